"""The demos: the main job (a quantised network on the digits, run whole on the simulated
TPU), and the matrix unit alone (its Verilog, and a random product through it)."""

import tempfile
import time
from pathlib import Path

import numpy as np

from .progress import ProgressBar

__all__ = ["run_network_demo", "run_matrix_unit_demo", "DEMO_CONFIG"]


def _say(text=""):
    print(text, flush=True)


def _default_config():
    from .config import Config
    return Config(rows=8, cols=8, ub_depth=1024, acc_depth=256, weight_tiles=64)


#: The TPU the network demos run on: an 8x8 array with room for the digits networks'
#: weights (64 tiles = 4 KiB) and blocks of 64 samples (a 1024-row Unified Buffer, 8 KiB).
DEMO_CONFIG = _default_config()


def build_network(kind, digits, seed=0):
    """Float layers of the demo network ``kind`` ("mlp" or "cnn") and how its input looks."""
    from .digits import train_cnn, train_mlp
    if kind == "mlp":
        return train_mlp(digits, hidden=(32,), seed=seed), digits.x_train, digits.x_test
    return train_cnn(digits, seed=seed), digits.images(digits.x_train), \
        digits.images(digits.x_test)


def layer_utilisation(cfg, model):
    """MXU utilisation of each layer run alone (one layer a program, on the golden back
    end's cycle model): useful MACs over rows x cols x cycles, for a batch of 64."""
    from .device import Device
    from .quantize import QuantizedModel
    device = Device(cfg, backend="golden")
    rng = np.random.default_rng(0)
    figures = []
    for index, layer in enumerate(model.layers):
        alone = QuantizedModel([layer], input_shape=layer.input_shape,
                               input_scale=layer.input_scale,
                               input_zero_point=layer.input_zero_point)
        x = rng.integers(-128, 128, (64, *layer.input_shape)).astype(np.int8)
        device.run(alone, x)
        stats = device.stats
        figures.append((f"{index}: {layer.kind} {layer.k}x{layer.n}",
                        stats["macs"] / (cfg.rows * cfg.cols * stats["cycles"])))
    return figures


def _pictures(out_dir, kind, digits, predictions, figures, cfg):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    shown = 16
    fig, axes = plt.subplots(2, shown // 2, figsize=(12, 4.2))
    for index, ax in enumerate(axes.flat):
        ax.imshow(digits.x_test[index].reshape(8, 8), cmap="gray_r", vmin=0, vmax=1)
        right = predictions[index] == digits.y_test[index]
        ax.set_title(f"TPU: {predictions[index]}" + ("" if right else f" ({digits.y_test[index]})"),
                     color="black" if right else "red", fontsize=10)
        ax.axis("off")
    fig.suptitle(f"tpuer {kind.upper()} on the {cfg.rows}x{cfg.cols} TPU: predictions "
                 f"(true label in brackets when wrong)")
    fig.tight_layout()
    digits_png = out_dir / f"{kind}-digits.png"
    fig.savefig(digits_png, dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.2))
    names = [name for name, _ in figures]
    values = [100 * value for _, value in figures]
    ax.barh(names, values, color="#4477aa")
    for y, value in enumerate(values):
        ax.text(value + 1, y, f"{value:.1f}%", va="center")
    ax.set_xlim(0, 110)
    ax.set_xlabel("MXU utilisation, % (useful MACs / (rows x cols x cycles))")
    ax.set_title(f"{kind.upper()} layers, each run alone (batch 64)")
    ax.invert_yaxis()
    fig.tight_layout()
    util_png = out_dir / f"{kind}-utilisation.png"
    fig.savefig(util_png, dpi=100)
    plt.close(fig)
    return digits_png, util_png


def _digits_and_count(samples, clock_mhz):
    """The digits and the number of test samples to run (all for ``None``), after checking
    the demo's options."""
    from .digits import load_digits
    if not clock_mhz > 0:
        raise ValueError(f"--clock-mhz must be positive, not {clock_mhz}")
    digits = load_digits()
    count = len(digits.x_test) if samples is None else samples
    if not 1 <= count <= len(digits.x_test):
        raise ValueError(f"--samples must be between 1 and {len(digits.x_test)}, not {count}")
    return digits, count


