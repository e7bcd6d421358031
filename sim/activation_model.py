"""Golden model of the activation / requantisation unit: the NumPy reference of the
gemmlowp / TFLite fixed-point scheme that the RTL implements bit for bit."""

import math

import numpy as np

from ..isa import MAX_LEFT_SHIFT, Rounding
from .numerics import check_range, saturate

__all__ = ["requantize", "requantize_lanes", "rounding_doubling_high_mul", "rounding_divide_by_pot",
           "quantize_multiplier", "tflite_multiplier", "ActivationParams", "scaled",
           "shift_places"]


def rounding_doubling_high_mul(x, multiplier):
    """gemmlowp ``SaturatingRoundingDoublingHighMul``: ``x * M / 2**31`` rounded to the
    nearest integer, ties upward (by gemmlowp's sign-dependent nudge and a division that
    truncates toward zero, as written here), saturated to int32. The RTL computes the same
    as ``floor((x * M + 2**30) / 2**31)`` (see :func:`tpuer.hw.activation.high_half`)."""
    prod = np.asarray(x, np.int64) * np.asarray(multiplier, np.int64)
    nudged = prod + np.where(prod >= 0, 1 << 30, 1 - (1 << 30))
    floor = nudged >> 31
    inexact = (nudged & ((1 << 31) - 1)) != 0
    toward_zero = floor + ((nudged < 0) & inexact)
    return saturate(toward_zero, 32)


def rounding_divide_by_pot(x, shift):
    """gemmlowp ``RoundingDivideByPOT``: ``x / 2**shift`` rounded half away from zero."""
    x = np.asarray(x, np.int64)
    shift = np.asarray(shift, np.int64)
    mask = (np.int64(1) << shift) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> shift) + (remainder > threshold)


class ActivationParams:
    """Parameters of one Activate step, checked against the configuration.

    Parameters
    ----------
    cfg : Config
    bias, multiplier, shift : int or array of ``cfg.cols``
        Per lane (a scalar applies to every lane). ``multiplier`` is a signed Q0.31 value,
        ``shift`` a right shift in ``[0, cfg.max_shift]`` or, negative, a left shift of up
        to :data:`~tpuer.isa.MAX_LEFT_SHIFT` places.
    zero_point : int
        Output zero point, an operand value.
    relu : bool
        The lower clamp bound is the zero point instead of ``clamp_min``.
    rounding : Rounding
        How the scaling rounds (:class:`~tpuer.isa.Rounding`).
    clamp_min, clamp_max : int or None
        The output's bounds, operand values (``None``: the operand range's end). Should
        they cross, a value below the lower bound takes it and any other the upper.
    """

    def __init__(self, cfg, *, bias=0, multiplier=(1 << 31) - 1, shift=0, zero_point=0,
                 relu=False, rounding=Rounding.DOUBLE, clamp_min=None, clamp_max=None):
        cols = cfg.cols
        self.cfg = cfg

        def lanes(name, value, low, high):
            arr = np.broadcast_to(np.asarray(value), (cols,)) if np.ndim(value) == 0 \
                else np.asarray(value)
            if arr.shape != (cols,):
                raise ValueError(f"{name} must be a scalar or have {cols} lanes, "
                                 f"not shape {arr.shape}")
            return check_range(name, arr, low, high)

        def operand(name, value):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"{name} must be an integer, not {value!r}")
            if not cfg.operand_min <= value <= cfg.operand_max:
                raise ValueError(f"{name} must lie in [{cfg.operand_min}, {cfg.operand_max}], "
                                 f"not {value}")
            return int(value)

        self.bias = lanes("bias", bias, cfg.acc_min, cfg.acc_max)
        self.multiplier = lanes("multiplier", multiplier, -(1 << 31), (1 << 31) - 1)
        self.shift = lanes("shift", shift, -MAX_LEFT_SHIFT, cfg.max_shift)
        self.zero_point = operand("zero_point", zero_point)
        self.relu = bool(relu)
        self.rounding = Rounding(rounding)
        self.clamp_min = operand("clamp_min", cfg.operand_min if clamp_min is None
                                 else clamp_min)
        self.clamp_max = operand("clamp_max", cfg.operand_max if clamp_max is None
                                 else clamp_max)


def requantize(acc, params, *, in_range=False):
    """Requantise accumulator words (any shape whose last axis is ``cfg.cols``) to operands.
    ``in_range``: the caller knows them to be accumulator words (int64, in range), so they
    are not checked again.

    Bit-exact reference of :class:`tpuer.hw.ActivationUnit`.
    """
    cfg = params.cfg
    if not in_range:
        acc = check_range("accumulator values", acc, cfg.acc_min, cfg.acc_max)
    return requantize_lanes(acc, bias=params.bias, multiplier=params.multiplier,
                            shift=params.shift, zero_point=params.zero_point,
                            relu=params.relu, rounding=params.rounding,
                            clamp=(params.clamp_min, params.clamp_max),
                            acc_width=cfg.acc_width, operand_width=cfg.operand_width)


