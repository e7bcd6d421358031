"""Golden model of the activation / requantisation unit: the NumPy reference of the
gemmlowp / TFLite fixed-point scheme that the RTL implements bit for bit."""

import math

import numpy as np

from .numerics import check_range, saturate

__all__ = ["requantize", "requantize_lanes", "rounding_doubling_high_mul", "rounding_divide_by_pot",
           "quantize_multiplier", "tflite_multiplier", "ActivationParams"]


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
        ``shift`` a right shift in ``[0, 31]``.
    zero_point : int
        Output zero point, an operand value.
    relu : bool
        Clamp below at the zero point.
    """

    def __init__(self, cfg, *, bias=0, multiplier=(1 << 31) - 1, shift=0, zero_point=0,
                 relu=False):
        cols = cfg.cols
        self.cfg = cfg

        def lanes(name, value, low, high):
            arr = np.broadcast_to(np.asarray(value), (cols,)) if np.ndim(value) == 0 \
                else np.asarray(value)
            if arr.shape != (cols,):
                raise ValueError(f"{name} must be a scalar or have {cols} lanes, "
                                 f"not shape {arr.shape}")
            return check_range(name, arr, low, high)

        self.bias = lanes("bias", bias, cfg.acc_min, cfg.acc_max)
        self.multiplier = lanes("multiplier", multiplier, -(1 << 31), (1 << 31) - 1)
        self.shift = lanes("shift", shift, 0, cfg.max_shift)
        if isinstance(zero_point, bool) or not isinstance(zero_point, (int, np.integer)):
            raise TypeError(f"zero_point must be an integer, not {zero_point!r}")
        if not cfg.operand_min <= zero_point <= cfg.operand_max:
            raise ValueError(f"zero_point must lie in [{cfg.operand_min}, {cfg.operand_max}], "
                             f"not {zero_point}")
        self.zero_point = int(zero_point)
        self.relu = bool(relu)


def requantize(acc, params):
    """Requantise accumulator words (any shape whose last axis is ``cfg.cols``) to operands.

    Bit-exact reference of :class:`tpuer.hw.ActivationUnit`.
    """
    cfg = params.cfg
    acc = check_range("accumulator values", acc, cfg.acc_min, cfg.acc_max)
    return requantize_lanes(acc, bias=params.bias, multiplier=params.multiplier,
                            shift=params.shift, zero_point=params.zero_point,
                            relu=params.relu, acc_width=cfg.acc_width,
                            operand_width=cfg.operand_width)


def requantize_lanes(acc, *, bias, multiplier, shift, zero_point, relu, acc_width=32,
                     operand_width=8):
    """The arithmetic of :func:`requantize` on any number of lanes (the quantised network's
    reference uses it for layers wider than the array): saturating bias add, rounding
    doubling high multiply, rounding right shift, zero point, clamp (and ReLU)."""
    x = saturate(np.asarray(acc, np.int64) + np.asarray(bias, np.int64), acc_width)
    high = rounding_doubling_high_mul(x, multiplier)
    y = rounding_divide_by_pot(high, shift) + zero_point
    low = zero_point if relu else -(1 << (operand_width - 1))
    return np.clip(y, low, (1 << (operand_width - 1)) - 1)


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
