"""Quantiser and compiler: the NumPy int8 reference against independent arithmetic and
against the float network, Device.run against the reference on random networks and on
every back end, and clear errors for models and inputs that cannot run."""

import numpy as np
import pytest

import tpuer
from tpuer import Conv2D, Dense
from tpuer.compiler import CompileError, compile_model
from tpuer.demo import DEMO_CONFIG
from tpuer.digits import float_forward, load_digits, train_mlp
from tpuer.quantize import im2col

from conftest import require_simulator

SMALL = tpuer.Config(rows=4, cols=4, ub_depth=64, acc_depth=32, weight_tiles=24,
                     program_depth=256)
ODD = tpuer.Config(rows=3, cols=5, ub_depth=60, acc_depth=20, weight_tiles=12,
                   program_depth=200, weight_fifo_tiles=2)
SQUARE8 = tpuer.Config(weight_tiles=64)


def random_mlp(rng, sizes):
    return [Dense(rng.normal(0, 1 / np.sqrt(k), (k, n)), rng.normal(0, 0.3, n),
                  relu=index < len(sizes) - 2)
            for index, (k, n) in enumerate(zip(sizes[:-1], sizes[1:]))]


def test_reference_matches_independent_integer_arithmetic():
    """One layer, recomputed with Python integers from the gemmlowp definitions."""
    rng = np.random.default_rng(1)
    layers = random_mlp(rng, [7, 5])
    model = tpuer.quantize(layers, rng.normal(0, 1, (50, 7)))
    x = rng.integers(-128, 128, (6, 7)).astype(np.int8)
    layer = model.layers[0]
    want = np.zeros((6, 5), np.int64)
    for r in range(6):
        for c in range(5):
            acc = sum(int(x[r, k]) * int(layer.weights[k, c]) for k in range(7))
            v = max(-2**31, min(2**31 - 1, acc + int(layer.bias[c])))
            prod = v * int(layer.multiplier[c])
            nudge = 2**30 if prod >= 0 else 1 - 2**30
            high = int((prod + nudge) / 2**31)              # truncates toward zero
            shift = int(layer.shift[c])
            mask, rem = (1 << shift) - 1, high & ((1 << shift) - 1)
            rounded = (high >> shift) + (rem > (mask >> 1) + (high < 0))
            want[r, c] = min(127, max(-128, rounded + layer.output_zero_point))
    assert np.array_equal(model.reference(x), want)


@pytest.mark.parametrize("per_channel", [True, False])
def test_quantised_model_follows_the_float_network(per_channel):
    rng = np.random.default_rng(2)
    layers = random_mlp(rng, [20, 16, 12, 6])
    calibration = rng.normal(0, 1, (400, 20))
    model = tpuer.quantize(layers, calibration, per_channel=per_channel)
    x = rng.normal(0, 1, (100, 20))
    real = float_forward(layers, x)
    approx = model.dequantize_output(model.reference(model.quantize_input(x)))
    spread = real.max() - real.min()
    assert np.abs(approx - real).mean() < 0.03 * spread
    assert np.corrcoef(approx.ravel(), real.ravel())[0, 1] > 0.99


