"""Small first-in first-out queues with stream ports, for the datapath's few-row queues.

Three forms share :class:`QueueSignature`: :class:`ShiftQueue` (the head always in its first
register), :class:`RingQueue` (entries in LUT RAM, a read moves a pointer) and
:class:`LookaheadRingQueue` (entries in registers, and the next cycle's head known a cycle
ahead). They exist beside :class:`amaranth.lib.fifo.SyncFIFO` because the datapath's queues
are a few wide rows whose reader decides late in the cycle: the SyncFIFO's memory read port
and its level logic put that decision in front of every bit of the row, which is what each
form here avoids in its own way (see each class).
"""

from amaranth.hdl import Array, Cat, Module, Mux, Shape, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from .arith import wrapped_increment

__all__ = ["QueueSignature", "LookaheadQueueSignature", "ShiftQueue", "RingQueue",
           "LookaheadRingQueue"]


def _check_depth(depth):
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be a positive integer, not {depth!r}")


class QueueSignature(wiring.Signature):
    """A queue of ``depth`` items of ``shape``: ``i`` (in), ``o`` (out), both streams,
    and ``level``, the items it holds. ``i.ready`` does not count a read in the same
    cycle; an item offered while the queue is full waits."""

    def __init__(self, shape, depth):
        _check_depth(depth)
        self.shape, self.depth = shape, depth
        super().__init__(self._members(shape, depth))

    @staticmethod
    def _members(shape, depth):
        return {"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape)),
                "level": Out(range(depth + 1))}


class LookaheadQueueSignature(QueueSignature):
    """A :class:`QueueSignature` that also says what the head will be in the next cycle,
    from registers and ``i.payload`` only (not from ``o.ready``), so that a user can decide
    something about the next head a cycle ahead and keep the decision in a register:
    ``next_if_read`` (the item after the head, or the one offered now if there is none) and
    ``next_if_kept`` (the head, or the item offered now into an empty queue). Either means
    something only if the queue will not be empty. ``o.valid`` is a register of its own."""

    @staticmethod
    def _members(shape, depth):
        return QueueSignature._members(shape, depth) | {
            "next_if_read": Out(shape), "next_if_kept": Out(shape)}


class _Queue(wiring.Component):
    def __init__(self, *, shape, depth):
        self._shape, self._depth = shape, depth
        super().__init__(self._signature_class(shape, depth))

    _signature_class = QueueSignature

    @property
    def shape(self):
        return self._shape

    @property
    def depth(self):
        return self._depth

    @property
    def _width(self):
        return Shape.cast(self._shape).width


class ShiftQueue(_Queue):
    """``depth`` items that move up one as the head is read, so the head is always the
    first register: no read multiplexer, and each entry's input is a single 2-to-1 choice
    (the entry behind it, or the item written), which an FPGA's logic cell holds beside its
    flip-flop. Meant for a few entries (a row queue at a slow clock).

    Latency: an item taken in cycle ``t`` is offered from cycle ``t + 1``; reading and
    writing in the same cycle is allowed, full or not.
    """

    def elaborate(self, platform):
        m = Module()
        entries = [Signal(self._width, name=f"entry{k}", reset_less=True)
                   for k in range(self._depth)]
        read = self.o.valid & self.o.ready
        write = self.i.valid & self.i.ready
        m.d.comb += [self.i.ready.eq(self.level != self._depth),
                     self.o.payload.eq(entries[0]), self.o.valid.eq(self.level != 0)]
        m.d.sync += self.level.eq(self.level + write - read)
        for k, entry in enumerate(entries):
            behind = entries[k + 1] if k + 1 < self._depth else 0
            # After a read the item written lands one entry lower.
            written_here = write & (self.level == Mux(read, k + 1, k))
            with m.If(read | written_here):
                m.d.sync += entry.eq(Mux(written_here, self.i.payload, behind))
        return m


