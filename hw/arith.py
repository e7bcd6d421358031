"""Small arithmetic helpers shared by the RTL blocks."""

from amaranth.hdl import Const, Mux, Shape, Value

__all__ = ["saturate"]


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
