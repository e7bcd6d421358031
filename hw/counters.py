"""The performance counters of a run: cycles, MXU busy cycles, weight stalls, instructions."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["PerformanceCounters", "PipelinedCounters", "COUNTER_BITS"]

#: Bits of each counter.
COUNTER_BITS = 32


class PerformanceCounters(wiring.Component):
    """Four counters, each adding a one-bit event every cycle (an adder's carry-in, no hold
    multiplexer): ``cycles`` while ``running``, ``mxu_busy_cycles`` while running and a
    vector enters the matrix unit (``vector_issued``), ``weight_stall_cycles`` while running
    and a vector waits for its weight tile (``weight_stall``), ``instructions`` when one
    ``retires``. ``clear`` (a run starts) sets them to 0 at the next edge, over any count.

    Latency: an event shows in its counter the cycle after it.
    """

    def __init__(self):
        super().__init__({
            "clear": In(1), "running": In(1), "vector_issued": In(1), "weight_stall": In(1),
            "retires": In(1),
            **{name: Out(COUNTER_BITS) for name in ("cycles", "mxu_busy_cycles",
                                                    "weight_stall_cycles", "instructions")},
        })

    def _events(self):
        """Each counter and the event it counts."""
        return ((self.cycles, self.running),
                (self.mxu_busy_cycles, self.running & self.vector_issued),
                (self.weight_stall_cycles, self.running & self.weight_stall),
                (self.instructions, self.retires))

    def elaborate(self, platform):
        m = Module()
        for counter, event in self._events():
            m.d.sync += counter.eq(counter + event)
        with m.If(self.clear):
            m.d.sync += [counter.eq(0) for counter, _ in self._events()]
        return m


class PipelinedCounters(PerformanceCounters):
    """The counters of :class:`PerformanceCounters` for fast clocks, where the events are
    decided late in the cycle (an instruction retires, a vector enters the matrix unit):
    each event goes into a register first and into a total a cycle later, so that no carry
    chain waits for it; the counter shows the total plus the pending event, the same value.
    ``clear`` does not reach every bit either: it sets a flag, and in the next cycle the
    totals count as 0, both as shown and as added to.

    Latency: as :class:`PerformanceCounters`.
    """

    def elaborate(self, platform):
        m = Module()
        fresh = Signal()                # ``clear`` was high in the cycle before
        m.d.sync += fresh.eq(self.clear)
        for counter, event in self._events():
            total = Signal(COUNTER_BITS, name=f"{counter.name}_total")
            total_now = Mux(fresh, 0, total)
            if counter is self.cycles:
                # (``running`` is a register: counted at once.)
                m.d.sync += total.eq(total_now + event)
                m.d.comb += counter.eq(total_now)
                continue
            pending = Signal(name=f"{counter.name}_pending")
            m.d.sync += [total.eq(total_now + pending), pending.eq(event)]
            m.d.comb += counter.eq(total_now + pending)
        return m
