"""TFLite models against LiteRT's interpreter with its reference kernels
(``OpResolverType.BUILTIN_REF``), the oracle: every supported operator and fused
activation, on random and edge-case inputs, in NumPy and on the TPU's back ends; and the
errors for files and models tpuer cannot run.

The models in ``tests/data/tflite`` were made by ``tools/make_tflite_models.py``
(TensorFlow's converter, full-integer int8); the tests need only the interpreter."""

import zlib
from pathlib import Path

import numpy as np
import pytest

import tpuer
from tpuer import tflite_kernels as kernels
from tpuer.sim.activation_model import quantize_multiplier
from tpuer.tflite_model import TFLiteError, from_tflite, litert_output

from conftest import require_simulator, seed
from test_device import SMALL       # the simulators built for its tests serve these too

MODELS = Path(__file__).parent / "data" / "tflite"
RUNNABLE = ["dense", "conv", "depthwise", "pool", "dilated", "residual", "float_io"]
#: Which operators (and fused activations) each model holds: the test below checks that
#: together they cover everything tpuer says it runs.
COVERED = {
    "dense": {"FULLY_CONNECTED", "RELU", "RELU6", "NONE"},
    "conv": {"CONV_2D", "RESHAPE", "FULLY_CONNECTED", "RELU", "RELU6", "NONE"},
    "depthwise": {"DEPTHWISE_CONV_2D", "CONV_2D", "RELU_N1_TO_1", "RELU", "NONE"},
    "pool": {"PAD", "MAX_POOL_2D", "AVERAGE_POOL_2D", "MEAN", "SOFTMAX"},
    "dilated": {"SPACE_TO_BATCH_ND", "CONV_2D", "DEPTHWISE_CONV_2D", "BATCH_TO_SPACE_ND",
                "ADD", "AVERAGE_POOL_2D", "PADV2", "MEAN"},
    "residual": {"ADD", "MEAN", "SOFTMAX"},
    "float_io": {"QUANTIZE", "DEQUANTIZE"},
}


def litert(name, x):
    """The output of model ``name`` for ``x`` by LiteRT's reference kernels."""
    pytest.importorskip("ai_edge_litert")
    return litert_output(MODELS / f"{name}.tflite", x)


def inputs(model, rng, batch):
    """Random samples of the model's input type, and the edge cases: every value the
    lowest, the highest, the zero point."""
    shape = (batch, *model.input_shape)
    if model.input.dtype == np.float32:
        # Through the leading QUANTIZE: its scale's halves are the ties of its rounding.
        scale, _ = model.tensors[model.operations[0].outputs[0]].quantization
        random = (rng.normal(size=shape) * 100 * float(scale)).astype(np.float32)
        ties = (rng.integers(-300, 300, size=shape) + 0.5) * np.float32(scale)
        edges = np.stack([np.full(model.input_shape, v, np.float32)
                          for v in (-1e30, 1e30, 0.0, -0.0)])
        return np.concatenate([random, ties.astype(np.float32), edges])
    random = rng.integers(-128, 128, size=shape).astype(np.int8)
    _, zero = model.input.quantization
    edges = np.stack([np.full(model.input_shape, v, np.int8) for v in (-128, 127, zero)])
    return np.concatenate([random, edges])


def rng_for(name):
    return np.random.default_rng([seed(), zlib.crc32(name.encode())])


@pytest.mark.parametrize("name", RUNNABLE)
def test_reference_equals_litert_operator_by_operator(name):
    """Every operator's output, not only the model's: a later operator (a pool, a MEAN, a
    SOFTMAX) can hide an earlier one's error."""
    model = from_tflite(MODELS / f"{name}.tflite")
    x = inputs(model, rng_for(name), 61)
    pytest.importorskip("ai_edge_litert")
    expected, tensors = litert_output(MODELS / f"{name}.tflite", x,
                                      tensors=[op.outputs[0] for op in model.operations])

    def compare(operation, output):
        want = tensors[operation.outputs[0]]
        assert output.dtype == want.dtype and output.shape == want.shape, operation.where()
        wrong = np.argwhere(output != want)
        assert len(wrong) == 0, (f"{operation.where()}: {len(wrong)} values differ, the "
                                 f"first at {wrong[0].tolist()}")

    y = model.run(x, lambda a, b: a.astype(np.int64) @ b.astype(np.int64), after=compare)
    np.testing.assert_array_equal(y, expected)
    assert y.dtype == expected.dtype