def test_im2col_equals_a_direct_convolution():
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, (2, 7, 6, 3))
    w = rng.normal(0, 1, (3, 2, 3, 4))
    for stride, padding in ((1, 0), (2, 1), (3, 2)):
        out = im2col(x, (3, 2), stride, padding, 0.0) @ w.reshape(-1, 4)
        padded = np.pad(x, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
        oh = (7 + 2 * padding - 3) // stride + 1
        ow = (6 + 2 * padding - 2) // stride + 1
        direct = np.zeros((2, oh, ow, 4))
        for i in range(oh):
            for j in range(ow):
                patch = padded[:, i * stride:i * stride + 3, j * stride:j * stride + 2]
                direct[:, i, j] = np.einsum("nhwc,hwco->no", patch, w)
        assert np.allclose(out.reshape(2, oh, ow, 4), direct)


@pytest.mark.parametrize("cfg", [SMALL, ODD, SQUARE8], ids=lambda c: c.name)
def test_random_networks_run_bit_exact_on_the_golden_device(cfg):
    """Sizes that are not multiples of the array, K larger than the array, many layers,
    batches larger than a block, a convolution with stride and padding."""
    rng = np.random.default_rng(4)
    networks = [
        ("mlp", random_mlp(rng, [13, 9, 17, 3, 11, 2]), (13,)),
        ("wide", random_mlp(rng, [3 * cfg.rows + 1, 2 * cfg.cols + 3]), (3 * cfg.rows + 1,)),
        ("cnn", [Conv2D(rng.normal(0, 0.4, (3, 3, 2, 5)), rng.normal(0, 0.1, 5), stride=2,
                        padding=1),
                 Conv2D(rng.normal(0, 0.4, (2, 2, 5, 3)), rng.normal(0, 0.1, 3)),
                 Dense(rng.normal(0, 0.3, (12, 4)), rng.normal(0, 0.1, 4), relu=False)],
         (6, 5, 2)),
    ]
    device = tpuer.Device(cfg)
    for name, layers, shape in networks:
        model = tpuer.quantize(layers, rng.normal(0, 1, (64, *shape)))
        for batch in (1, 7, 70):
            x = model.quantize_input(rng.normal(0, 1, (batch, *shape)))
            y = device.run(model, x)
            assert y.dtype == np.int8
            assert np.array_equal(y, model.reference(x)), (name, batch)
            assert device.stats["macs"] == model.macs_per_sample * batch
            assert device.stats["cycles"] >= device.stats["mxu_busy_cycles"] > 0


def test_layers_too_big_for_one_program_are_split_and_still_exact():
    cfg = tpuer.Config(rows=4, cols=4, ub_depth=32, acc_depth=16, weight_tiles=6,
                       program_depth=64)
    rng = np.random.default_rng(5)
    model = tpuer.quantize(random_mlp(rng, [10, 30, 5]), rng.normal(0, 1, (64, 10)))
    plan = compile_model(cfg, model)
    assert any(segment.n_tiles for segment in plan.segments)       # N split over programs
    assert any(len(unit) > 1 for unit in plan.units)                # K split over programs
    x = model.quantize_input(rng.normal(0, 1, (9, 10)))
    assert np.array_equal(tpuer.Device(cfg).run(model, x), model.reference(x))


def test_dense_layers_chain_in_the_unified_buffer_on_a_square_array():
    rng = np.random.default_rng(6)
    model = tpuer.quantize(random_mlp(rng, [16, 16, 8, 4]), rng.normal(0, 1, (64, 16)))
    assert [s.layers for s in compile_model(SQUARE8, model).segments] == [[0, 1, 2]]
    non_square = tpuer.Config(rows=3, cols=5, weight_tiles=64)
    assert [s.layers for s in compile_model(non_square, model).segments] == [[0], [1], [2]]


@pytest.mark.parametrize("layers, calibration, error, message", [
    ([Dense(np.ones((3, 2)), np.zeros(2))], np.ones((5, 4)), ValueError,
     "layer 0 takes 3 inputs, but its input has 4 values"),
    ([Dense(np.ones((3, 2)), np.zeros(2)), Dense(np.ones((3, 2)), np.zeros(2))],
     np.ones((5, 3)), ValueError, "layer 1 takes 3 inputs, but its input has 2 values"),
    ([Dense(np.full((3, 2), np.nan), np.zeros(2))], np.ones((5, 3)), ValueError,
     "layer 0 weights contains NaN"),
    ([Dense(np.ones((3, 2)), np.zeros(3))], np.ones((5, 3)), ValueError,
     "layer 0 has 2 outputs but a bias of shape"),
    ([Dense(np.ones((3, 2)), np.zeros(2))], np.array([[np.inf, 0, 0]]), ValueError,
     "calibration_x contains NaN or infinite"),
    ([Conv2D(np.ones((3, 3, 1, 2)), np.zeros(2))], np.ones((5, 8)), ValueError,
     "its input must be \\(height, width, channels\\)"),
    ([Conv2D(np.ones((9, 9, 1, 2)), np.zeros(2))], np.ones((5, 8, 8, 1)), ValueError,
     "a 9x9 kernel does not fit"),
    (["not a layer"], np.ones((5, 3)), TypeError, "must be a tpuer.Dense or tpuer.Conv2D"),
    ([], np.ones((5, 3)), ValueError, "non-empty list"),
])
def test_bad_models_are_refused(layers, calibration, error, message):
    with pytest.raises(error, match=message):
        tpuer.quantize(layers, calibration)


def test_models_that_cannot_fit_say_why():
    rng = np.random.default_rng(7)
    model = tpuer.quantize(random_mlp(rng, [600, 4]), rng.normal(0, 1, (16, 600)))
    tiny = tpuer.Config(rows=4, cols=4, ub_depth=64, acc_depth=8, weight_tiles=4)
    plan = compile_model(tiny, model)         # cut along K: 150 input tiles, 4 at a time
    assert len(plan.units) == 1 and len(plan.units[0]) == 38
    x = model.quantize_input(rng.normal(0, 1, (5, 600)))
    assert np.array_equal(tpuer.Device(tiny).run(model, x), model.reference(x))
    with pytest.raises(CompileError, match="does not fit even one tile at a time: needs a "
                                           "program of .* instruction memory holds 8"):
        compile_model(tpuer.Config(rows=4, cols=4, program_depth=8), model)
    with pytest.raises(ValueError, match="sums 200000 products"):
        tpuer.quantize_mlp([(np.ones((200000, 1)), np.zeros(1))], np.ones((2, 200000)))
    with pytest.raises(TypeError, match="model must be a tpuer.QuantizedModel"):
        compile_model(tiny, [np.ones((2, 2))])


def test_bad_inputs_to_a_model_are_refused():
    rng = np.random.default_rng(8)
    model = tpuer.quantize(random_mlp(rng, [5, 3]), rng.normal(0, 1, (16, 5)))
    device = tpuer.Device(SMALL)
    with pytest.raises(TypeError, match="dtype int8, not float64"):
        device.run(model, np.zeros((2, 5)))
    with pytest.raises(ValueError, match=r"shape \(batch, 5\), not \(2, 4\)"):
        device.run(model, np.zeros((2, 4), np.int8))
    with pytest.raises(ValueError, match="no samples"):
        device.run(model, np.zeros((0, 5), np.int8))
    with pytest.raises(ValueError, match="NaN"):
        model.quantize_input(np.full((1, 5), np.nan))
    with pytest.raises(TypeError, match="dtype int8"):
        model.dequantize_output(np.zeros(3))
    with pytest.raises(TypeError, match=r"layer 0 must be a \(W, b\) pair"):
        tpuer.quantize_mlp([np.ones((5, 3))], np.zeros((2, 5)))


@pytest.mark.parametrize("backend", ["pysim", "verilator", "icarus"])
def test_digits_mlp_is_bit_exact_on_the_rtl(backend):
    """The demo's network on a subset of the test split: the RTL's outputs equal the int8
    reference, and its counters equal the golden back end's."""
    if backend != "pysim":
        require_simulator(backend)
    digits = load_digits()
    model = tpuer.quantize(train_mlp(digits, hidden=(32,)), digits.x_train)
    count = 12 if backend == "pysim" else 70
    x = model.quantize_input(digits.x_test[:count])
    cfg = DEMO_CONFIG if backend != "pysim" else SQUARE8     # the demo's build, reused
    golden, device = tpuer.Device(cfg), tpuer.Device(cfg, backend=backend)
    y = device.run(model, x)
    assert np.array_equal(y, model.reference(x))
    assert np.array_equal(golden.run(model, x), y)
    assert device.stats == golden.stats
    assert np.mean(y.argmax(axis=1) == digits.y_test[:count]) > 0.85


@pytest.mark.parametrize("backend", ["verilator", "icarus"])
def test_random_network_with_a_convolution_on_the_rtl(backend):
    require_simulator(backend)
    rng = np.random.default_rng(9)
    layers = [Conv2D(rng.normal(0, 0.4, (3, 3, 1, 3)), rng.normal(0, 0.1, 3), stride=2,
                     padding=1),
              Dense(rng.normal(0, 0.3, (27, 6)), rng.normal(0, 0.1, 6)),
              Dense(rng.normal(0, 0.3, (6, 5)), rng.normal(0, 0.1, 5), relu=False)]
    model = tpuer.quantize(layers, rng.normal(0, 1, (64, 6, 5, 1)))
    x = model.quantize_input(rng.normal(0, 1, (5, 6, 5, 1)))
    golden, device = tpuer.Device(SMALL), tpuer.Device(SMALL, backend=backend)
    y = device.run(model, x)
    assert np.array_equal(y, model.reference(x))
    golden.run(model, x)
    assert device.stats == golden.stats
