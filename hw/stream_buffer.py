"""A register stage for a stream: the timing paths end at it, the throughput stays."""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["StreamBuffer"]


class StreamBuffer(wiring.Component):
    """Passes ``i`` to ``o`` through registers, both ways: ``o.valid`` and ``o.payload``
    come from registers and ``i.ready`` too (a second, skid register holds the item that
    arrives in the cycle ``o`` stalls), so no combinational path crosses the buffer.

    With ``ready_path=True`` there is no skid register: ``i.ready`` is ``o.ready`` when
    ``o`` holds an item, so only the forward path (valid and payload) is cut, on half the
    flip-flops.

    With ``half_rate=True`` there is no skid register either, and yet both paths are cut:
    ``i.ready`` is high only while ``o`` holds nothing, so an item passes at most every
    other cycle (for a stream much slower than the clock, such as a UART's).

    Latency: 1 cycle; one item per cycle when ``o`` is always ready (every other cycle with
    ``half_rate``); holds two items (one with ``ready_path`` or ``half_rate``).
    """

    def __init__(self, shape, *, ready_path=False, half_rate=False):
        if ready_path and half_rate:
            raise ValueError("a StreamBuffer is either ready_path or half_rate, not both")
        self._shape = shape
        self._ready_path = ready_path
        self._half_rate = half_rate
        super().__init__({"i": In(stream.Signature(shape)),
                          "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        if self._ready_path:
            m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)
            with m.If(self.i.ready):
                m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid)]
            return m
        if self._half_rate:
            m.d.comb += self.i.ready.eq(~self.o.valid)
            with m.If(self.o.ready):
                m.d.sync += self.o.valid.eq(0)
            with m.If(self.i.valid & ~self.o.valid):
                m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(1)]
            return m
        skid = Signal.like(self.o.payload)
        skid_valid = Signal()
        m.d.comb += self.i.ready.eq(~skid_valid)
        with m.If(~self.o.valid | self.o.ready):
            with m.If(skid_valid):
                m.d.sync += [self.o.payload.eq(skid), self.o.valid.eq(1), skid_valid.eq(0)]
            with m.Else():
                m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid)]
        with m.Elif(self.i.valid & self.i.ready):
            m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(1)]
        return m
