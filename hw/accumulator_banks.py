"""Which half of the accumulator memory has products on their way to it."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .accumulators import add_spacing
from .arith import above
from .delay_line import delayed_with_payload
from .matrix_unit import matrix_unit_latency

__all__ = ["AccumulatorBanks"]


class AccumulatorBanks(wiring.Component):
    """Counts, for each half of the accumulator memory (rows below ``cfg.acc_depth // 2``,
    and from there on), the taken MATMUL rows not yet written into it: counted in as a
    command is taken (``taken``, ``taken_addr``), out as its result's write commits, at the
    end of the :func:`~tpuer.hw.accumulators.add_spacing`-th cycle after the matrix unit
    offers it (``result_valid``, ``result_addr``).

    Members
    -------
    taken : In(1)
    taken_addr : In(acc_addr_width)
    result_valid : In(1)
    result_addr : In(acc_addr_width)
    busy : Out(2)
        Bit ``h``: half ``h`` has rows on their way. A register, set from the count the
        half will have (the ``taken`` decision enters its last OR, no adder).
    """

    def __init__(self, cfg):
        self._cfg = cfg
        super().__init__({
            "taken": In(1), "taken_addr": In(cfg.acc_addr_width),
            "result_valid": In(1), "result_addr": In(cfg.acc_addr_width),
            "busy": Out(2),
        })

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        half = cfg.acc_depth // 2
        in_flight_limit = matrix_unit_latency(cfg) + 12
        banks = [Signal(range(in_flight_limit), name=f"acc_bank{h}_rows") for h in (0, 1)]
        committing, commit_bank = delayed_with_payload(
            m, self.result_valid, self.result_addr >= half, add_spacing(cfg),
            name="result_written")[-1]
        taken_bank = self.taken_addr >= half
        for h, count in enumerate(banks):
            up = self.taken & (taken_bank == h)
            down = committing & (commit_bank == h)
            m.d.sync += [count.eq(count + up - down),
                         self.busy[h].eq(above(count, 1) | up | ((count == 1) & ~down))]
        return m