def test_the_models_cover_every_supported_operator_and_activation():
    seen = set()
    for name, covered in COVERED.items():
        model = from_tflite(MODELS / f"{name}.tflite")
        names = {op.name for op in model.operations}
        activations = {getattr(op, "activation", None) for op in model.operations} - {None}
        assert covered <= names | activations, f"{name}: {covered - names - activations}"
        seen |= names | activations
    supported = set(tpuer.tflite_model.SUPPORTED_OPERATORS) - {"SQUEEZE", "EXPAND_DIMS"}
    assert supported | {"NONE", "RELU", "RELU6", "RELU_N1_TO_1"} <= seen


@pytest.mark.parametrize("name", ["dense", "conv", "depthwise", "dilated", "residual",
                                  "float_io"])
def test_golden_device_equals_litert(name):
    model = from_tflite(MODELS / f"{name}.tflite")
    x = inputs(model, rng_for(name), 5)
    device = tpuer.Device(tpuer.Config(rows=4, cols=4))
    y = device.run(model, x)
    np.testing.assert_array_equal(y, litert(name, x))
    assert device.stats["macs"] == model.macs_per_sample() * len(x)
    assert device.stats["programs"] > 0 and device.stats["cycles"] > 0


@pytest.mark.parametrize("name", ["depthwise", "dense"])
@pytest.mark.parametrize("backend", ["pysim", "verilator", "icarus"])
def test_simulated_device_equals_litert(backend, name):
    """The RTL requantises as the kernels do: the convolutions' double rounding and
    FULLY_CONNECTED's single rounding (its three layers one program in ``dense``)."""
    if backend != "pysim":
        require_simulator(backend)
    model = from_tflite(MODELS / f"{name}.tflite")
    x = inputs(model, rng_for(backend), 1)[:2]
    device = tpuer.Device(SMALL, backend=backend)
    np.testing.assert_array_equal(device.run(model, x), litert(name, x))
    golden = tpuer.Device(SMALL)
    golden.run(model, x)
    assert device.stats == golden.stats


def test_serial_device_on_a_faulty_line_equals_litert():
    """The serial back end too: a board modelled in simulated time, its line flipping,
    dropping and repeating bytes."""
    from tpuer.sim.model_board import ModelBoard
    from test_serial import SERIAL_CONFIG as cfg
    board = ModelBoard(cfg, faults={"flip": 3e-4, "drop": 2e-4, "duplicate": 2e-4,
                                    "seed": seed()})
    model = from_tflite(MODELS / "conv.tflite")
    x = inputs(model, rng_for("serial"), 2)
    device = tpuer.Device(cfg, backend="serial", port=board)
    np.testing.assert_array_equal(device.run(model, x), litert("conv", x))


def test_mapping_names_each_operator_and_where_it_runs():
    model = from_tflite(MODELS / "residual.tflite")
    rows = model.mapping()
    assert [(index, name, where) for index, name, where, _ in rows] == [
        (0, "CONV_2D", "TPU"), (1, "CONV_2D", "TPU"), (2, "ADD", "host"), (3, "MEAN", "host"),
        (4, "FULLY_CONNECTED", "TPU"), (5, "SOFTMAX", "host")]
    # 8x8 positions, 3x3 windows of 4 channels, 4 filters; then 4 inputs to 5 outputs.
    assert [macs for *_, macs in rows] == [64 * 36 * 4, 64 * 36 * 4, 0, 0, 20, 0]


def test_consecutive_fully_connected_operators_run_as_one_program():
    """dense.tflite's three FULLY_CONNECTED operators are one run: one program whose
    activations stay in the Unified Buffer, with every layer's requantisation on the TPU."""
    from tpuer.compiler import compile_model
    model = from_tflite(MODELS / "dense.tflite")
    assert [[op.index for op in run] for run in model.runs()] == [[0, 1, 2]]
    cfg = tpuer.Config(rows=8, cols=8)
    seen = {}

    def layers(run, quantized, rows):
        seen["plan"] = compile_model(cfg, quantized)
        return quantized.reference(rows)
    x = inputs(model, rng_for("chain"), 4)
    np.testing.assert_array_equal(model.run(x, None, layers=layers), litert("dense", x))
    assert [list(segment.layers) for segment in seen["plan"].segments] == [[0, 1, 2]]
    device = tpuer.Device(cfg)
    np.testing.assert_array_equal(device.run(model, x), litert("dense", x))
    assert list(device.operator_cycles) == [0]
    assert any("(op 0)" in line for line in model.report(cfg))


