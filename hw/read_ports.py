"""The read ports of the Unified Buffer and the accumulators, shared by the datapath's own
reads and the host's. Two forms behind one signature, picked by :func:`read_ports`."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .arith import count_of
from .delay_line import delayed_with_payload
from .queues import RingQueue, ShiftQueue

__all__ = ["host_answer_slots", "OwnRead", "MemoryRead", "ReadPorts", "RegisteredReadPorts",
           "read_ports"]


def host_answer_slots(cfg):
    """Rows the queue of answers to the host's reads holds: ``cfg.host_read_queue``, and
    with ``cfg.memory_read_latency`` 2 two more, so that a reader that keeps up still gets
    a row per cycle: one for the read's cycle more, one because the room for a read then
    counts only what registers hold, not an answer taken in the same cycle (whose ``ready``
    comes from the host's side, through the DMA engine). The cycle model uses it too."""
    return cfg.host_read_queue + 2 * (cfg.memory_read_latency - 1)


class OwnRead(wiring.Signature):
    """A read of one memory by the datapath itself, which goes before the host's. From the
    reader's side: ``valid``, it offers a read; ``pending``, it offers one or may offer one
    in this cycle (at least ``valid``); ``taken``, the read happens (at most ``valid``);
    ``addr``, its row."""

    def __init__(self, addr_width):
        super().__init__({"valid": Out(1), "pending": Out(1), "taken": Out(1),
                          "addr": Out(addr_width)})


class MemoryRead(wiring.Signature):
    """A memory's read port, from the reader's side: ``addr`` and ``en`` out, ``data``
    (``cfg.memory_read_latency`` cycles after ``en``) in."""

    def __init__(self, addr_width, data_shape):
        super().__init__({"addr": Out(addr_width), "en": Out(1), "data": In(data_shape)})


class ReadPorts(wiring.Component):
    """Both memories' read ports: the datapath's own reads (``matmul`` of the Unified
    Buffer, ``activate`` of the accumulators) go first; a host read (``host_read``) of a
    memory is taken when that memory's own read is not offered and its row is sure to find
    room in the answer queue of :func:`host_answer_slots` rows, which holds the rows until
    ``host_data`` takes them: the rows queued and the ones still being read, less one taken
    this cycle, leave room for one more (a reader that takes every answer at once so gets a
    row per cycle with ``cfg.host_read_queue`` 2, every other cycle with 1). The row is
    widened into the answer layout (the UB's lanes sign-extended, or the accumulator words
    in lanes ``0 .. cols - 1``, the others 0) as it enters the queue.

    This form, for ``cfg.memory_read_latency`` 1, puts an address on a port as the read is
    taken: the form the slower boards were placed and routed with. Its queue is a
    :class:`~tpuer.hw.queues.ShiftQueue`.

    Members
    -------
    matmul, activate : In(OwnRead)
        The datapath's reads of the Unified Buffer and of the accumulators.
    host_read : In(stream.Signature(host read layout))
        The host's reads (``acc``: of the accumulators, else of the UB; ``addr``).
    host_data : Out(stream.Signature(host row layout))
        The answers, in order.
    ub, acc : Out(MemoryRead)
        The two memories' read ports.

    Latency: a host read taken in cycle ``t`` is answered from cycle
    ``t + 1 + cfg.memory_read_latency``.
    """

    _queue_class = ShiftQueue

    def __init__(self, cfg, *, host_read_layout, host_row_layout):
        self._cfg = cfg
        self._host_row_layout = host_row_layout
        super().__init__({
            "matmul": In(OwnRead(cfg.ub_addr_width)),
            "activate": In(OwnRead(cfg.acc_addr_width)),
            "host_read": In(stream.Signature(host_read_layout)),
            "host_data": Out(stream.Signature(host_row_layout)),
            "ub": Out(MemoryRead(cfg.ub_addr_width,
                                 data.ArrayLayout(cfg.operand_shape, cfg.ub_lanes))),
            "acc": Out(MemoryRead(cfg.acc_addr_width, data.ArrayLayout(cfg.acc_shape,
                                                                       cfg.cols))),
        })

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        depth = host_answer_slots(cfg)
        m.submodules.host_answers = queue = self._queue_class(shape=self._host_row_layout,
                                                              depth=depth)
        request = self.host_read.payload
        fresh = Signal()             # a host read was issued last cycle
        fresh_acc = Signal()         # ... of the accumulators
        reads = delayed_with_payload(m, fresh, fresh_acc, cfg.memory_read_latency - 1,
                                     name="host_reading")
        arrived, arrived_acc = reads[-1]     # its row is on the port's output this cycle
        held = queue.level + count_of(valid for valid, _ in reads)
        room = self._room(queue, held, depth)
        blocked = self._blocked()
        taken = self.host_read.valid & ~blocked & room
        for lane in range(cfg.ub_lanes):
            from_acc = self.acc.data[lane] if lane < cfg.cols else 0
            m.d.comb += queue.i.payload[lane].eq(Mux(arrived_acc, from_acc,
                                                     self.ub.data[lane]))
        m.d.comb += [
            self.host_read.ready.eq(~blocked & room),
            queue.i.valid.eq(arrived),
        ]
        wiring.connect(m, queue.o, wiring.flipped(self.host_data))
        m.d.sync += [fresh.eq(taken), fresh_acc.eq(request.acc)]
        self._address(m, self.acc, self.activate, request.acc, taken, room)
        self._address(m, self.ub, self.matmul, ~request.acc, taken, room)
        return m

    def _room(self, queue, held, depth):
        """Room in the answer queue for one more row: with the late ``taken`` last,
        ``held - taken < depth``."""
        taken = queue.o.valid & self.host_data.ready
        return (held < depth) | (taken & (held < depth + 1))

    def _blocked(self):
        """The memory the host would read has a read of its own offered."""
        return Mux(self.host_read.payload.acc, self.activate.valid, self.matmul.valid)

    def _address(self, m, port, own, host_wants, host_taken, room):
        """A memory's address and enable: its own read's if taken, else the host's if
        taken and of this memory (``host_wants``)."""
        with m.If(own.taken):
            m.d.comb += [port.addr.eq(own.addr), port.en.eq(1)]
        with m.Elif(host_taken & host_wants):
            m.d.comb += [port.addr.eq(self.host_read.payload.addr), port.en.eq(1)]


class RegisteredReadPorts(ReadPorts):
    """:class:`ReadPorts` for ``cfg.memory_read_latency`` 2 (fast clocks). A host read of
    a memory waits while the datapath offers a read of it or may offer one (``pending``),
    so the offer alone chooses the address: the multiplexers do not wait for the rest of
    the issue decisions (the sequencer's hazard checks, the feed's room, the host's
    arbitration), and each memory's enable is written out for that memory alone (so that
    the sequencer's MATMUL decision is not in the accumulators' logic). The room in the
    answer queue counts only what registers hold, which :func:`host_answer_slots` pays for
    with a slot more. The queue is a :class:`~tpuer.hw.queues.RingQueue`: the host's
    ``ready``, which comes late through the DMA engine, then drives a pointer and not the
    enables of all the rows.

    Latency: as :class:`ReadPorts`'s.
    """

    _queue_class = RingQueue

    def _room(self, queue, held, depth):
        return held < depth

    def _blocked(self):
        return Mux(self.host_read.payload.acc, self.activate.pending, self.matmul.pending)

    def _address(self, m, port, own, host_wants, host_taken, room):
        host_reads_it = self.host_read.valid & host_wants & ~own.pending & room
        m.d.comb += [port.addr.eq(Mux(own.pending, own.addr, self.host_read.payload.addr)),
                     port.en.eq(own.taken | host_reads_it)]


def read_ports(cfg, **layouts):
    """The read ports ``cfg`` asks for: :class:`RegisteredReadPorts` with
    ``cfg.memory_read_latency`` 2, else :class:`ReadPorts`."""
    return (RegisteredReadPorts if cfg.memory_read_latency > 1 else ReadPorts)(cfg, **layouts)
