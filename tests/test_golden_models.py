"""The golden models against independent references: plain Python integers written from
the gemmlowp definitions, NumPy's matmul, and hand-worked cases."""

import numpy as np
import pytest
from amaranth.lib import data

from tpuer.isa import Rounding
from tpuer import Config
from tpuer.sim.accumulator_model import AccumulatorModel
from tpuer.sim.activation_model import (ActivationParams, quantize_multiplier, requantize,
                                        rounding_divide_by_pot, rounding_doubling_high_mul)
from tpuer.sim.matrix_unit_model import MatrixUnitModel
from tpuer.sim.unified_buffer_model import UnifiedBufferModel
from tpuer.tb.packing import Codec

INT32_MIN, INT32_MAX = -2**31, 2**31 - 1


def c_div(a, b):
    """C integer division: truncates toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def gemmlowp_high_mul(a, b):
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    return c_div(ab + nudge, 1 << 31)


def gemmlowp_divide_by_pot(x, exponent):
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


EDGE_INT32 = [INT32_MIN, INT32_MIN + 1, -2**30, -1, 0, 1, 2**30, INT32_MAX - 1, INT32_MAX]


def test_high_mul_matches_gemmlowp_on_edges_and_random():
    rng = np.random.default_rng(3)
    pairs = [(a, b) for a in EDGE_INT32 for b in EDGE_INT32]
    pairs += [tuple(int(v) for v in rng.integers(INT32_MIN, INT32_MAX + 1, 2)) for _ in range(3000)]
    a, b = np.array(pairs).T
    got = rounding_doubling_high_mul(a, b)
    want = [gemmlowp_high_mul(int(x), int(y)) for x, y in pairs]
    assert got.tolist() == want


def test_high_mul_is_one_nudge_and_a_floor():
    """The identity the RTL uses: gemmlowp's sign-dependent nudge and truncation toward
    zero give floor((a * b + 2**30) / 2**31) for every product, ties and extremes included."""
    rng = np.random.default_rng(5)
    pairs = [(a, b) for a in EDGE_INT32 for b in EDGE_INT32]
    pairs += [(-(1 << 30) + int(d), 1) for d in range(-3, 4)]       # ties around -0.5
    pairs += [tuple(int(v) for v in rng.integers(INT32_MIN, INT32_MAX + 1, 2)) for _ in range(3000)]
    for a, b in pairs:
        floored = min((a * b + (1 << 30)) >> 31, INT32_MAX)
        assert gemmlowp_high_mul(a, b) == floored, (a, b)


def test_divide_by_pot_matches_gemmlowp_and_rounds_half_away_from_zero():
    rng = np.random.default_rng(4)
    xs = EDGE_INT32 + rng.integers(INT32_MIN, INT32_MAX + 1, 2000).tolist()
    for shift in (0, 1, 2, 7, 30, 31):
        got = rounding_divide_by_pot(np.array(xs), shift)
        assert got.tolist() == [gemmlowp_divide_by_pot(int(x), shift) for x in xs]
    assert rounding_divide_by_pot(np.array([6, -6, 5, -5, 7, -7]), 2).tolist() == \
        [2, -2, 1, -1, 2, -2]   # 1.5 -> 2, -1.5 -> -2, 1.25 -> 1, 1.75 -> 2


def test_requantize_is_close_to_the_real_scale():
    cfg = Config(cols=4)
    rng = np.random.default_rng(5)
    for _ in range(50):
        scale = float(rng.uniform(1e-6, 0.99))
        multiplier, shift = quantize_multiplier(scale)
        params = ActivationParams(cfg, multiplier=multiplier, shift=shift, zero_point=3)
        acc = rng.integers(-200_000, 200_000, (20, 4))
        got = requantize(acc, params)
        real = np.clip(acc * (multiplier / 2**(31 + shift)) + 3, -128, 127)
        assert np.abs(got - real).max() <= 0.5 + 1e-6
        assert abs(multiplier / 2**(31 + shift) - scale) <= scale * 2**-30


def test_requantize_relu_bias_and_saturation():
    cfg = Config(cols=4)
    half = ActivationParams(cfg, multiplier=1 << 30, shift=0, zero_point=-10, relu=True,
                            bias=[0, 10, -10, INT32_MAX])
    acc = np.array([[-100, 100, 1000, INT32_MAX]])
    # x/2 + zp, clamped to [zp, 127]: -50-10 -> -10 (ReLU), 55-10 = 45, 495-10 -> 127,
    # bias saturates at INT32_MAX then halves to 2**30 -> 127.
    assert requantize(acc, half).tolist() == [[-10, 45, 127, 127]]
    no_relu = ActivationParams(cfg, multiplier=1 << 30, shift=0, zero_point=-10,
                               bias=[0, 10, -10, INT32_MAX])
    assert requantize(acc, no_relu).tolist() == [[-60, 45, 127, 127]]
    assert requantize(np.array([[-1000, 0, 0, 0]]), no_relu).tolist()[0][0] == -128


def test_requantize_roundings_left_shifts_and_clamps():
    """Worked by hand: a quarter (2**30 / 2**32) of -6, 6, -2, 2 is -1.5, 1.5, -0.5, 0.5;
    gemmlowp's double rounding takes halves away from zero, TFLite's single rounding up. A
    left shift multiplies first, within 32 bits: (2**29 + 1) * 8 wraps to 8. The clamps
    take the place of RELU6 and RELU_N1_TO_1."""
    cfg = Config(cols=4)
    quarter = {"multiplier": 1 << 30, "shift": 1}
    acc = np.array([[-6, 6, -2, 2]])
    assert requantize(acc, ActivationParams(cfg, **quarter)).tolist() == [[-2, 2, -1, 1]]
    assert requantize(acc, ActivationParams(cfg, **quarter, rounding=Rounding.SINGLE)
                      ).tolist() == [[-1, 2, 0, 1]]
    half = {"multiplier": 1 << 30}
    for rounding in Rounding:
        params = ActivationParams(cfg, **half, shift=-2, rounding=rounding)
        assert requantize(np.array([[3, -3, 7, 0]]), params).tolist() == [[6, -6, 14, 0]]
        params = ActivationParams(cfg, **half, shift=-3, rounding=rounding)
        assert requantize(np.array([[(1 << 29) + 1, 0, 0, 0]]), params).tolist() == \
            [[4, 0, 0, 0]]
    one = {"multiplier": INT32_MAX}
    values = np.array([[-100, 3, 100, -3]])
    assert requantize(values, ActivationParams(cfg, **one, clamp_min=-5, clamp_max=5)
                      ).tolist() == [[-5, 3, 5, -3]]
    assert requantize(values, ActivationParams(cfg, **one, relu=True, clamp_min=-5,
                                               clamp_max=6, zero_point=1)).tolist() == \
        [[1, 4, 6, 1]]


@pytest.mark.parametrize("kwargs, message", [
    ({"shift": 32}, "shift must lie in [-7, 31]"),
    ({"shift": -8}, "shift must lie in [-7, 31]"),
    ({"clamp_max": 128}, "clamp_max must lie in [-128, 127]"),
    ({"rounding": 2}, "2 is not a valid Rounding"),
    ({"zero_point": 128}, "zero_point must lie in [-128, 127]"),
    ({"multiplier": 2**31}, "multiplier must lie in"),
    ({"bias": [1, 2, 3]}, "bias must be a scalar or have 4 lanes"),
    ({"shift": 1.5}, "shift must hold integers"),
])
def test_activation_params_are_checked(kwargs, message):
    with pytest.raises((ValueError, TypeError)) as error:
        ActivationParams(Config(cols=4), **kwargs)
    assert message in str(error.value)


@pytest.mark.parametrize("scale", [0.0, 1.0, 1.5, -0.1, float("nan"), float("inf")])
def test_quantize_multiplier_refuses_scales_outside_0_1(scale):
    with pytest.raises(ValueError):
        quantize_multiplier(scale)


def test_accumulator_model_saturates_and_reports_it():
    model = AccumulatorModel(Config(cols=2, acc_depth=4))
    assert not model.write(1, [INT32_MAX, INT32_MIN])
    assert model.write(1, [1, 0], accumulate=True)
    assert model.read(1).tolist() == [INT32_MAX, INT32_MIN]
    assert model.write(1, [0, -1], accumulate=True)
    assert model.read(1).tolist() == [INT32_MAX, INT32_MIN]
    assert not model.write(1, [-5, 5], accumulate=True)
    assert model.read(1).tolist() == [INT32_MAX - 5, INT32_MIN + 5]
    assert not model.write(9, [1, 1])          # out of range: nothing happens
    assert model.read(9).tolist() == [0, 0]
    with pytest.raises(ValueError, match="accumulator row must lie in"):
        model.write(0, [2**31, 0])


def test_matrix_unit_model_is_matmul_per_tile():
    cfg = Config(rows=3, cols=5)
    rng = np.random.default_rng(6)
    model = MatrixUnitModel(cfg)
    x = rng.integers(-128, 128, (4, 3))
    assert not model.matmul(x, new_tile=False).any()   # zero weights after reset
    tiles = [rng.integers(-128, 128, (3, 5)) for _ in range(3)]
    for tile in tiles:
        model.push_tile(tile)
    for tile in tiles:
        assert np.array_equal(model.matmul(x), x @ tile)
    with pytest.raises(RuntimeError, match="no complete weight tile"):
        model.vector(x[0], new_tile=True)
    with pytest.raises(ValueError, match="3 operands"):
        model.vector(np.zeros(4, int))
    with pytest.raises(ValueError, match=r"must lie in \[-128, 127\]"):
        model.vector(np.array([128, 0, 0]))


def test_unified_buffer_model_masks_lanes():
    model = UnifiedBufferModel(Config(rows=2, cols=3, ub_depth=5))
    model.write(4, [1, 2, 3])
    model.write(4, [7, 8, 9], mask=[False, True, False])
    assert model.read(4).tolist() == [1, 8, 3]
    assert not model.write(5, [1, 1, 1])
    assert model.read(5).tolist() == [0, 0, 0]


def test_codec_round_trips_nested_layouts():
    layout = data.StructLayout({"data": data.ArrayLayout(Config().operand_shape, 3),
                                "flag": 1, "tag": 16})
    codec = Codec(layout)
    value = {"data": [-128, 127, -1], "flag": 1, "tag": 40000}
    bits = codec.encode(value)
    assert bits == layout.const(value).as_bits()      # the same bits Amaranth makes
    decoded = codec.decode(bits)
    assert decoded["data"].tolist() == [-128, 127, -1] and decoded["tag"] == 40000
    with pytest.raises(ValueError, match="does not fit"):
        codec.encode({"data": [128, 0, 0]})
