"""Simulator speed: cycles per second of the checked cocotb loop on the matrix unit."""

import tempfile
import time
from pathlib import Path

import numpy as np

__all__ = ["run_speed_bench", "measure_speed"]


def measure_speed(cfg, simulator, *, tiles=40, seed=7):
    """Simulated cycles per wall-clock second of the matrix unit's checked testbench loop
    (two streams driven, one monitored, every result compared with the golden model)."""
    from .sim import cocotb_backend as backend
    built = backend.build("matrix_unit", cfg, simulator)
    with tempfile.TemporaryDirectory() as tmp:
        job_in, job_out = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        np.savez(job_in, tiles=tiles, seed=seed)
        backend.run(built, test_module="tpuer.tb.jobs", testcase="speed",
                    extra_env={"TPUER_JOB_IN": str(job_in), "TPUER_JOB_OUT": str(job_out)})
        result = np.load(job_out)
        return int(result["cycles"]), float(result["seconds"])


def run_speed_bench(cfg, *, simulators=None, tiles=40):
    simulators = simulators or ["verilator", "icarus"]
    print(f"simulator speed, matrix unit {cfg.name}, {tiles} tiles of {cfg.rows}.."
          f"{2 * cfg.rows} vectors, cocotb-checked loop")
    print(f"| simulator | cycles | seconds | cycles/s |")
    print(f"| --- | ---: | ---: | ---: |")
    for simulator in simulators:
        started = time.perf_counter()
        cycles, seconds = measure_speed(cfg, simulator, tiles=tiles)
        print(f"| {simulator} | {cycles} | {seconds:.2f} | {cycles / seconds:,.0f} |", flush=True)
        del started
    return 0
