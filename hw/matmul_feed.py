"""The matmul path's feed: Unified Buffer rows for MATMUL commands, queued for the matrix
unit. Two forms behind one signature, picked by :func:`matmul_feed`."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .accumulators import add_spacing
from .arith import any_of, count_of
from .delay_line import delayed_with_payload
from .queues import LookaheadRingQueue, ShiftQueue

__all__ = ["feed_slots", "MatmulFeed", "LookaheadMatmulFeed", "matmul_feed"]


def feed_slots(cfg):
    """Rows the matmul path keeps in flight between the Unified Buffer and the matrix unit:
    the UB reads under way (``cfg.memory_read_latency``) plus the rows queued for the matrix
    unit, two more, so that a row per cycle flows (the cycle model uses it too)."""
    return 2 + cfg.memory_read_latency


class MatmulFeed(wiring.Component):
    """Takes a ``matmul`` command when its row is sure to find room in a queue of
    :func:`feed_slots` rows (the rows queued and the ones being read are fewer), reads its
    Unified Buffer row (the caller puts ``matmul.payload.ub_addr`` on the read port in
    the cycle the command is taken), and offers the row with the command's ``new_tile``
    and tag (``acc_addr``, ``accumulate``) on ``rows``, for the matrix unit.

    A row that adds to the accumulator row of a row that entered the matrix unit in the
    :func:`~tpuer.hw.accumulators.add_spacing` ``- 1`` cycles before waits: the accumulator
    memory needs that spacing between two writes to a row when the second adds to it (the
    results keep the rows' spacing).

    This form decides the room and the hold-back in the cycle they count, for
    ``cfg.memory_read_latency`` 1; its queue is a :class:`~tpuer.hw.queues.ShiftQueue`.

    Members
    -------
    matmul : In(stream.Signature(command layout))
        The commands (``ub_addr``, ``acc_addr``, ``accumulate``, ``new_tile``).
    read_data : In(ArrayLayout(operand, ub_lanes))
        The Unified Buffer's read data, ``cfg.memory_read_latency`` cycles after a command
        is taken.
    rows : Out(stream.Signature(row layout))
        The rows for the matrix unit (its ``rows`` member).
    busy : Out(1)
        A taken command's row is being read or waits in the queue.

    Latency: a command taken in cycle ``t`` can be offered on ``rows`` from cycle
    ``t + 1 + cfg.memory_read_latency``.
    """

    _queue_class = ShiftQueue

    def __init__(self, cfg, *, command_layout, row_layout):
        self._cfg = cfg
        self._command_layout, self._row_layout = command_layout, row_layout
        super().__init__({
            "matmul": In(stream.Signature(command_layout)),
            "read_data": In(data.ArrayLayout(cfg.operand_shape, cfg.ub_lanes)),
            "rows": Out(stream.Signature(row_layout)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        m.submodules.queue = queue = self._queue_class(shape=self._row_layout,
                                                       depth=feed_slots(cfg))
        reading = Signal()                      # a row read was issued last cycle
        reading_cmd = Signal(self._command_layout)
        reads = delayed_with_payload(m, reading, reading_cmd, cfg.memory_read_latency - 1,
                                     name="reading")
        arrived, arrived_cmd = reads[-1]        # the row of this read is on read_data
        room = self._room(m, queue, reads)
        taken = self.matmul.valid & room
        m.d.comb += self.matmul.ready.eq(room)
        m.d.sync += reading.eq(taken)
        with m.If(taken):
            m.d.sync += reading_cmd.eq(self.matmul.payload)
        m.d.comb += [
            *(queue.i.payload.data[lane].eq(self.read_data[lane]) for lane in range(cfg.rows)),
            queue.i.payload.new_tile.eq(arrived_cmd.new_tile),
            queue.i.payload.tag.acc_addr.eq(arrived_cmd.acc_addr),
            queue.i.payload.tag.accumulate.eq(arrived_cmd.accumulate),
            queue.i.valid.eq(arrived),
        ]
        entered = [(Signal(name="entered" if k == 1 else f"entered_{k}"),
                    Signal(cfg.acc_addr_width,
                           name="entered_addr" if k == 1 else f"entered_{k}_addr"))
                   for k in range(1, add_spacing(cfg))]
        entering = self.rows.valid & self.rows.ready
        repeat = self._held_back(m, queue, entered, entering)
        m.d.comb += [
            self.rows.payload.eq(queue.o.payload),
            self.rows.valid.eq(queue.o.valid & ~repeat),
            queue.o.ready.eq(self.rows.ready & ~repeat),
        ]
        m.d.sync += [entered[0][0].eq(entering),
                     entered[0][1].eq(queue.o.payload.tag.acc_addr)]
        for (was, addr), (earlier, earlier_addr) in zip(entered[1:], entered):
            m.d.sync += [was.eq(earlier), addr.eq(earlier_addr)]
        m.d.comb += self.busy.eq(any_of(valid for valid, _ in reads) | queue.o.valid)
        return m

    def _room(self, m, queue, reads):
        """Room for one more row: the rows queued and those being read are fewer than the
        slots."""
        return queue.level + count_of(valid for valid, _ in reads) < feed_slots(self._cfg)

    def _held_back(self, m, queue, entered, entering):
        """The head waits: it adds to the row of one that entered lately."""
        head = queue.o.payload
        return any_of(was & head.tag.accumulate & (head.tag.acc_addr == addr)
                      for was, addr in entered)


class LookaheadMatmulFeed(MatmulFeed):
    """A :class:`MatmulFeed` whose handshakes start from registers, for
    ``cfg.memory_read_latency`` 2 (fast clocks): the rows queued and being read are counted
    in a register of their own and the room they leave is decided a cycle ahead, so that
    the ``matmul`` handshake starts from a register; the hold-back is decided a cycle ahead
    from the queue's lookahead, so that the matrix unit's handshake does not wait on
    address comparisons. The queue is a :class:`~tpuer.hw.queues.LookaheadRingQueue`: the
    matrix unit's late ``ready`` then moves a pointer and does not enable every entry.

    Latency: as :class:`MatmulFeed`'s.
    """

    _queue_class = LookaheadRingQueue

    def _room(self, m, queue, reads):
        room = Signal(init=1)
        held = Signal(range(feed_slots(self._cfg) + 1))
        held_next = held + (self.matmul.valid & room) - (queue.o.valid & queue.o.ready)
        m.d.sync += [held.eq(held_next), room.eq(held_next < feed_slots(self._cfg))]
        return room

    def _held_back(self, m, queue, entered, entering):
        """The head's hold-back flag, decided in the cycle before from registers: the head
        of the next cycle (the queue's lookahead, whichever way ``entering`` goes) against
        the rows that will then have entered the matrix unit in the cycles before it (this
        cycle's head if it enters, and ``entered`` but its oldest)."""
        def adds_to_any(row, recent):
            return any_of([0] + [was & row.tag.accumulate & (row.tag.acc_addr == addr)
                               for was, addr in recent])

        head_addr = queue.o.payload.tag.acc_addr
        after_read = adds_to_any(queue.next_if_read, [(1, head_addr)] + entered[:-1])
        after_kept = adds_to_any(queue.next_if_kept, entered[:-1])
        held_back = Signal()
        m.d.sync += held_back.eq(Mux(entering, after_read, after_kept))
        return held_back


def matmul_feed(cfg, *, command_layout, row_layout):
    """The feed ``cfg`` asks for: :class:`LookaheadMatmulFeed` with
    ``cfg.memory_read_latency`` 2, else :class:`MatmulFeed`."""
    kind = LookaheadMatmulFeed if cfg.memory_read_latency > 1 else MatmulFeed
    return kind(cfg, command_layout=command_layout, row_layout=row_layout)