class RingQueue(_Queue):
    """``depth`` items in a memory with an asynchronous read port (LUT RAM on an FPGA),
    written at a write pointer and read at a read pointer, so that ``o.ready`` drives two
    pointers and the level, not the enables of every entry as in a :class:`ShiftQueue`:
    for wide rows whose reader decides late in the cycle, at fast clocks. The entry at the
    write pointer takes ``i.payload`` in every cycle the queue is not full, taken or not
    (it holds nothing yet), so that the RAM's write enable is one register of its own
    (``open_slot``), not a decision of the cycle.

    Latency: as :class:`ShiftQueue`'s.
    """

    def elaborate(self, platform):
        m = Module()
        read_at, write_at, _, level_next = self._pointers(m)
        m.submodules.entries = entries = memory.Memory(shape=self._width, depth=self._depth,
                                                       init=[])
        writer, reader = entries.write_port(), entries.read_port(domain="comb")
        open_slot = Signal(init=1)
        m.d.sync += open_slot.eq(level_next != self._depth)
        m.d.comb += [writer.addr.eq(write_at), writer.data.eq(self.i.payload),
                     writer.en.eq(open_slot), reader.addr.eq(read_at),
                     self.o.payload.eq(reader.data), self.o.valid.eq(self.level != 0)]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += read_at.eq(wrapped_increment(read_at, self._depth))
        return m

    def _pointers(self, m):
        """The level and the write pointer, kept; the read pointer, to be moved by the
        form. Returns the read pointer, the write pointer, the write pointer of the next
        cycle and the next level."""
        write_at = Signal(range(self._depth))
        read_at = Signal(range(self._depth))
        write = self.i.valid & self.i.ready
        m.d.comb += self.i.ready.eq(self.level != self._depth)
        level_next = self.level + write - (self.o.valid & self.o.ready)
        write_at_next = Signal.like(write_at)
        m.d.comb += write_at_next.eq(write_at)
        with m.If(write):
            m.d.comb += write_at_next.eq(wrapped_increment(write_at, self._depth))
        m.d.sync += [self.level.eq(level_next), write_at.eq(write_at_next)]
        return read_at, write_at, write_at_next, level_next


class LookaheadRingQueue(RingQueue):
    """A :class:`RingQueue` with the members of :class:`LookaheadQueueSignature`: its
    entries are registers, read three ways (the head, ``next_if_read``, ``next_if_kept``),
    each entry's enable a register of its own (``open_slot``, one bit per entry), and
    ``o.valid`` a register. For the matrix unit's feed at fast clocks, whose hold-back
    decision about the next head is made a cycle ahead.

    Latency: as :class:`ShiftQueue`'s.
    """

    _signature_class = LookaheadQueueSignature

    def elaborate(self, platform):
        m = Module()
        read_at, _, write_at_next, level_next = self._pointers(m)
        entries = Array(Signal(self._width, name=f"entry{k}", reset_less=True)
                        for k in range(self._depth))
        m.d.comb += self.o.payload.eq(entries[read_at])
        # open_slot[k]: entry k is at the write pointer and the queue is not full.
        open_slot = Signal(self._depth, init=1)
        m.d.sync += open_slot.eq(Cat((write_at_next == k) & (level_next != self._depth)
                                     for k in range(self._depth)))
        for k in range(self._depth):
            with m.If(open_slot[k]):
                m.d.sync += entries[k].eq(self.i.payload)
        nonempty = Signal()
        m.d.sync += nonempty.eq(level_next != 0)
        m.d.comb += self.o.valid.eq(nonempty)
        # The entry after the head, a pointer of its own.
        after_head = Signal(range(self._depth), init=1 % self._depth)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += [read_at.eq(after_head),
                         after_head.eq(wrapped_increment(after_head, self._depth))]
        m.d.comb += [
            self.next_if_read.eq(Mux(self.level > 1, entries[after_head], self.i.payload)),
            self.next_if_kept.eq(Mux(self.level > 0, entries[read_at], self.i.payload)),
        ]
        return m
