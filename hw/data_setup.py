"""Systolic data setup: the diagonal skew into the array and the de-skew out of it."""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["DiagonalSkew"]


class DiagonalSkew(wiring.Component):
    """Delays lane ``k`` of a vector by ``k`` cycles (or by ``lanes - 1 - k`` when
    ``reverse`` is set), with one register per cycle of delay.

    Skewing turns a whole input vector into the diagonal wavefront that a systolic array
    needs; the reversed skew lines a skewed result wavefront back up into a whole vector.
    It never stalls.

    Parameters
    ----------
    lane_shape : ShapeLike
        Shape of one lane.
    lanes : int
        Number of lanes, at least 1.
    reverse : bool
        Delay the last lane least instead of the first.

    Members
    -------
    i : In(ArrayLayout(lane_shape, lanes))
    o : Out(ArrayLayout(lane_shape, lanes))

    Latency: lane ``k`` takes :meth:`delay` ``(k)`` cycles; at most ``lanes - 1``.
    """

    def __init__(self, *, lane_shape, lanes, reverse=False):
        if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 1:
            raise ValueError(f"lanes must be a positive integer, not {lanes!r}")
        self._lane_shape = lane_shape
        self._lanes = lanes
        self._reverse = bool(reverse)
        layout = data.ArrayLayout(lane_shape, lanes)
        super().__init__({"i": In(layout), "o": Out(layout)})

    @property
    def lanes(self):
        return self._lanes

    def delay(self, lane):
        """Cycles of delay of ``lane``."""
        return self._lanes - 1 - lane if self._reverse else lane

    @property
    def latency(self):
        """The longest delay of any lane."""
        return self._lanes - 1

    def elaborate(self, platform):
        m = Module()
        for lane in range(self._lanes):
            value = self.i[lane]
            for stage in range(self.delay(lane)):
                reg = Signal(self._lane_shape, name=f"lane{lane}_d{stage + 1}")
                m.d.sync += reg.eq(value)
                value = reg
            m.d.comb += self.o[lane].eq(value)
        return m
