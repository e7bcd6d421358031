"""The core on Verilator with its host in C++: ``Device(backend="verilator")`` runs here.

The cocotb benches move every host row through Python, one cycle at a time (about 5,000
core cycles per second). Here a small C++ driver (``core_driver.cpp``) compiled into the
Verilator model of the core loads weights and programs, feeds the host rows from a buffer
and collects the rows sent, with no Python per cycle; Python calls it through ``ctypes``
once per program. Each cycle is what the cocotb bench does (drive, settle and sample, clock
edge), so the counters are the same. The model is built once per configuration under
``build/sim/verilator-driver/`` and rebuilt only when the Verilog or the driver changes.
"""

import ctypes
import fcntl
import hashlib
import subprocess
from pathlib import Path

import numpy as np

from ..hw.export import build_block, to_verilog
from ..hw.lint_waivers import VERILATOR_WAIVERS
from ..isa import CoreState, ErrorCode
from .cocotb_backend import build_root, check_simulator, verilator_root

__all__ = ["VerilatorCoreBackend", "build_driver"]

DRIVER_SOURCE = Path(__file__).with_name("core_driver.cpp")
_loaded = {}          # the loaded library of each configuration


def build_driver(cfg):
    """Build (or find) the shared library of the core of ``cfg`` with the C++ driver;
    returns its path."""
    check_simulator("verilator")
    directory = build_root() / "sim" / "verilator-driver" / f"core-{cfg.name}"
    directory.mkdir(parents=True, exist_ok=True)
    verilog = to_verilog(build_block("core", cfg), name="top")
    driver = DRIVER_SOURCE.read_text()
    stamp = hashlib.sha256((verilog + driver).encode()).hexdigest()
    library = directory / "libtpuer_core.so"
    stamp_file = directory / "build.stamp"
    with open(directory / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp_file.exists() and stamp_file.read_text() == stamp and library.exists():
            return library
        (directory / "top.v").write_text(verilog)
        root = verilator_root()
        log = directory / "build.log"
        with open(log, "w") as out:
            _call([str(root / "bin" / "verilator"), "--cc", "top.v", "--top-module", "top",
                   "--prefix", "Vtop", "-O3", "--Mdir", "obj", "--build", "-j", "2",
                   "-CFLAGS", "-fPIC -O2",
                   *(f"-Wno-{rule}" for rule in VERILATOR_WAIVERS)], directory, out, log)
            _call(["g++", "-shared", "-fPIC", "-O2", "-std=c++17",
                   "-I", "obj", "-I", str(root / "include"), "-I", str(root / "include" / "vltstd"),
                   str(DRIVER_SOURCE), "obj/libVtop.a", "obj/libverilated.a", "-pthread",
                   "-o", library.name], directory, out, log)
        stamp_file.write_text(stamp)
    return library


def _call(command, directory, out, log):
    if subprocess.run(command, cwd=directory, stdout=out, stderr=subprocess.STDOUT).returncode:
        raise RuntimeError(f"building the Verilator model of the core failed: {command[0]} "
                           f"(log: {log})")


def _library(cfg):
    """The loaded library of ``cfg``'s core, built (or found, which takes making its
    Verilog) once per process."""
    lib = _loaded.get(cfg)
    if lib is None:
        path = build_driver(cfg)
        lib = ctypes.CDLL(str(path))
        lib.tpuer_core_new.restype = ctypes.c_void_p
        lib.tpuer_core_free.argtypes = [ctypes.c_void_p]
        lib.tpuer_core_load_weights.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                                ctypes.c_int64, ctypes.c_int64]
        lib.tpuer_core_load_program.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                                ctypes.c_int64]
        lib.tpuer_core_run.restype = ctypes.c_int64
        lib.tpuer_core_run.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_char_p,
                                       ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                       ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                       ctypes.c_void_p]
        lib.tpuer_core_rows_out.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        _loaded[cfg] = lib
    return lib


class VerilatorCoreBackend:
    """The RTL on Verilator, driven by :data:`DRIVER_SOURCE` in C++: one core per call,
    its steps one after another (each with its weights loaded before it), yielding
    (step, run) as each ends; the same runs and counters as the cocotb bench
    (:func:`tpuer.tb.core_tb.run_steps`). Needs ``operand_width`` 8 and ``acc_width`` 32,
    the host word stream's lanes."""

    name = "verilator"

    def __init__(self, cfg):
        if cfg.operand_width != 8 or cfg.acc_width != 32:
            raise ValueError(f"the Verilator back end needs 8-bit operands and 32-bit "
                             f"accumulators, not {cfg.operand_width} and {cfg.acc_width}")
        self.cfg = cfg

    def run(self, steps, *, max_cycles, activity=False):
        """With ``activity``, each run's :attr:`~tpuer.tb.core_tb.CoreRun.activity` too
        (what the core did in each cycle, as its ports show it)."""
        from ..device import CycleBudgetError
        from ..tb.core_tb import CoreRun, rest_cycles, rtl_activity
        cfg = self.cfg
        lib = _library(cfg)
        core = lib.tpuer_core_new()
        status = np.zeros(8, np.int64)
        used = 0
        try:
            for step in steps:
                weights = np.ascontiguousarray(step.weights, np.int64).astype(np.int8)
                lib.tpuer_core_load_weights(core, weights.tobytes(),
                                            weights.shape[0] * cfg.rows, cfg.cols)
                words = np.array([i.word for i in step.program], np.uint64)
                lib.tpuer_core_load_program(core, words.tobytes(), len(words))
                rows_in = np.ascontiguousarray(step.host_in, np.int64).astype(np.int8)
                # A core that hangs stops at this bound (the cocotb bench's), long before
                # any budget.
                bound = 100 * (len(rows_in) + 100) + sum(4 * i.count + 50 for i in step.program)
                left = max_cycles - used
                limit = min(bound, left + 2)
                samples = np.zeros((limit + 1, 6), np.int64) if activity else None
                taken = lib.tpuer_core_run(core, 0, rows_in.tobytes(), len(rows_in),
                                           cfg.ub_lanes, 4 * cfg.ub_lanes, rest_cycles(cfg),
                                           limit, status.ctypes.data,
                                           None if samples is None else samples.ctypes.data)
                if taken == -1 and bound <= left + 2:
                    raise RuntimeError(f"the core still ran after {bound:,} cycles")
                if taken == -1 or status[3] > left:
                    raise CycleBudgetError(f"the core ran past the call's cycle budget of "
                                           f"{max_cycles:,} cycles (max_cycles)")
                rows_out = np.zeros((taken, cfg.ub_lanes), np.int32)
                if taken:
                    lib.tpuer_core_rows_out(core, rows_out.ctypes.data)
                used += int(status[3])
                seen = None
                if activity:
                    samples = samples[:int(status[7])]
                    seen = rtl_activity([(t, *row[:4]) for t, row in enumerate(samples)],
                                        np.flatnonzero(samples[:, 4]).tolist(),
                                        np.flatnonzero(samples[:, 5]).tolist())
                yield step, CoreRun(
                    state=CoreState(int(status[0])), error=ErrorCode(int(status[1])),
                    error_pc=int(status[2]), host_out=list(rows_out[:taken].astype(np.int64)),
                    cycles=int(status[3]), mxu_busy_cycles=int(status[4]),
                    weight_stall_cycles=int(status[5]), instructions=int(status[6]),
                    activity=seen)
        finally:
            lib.tpuer_core_free(core)