def _run_in_chunks(device, model, x, chunk):
    """``device.run(model, x)`` ``chunk`` samples at a time, with a progress bar: the
    outputs and the sum of each counter."""
    from .sim import cocotb_backend
    outputs, totals = [], {}
    bar = ProgressBar("      inference", len(x))
    try:
        for start in range(0, len(x), chunk):
            outputs.append(device.run(model, x[start:start + chunk], progress=False))
            for name, value in device.stats.items():
                totals[name] = totals.get(name, 0) + (value or 0)
            bar.update(min(len(x), start + chunk))
    except cocotb_backend.SimulatorUnavailable as error:
        raise SystemExit(f"tpuer demo: {error}")
    finally:
        bar.close()
    return np.concatenate(outputs), totals


def run_network_demo(kind="mlp", cfg=None, *, backend="verilator", samples=None,
                     clock_mhz=100.0, chunk=60, seed=0):
    """Train ``kind`` ("mlp" or "cnn") on the digits, quantise it, compile it, run the test
    split on the TPU simulated by ``backend``, and print the accuracies and figures."""
    from .device import Device
    from .digits import float_forward
    from .quantize import quantize
    from .sim import cocotb_backend

    cfg = cfg or DEMO_CONFIG
    if kind not in ("mlp", "cnn"):
        raise ValueError(f"the network is mlp or cnn, not {kind!r}")
    digits, count = _digits_and_count(samples, clock_mhz)
    _say(f"tpuer demo {kind}: scikit-learn's handwritten digits (8x8 pixels), "
         f"{len(digits.x_train)} training and {len(digits.x_test)} test samples")
    started = time.perf_counter()
    layers, calibration, x_test = build_network(kind, digits, seed=seed)
    shapes = " -> ".join(type(layer).__name__ + str(tuple(layer.weights.shape))
                         for layer in layers)
    _say(f"[1/4] trained the float {kind.upper()} in {time.perf_counter() - started:.1f} s: "
         f"{shapes}")
    model = quantize(layers, calibration)
    _say(f"[2/4] quantised to int8 (per-channel weights, calibrated on the training split): "
         f"{model.macs_per_sample:,} MACs per inference")
    from .compiler import compile_model
    plan = compile_model(cfg, model)
    _say(f"[3/4] compiled for the {cfg.name} TPU (Unified Buffer {cfg.ub_depth} rows, "
         f"{cfg.weight_tiles} weight tiles): " + "; ".join(
             f"layers {seg.layers} in programs of {seg.program_length} instructions, "
             f"{seg.block} rows a block" for seg in plan.segments))

    x_float = x_test[:count]
    labels = digits.y_test[:count]
    x_int8 = model.quantize_input(x_float)
    reference = model.reference(x_int8)
    device = Device(cfg, backend=backend)
    _say(f"[4/4] running {count} test samples on the {backend} back end "
         f"(the first run builds the simulator; later runs reuse the build)")
    tpu, totals = _run_in_chunks(device, model, x_int8, chunk)
    float_accuracy = np.mean(float_forward(layers, x_float).argmax(axis=1) == labels)
    reference_accuracy = np.mean(reference.argmax(axis=1) == labels)
    tpu_accuracy = np.mean(tpu.argmax(axis=1) == labels)
    exact = np.array_equal(tpu, reference)
    cycles = totals["cycles"] / count
    utilisation = totals["macs"] / (cfg.rows * cfg.cols * totals["cycles"])
    _say()
    _say(f"float accuracy            {100 * float_accuracy:.2f}%")
    _say(f"int8 reference accuracy   {100 * reference_accuracy:.2f}%")
    _say(f"TPU accuracy              {100 * tpu_accuracy:.2f}%  "
         f"({'equal to the reference, every output bit for bit' if exact else 'MISMATCH'})")
    _say(f"cycles per inference      {cycles:,.1f}  ({totals['cycles']:,} cycles, "
         f"{totals['programs']} programs, {totals['weight_stall_cycles']} weight-stall cycles)")
    _say(f"MXU utilisation           {100 * utilisation:.1f}%  (useful MACs / "
         f"(rows x cols x cycles))")
    _say(f"inferences per second     {clock_mhz * 1e6 / cycles:,.0f} at {clock_mhz:g} MHz")
    figures = layer_utilisation(cfg, model)
    out_dir = cocotb_backend.build_root() / "demo"
    out_dir.mkdir(parents=True, exist_ok=True)
    pictures = _pictures(out_dir, kind, digits, tpu.argmax(axis=1), figures, cfg)
    _say(f"pictures: {pictures[0]} (digits and predictions), {pictures[1]} "
         f"(utilisation per layer)")
    return 0 if exact else 1