def test_host_requantises_what_the_unit_cannot():
    """An operator whose requantisation the unit cannot compute (here one marked so) runs
    its product on the TPU and its requantisation on the host, still bit for bit; it
    breaks the run of FULLY_CONNECTED operators, and the report says why."""
    model = from_tflite(MODELS / "dense.tflite")
    middle = model.operations[1]
    middle.layer, middle.host_requantisation = None, "a reason given by the test"
    assert [[op.index for op in run] for run in model.runs()] == [[0], [1], [2]]
    assert [where for _, _, where, _ in model.mapping()] == ["TPU", "TPU+host", "TPU"]
    x = inputs(model, rng_for("host requantisation"), 4)
    device = tpuer.Device(tpuer.Config(rows=4, cols=4))
    np.testing.assert_array_equal(device.run(model, x), litert("dense", x))
    assert sorted(device.operator_cycles) == [0, 1, 2]
    assert "op 1: the host requantises, as a reason given by the test" in \
        model.report(tpuer.Config(rows=4, cols=4))


def test_single_rounding_pair_is_the_float_requantisation_or_none(monkeypatch):
    """Over every accumulator of a range, brute force: the pair found gives
    FULLY_CONNECTED's float64 requantisation exactly; a multiplier a little off is
    refused."""
    from tpuer.isa import Rounding
    from tpuer.sim.activation_model import requantize_lanes
    rng = rng_for("single rounding")
    found = 0
    for _ in range(40):
        scale = float(np.exp(rng.uniform(np.log(1e-4), np.log(3.0))))
        zero = int(rng.integers(-128, 128))
        bounds = (-128, 127) if rng.random() < 0.5 else (zero, min(127, zero + 60))
        low, high = sorted(int(v) for v in rng.integers(-400_000, 400_000, 2))
        acc = np.arange(low, high + 1)
        exact = kernels.requantize_float(acc, scale, zero, bounds)
        pair = kernels.single_rounding_pair(low, high, scale, zero, bounds)
        if pair is not None:
            found += 1
            fixed = requantize_lanes(acc, bias=0, multiplier=pair[0], shift=pair[1],
                                     zero_point=zero, relu=False, rounding=Rounding.SINGLE,
                                     clamp=bounds)
            np.testing.assert_array_equal(fixed, exact)
    assert found >= 30
    exact_pair = kernels.tflite_multiplier
    monkeypatch.setattr(kernels, "tflite_multiplier",
                        lambda scale: (exact_pair(scale)[0] + (1 << 12), exact_pair(scale)[1]))
    assert kernels.single_rounding_pair(-(1 << 22), 1 << 22, 0.0123, 3, (-128, 127)) is None


def test_compile_and_run_model_commands(tmp_path, capsys):
    from tpuer.cli import main
    path = MODELS / "conv.tflite"
    assert main(["compile", str(path), "--rows", "4", "--cols", "4"]) == 0
    printed = capsys.readouterr().out
    assert "CONV_2D            TPU" in printed and "RESHAPE            host" in printed
    assert "4 of 5 operators on the TPU, 1 on the host" in printed
    model = from_tflite(path)
    x = inputs(model, rng_for("cli"), 3)
    np.save(tmp_path / "x.npy", x)
    assert main(["run-model", str(path), "--input", str(tmp_path / "x.npy"), "-o",
                 str(tmp_path / "y.npy"), "--rows", "4", "--cols", "4"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), litert("conv", x))
    np.save(tmp_path / "bad.npy", x.astype(np.int16))
    assert main(["run-model", str(path), "--input", str(tmp_path / "bad.npy")]) == 2
    assert "dtype int8, not int16" in capsys.readouterr().err
    assert main(["compile", str(MODELS / "unsupported_tanh.tflite")]) == 2
    assert "operator 1 (TANH) is not supported" in capsys.readouterr().err


def test_tflite_demo_is_bit_exact_with_litert(capsys):
    from tpuer.demo import run_tflite_demo
    assert run_tflite_demo(backend="golden", samples=60, chunk=30) == 0
    printed = capsys.readouterr().out
    assert "bit-exact with LiteRT     60 of 60 samples, every output value equal" in printed


# --- errors ------------------------------------------------------------------------------

def test_unsupported_operator_is_named_with_its_index():
    with pytest.raises(TFLiteError, match=r"operator 1 \(TANH\) is not supported"):
        from_tflite(MODELS / "unsupported_tanh.tflite")


def test_float_model_is_refused_naming_the_tensor():
    with pytest.raises(TFLiteError, match=r"operator 0 \(FULLY_CONNECTED\): tensor .* has "
                                          r"type float32; tpuer runs int8 here"):
        from_tflite(MODELS / "unsupported_float.tflite")


