"""The sequencer's hazard checks: which instructions must wait for work still under way."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..isa import DMA_HAZARDS, END_BITS, INSTRUCTION_LAYOUT, Opcode, dma_kind, kind_in
from .activation_issuer import ActivationView
from .arith import above, any_of
from .host_dma import TransferView
from .instruction_checks import OPCODE_LAYOUT, opcode_bits

__all__ = ["HazardTracker", "RegisteredHazardTracker", "DECODED_LAYOUT"]

#: An instruction with what the sequencer decodes from it: its one-hot opcode, the ends
#: of its row ranges, whether its count is 0.
DECODED_LAYOUT = data.StructLayout({"instr": INSTRUCTION_LAYOUT, "is_op": OPCODE_LAYOUT,
                                    "a_end": END_BITS, "b_end": END_BITS, "count_zero": 1})


class HazardTracker(wiring.Component):
    """Whether the instruction under way may go on, against the work still under way:
    ACTIVATE and WRITE_HOST of accumulators wait until every issued matrix row bound for
    the same half of the accumulator memory has been written (``acc_bank_busy``); MATMUL
    waits while an activation still has to read its accumulator rows or write UB rows it
    reads; MATMUL and ACTIVATE wait while the host DMA engine moves rows they must not
    touch (:data:`~tpuer.isa.DMA_HAZARDS`); host transfers wait while an activation is
    under way.

    The rows are compared as an instruction is loaded (``load``: ``upcoming`` becomes the
    instruction under way, ``current``), so that the flags start from registers. The rows
    of the transfer and of the activation under way change only when the sequencer hands
    one over, which is when the instruction before retires: so the comparison is made with
    the rows they will have from the next cycle on (``current`` handed over unless
    ``priming``: the run's first load).

    Latency: the flags follow the status inputs in the same cycle.

    Members
    -------
    load, priming : In(1)
    current, upcoming : In(DECODED_LAYOUT)
    transfer : In(TransferView)
    activation : In(ActivationView)
    activate_busy : In(1)
        An activation's rows are still on their way (in the issuer or the datapath).
    acc_bank_busy : In(2)
        Matrix rows are still bound for each half of the accumulator memory.
    matmul_free, activate_free, dma_free : Out(1)
        The instruction under way, if of that kind, need not wait.
    """

    def __init__(self, cfg):
        self._cfg = cfg
        super().__init__({
            "load": In(1), "priming": In(1),
            "current": In(DECODED_LAYOUT), "upcoming": In(DECODED_LAYOUT),
            "transfer": In(TransferView()), "activation": In(ActivationView()),
            "activate_busy": In(1), "acc_bank_busy": In(2),
            "matmul_free": Out(1), "activate_free": Out(1), "dma_free": Out(1),
        })

    def _overlaps(self, rows, low, high):
        """Rows ``[start, end)`` meet rows ``[low, high)``. (The checks matter only for an
        instruction that passed its range checks, against transfers that passed theirs:
        every row number and end is at most the larger memory's depth, so they compare
        only that many bits.)"""
        row_bits = self._cfg.row_bits
        start, end = (value[:row_bits] for value in rows)
        return (low[:row_bits] < end) & (start < high[:row_bits])

    def _next_rows(self):
        """The upcoming instruction's row ranges, ``a...`` and ``b...``, as ``(start,
        end)``."""
        upcoming = self.upcoming
        return {"a": (upcoming.instr.a, upcoming.a_end), "b": (upcoming.instr.b, upcoming.b_end)}

    def _handed(self):
        """Whether the instruction under way is handed over as it retires: a host transfer,
        an ACTIVATE."""
        current = self.current
        is_op = opcode_bits(current.is_op)
        moves = ~self.priming & ~current.count_zero
        return (moves & (is_op[Opcode.READ_HOST] | is_op[Opcode.WRITE_HOST]),
                moves & is_op[Opcode.ACTIVATE])

    def _ub_rows_meet(self, handed_activate):
        """Whether the upcoming instruction's rows ``a`` meet the UB rows the activations
        will write: the ones under way, and the current ACTIVATE's if it is handed over
        (merged with them while the activation unit still drains)."""
        row_bits = self._cfg.row_bits
        current = self.current
        ub_low = self.activation.ub_low[:row_bits]
        ub_high = self.activation.ub_high[:row_bits]
        new_low, new_high = current.instr.b[:row_bits], current.b_end[:row_bits]
        merged = (Mux(new_low < ub_low, new_low, ub_low),
                  Mux(new_high > ub_high, new_high, ub_high))
        ub_next = (Mux(handed_activate, Mux(self.activate_busy, merged[0], new_low), ub_low),
                   Mux(handed_activate, Mux(self.activate_busy, merged[1], new_high), ub_high))
        return self._overlaps(self._next_rows()["a"], *ub_next)

    def _drive(self, m, *, ub_a, acc_b, dma_blocks_matmul, dma_blocks_activate,
               acc_rows_pending, dma_waits):
        """The flags, from the overlaps kept at the load (``ub_a``: rows ``a`` meet the
        activations' UB rows; ``acc_b``: rows ``b`` their accumulator rows)."""
        activation = self.activation
        activation_blocks_matmul = (self.activate_busy & ub_a) | (activation.busy & acc_b)
        m.d.comb += [
            self.matmul_free.eq(~activation_blocks_matmul & ~dma_blocks_matmul),
            self.activate_free.eq(~acc_rows_pending & ~dma_blocks_activate),
            self.dma_free.eq(~self.activate_busy & ~dma_waits),
        ]

    def elaborate(self, platform):
        m = Module()
        self._track(m, *self._handed())
        return m

    def _track(self, m, handed_dma, handed_activate):
        """The flags, the rows compared at the load (``handed_*``: what the instruction
        under way hands over as it retires, :meth:`_handed`)."""
        cfg = self._cfg
        row_bits = cfg.row_bits
        current, upcoming, transfer = self.current, self.upcoming, self.transfer
        a, a_end = current.instr.a, current.a_end
        dma_next = (Mux(handed_dma, a[:row_bits], transfer.low[:row_bits]),
                    Mux(handed_dma, a_end[:row_bits], transfer.high[:row_bits]))
        acc_next = (Mux(handed_activate, a[:row_bits], self.activation.acc_low[:row_bits]),
                    Mux(handed_activate, a_end[:row_bits], self.activation.acc_high[:row_bits]))
        next_rows = self._next_rows()
        overlap_dma = {"a": Signal(name="ov_dma_a"), "b": Signal(name="ov_dma_b")}
        ub_a, acc_b = Signal(name="ov_ub_a"), Signal(name="ov_acc_b")
        # Which halves of the accumulator memory rows ``a...`` touch.
        a_in_low_half, a_in_high_half = Signal(), Signal()
        half = cfg.acc_depth // 2
        with m.If(self.load):
            m.d.sync += [*(overlap_dma[field].eq(self._overlaps(next_rows[field], *dma_next))
                           for field in ("a", "b")),
                         ub_a.eq(self._ub_rows_meet(handed_activate)),
                         acc_b.eq(self._overlaps(next_rows["b"], *acc_next)),
                         a_in_low_half.eq(~above(upcoming.instr.a, half - 1)),
                         a_in_high_half.eq(above(upcoming.a_end, half))]
        # Products are still going into accumulator rows ``a...``.
        acc_rows_pending = ((self.acc_bank_busy[0] & a_in_low_half) |
                            (self.acc_bank_busy[1] & a_in_high_half))

        def dma_blocks(code):
            """The transfer under way meets rows of the instruction (of opcode ``code``)
            that it must not."""
            return transfer.busy & any_of(kind_in(transfer.kind, kinds) & overlap_dma[field]
                                          for field, kinds in DMA_HAZARDS[code].items())

        is_op = opcode_bits(current.is_op)
        self._drive(m, ub_a=ub_a, acc_b=acc_b,
                    dma_blocks_matmul=dma_blocks(Opcode.MATMUL),
                    dma_blocks_activate=dma_blocks(Opcode.ACTIVATE),
                    acc_rows_pending=acc_rows_pending,
                    dma_waits=is_op[Opcode.WRITE_HOST] & current.instr.flags[0] &
                    acc_rows_pending)


class RegisteredHazardTracker(HazardTracker):
    """:class:`HazardTracker` for fast clocks: each range the rows may meet is compared on
    its own and the flags are chosen after (no multiplexer before the comparators); the
    DMA hazard is kept as one flag with the transfer's kind folded in (an AND-OR: a term per
    row range and per transfer, the one handed over now or the one kept); and which halves
    of the accumulator memory to watch is decided at the load for the kinds that watch
    them, so that a host transfer's wait is one AND.

    Latency: as :class:`HazardTracker`.
    """

    def _track(self, m, handed_dma, handed_activate):
        cfg = self._cfg
        row_bits = cfg.row_bits
        current, upcoming, transfer = self.current, self.upcoming, self.transfer
        a, a_end = current.instr.a, current.a_end
        is_op, next_is_op = opcode_bits(current.is_op), opcode_bits(upcoming.is_op)
        next_rows_a, next_rows_b = self._next_rows().values()
        kind_handed = dma_kind(is_op[Opcode.READ_HOST], current.instr.flags[0], select=Mux)
        # The hazard matrix for the next instruction: a MATMUL's, or else an ACTIVATE's
        # (the only other kind the flag blocks). Only a MATMUL's rows a meet a transfer's:
        # one AND there, no multiplexer.
        assert "a" not in DMA_HAZARDS[Opcode.ACTIVATE]
        matmul_kinds, activate_kinds = DMA_HAZARDS[Opcode.MATMUL], DMA_HAZARDS[Opcode.ACTIVATE]
        next_is_matmul = next_is_op[Opcode.MATMUL]
        dma_terms = []
        for chosen, kind, rows in ((handed_dma, kind_handed, (a, a_end)),
                                   (~handed_dma, transfer.kind, (transfer.low, transfer.high))):
            hazard_a = chosen & next_is_matmul & kind_in(kind, matmul_kinds["a"])
            hazard_b = chosen & Mux(next_is_matmul, kind_in(kind, matmul_kinds["b"]),
                                    kind_in(kind, activate_kinds["b"]))
            dma_terms += [hazard_a & self._overlaps(next_rows_a, *rows),
                          hazard_b & self._overlaps(next_rows_b, *rows)]
        # The UB rows of the activations, each range compared on its own.
        new_low, new_high = current.instr.b[:row_bits], current.b_end[:row_bits]
        ub_low = self.activation.ub_low[:row_bits]
        ub_high = self.activation.ub_high[:row_bits]
        start, end = (value[:row_bits] for value in next_rows_a)
        below_new, below_old = new_low < end, ub_low < end
        above_new, above_old = start < new_high, start < ub_high
        meets_ub_a = Mux(handed_activate,
                         Mux(self.activate_busy,
                             (below_new | below_old) & (above_new | above_old),
                             below_new & above_new),
                         below_old & above_old)
        meets_acc_b = Mux(handed_activate, self._overlaps(next_rows_b, a, a_end),
                          self._overlaps(next_rows_b, self.activation.acc_low,
                                         self.activation.acc_high))
        dma_hazard, ub_a, acc_b = Signal(), Signal(name="ov_ub_a"), Signal(name="ov_acc_b")
        # The halves of the accumulator memory whose pending products the instruction
        # waits for (an ACTIVATE's, or a WRITE_HOST's from the accumulators).
        acc_watch = Signal(2)
        half = cfg.acc_depth // 2
        watches = (next_is_op[Opcode.ACTIVATE] |
                   (next_is_op[Opcode.WRITE_HOST] & upcoming.instr.flags[0]))
        with m.If(self.load):
            m.d.sync += [dma_hazard.eq(Cat(*dma_terms).any()), ub_a.eq(meets_ub_a),
                         acc_b.eq(meets_acc_b),
                         acc_watch.eq(Cat(~above(upcoming.instr.a, half - 1),
                                          above(upcoming.a_end, half)) &
                                      watches.replicate(2))]
        acc_rows_pending = (acc_watch & self.acc_bank_busy).any()
        dma_blocks = transfer.busy & dma_hazard
        self._drive(m, ub_a=ub_a, acc_b=acc_b, dma_blocks_matmul=dma_blocks,
                    dma_blocks_activate=dma_blocks, acc_rows_pending=acc_rows_pending,
                    dma_waits=acc_rows_pending)
