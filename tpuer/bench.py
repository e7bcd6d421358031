"""Simulator speed: cycles per second of the checked cocotb loop on the matrix unit."""

import tempfile
from pathlib import Path

import numpy as np

__all__ = ["run_speed_bench", "measure_speed"]


def measure_speed(cfg, simulator, *, tiles=300, seed=7):
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
        return {"checked": int(result["cycles"]) / float(result["seconds"]),
                "free": int(result["free_cycles"]) / float(result["free_seconds"]),
                "cycles": int(result["cycles"])}


def run_speed_bench(cfg, *, simulators=None, tiles=300):
    simulators = simulators or ["verilator", "icarus"]
    print(f"simulator speed of the matrix unit {cfg.name}: {tiles} random tiles of "
          f"{cfg.rows}..{2 * cfg.rows} vectors through the cocotb testbench loop (streams "
          f"driven and every result checked), then free-running with no Python per cycle",
          flush=True)
    print("| simulator | checked loop, cycles/s | free-running, cycles/s |")
    print("| --- | ---: | ---: |")
    for simulator in simulators:
        speed = measure_speed(cfg, simulator, tiles=tiles)
        print(f"| {simulator} | {speed['checked']:,.0f} | {speed['free']:,.0f} |", flush=True)
    return 0