#: The Keras CNN of ``tpuer demo tflite``, converted to int8 by TensorFlow's converter
#: (``tools/train_digits_cnn.py`` trained and converted it).
DIGITS_CNN_TFLITE = Path(__file__).parent / "data" / "digits_cnn.tflite"


def run_tflite_demo(cfg=None, *, backend="verilator", samples=None, clock_mhz=100.0,
                    chunk=60, path=DIGITS_CNN_TFLITE):
    """Run the Keras-trained digits CNN (a TFLite int8 model) on the TPU simulated by
    ``backend``: its mapping, the accuracy, whether every output equals LiteRT's, the cycles
    and MXU utilisation per inference."""
    from .device import Device
    from .tflite_model import from_tflite, litert_output

    cfg = cfg or DEMO_CONFIG
    digits, count = _digits_and_count(samples, clock_mhz)
    model = from_tflite(path)
    _say(f"tpuer demo tflite: {path.name}, a Keras CNN trained on scikit-learn's digits and "
         f"converted to int8 by TensorFlow's converter")
    _say(f"[1/3] its mapping onto the {cfg.rows}x{cfg.cols} TPU (cycles of one inference "
         f"alone):")
    for line in model.report(cfg):
        _say("      " + line)
    x = digits.images(digits.x_test[:count]).astype(np.float32)
    labels = digits.y_test[:count]
    _say(f"[2/3] LiteRT's interpreter with its reference kernels on {count} test samples")
    expected = litert_output(path, x)
    device = Device(cfg, backend=backend)
    _say(f"[3/3] running them on the {backend} back end, {chunk} at a time (the first run "
         f"builds the simulator; later runs reuse the build)")
    tpu, totals = _run_in_chunks(device, model, x, chunk)
    reference = model.reference(x)
    exact = np.array_equal(tpu, reference)
    cycles = totals["cycles"] / count
    utilisation = totals["macs"] / (cfg.rows * cfg.cols * totals["cycles"])
    _say()
    _say(f"TPU accuracy              {100 * np.mean(tpu.argmax(axis=1) == labels):.2f}%")
    if expected is None:
        _say("LiteRT                    not installed (pip install ai-edge-litert): not "
             "compared")
        same = exact
    else:
        same = exact and np.array_equal(tpu, expected)
        _say(f"LiteRT accuracy           {100 * np.mean(expected.argmax(axis=1) == labels):.2f}%")
        matching = int(np.sum(np.all(tpu == expected, axis=1)))
        _say(f"bit-exact with LiteRT     {matching} of {count} samples, every output value "
             f"{'equal' if same else 'NOT equal'} ({tpu.dtype}{list(tpu.shape)})")
    _say(f"cycles per inference      {cycles:,.1f}  ({totals['cycles']:,} cycles, "
         f"{totals['programs']} programs, batches of {chunk})")
    _say(f"MXU utilisation           {100 * utilisation:.1f}%  (useful MACs / "
         f"(rows x cols x cycles))")
    _say(f"inferences per second     {clock_mhz * 1e6 / cycles:,.0f} at {clock_mhz:g} MHz "
         f"(the TPU's cycles; the host's operators not counted)")
    return 0 if same else 1


