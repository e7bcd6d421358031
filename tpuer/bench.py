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


def gemm_shapes(cfg):
    """The benchmark's matrix products: compute-bound, one array-high batch, one vector."""
    return [(512, 4 * cfg.rows, 4 * cfg.cols), (cfg.rows, 4 * cfg.rows, 4 * cfg.cols),
            (1, 4 * cfg.rows, 4 * cfg.cols)]


def run_gemm_bench(cfg, *, backend="verilator", seed=3):
    """Matrix products on the core through ``tpuer.Device``: cycles, MXU utilisation
    (useful MACs over ``rows x cols x cycles``), weight stalls, simulation speed."""
    import time

    from .device import Device
    device = Device(cfg, backend=backend)
    rng = np.random.default_rng(seed)
    device.matmul(np.ones((1, 1), np.int8), np.ones((1, 1), np.int8))   # build, warm up
    print(f"GEMM on the {cfg.name} core, {backend} back end (cycles include moving the "
          f"inputs in and the int32 results out over the host streams)", flush=True)
    print("| M x K x N | cycles | MXU utilisation | MXU-busy cycles | weight-stall cycles "
          "| programs | simulated cycles/s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for m, k, n in gemm_shapes(cfg):
        a = rng.integers(-128, 128, (m, k)).astype(np.int8)
        b = rng.integers(-128, 128, (k, n)).astype(np.int8)
        started = time.perf_counter()
        y = device.matmul(a, b)
        seconds = time.perf_counter() - started
        if not np.array_equal(y, a.astype(np.int64) @ b.astype(np.int64)):
            raise SystemExit(f"tpuer bench: the product {m}x{k}x{n} is wrong")
        s = device.stats
        utilisation = s["macs"] / (cfg.rows * cfg.cols * s["cycles"])
        print(f"| {m} x {k} x {n} | {s['cycles']:,} | {100 * utilisation:.1f}% | "
              f"{s['mxu_busy_cycles']:,} | {s['weight_stall_cycles']:,} | {s['programs']} | "
              f"{s['cycles'] / seconds:,.0f} |", flush=True)
    return 0
