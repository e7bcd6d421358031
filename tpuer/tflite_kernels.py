"""NumPy kernels that compute, bit for bit, what LiteRT's reference kernels
(``OpResolverType.BUILTIN_REF``) compute for int8 models: the arithmetic of
``tflite/kernels/internal/reference`` and of the kernels' ``Prepare`` steps, in integers
where they use integers and in IEEE float32 or float64 exactly where they do.

Tensors are NHWC with the batch first. The products of the matrix operators are left to
a ``matmul(a, b)`` of int8 matrices (NumPy here, the TPU in :class:`tpuer.Device`); all the
rest (zero points, bias, requantisation, clamps) is here, on the host.
"""

import math

import numpy as np

from .isa import MAX_LEFT_SHIFT, Rounding
from .sim.activation_model import (requantize_lanes, rounding_divide_by_pot,
                                   rounding_doubling_high_mul, tflite_multiplier)

__all__ = ["round_half_away", "tflite_multiplier", "multiply_by_quantized_multiplier",
           "activation_range", "same_padding", "output_size", "window_geometry", "patches",
           "integer_product", "requantize_double", "requantize_float", "single_rounding_pair",
           "max_pool", "average_pool", "mean", "add", "softmax", "quantize", "dequantize", "pad",
           "space_to_batch", "batch_to_space"]

INT8_MIN, INT8_MAX = -128, 127


def round_half_away(value):
    """C's ``round``: to the nearest integer, halves away from zero, exactly (for float32
    or float64 input); as int64."""
    value = np.asarray(value)
    whole = np.trunc(value)
    fraction = value - whole                # exact in binary floating point
    step = np.where(np.abs(fraction) >= 0.5, np.sign(value), 0)
    return (whole + step).astype(np.int64)


