"""A small first-in first-out queue whose head is always in its first register."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["ShiftQueue", "queue_members"]


def queue_members(width, depth, lookahead=False):
    """The members of a small queue of ``depth`` entries of ``width`` bits, those of an
    :class:`amaranth.lib.fifo.SyncFIFO` (and with ``lookahead`` ``next_if_read`` and
    ``next_if_kept``, see :class:`ShiftQueue`); refuses a ``depth`` that is not a positive
    integer."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be a positive integer, not {depth!r}")
    members = {
        "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
        "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1),
        "level": Out(range(depth + 1)),
    }
    if lookahead:
        members |= {"next_if_read": Out(width), "next_if_kept": Out(width)}
    return members


class ShiftQueue(wiring.Component):
    """``depth`` entries of ``width`` bits, with the members of an
    :class:`amaranth.lib.fifo.SyncFIFO` (``w_data``, ``w_en``, ``w_rdy``, ``r_data``,
    ``r_en``, ``r_rdy``, ``level``).

    The entries move up one as the head is read, so the head is always the first register:
    no read multiplexer, and each entry's input is a single 2-to-1 choice (the entry
    behind it, or the word written), which an FPGA's logic cell holds beside its
    flip-flop. Meant for a few entries; a write while full is ignored.

    With ``lookahead``, two more members say what the head will be in the next cycle,
    from registers and ``w_data`` only (not from ``r_en``), so that a user can decide
    something about the next head a cycle ahead and keep the decision in a register:
    ``next_if_read`` (entry 1, or the word written now if there is no entry 1) and
    ``next_if_kept`` (the head, or the word written now into an empty queue). Either is
    meaningful only if the queue will not be empty. ``r_rdy`` is then a register of its
    own (the queue is not empty), so that a reader's handshake starts from one.

    Latency: a word written in cycle ``t`` can be read from cycle ``t + 1``; reading and
    writing in the same cycle is allowed, full or not (a write when full waits for
    ``w_rdy``, which does not count a read in the same cycle).
    """

    def __init__(self, *, width, depth, lookahead=False):
        self.width, self.depth, self._lookahead = width, depth, lookahead
        super().__init__(queue_members(width, depth, lookahead))

    def elaborate(self, platform):
        m = Module()
        entries = [Signal(self.width, name=f"entry{k}", reset_less=True)
                   for k in range(self.depth)]
        read = self.r_en & self.r_rdy
        write = self.w_en & self.w_rdy
        level_next = self.level + write - read
        m.d.comb += [self.w_rdy.eq(self.level != self.depth), self.r_data.eq(entries[0])]
        m.d.sync += self.level.eq(level_next)
        if self._lookahead:
            nonempty = Signal()
            m.d.sync += nonempty.eq(level_next != 0)
            m.d.comb += self.r_rdy.eq(nonempty)
        else:
            m.d.comb += self.r_rdy.eq(self.level != 0)
        for k, entry in enumerate(entries):
            behind = entries[k + 1] if k + 1 < self.depth else 0
            # After a read the word written lands one entry lower.
            written_here = write & (self.level == Mux(read, k + 1, k))
            with m.If(read | written_here):
                m.d.sync += entry.eq(Mux(written_here, self.w_data, behind))
        if self._lookahead:
            second = entries[1] if self.depth > 1 else self.w_data
            m.d.comb += [
                self.next_if_read.eq(Mux(self.level > 1, second, self.w_data)),
                self.next_if_kept.eq(Mux(self.level > 0, entries[0], self.w_data)),
            ]
        return m
