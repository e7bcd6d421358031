"""A small first-in first-out queue whose entries stay where they were written."""

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import memory, wiring

from .arith import wrapped_increment
from .shift_queue import queue_members

__all__ = ["RingQueue"]


class RingQueue(wiring.Component):
    """``depth`` entries of ``width`` bits in a ring, with the members of a
    :class:`~tpuer.hw.shift_queue.ShiftQueue` (``w_data``, ``w_en``, ``w_rdy``, ``r_data``,
    ``r_en``, ``r_rdy``, ``level``, and with ``lookahead`` ``next_if_read`` and
    ``next_if_kept``, which mean what they mean there; ``r_rdy`` is then a register).

    A write goes into the entry at the write pointer; a read moves the read pointer only,
    and the head is chosen from the entries by it (a multiplexer on ``r_data``). So
    ``r_en`` drives two pointers and the level, not the enables of every entry as in a
    :class:`~tpuer.hw.shift_queue.ShiftQueue`: for wide words whose reader decides late in
    the cycle, at fast clocks. A write while full is ignored. The entry at the write
    pointer takes ``w_data`` in every cycle the queue is not full, written or not (it holds
    nothing yet), so that its enable is one register of its own (``open_slot``) and not a
    decision of the cycle. Without ``lookahead`` the entries are a memory with an
    asynchronous read port (LUT RAM on an FPGA): that register is then the write enable
    of a few RAM cells, not the clock enable of every bit of the entries.

    Latency: a word written in cycle ``t`` can be read from cycle ``t + 1``; reading and
    writing in the same cycle is allowed, full or not (a write when full waits for
    ``w_rdy``, which does not count a read in the same cycle).
    """

    def __init__(self, *, width, depth, lookahead=False):
        self.width, self.depth, self._lookahead = width, depth, lookahead
        super().__init__(queue_members(width, depth, lookahead))

    def elaborate(self, platform):
        m = Module()
        write_at = Signal(range(self.depth))
        read_at = Signal(range(self.depth))
        read = self.r_en & self.r_rdy
        write = self.w_en & self.w_rdy
        m.d.comb += self.w_rdy.eq(self.level != self.depth)
        level_next = self.level + write - read
        write_at_next = Signal.like(write_at)
        m.d.comb += write_at_next.eq(write_at)
        with m.If(write):
            m.d.comb += write_at_next.eq(wrapped_increment(write_at, self.depth))
        m.d.sync += [self.level.eq(level_next), write_at.eq(write_at_next)]
        if not self._lookahead:
            # The memory's write port at the write pointer, enabled while not full.
            m.submodules.entries = entries = memory.Memory(shape=self.width, depth=self.depth,
                                                           init=[])
            writer, reader = entries.write_port(), entries.read_port(domain="comb")
            open_slot = Signal(init=1)
            m.d.sync += open_slot.eq(level_next != self.depth)
            m.d.comb += [writer.addr.eq(write_at), writer.data.eq(self.w_data),
                         writer.en.eq(open_slot), reader.addr.eq(read_at),
                         self.r_data.eq(reader.data), self.r_rdy.eq(self.level != 0)]
            with m.If(read):
                m.d.sync += read_at.eq(wrapped_increment(read_at, self.depth))
            return m
        # The lookahead form: the entries are registers, read three ways.
        entries = Array(Signal(self.width, name=f"entry{k}", reset_less=True)
                        for k in range(self.depth))
        m.d.comb += self.r_data.eq(entries[read_at])
        # open_slot[k]: entry k is at the write pointer and the queue is not full.
        open_slot = Signal(self.depth, init=1)
        m.d.sync += open_slot.eq(Cat((write_at_next == k) & (level_next != self.depth)
                                     for k in range(self.depth)))
        for k in range(self.depth):
            with m.If(open_slot[k]):
                m.d.sync += entries[k].eq(self.w_data)
        nonempty = Signal()
        m.d.sync += nonempty.eq(level_next != 0)
        m.d.comb += self.r_rdy.eq(nonempty)
        # The entry after the head, a pointer of its own.
        after_head = Signal(range(self.depth), init=1 % self.depth)
        with m.If(read):
            m.d.sync += [read_at.eq(after_head),
                         after_head.eq(wrapped_increment(after_head, self.depth))]
        m.d.comb += [
            self.next_if_read.eq(Mux(self.level > 1, entries[after_head], self.w_data)),
            self.next_if_kept.eq(Mux(self.level > 0, entries[read_at], self.w_data)),
        ]
        return m
