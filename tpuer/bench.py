"""Simulator speed: cycles per second of the checked cocotb loop on the matrix unit."""

import tempfile
from pathlib import Path

import numpy as np

__all__ = ["run_speed_bench", "measure_speed", "measure_device_speeds", "measure_compile_times"]


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


def _timed(call):
    import time
    started = time.perf_counter()
    result = call()
    return result, time.perf_counter() - started


def _dense_model(n, seed=0):
    """A quantised n x n dense layer of random weights."""
    from .quantize import Dense, quantize
    rng = np.random.default_rng(seed)
    return quantize([Dense(rng.normal(0, 0.05, (n, n)), np.zeros(n))],
                    rng.normal(0, 1, (16, n))), rng


def _again(call, times=5):
    """The least of ``times`` wall-clock seconds of ``call()``."""
    return min(_timed(call)[1] for _ in range(times))


def measure_device_speeds(backends=("golden", "verilator")):
    """Core cycles per second of whole ``Device`` calls on the 8x8 core, the first call and
    the same call again (the best of 5): a 1024x1024 dense layer at batch 8 and the TFLite
    digits CNN at batch 64 on the golden back end, a 256x64x64 product on each RTL back end
    of ``backends``. Rows of (what, back end, cycles, seconds first, seconds again)."""
    from .config import Config
    from .demo import DIGITS_CNN_TFLITE
    from .device import Device
    from .tflite_model import from_tflite
    cfg = Config()
    rows = []
    if "golden" in backends:
        model, rng = _dense_model(1024)
        x = model.quantize_input(rng.normal(0, 1, (8, 1024)))
        device = Device(cfg)
        _, first = _timed(lambda: device.run(model, x, progress=False))
        again = _again(lambda: device.run(model, x, progress=False))
        rows.append(("1024x1024 dense layer, batch 8", "golden", device.stats["cycles"],
                     first, again))
        cnn = from_tflite(DIGITS_CNN_TFLITE)
        x = rng.random((64, *cnn.input_shape)).astype(np.float32)
        _, first = _timed(lambda: device.run(cnn, x, progress=False))
        again = _again(lambda: device.run(cnn, x, progress=False))
        rows.append(("TFLite digits CNN, batch 64", "golden", device.stats["cycles"],
                     first, again))
    for backend in (b for b in backends if b != "golden"):
        rng = np.random.default_rng(1)
        a = rng.integers(-128, 128, (256, 64)).astype(np.int8)
        b = rng.integers(-128, 128, (64, 64)).astype(np.int8)
        device = Device(cfg, backend=backend)
        _, first = _timed(lambda: device.matmul(a, b, progress=False))
        again = _again(lambda: device.matmul(a, b, progress=False))
        rows.append(("256x64x64 product", backend, device.stats["cycles"], first, again))
    return rows


def measure_compile_times(sizes=(1024, 2048, 4096)):
    """Seconds to compile an n x n dense layer for the 8x8 core, for each n."""
    from .compiler import compile_model
    from .config import Config
    times = []
    for n in sizes:
        model, _ = _dense_model(n)
        _, seconds = _timed(lambda: compile_model(Config(), model))
        times.append((n, seconds))
    return times


def run_speed_bench(cfg, *, simulators=None, tiles=300):
    simulators = simulators or ["verilator", "icarus"]
    print("Device calls on the 8x8 core: core cycles per second of wall-clock time (the first "
          "call, compile and simulator build or start included; the same call again, the "
          "best of 5)", flush=True)
    print("| work | back end | core cycles | first call, cycles/s | again, cycles/s |")
    print("| --- | --- | ---: | ---: | ---: |")
    backends = ["golden", *(s for s in simulators if s == "verilator")]
    for what, backend, cycles, first, again in measure_device_speeds(backends):
        print(f"| {what} | {backend} | {cycles:,} | {cycles / first:,.0f} | "
              f"{cycles / again:,.0f} |", flush=True)
    print()
    print("| compile an n x n dense layer for the 8x8 core | seconds |")
    print("| --- | ---: |")
    for n, seconds in measure_compile_times():
        print(f"| {n} x {n} | {seconds:.2f} |", flush=True)
    print()
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