def scaled(x, multiplier, shift, rounding=Rounding.DOUBLE):
    """The scaling of :func:`requantize_lanes`: ``x * multiplier / 2**(31 + shift)``
    rounded, for int32 ``x``.

    A negative ``shift`` first shifts ``x`` left by ``-shift`` places within 32 bits (the
    bits above wrap away, as TFLite's ``x * (1 << left_shift)`` does). Then, by
    ``rounding``:

    * ``DOUBLE`` (gemmlowp, TFLite's ``MultiplyByQuantizedMultiplier``): the saturating
      rounding doubling high multiply, then a right shift rounding half away from zero;
    * ``SINGLE`` (TFLite's ``TFLITE_SINGLE_ROUNDING``): ``floor((x M + 2**(30 + shift)) /
      2**(31 + shift))`` for a right shift, a single rounding half up. It is computed as
      ``h = floor(x M / 2**31)`` (saturated), then ``floor((h + 2**(shift - 1)) /
      2**shift)``, which is equal; without a right shift both modes are the first step."""
    x = np.asarray(x, np.int64)
    right, left = shift_places(shift)
    x = ((x << left) + (1 << 31)) % (1 << 32) - (1 << 31)        # wraps within 32 bits
    if Rounding(rounding) is Rounding.DOUBLE:
        return rounding_divide_by_pot(rounding_doubling_high_mul(x, multiplier), right)
    product = x * np.asarray(multiplier, np.int64)
    high = saturate((product + np.where(right == 0, 1 << 30, 0)) >> 31, 32)
    return (high + ((np.int64(1) << right) >> 1)) >> right


def shift_places(shift):
    """A SHIFT as ``(right, left)`` places, the other 0 (the activation unit's ``shift`` and
    ``left_shift``)."""
    shift = np.asarray(shift, np.int64)
    return np.maximum(shift, 0), np.maximum(-shift, 0)


def requantize_lanes(acc, *, bias, multiplier, shift, zero_point, relu,
                     rounding=Rounding.DOUBLE, clamp=(None, None), acc_width=32,
                     operand_width=8):
    """The arithmetic of :func:`requantize` on any number of lanes (the quantised network's
    reference uses it for layers wider than the array): saturating bias add, the scaling
    (:func:`scaled`), zero point, clamp: to ``clamp`` (``None``: the operand range's ends),
    the lower bound the zero point with ``relu``. A value below the lower bound takes it,
    else one above the upper bound takes that (which decides should the bounds cross)."""
    x = saturate(np.asarray(acc, np.int64) + np.asarray(bias, np.int64), acc_width)
    limit = 1 << (operand_width - 1)
    low = -limit if clamp[0] is None else clamp[0]
    high = limit - 1 if clamp[1] is None else clamp[1]
    if relu:
        low = zero_point
    y = np.minimum(np.maximum(scaled(x, multiplier, shift, rounding) + zero_point, -limit),
                   limit - 1)
    return np.where(y < low, low, np.where(y > high, high, y))


def tflite_multiplier(real):
    """TFLite's ``QuantizeMultiplier``: a non-negative ``real`` as ``(multiplier,
    exponent)``, ``real ~= multiplier * 2**(exponent - 31)`` with ``multiplier`` in
    ``[2**30, 2**31)``, the mantissa's ties rounded away from zero; ``(0, 0)`` for 0 and for
    values too small to represent."""
    real = float(real)
    if real == 0.0:
        return 0, 0
    mantissa, exponent = math.frexp(real)           # real = mantissa * 2**exponent
    fixed = math.floor(mantissa * (1 << 31) + 0.5)  # exact: a 53-bit mantissa times 2**31
    if fixed == 1 << 31:
        fixed //= 2
        exponent += 1
    if exponent < -31:
        return 0, 0
    return fixed, exponent


def quantize_multiplier(scale):
    """Express a real ``scale`` in ``(0, 1)`` as ``(multiplier, shift)`` with
    ``scale ~= multiplier / 2**(31 + shift)`` and ``multiplier`` in ``[2**30, 2**31)``,
    rounded as TFLite rounds (:func:`tflite_multiplier`)."""
    if not (isinstance(scale, (int, float, np.floating)) and math.isfinite(scale)):
        raise ValueError(f"scale must be a finite number, not {scale!r}")
    if not 0 < scale < 1:
        raise ValueError(f"scale must lie in (0, 1), not {scale}")
    multiplier, exponent = tflite_multiplier(scale)
    if multiplier == 0 or -exponent > 31:
        return 0, 31  # too small to represent: every output becomes the zero point
    return multiplier, -exponent