@pytest.mark.parametrize("damage, message", [
    (lambda data: b"", "not a TFLite model"),
    (lambda data: b"\x00" * 64, "not a TFLite model"),
    (lambda data: data[:len(data) // 3], "damaged"),
])
def test_bad_files_give_clear_errors(damage, message):
    data = (MODELS / "dense.tflite").read_bytes()
    with pytest.raises(TFLiteError, match=message):
        from_tflite(damage(data))


def test_missing_file_and_wrong_source_type():
    with pytest.raises(TFLiteError, match="cannot read"):
        from_tflite(MODELS / "no_such_model.tflite")
    with pytest.raises(TypeError, match="path or bytes"):
        from_tflite(42)


def test_wrong_inputs_are_refused():
    model = from_tflite(MODELS / "conv.tflite")
    good = np.zeros((2, *model.input_shape), np.int8)
    with pytest.raises(TypeError, match="dtype int8"):
        model.reference(good.astype(np.float32))
    with pytest.raises(ValueError, match="shape"):
        model.reference(good[:, :-1])
    with pytest.raises(ValueError, match="no samples"):
        model.reference(good[:0])
    with pytest.raises(TypeError, match="NumPy array"):
        model.reference(good.tolist())
    floats = from_tflite(MODELS / "float_io.tflite")
    with pytest.raises(ValueError, match="NaN"):
        floats.reference(np.full((1, *floats.input_shape), np.nan, np.float32))


# --- the kernels' arithmetic -------------------------------------------------------------

def test_round_half_away_from_zero():
    values = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999999999999994, -0.3, 2.7])
    assert kernels.round_half_away(values).tolist() == [1, 2, 3, -1, -2, -3, 0, 0, 3]


def test_tflite_multiplier_rounds_ties_away_and_carries():
    # 0.75 = 0.75 * 2**0: mantissa 0.75, multiplier 0.75 * 2**31.
    assert kernels.tflite_multiplier(0.75) == (3 << 29, 0)
    # A mantissa whose 2**31 multiple ends in exactly one half rounds up, not to even.
    mantissa = (2 * 1234567890 + 1) / 2 ** 32
    assert kernels.tflite_multiplier(mantissa) == (1234567891, 0)
    # ... and so does the quantiser's (multiplier, right shift).
    assert quantize_multiplier(mantissa / 4) == (1234567891, 2)
    # Just below 1: the rounding reaches 2**31, which becomes 2**30 with the exponent up.
    assert kernels.tflite_multiplier(1 - 2 ** -40) == (1 << 30, 1)
    assert kernels.tflite_multiplier(3.0) == (3 << 29, 2)
    assert kernels.tflite_multiplier(0.0) == (0, 0)
    assert kernels.tflite_multiplier(2.0 ** -40) == (0, 0)


def test_multiply_by_quantized_multiplier_left_and_right():
    x = np.array([1000, -1000, 7, -7])
    # A scale of 3 (left shift 2 of 0.75): exact.
    assert kernels.multiply_by_quantized_multiplier(x, 3 << 29, 2).tolist() == \
        [3000, -3000, 21, -21]
    # A scale of 0.75 / 4 = 0.1875: 187.5 -> 188, -187.5 -> -188 (halves away from zero
    # after the high multiply), 1.3125 -> 1.
    assert kernels.multiply_by_quantized_multiplier(x, 3 << 29, -2).tolist() == \
        [188, -188, 1, -1]


def test_fully_connected_requantisation_rounds_halves_away_from_zero():
    """C's round, as the reference kernel's float path: 2.5 -> 3 and -2.5 -> -3 (round
    to even would give 2 and -2)."""
    acc = np.array([[5, -5, 3, -3, 1]])
    assert kernels.requantize_float(acc, 0.5, 0, (-128, 127)).tolist() == [[3, -3, 2, -2, 1]]
    assert kernels.requantize_float(acc, 0.5, 10, (-128, 12)).tolist() == [[12, 7, 12, 8, 11]]


def test_average_pool_divides_as_c_does():
    """A 2x2 window's sum plus or minus half the count, divided with truncation: -6 / 4
    gives -2 (floor of -4 / 4 would give -1), 6 / 4 gives 2, -5 / 4 gives -1."""
    x = np.array([-1, -2, -1, -2, 1, 2, 1, 2, -1, -2, -1, -1], np.int8).reshape(3, 2, 2, 1)
    pooled = kernels.average_pool(x, (2, 2), (2, 2), "VALID", (-128, 127))
    assert pooled.reshape(-1).tolist() == [-2, 2, -1]