def _wrap_int32(value):
    return ((np.asarray(value, np.int64) + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def multiply_by_quantized_multiplier(x, multiplier, exponent):
    """TFLite's ``MultiplyByQuantizedMultiplier`` as LiteRT's reference kernels are built
    (two roundings): ``x * 2**max(exponent, 0)`` (in int32), gemmlowp's rounding doubling
    high multiply by ``multiplier``, then a rounding right shift by ``max(-exponent, 0)``.
    Arrays broadcast."""
    exponent = np.asarray(exponent, np.int64)
    left = np.maximum(exponent, 0)
    right = np.maximum(-exponent, 0)
    shifted = _wrap_int32(np.asarray(x, np.int64) << left)
    return rounding_divide_by_pot(rounding_doubling_high_mul(shifted, multiplier), right)


def activation_range(activation, scale, zero_point):
    """TFLite's ``CalculateActivationRangeQuantized`` for an int8 output: the clamp bounds
    of a fused ``activation`` (``"NONE"``, ``"RELU"``, ``"RELU6"``, ``"RELU_N1_TO_1"``),
    each bound quantised as :func:`quantize` quantises (TFLite takes the larger of the lower
    bound and -128, the smaller of the upper bound and 127: the clamp that function ends
    with)."""
    def quantized(value):
        return int(quantize(value, scale, zero_point))

    if activation == "NONE":
        return INT8_MIN, INT8_MAX
    if activation == "RELU":
        return quantized(0.0), INT8_MAX
    if activation == "RELU6":
        return quantized(0.0), quantized(6.0)
    if activation == "RELU_N1_TO_1":
        return quantized(-1.0), quantized(1.0)
    raise ValueError(f"no int8 clamp for the fused activation {activation}")


def output_size(size, filter_size, stride, dilation, padding):
    """TFLite's output size along one axis for ``padding`` ``"SAME"`` or ``"VALID"``."""
    effective = (filter_size - 1) * dilation + 1
    if padding == "SAME":
        return (size + stride - 1) // stride
    return (size + stride - effective) // stride


def same_padding(size, filter_size, stride, dilation, out_size):
    """The padding TFLite puts before the input along one axis (the rest, up to one more,
    goes after it): half of what the window needs, rounded down."""
    effective = (filter_size - 1) * dilation + 1
    return max((out_size - 1) * stride + effective - size, 0) // 2


def patches(x, kernel, stride, dilation, before, out_size, pad_value):
    """The windows of ``x`` (N, H, W, C): an array (N, OH, OW, KH, KW, C) whose positions
    outside the input hold ``pad_value``; ``before`` is the padding before row and column
    0."""
    n, height, width, channels = x.shape
    (kh, kw), (sh, sw), (dh, dw), (ph, pw), (oh, ow) = kernel, stride, dilation, before, out_size
    rows = np.arange(oh)[:, None] * sh - ph + np.arange(kh)[None, :] * dh      # (OH, KH)
    cols = np.arange(ow)[:, None] * sw - pw + np.arange(kw)[None, :] * dw      # (OW, KW)
    inside = ((rows >= 0) & (rows < height))[:, None, :, None] & \
             ((cols >= 0) & (cols < width))[None, :, None, :]                 # (OH, OW, KH, KW)
    gathered = x[:, np.clip(rows, 0, height - 1)[:, None, :, None],
                 np.clip(cols, 0, width - 1)[None, :, None, :], :]
    return np.where(inside[None, ..., None], gathered, np.asarray(pad_value, x.dtype))


def integer_product(rows, weights, *, input_zero_point, weight_zero_point, bias, matmul):
    """``(rows - input_zero_point) @ (weights - weight_zero_point) + bias`` in int64, with the
    int8 product ``rows @ weights`` from ``matmul`` and the zero points folded in after:
    ``x @ w - z_w sum(x) - z_x sum(w) + K z_x z_w``."""
    product = np.asarray(matmul(rows, weights), np.int64)
    k = rows.shape[1]
    rows64, weights64 = rows.astype(np.int64), weights.astype(np.int64)
    acc = product - input_zero_point * weights64.sum(axis=0)[None, :]
    if np.any(weight_zero_point):
        acc = acc - rows64.sum(axis=1)[:, None] * weight_zero_point + \
            k * input_zero_point * np.asarray(weight_zero_point, np.int64)
    if bias is not None:
        acc = acc + np.asarray(bias, np.int64)[None, :]
    return acc


def requantize_double(acc, multiplier, exponent, zero_point, bounds):
    """The convolutions' requantisation: ``MultiplyByQuantizedMultiplier`` (per output
    channel along the last axis), the zero point, the clamp to ``bounds``; int8."""
    scaled = multiply_by_quantized_multiplier(_wrap_int32(acc), multiplier, exponent)
    return np.clip(scaled + zero_point, *bounds).astype(np.int8)


def requantize_float(acc, scale, zero_point, bounds):
    """FULLY_CONNECTED's reference requantisation: ``round(acc * scale)`` in float64 of the
    int32 accumulator (wrapped, as the kernel's),
    ``scale`` the float64 ``s_in * s_w / s_out`` per output channel; the zero point; the
    clamp to ``bounds``; int8."""
    # the kernel's accumulator is an int32, which wraps
    product = _wrap_int32(acc).astype(np.float64) * scale
    # its cast of the rounded product to int32 gives INT32_MIN out of range (x86-64's)
    fits = np.abs(product) < float(1 << 31)
    scaled = np.where(fits, round_half_away(np.where(fits, product, 0.0)), -(1 << 31))
    return np.clip(_wrap_int32(scaled) + zero_point, *bounds).astype(np.int8)


def single_rounding_pair(low, high, scale, zero_point, bounds):
    """The activation unit's ``(multiplier, shift)`` with single rounding
    (:class:`~tpuer.isa.Rounding` ``SINGLE``) that gives exactly FULLY_CONNECTED's float64
    requantisation (:func:`requantize_float`) of every accumulator from ``low`` to ``high``
    for one output channel of real scale ``scale``; ``None`` if there is none.

    The pair is :func:`tflite_multiplier`'s. Both requantisations are non-decreasing
    step functions of the accumulator that step only near ``(j + 1/2) / scale``: the float
    one within float64's rounding, the fixed-point one within its multiplier's relative
    error of ``2**-31``, less than one accumulator step while ``|acc| < 2**31``. Between
    those places both are constant, so they are equal everywhere once they are equal on
    every accumulator within 3 of each place where the clamped output can step, and at
    ``low`` and ``high``: a few thousand values, not the millions of the range."""
    multiplier, exponent = tflite_multiplier(scale)
    reach = max(abs(int(low)), abs(int(high)))
    if multiplier == 0 or exponent > MAX_LEFT_SHIFT or \
            reach << max(exponent, 0) >= 1 << 31 or reach * scale >= 1 << 31:
        return None
    steps = np.arange(bounds[0] - zero_point - 1, bounds[1] - zero_point + 1)
    places = np.floor((steps + 0.5) / scale).astype(np.int64)
    acc = np.unique(np.clip(np.concatenate([(places[:, None] + np.arange(-3, 4)).ravel(),
                                            [low, high]]), low, high))
    fixed = requantize_lanes(acc, bias=0, multiplier=multiplier, shift=-exponent,
                             zero_point=zero_point, relu=False, rounding=Rounding.SINGLE,
                             clamp=bounds)
    if not np.array_equal(fixed, requantize_float(acc, scale, zero_point, bounds)):
        return None
    return multiplier, -exponent


def window_geometry(size, kernel, stride, dilation, padding):
    """``(before, out)`` of windows ``kernel`` (rows, columns) moved by ``stride`` over an
    input of ``size`` (height, width) with ``padding`` ``"SAME"`` or ``"VALID"``: the
    padding before row and column 0, and the output's height and width."""
    out = tuple(output_size(n, k, s, d, padding)
                for n, k, s, d in zip(size, kernel, stride, dilation))
    before = tuple(same_padding(n, k, s, d, o) if padding == "SAME" else 0
                   for n, k, s, d, o in zip(size, kernel, stride, dilation, out))
    return before, out


def _pool_windows(x, filter_size, stride, padding):
    _, height, width, _ = x.shape
    before, out = window_geometry((height, width), filter_size, stride, (1, 1), padding)
    windows = patches(x.astype(np.int64), filter_size, stride, (1, 1), before, out, 0)
    inside = patches(np.ones((1, height, width, 1), np.int64), filter_size, stride, (1, 1),
                     before, out, 0)
    return windows, inside.astype(bool)


def max_pool(x, filter_size, stride, padding, bounds):
    """MAX_POOL_2D: the largest value of each window's positions inside the input."""
    windows, inside = _pool_windows(x, filter_size, stride, padding)
    largest = np.where(inside, windows, INT8_MIN - 1).max(axis=(3, 4))
    return np.clip(largest, *bounds).astype(np.int8)


def average_pool(x, filter_size, stride, padding, bounds):
    """AVERAGE_POOL_2D: each window's sum over its positions inside the input, divided by
    their count rounding halves away from zero (C's truncating division)."""
    windows, inside = _pool_windows(x, filter_size, stride, padding)
    total = (windows * inside).sum(axis=(3, 4))
    count = inside.sum(axis=(3, 4))
    half = count // 2
    average = np.where(total > 0, (total + half) // count, -((-(total - half)) // count))
    return np.clip(average, *bounds).astype(np.int8)


def mean(x, axes, keep_dims, input_zero_point, output_zero_point, real_multiplier):
    """MEAN on int8: the sum over ``axes`` less the input zero point's share, scaled by
    TFLite's multiplier for ``real_multiplier / count`` (its 1/count folded into the
    multiplier by a shift and an integer division, as the reference kernel does)."""
    total = x.astype(np.int64).sum(axis=tuple(axes), keepdims=keep_dims)
    count = int(np.prod([x.shape[axis] for axis in axes]))
    multiplier, exponent = tflite_multiplier(real_multiplier)
    shift = min(count.bit_length() - 1, 32, 31 + exponent)
    multiplier = (multiplier << shift) // count
    exponent -= shift
    scaled = multiply_by_quantized_multiplier(
        _wrap_int32(total - input_zero_point * count), multiplier, exponent)
    return np.clip(scaled + output_zero_point, INT8_MIN, INT8_MAX).astype(np.int8)


def add(a, b, params_a, params_b, params_out, bounds):
    """ADD on int8 (broadcasting): both inputs shifted left by 20 bits and scaled to twice
    the larger input scale, summed, and scaled to the output; each ``params_*`` a
    ``(scale, zero_point)`` with the scale a float32."""
    (scale_a, zero_a), (scale_b, zero_b), (scale_out, zero_out) = params_a, params_b, params_out
    left_shift = 20
    twice_max = float(2 * max(np.float32(scale_a), np.float32(scale_b)))
    m_a, e_a = tflite_multiplier(float(np.float32(scale_a)) / twice_max)
    m_b, e_b = tflite_multiplier(float(np.float32(scale_b)) / twice_max)
    m_out, e_out = tflite_multiplier(
        twice_max / float(np.float32((1 << left_shift) * np.float32(scale_out))))
    scaled_a = multiply_by_quantized_multiplier(
        (a.astype(np.int64) - zero_a) << left_shift, m_a, e_a)
    scaled_b = multiply_by_quantized_multiplier(
        (b.astype(np.int64) - zero_b) << left_shift, m_b, e_b)
    total = multiply_by_quantized_multiplier(_wrap_int32(scaled_a + scaled_b), m_out, e_out)
    return np.clip(total + zero_out, *bounds).astype(np.int8)


def quantize(x, scale, zero_point):
    """QUANTIZE float32 -> int8: ``round(x / scale)`` in float32, converted to int32, plus
    the zero point (in int32), clamped. A quotient beyond int32 converts as the x86
    instruction LiteRT's build uses converts it: to ``-2**31``."""
    quotient = np.asarray(x, np.float32) / np.float32(scale)
    inside = np.abs(quotient) < np.float32(2 ** 31)
    rounded = np.where(inside, round_half_away(np.where(inside, quotient, 0)), -(1 << 31))
    return np.clip(_wrap_int32(rounded + zero_point), INT8_MIN, INT8_MAX).astype(np.int8)


def dequantize(x, scale, zero_point):
    """DEQUANTIZE int8 -> float32: ``scale * (x - zero_point)`` in float64, then float32."""
    return (float(np.float32(scale)) * (x.astype(np.float64) - zero_point)).astype(np.float32)


def pad(x, paddings, value):
    """PAD: ``x`` with ``paddings[d] = (before, after)`` positions of ``value`` along each
    axis."""
    return np.pad(x, [tuple(int(v) for v in p) for p in paddings], constant_values=value)


def space_to_batch(x, block, paddings, value):
    """SPACE_TO_BATCH_ND on (N, H, W, C): pad rows and columns with ``value``, then split
    them into ``block`` phases, phase ``(i, j)`` the batch entries ``(i * bw + j) * N + n``."""
    n, _, _, channels = x.shape
    (bh, bw) = block
    padded = np.pad(x, [(0, 0), tuple(paddings[0]), tuple(paddings[1]), (0, 0)],
                    constant_values=value)
    height, width = padded.shape[1] // bh, padded.shape[2] // bw
    phases = padded[:, :height * bh, :width * bw].reshape(n, height, bh, width, bw, channels)
    return phases.transpose(2, 4, 0, 1, 3, 5).reshape(bh * bw * n, height, width, channels)


def batch_to_space(x, block, crops):
    """BATCH_TO_SPACE_ND, the inverse of :func:`space_to_batch`: the phases interleaved
    back into rows and columns, then ``crops`` (before, after) cut off each."""
    batch, height, width, channels = x.shape
    (bh, bw) = block
    n = batch // (bh * bw)
    whole = x.reshape(bh, bw, n, height, width, channels).transpose(2, 3, 0, 4, 1, 5)
    whole = whole.reshape(n, height * bh, width * bw, channels)
    (top, bottom), (left, right) = crops
    return whole[:, top:height * bh - bottom, left:width * bw - right]


# --- SOFTMAX: gemmlowp's fixed-point exp and reciprocal, as LiteRT's reference kernel ---

_srdhm = rounding_doubling_high_mul       # gemmlowp's names, as in its fixed-point code
_rdbp = rounding_divide_by_pot


def _saturating_left_shift(x, shift):
    return np.clip(np.asarray(x, np.int64) << shift, -(1 << 31), (1 << 31) - 1)


def _exp_on_interval(a):
    """gemmlowp ``exp_on_interval_between_negative_one_quarter_and_0_excl`` on raw Q0.31."""
    constant_term = 1895147668
    constant_1_over_3 = 715827883
    x = a + (1 << 28)
    x2 = _srdhm(x, x)
    x3 = _srdhm(x2, x)
    x4 = _srdhm(x2, x2)
    x4_over_4 = _rdbp(x4, 2)
    x4_over_24_plus_x3_over_6_plus_x2_over_2 = _rdbp(
        _srdhm(x4_over_4 + x3, constant_1_over_3) + x2, 1)
    return constant_term + _srdhm(constant_term, x + x4_over_24_plus_x3_over_6_plus_x2_over_2)


def _exp_on_negative_values(a, integer_bits):
    """gemmlowp ``exp_on_negative_values`` of raw Q(integer_bits).(31 - integer_bits)
    values, giving raw Q0.31."""
    fractional_bits = 31 - integer_bits
    one_quarter = 1 << (fractional_bits - 2)
    mask = one_quarter - 1
    a_mod_quarter_minus_one_quarter = (a & mask) - one_quarter
    result = _exp_on_interval(a_mod_quarter_minus_one_quarter << integer_bits)
    remainder = a_mod_quarter_minus_one_quarter - a
    multipliers = {-2: 1672461947, -1: 1302514674, 0: 790015084, 1: 290630308,
                   2: 39332535, 3: 720401, 4: 242}
    for exponent, multiplier in multipliers.items():
        if integer_bits > exponent:
            shift = fractional_bits + exponent
            if 0 <= shift <= 31:
                selected = (remainder & (1 << shift)) != 0
                result = np.where(selected, _srdhm(result, multiplier), result)
    if integer_bits > 5:
        clamp = -(1 << (fractional_bits + 5))
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, (1 << 31) - 1, result)


def _one_over_one_plus_x(a):
    """gemmlowp ``one_over_one_plus_x_for_x_in_0_1`` on raw Q0.31, giving raw Q2.29."""
    half_denominator = _rdbp(a.astype(np.int64) + ((1 << 31) - 1), 1)   # RoundingHalfSum
    constant_48_over_17 = 1515870810
    constant_neg_32_over_17 = -1010580540
    x = constant_48_over_17 + _srdhm(half_denominator, constant_neg_32_over_17)
    one = 1 << 29
    for _ in range(3):
        half_denominator_times_x = _srdhm(half_denominator, x)
        one_minus = one - half_denominator_times_x
        x = x + _saturating_left_shift(_srdhm(x, one_minus), 2)
    return _saturating_left_shift(x, 1)


def _reciprocal(sum_of_exps, integer_bits):
    """TFLite's ``GetReciprocal``: ``(raw Q0.31 reciprocal, num_bits_over_unit)``."""
    headroom = np.array([32 - int(v).bit_length() for v in sum_of_exps.reshape(-1)],
                        np.int64).reshape(sum_of_exps.shape)
    num_bits_over_unit = integer_bits - headroom
    shifted_sum_minus_one = (sum_of_exps.astype(np.int64) << headroom) - (1 << 31)
    shifted_sum_minus_one = _wrap_int32(shifted_sum_minus_one)
    return _one_over_one_plus_x(shifted_sum_minus_one), num_bits_over_unit


def softmax(x, beta, input_scale):
    """SOFTMAX int8 -> int8 (output scale 1/256, zero point -128) over the last axis, by
    gemmlowp's fixed-point arithmetic: differences from the row's largest value scaled
    into Q5.26, exponentials summed in Q12.19, the reciprocal, each share rounded."""
    scaled_diff_integer_bits, accumulation_integer_bits = 5, 12
    real = min(float(beta) * float(input_scale) * (1 << (31 - scaled_diff_integer_bits)),
               (1 << 31) - 1.0)
    multiplier, left_shift = tflite_multiplier(real)
    radius = ((1 << scaled_diff_integer_bits) - 1) * (1 << (31 - scaled_diff_integer_bits)) \
        / (1 << left_shift)
    diff_min = -int(math.floor(radius))
    values = x.astype(np.int64)
    diff = values - values.max(axis=-1, keepdims=True)
    kept = diff >= diff_min
    rescaled = multiply_by_quantized_multiplier(diff, multiplier, left_shift)
    exps = _exp_on_negative_values(np.where(kept, rescaled, 0), scaled_diff_integer_bits)
    in_accumulator = _rdbp(exps, accumulation_integer_bits)
    sum_of_exps = np.where(kept, in_accumulator, 0).sum(axis=-1, keepdims=True)
    scale, num_bits_over_unit = _reciprocal(_wrap_int32(sum_of_exps), accumulation_integer_bits)
    exponent = num_bits_over_unit + 31 - 8
    shares = _rdbp(_srdhm(scale, exps), exponent) + INT8_MIN
    return np.where(kept, np.clip(shares, INT8_MIN, INT8_MAX), INT8_MIN).astype(np.int8)
