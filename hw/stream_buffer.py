"""A register stage for a stream: the timing paths end at it, the throughput stays."""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["StreamBuffer", "HalfRateStreamBuffer"]


class StreamBuffer(wiring.Component):
    """Passes ``i`` to ``o`` through registers, both ways: ``o.valid`` and ``o.payload``
    come from registers and ``i.ready`` too (a second, skid register holds the item that
    arrives in the cycle ``o`` stalls), so no combinational path crosses the buffer.

    Latency: 1 cycle; one item per cycle when ``o`` is always ready; holds two items.
    """

    def __init__(self, shape):
        self._shape = shape
        super().__init__({"i": In(stream.Signature(shape)),
                          "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        skid = Signal.like(self.o.payload)
        skid_valid = Signal()
        m.d.comb += self.i.ready.eq(~skid_valid)
        # The skid register takes the payload whenever it holds nothing (what it takes
        # counts only once skid_valid is set), so that its enable waits for no handshake.
        with m.If(~skid_valid):
            m.d.sync += skid.eq(self.i.payload)
        with m.If(~self.o.valid | self.o.ready):
            with m.If(skid_valid):
                m.d.sync += [self.o.payload.eq(skid), self.o.valid.eq(1), skid_valid.eq(0)]
            with m.Else():
                m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid)]
        with m.Elif(self.i.valid & self.i.ready):
            m.d.sync += skid_valid.eq(1)
        return m


class HalfRateStreamBuffer(StreamBuffer):
    """A :class:`StreamBuffer` without the skid register that yet cuts both paths:
    ``i.ready`` is high only while ``o`` holds nothing, so an item passes at most every
    other cycle (for a stream much slower than the clock, such as a UART's).

    Latency: 1 cycle; an item every other cycle at most; holds one item.
    """

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.i.ready.eq(~self.o.valid)
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(self.i.valid & ~self.o.valid):
            m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(1)]
        return m