def run_matrix_unit_demo(cfg, *, simulator="verilator", m=16, tiles=2, seed=2026):
    from .hw.export import build_block, to_verilog
    from .sim import cocotb_backend as backend

    if not 1 <= m <= 4096:
        raise ValueError(f"-m must be between 1 and 4096, not {m}")
    if not 1 <= tiles <= 64:
        raise ValueError(f"--tiles must be between 1 and 64, not {tiles}")
    _say(f"tpuer demo: a {cfg.rows}x{cfg.cols} weight-stationary systolic array "
         f"(int{cfg.operand_width} x int{cfg.operand_width} -> int{cfg.acc_width}), "
         f"Weight FIFO {cfg.weight_fifo_tiles} tiles deep")

    out_dir = backend.build_root() / "demo"
    out_dir.mkdir(parents=True, exist_ok=True)
    verilog_path = out_dir / f"matrix_unit-{cfg.name}.v"
    verilog_path.write_text(to_verilog(build_block("matrix_unit", cfg), name="top"))
    _say(f"[1/3] Verilog of the matrix unit: {verilog_path} "
         f"({verilog_path.read_text().count(chr(10))} lines)")

    started = time.perf_counter()
    _say(f"[2/3] building it for {simulator} (the first build takes a while; later runs reuse it)")
    try:
        built = backend.build("matrix_unit", cfg, simulator)
    except backend.SimulatorUnavailable as error:
        raise SystemExit(f"tpuer demo: {error}")
    _say(f"      ready in {time.perf_counter() - started:.1f} s: {built.directory}")

    rng = np.random.default_rng(seed)
    a = rng.integers(cfg.operand_min, cfg.operand_max + 1, (m, cfg.rows))
    weights = rng.integers(cfg.operand_min, cfg.operand_max + 1, (tiles, cfg.rows, cfg.cols))
    _say(f"[3/3] multiplying A ({m}x{cfg.rows}) by {tiles} weight tile(s) W "
         f"({cfg.rows}x{cfg.cols}) back to back on {simulator}")
    with tempfile.TemporaryDirectory() as tmp:
        job_in, job_out = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        np.savez(job_in, a=a, tiles=weights)
        started = time.perf_counter()
        backend.run(built, test_module="tpuer.tb.jobs", testcase="matmul",
                    extra_env={"TPUER_JOB_IN": str(job_in), "TPUER_JOB_OUT": str(job_out)})
        seconds = time.perf_counter() - started
        result = dict(np.load(job_out))

    got = result["results"].reshape(tiles, m, cfg.cols)
    want = np.einsum("mk,tkn->tmn", a, weights)
    np.set_printoptions(linewidth=120)
    shown = min(m, 4)
    _say(f"\nA[:{shown}] =\n{a[:shown]}\nW0 =\n{weights[0]}\n(A @ W0)[:{shown}] from the TPU =\n"
         f"{got[0][:shown]}")
    match = np.array_equal(got, want)
    vectors = m * tiles
    span = int(result["last_result_cycle"] - result["first_result_cycle"]) + 1
    macs = vectors * cfg.rows * cfg.cols
    _say(f"\ncheck against NumPy (a @ w for every tile): "
         f"{'all ' + str(vectors * cfg.cols) + ' values equal' if match else 'MISMATCH'}")
    _say(f"cycles: {int(result['cycles'])} in all; {vectors} result rows in {span} cycles "
         f"(one per cycle when {span} == {vectors}); "
         f"weight-stall cycles {int(result['weight_stall_cycles'])}")
    _say(f"MXU utilisation while streaming: {100 * macs / (cfg.rows * cfg.cols * span):.1f}% "
         f"({macs} MACs); simulation took {seconds:.1f} s")
    if built.waves:
        _say(f"waveform: {backend.waves_file(built)} (open it with gtkwave or surfer)")
    if not match:
        bad = np.argwhere(got != want)[:5]
        _say(f"first differences at (tile, row, col): {bad.tolist()}")
        return 1
    return 0


