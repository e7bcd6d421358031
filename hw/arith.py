"""Small arithmetic helpers shared by the RTL blocks."""

from amaranth.hdl import Mux, Shape

__all__ = ["saturate"]


def saturate(value, shape):
    """Clamp the signed ``value`` into the signed ``shape``.

    Returns ``(clamped, clipped)``: the value as ``shape`` and a 1-bit flag that is high when
    clamping changed it. Purely combinational.
    """
    shape = Shape.cast(shape)
    low, high = -(1 << (shape.width - 1)), (1 << (shape.width - 1)) - 1
    too_high, too_low = value > high, value < low
    clamped = Mux(too_high, high, Mux(too_low, low, value)).as_signed()[:shape.width].as_signed()
    return clamped, too_high | too_low
