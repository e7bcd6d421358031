"""Small arithmetic helpers shared by the RTL blocks."""

import operator
from functools import reduce

from amaranth.hdl import Const, Mux, Shape, Value

__all__ = ["saturate", "above", "outside", "any_of", "count_of", "wrapped_increment"]


def saturate(value, shape):
    """Clamp ``value`` (signed or unsigned) into the signed ``shape``.

    Returns ``(clamped, clipped)``: the value as ``shape`` and a 1-bit flag that is high when
    clamping changed it. Purely combinational, without comparators: a signed value fits
    when its bits from the shape's sign bit up are all equal, and its own sign says which
    limit it passed.
    """
    shape = Shape.cast(shape)
    value = Value.cast(value)
    width = shape.width
    too_high = too_low = Const(0, 1)
    if value.shape().signed and len(value) > width:
        top = value[width - 1:]
        fits = top.all() | ~top.any()
        too_high, too_low = ~fits & ~value[-1], ~fits & value[-1]
    elif not value.shape().signed and len(value) >= width:
        too_high = value[width - 1:].any()
    clamped = Mux(too_high, (1 << (width - 1)) - 1, Mux(too_low, -(1 << (width - 1)), value))
    return clamped.as_signed()[:width].as_signed(), too_high | too_low


def above(value, constant):
    """``value > constant`` for an unsigned ``value`` and a constant, without an adder when
    the constant is ``2**k`` or ``2**k - 1`` (the depths and limits of power-of-two sized
    memories): an OR of the bits above it."""
    value = Value.cast(value).as_unsigned()
    width = len(value)
    if constant < 0:
        return Const(1, 1)
    if constant >= (1 << width) - 1:
        return Const(0, 1)
    k = (constant + 1).bit_length() - 1
    if constant + 1 == 1 << k:                  # 2**k - 1: some bit from k up is set
        return value[k:].any()
    k = constant.bit_length() - 1
    if constant == 1 << k:                      # 2**k: a bit above k, or bit k and one below
        return value[k + 1:].any() | (value[k] & value[:k].any())
    return value > constant


def outside(value, low, high):
    """``(value < low) | (value > high)`` for constants, without adders when
    ``[low, high]`` is the range of a signed or an unsigned width (a sign-extension or
    zero-extension check), or holds every value of ``value``'s shape."""
    value = Value.cast(value)
    shape = value.shape()
    width = len(value)
    if shape.signed:
        smallest, largest = -(1 << (width - 1)), (1 << (width - 1)) - 1
    else:
        smallest, largest = 0, (1 << width) - 1
    if low <= smallest and high >= largest:
        return Const(0, 1)
    for bits in range(1, width + 1):
        if shape.signed and (low, high) == (-(1 << (bits - 1)), (1 << (bits - 1)) - 1):
            top = value[bits - 1:]
            return ~(top.all() | ~top.any())
        if (low, high) == (0, (1 << bits) - 1):
            return value[bits:].any() | (value[-1] if shape.signed else Const(0, 1))
    return (value < low) | (value > high)


def any_of(bits):
    """Whether any of ``bits`` (an iterable of 1-bit values) is high: an OR of them, the
    bit itself when there is one."""
    return reduce(operator.or_, bits)


def wrapped_increment(value, modulus):
    """``(value + 1) % modulus`` for a ``value`` below the constant ``modulus``: a ring's
    next position."""
    return Mux(value == modulus - 1, 0, value + 1)


def count_of(bits):
    """How many of ``bits`` (an iterable of 1-bit values) are high: their sum, the bit
    itself when there is one."""
    return reduce(operator.add, bits)
