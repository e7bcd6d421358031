"""The whole datapath: Unified Buffer -> matrix unit -> accumulators -> activation -> UB."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .accumulators import AccumulatorMemory, add_spacing
from .activation import PARAM_WRITE_LAYOUT, ActivationUnit
from .activation_units import activation_latency, activation_unit
from .arith import above, any_of, count_of
from .delay_line import delayed
from .matrix_unit import MatrixUnit, matrix_unit_latency
from .ring_queue import RingQueue
from .shift_queue import ShiftQueue
from .targets import is_ice40
from .unified_buffer import UnifiedBuffer

__all__ = ["Datapath", "command_layouts", "feed_slots", "host_answer_slots"]

def feed_slots(cfg):
    """Rows the matmul path keeps in flight between the Unified Buffer and the matrix unit:
    the UB reads under way (``cfg.memory_read_latency``) plus the rows queued for the matrix
    unit, two more, so that a row per cycle flows (the cycle model uses it too)."""
    return 2 + cfg.memory_read_latency


def command_layouts(cfg):
    """Payload layouts of the datapath's command streams."""
    ub_addr, acc_addr = cfg.ub_addr_width, cfg.acc_addr_width
    return {
        "matmul": data.StructLayout({"ub_addr": ub_addr, "acc_addr": acc_addr,
                                     "accumulate": 1, "new_tile": 1}),
        "activate": data.StructLayout({"acc_addr": acc_addr, "ub_addr": ub_addr}),
        "host_write": data.StructLayout({
            "addr": ub_addr, "data": data.ArrayLayout(cfg.operand_shape, cfg.ub_lanes),
            "mask": cfg.ub_lanes}),
        # A host read: a row of the accumulators (``acc``) or of the Unified Buffer.
        "host_read": data.StructLayout({"acc": 1, "addr": max(ub_addr, acc_addr)}),
        # Its answer: the UB's lanes sign-extended, or the accumulator words in lanes
        # ``0 .. cols - 1`` (the others 0).
        "host_row": data.ArrayLayout(cfg.acc_shape, cfg.ub_lanes),
    }


class Datapath(wiring.Component):
    """Every block of the TPU joined the way TPU v1 joins them, driven by per-row commands.

    * ``matmul``: read Unified Buffer row ``ub_addr``, multiply its first ``rows`` lanes by
      the active weight tile (switching to the next one first when ``new_tile``), and write
      or add (``accumulate``) the result into accumulator row ``acc_addr``. One command per
      cycle streams back to back, except that a row adding to the accumulator row of one
      of the rows just before it waits until :func:`~tpuer.hw.accumulators.add_spacing`
      cycles (2, or 3 with ``cfg.memory_read_latency`` 2) separate the two in the matrix
      unit.
    * ``activate``: read accumulator row ``acc_addr``, requantise it with ``params`` and
      write it into lanes ``0 .. cols - 1`` of Unified Buffer row ``ub_addr``. One per cycle.
    * ``weights``: weight rows into the Weight FIFO.
    * ``host_write`` and ``host_read`` -> ``host_data``: the host's access to both memories
      (reads of either answered in order through one queue of :func:`host_answer_slots`
      rows). The datapath's own traffic goes first: a host read waits while ``matmul``
      reads the Unified Buffer, a host read of the accumulators while ``activate`` reads
      them, a host write while an activated row is written.

    Commands of one stream execute in order; the streams are not ordered against each
    other. Whoever drives them (the sequencer) waits for ``busy`` to fall, or otherwise
    keeps the dependencies, before it activates rows that a matrix product writes.

    Members
    -------
    params : In(ActivationUnit params layout)
        Requantisation parameters; change them only while ``busy`` is low.
    param_write : In(PARAM_WRITE_LAYOUT)
        With a lane-serial activation unit, its biases and multipliers (which it keeps
        itself; those of ``params`` are unused): a write per cycle, only while ``busy`` is
        low.
    matmul_pending : In(1)
        High in every cycle ``matmul.valid`` is, and in any others where a ``matmul``
        command may come (its driver's instruction still waits on other checks). With
        ``cfg.memory_read_latency`` 2 (fast clocks) it alone chooses the Unified Buffer's
        read address, and host reads of the Unified Buffer wait while it is high, so that
        neither waits for ``valid``'s later decisions. (Tie it to ``matmul.valid`` where
        nothing earlier is known.)
    busy : Out(1)
        Some command is still in flight.
    matmul_busy, activate_busy : Out(1)
        A ``matmul`` (up to its accumulator write) or an ``activate`` (up to its UB write)
        is still in flight.
    acc_bank_busy : Out(2)
        Bit ``h``: some accepted ``matmul`` row has not yet been written into accumulator
        half ``h`` (rows below ``acc_depth // 2``, or from there on), so that a reader of
        one half need not wait for products going into the other. From registers.
    vector_issued : Out(1)
        A vector entered the matrix unit this cycle (the MXU-busy counter counts these).
    weight_stall, overflow, range_error : Out(1)
        A ``new_tile`` is waiting for its weights; an accumulation saturated; a command
        named an address past the end of a memory (one-cycle pulses, as the blocks raise
        them).

    Latency: a ``matmul`` command accepted in cycle ``t`` has its accumulator row written at
    the end of cycle ``t + 1 + R + S + M`` (:attr:`matmul_latency`; ``R`` is
    ``cfg.memory_read_latency``, ``S`` the accumulators'
    :func:`~tpuer.hw.accumulators.add_spacing`, ``M`` the matrix unit's
    :func:`~tpuer.hw.matrix_unit.matrix_unit_latency`, ``rows + cols + multiply_latency``);
    an ``activate`` accepted in cycle ``t`` writes its UB row at the end of cycle
    ``t + R + L`` (:attr:`activate_latency`), where ``L`` is the activation unit's latency
    (:func:`~tpuer.hw.activation_units.activation_latency`: 7, 9 with ``multiply_latency`` 2,
    10 with 3;
    with ``cfg.activation_steps``, ``cols * (steps + 37) + 1``, and the next
    ``activate`` is taken only when the unit can take its row).
    """

    def __init__(self, cfg):
        self._cfg = cfg
        layouts = command_layouts(cfg)
        self.matmul_layout = layouts["matmul"]
        self.activate_layout = layouts["activate"]
        self.host_write_layout = layouts["host_write"]
        self.host_read_layout = layouts["host_read"]
        self.params_layout = ActivationUnit.params_layout_for(cfg)
        super().__init__({
            "weights": In(stream.Signature(data.ArrayLayout(cfg.operand_shape, cfg.cols))),
            "matmul": In(stream.Signature(self.matmul_layout)),
            "matmul_pending": In(1),
            "activate": In(stream.Signature(self.activate_layout)),
            "params": In(self.params_layout),
            "param_write": In(PARAM_WRITE_LAYOUT),
            "host_write": In(stream.Signature(self.host_write_layout)),
            "host_read": In(stream.Signature(layouts["host_read"])),
            "host_data": Out(stream.Signature(layouts["host_row"])),
            "busy": Out(1),
            "matmul_busy": Out(1),
            "acc_bank_busy": Out(2),
            "activate_busy": Out(1),
            "vector_issued": Out(1),
            "weight_stall": Out(1),
            "overflow": Out(1),
            "range_error": Out(1),
        })

    @property
    def matmul_latency(self):
        cfg = self._cfg
        return 1 + cfg.memory_read_latency + add_spacing(cfg) + matrix_unit_latency(cfg)

    @property
    def activate_latency(self):
        return self._cfg.memory_read_latency + activation_latency(self._cfg)

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        tag = data.StructLayout({"acc_addr": cfg.acc_addr_width, "accumulate": 1})
        m.submodules.ub = ub = UnifiedBuffer(cfg)
        m.submodules.mxu = mxu = MatrixUnit(cfg, tag_shape=tag)
        # On an iCE40 each accumulator lane is written as its column leaves the array, so
        # that no de-skew registers line the columns up.
        skewed = is_ice40(platform)
        m.submodules.acc = acc = AccumulatorMemory(cfg, skewed_lanes=skewed)
        m.submodules.act = act = activation_unit(cfg, tag_shape=cfg.ub_addr_width)
        wiring.connect(m, wiring.flipped(self.weights), mxu.weights)
        m.d.comb += [act.params.eq(self.params), act.param_write.eq(self.param_write)]

        # --- matmul: UB read -> small queue -> matrix unit ---------------------------------
        # The queue absorbs the UB's read latency when the matrix unit waits for weights;
        # a read is issued only when its row is sure to find room (the rows queued and the
        # ones being read are fewer than feed_slots, so they never overflow it).
        slots = feed_slots(cfg)
        feed_layout = data.StructLayout({"data": data.ArrayLayout(cfg.operand_shape, cfg.rows),
                                         "new_tile": 1, "tag": tag})
        # With slower reads (fast clocks), the hold-back check below is made a cycle ahead.
        ahead = cfg.memory_read_latency > 1
        # (A ring then, so that the matrix unit's late ``ready`` moves a pointer and does not
        # enable every entry.)
        m.submodules.feed = feed = (RingQueue if ahead else ShiftQueue)(
            width=feed_layout.size, depth=slots, lookahead=ahead)
        reading = Signal()                      # a matmul read was issued last cycle
        reading_cmd = Signal(self.matmul_layout)
        reads = _delayed(m, cfg, reading, reading_cmd, "reading")
        arrived, arrived_cmd = reads[-1]        # the row of this read is on ub.read_data
        if ahead:
            # The rows queued and being read are counted in a register of their own
            # (``held``), and the room they leave is decided a cycle ahead: the MATMUL
            # handshake starts from a register.
            room = Signal(init=1)
            held = Signal(range(slots + 1))
            issue = self.matmul.valid & room
            held_next = held + issue - (feed.r_en & feed.r_rdy)
            m.d.sync += [held.eq(held_next), room.eq(held_next < slots)]
        else:
            room = feed.level + count_of(valid for valid, _ in reads) < slots
            issue = self.matmul.valid & room
        m.d.comb += self.matmul.ready.eq(room)
        m.d.sync += reading.eq(issue)
        with m.If(issue):
            m.d.sync += reading_cmd.eq(self.matmul.payload)
        feed_in = Signal(feed_layout)
        for lane in range(cfg.rows):
            m.d.comb += feed_in.data[lane].eq(ub.read_data[lane])
        m.d.comb += [
            feed_in.new_tile.eq(arrived_cmd.new_tile),
            feed_in.tag.acc_addr.eq(arrived_cmd.acc_addr),
            feed_in.tag.accumulate.eq(arrived_cmd.accumulate),
            feed.w_data.eq(feed_in),
            feed.w_en.eq(arrived),
        ]
        # A row that adds to the accumulator row of a row that entered the matrix unit in
        # the add_spacing - 1 cycles before waits: the accumulator memory needs that
        # spacing between two writes to a row when the second adds to it (the results keep
        # the rows' spacing).
        head = data.View(feed_layout, feed.r_data)
        entered = [(Signal(name="entered" if k == 1 else f"entered_{k}"),
                    Signal(cfg.acc_addr_width,
                           name="entered_addr" if k == 1 else f"entered_{k}_addr"))
                   for k in range(1, add_spacing(cfg))]
        entering = mxu.rows.valid & mxu.rows.ready    # the head enters the matrix unit
        if ahead:
            repeat = _held_back_next(m, feed, feed_layout, entered, entering)
        else:
            repeat = any_of(was & head.tag.accumulate & (head.tag.acc_addr == addr)
                            for was, addr in entered)
        m.d.comb += [
            mxu.rows.payload.eq(feed.r_data),
            mxu.rows.valid.eq(feed.r_rdy & ~repeat),
            feed.r_en.eq(mxu.rows.ready & ~repeat),
        ]
        m.d.sync += [entered[0][0].eq(entering),
                     entered[0][1].eq(head.tag.acc_addr)]
        for (was, addr), (earlier, earlier_addr) in zip(entered[1:], entered):
            m.d.sync += [was.eq(earlier), addr.eq(earlier_addr)]

        # In-flight rows per accumulator half: counted in when the command is accepted, out
        # when its accumulator write commits.
        half = cfg.acc_depth // 2
        in_flight_limit = matrix_unit_latency(cfg) + 12
        banks = [Signal(range(in_flight_limit), name=f"acc_bank{h}_rows") for h in (0, 1)]
        # A result written in cycle t commits at the end of t + add_spacing.
        result_bank, commit_bank = Signal(), Signal()
        result_written, committing = Signal(), Signal()
        m.d.sync += [result_written.eq(mxu.results.valid),
                     result_bank.eq(mxu.results.payload.tag.acc_addr >= half)]
        for k in range(add_spacing(cfg) - 2):
            later_written, later_bank = Signal(name=f"result_written_{k + 2}"), Signal(
                name=f"result_bank_{k + 2}")
            m.d.sync += [later_written.eq(result_written), later_bank.eq(result_bank)]
            result_written, result_bank = later_written, later_bank
        m.d.sync += [committing.eq(result_written), commit_bank.eq(result_bank)]
        issue_bank = self.matmul.payload.acc_addr >= half
        for h, count in enumerate(banks):
            up = issue & (issue_bank == h)
            down = committing & (commit_bank == h)
            # The busy flag is a register, set from the count the half will have: the
            # issue decision enters its last OR, no adder.
            m.d.sync += [count.eq(count + up - down),
                         self.acc_bank_busy[h].eq(above(count, 1) | up |
                                                  ((count == 1) & ~down))]

        # --- matrix unit results -> accumulators ----------------------------------------
        if skewed:
            for j in range(cfg.cols):
                column = mxu.columns[j]
                m.d.comb += [
                    acc.write_addr[j].eq(column.tag.acc_addr),
                    acc.write_accumulate[j].eq(column.tag.accumulate),
                    acc.write_data[j].eq(column.sum),
                    acc.write_en[j].eq(column.valid),
                    acc.next_write_addr[j].eq(column.next_tag.acc_addr),
                    acc.next_write_en[j].eq(column.next_valid),
                ]
        else:
            m.d.comb += [
                acc.write_addr.eq(mxu.results.payload.tag.acc_addr),
                acc.write_accumulate.eq(mxu.results.payload.tag.accumulate),
                acc.write_data.eq(mxu.results.payload.data),
                acc.write_en.eq(mxu.results.valid),
                acc.next_write_addr.eq(mxu.upcoming.tag.acc_addr),
                acc.next_write_en.eq(mxu.upcoming.valid),
            ]

        # --- activate: accumulator read -> activation unit -> UB write ------------------
        # The activated row always has the UB write port, so the unit never stalls.
        activating = Signal()
        activating_ub_addr = Signal(cfg.ub_addr_width)
        activations = _delayed(m, cfg, activating, activating_ub_addr, "activating")
        activations_in_flight = any_of(valid for valid, _ in activations)
        m.d.comb += self.activate.ready.eq(act.admits(activations_in_flight))
        m.d.sync += [activating.eq(self.activate.valid & self.activate.ready),
                     activating_ub_addr.eq(self.activate.payload.ub_addr)]
        m.d.comb += [
            act.i.payload.data.eq(acc.read_data),
            act.i.payload.tag.eq(activations[-1][1]),
            act.i.valid.eq(activations[-1][0]),
            act.o.ready.eq(1),
        ]

        if cfg.control_registers:
            # A register set a cycle ahead, of the same value: a row handed to the first
            # stage, or one moving on to the next, or the unit busy in the next cycle; so
            # that the sequencer's hazard checks start from a register near them.
            m.d.sync += self.activate_busy.eq(
                any_of([self.activate.valid & self.activate.ready,
                        *(valid for valid, _ in activations[:-1]), act.busy_next]))
        else:
            m.d.comb += self.activate_busy.eq(activations_in_flight | act.busy)

        # --- host reads of both memories, when the datapath does not read -------------
        request = self.host_read.payload
        host_issue, host_room = _serve_host_reads(
            m, cfg, self.host_read, self.host_data, acc.read_data, ub.read_data,
            blocked=Mux(request.acc, self.activate.valid,
                        self.matmul_pending if ahead else self.matmul.valid))
        if ahead:
            # A host read of a memory waits while the datapath offers a read of it (or,
            # for the UB, may offer one: ``matmul_pending``), so the offer alone chooses
            # the address: the multiplexers do not wait for the rest of the issue
            # decisions (the sequencer's hazard checks, the feed's room, the host's
            # arbitration). The accumulators' enable is written out for their memory
            # alone, so that the sequencer's MATMUL decision is not in its logic.
            host_reads_acc = (self.host_read.valid & request.acc & ~self.activate.valid &
                              host_room)
            m.d.comb += [
                acc.read_addr.eq(Mux(self.activate.valid, self.activate.payload.acc_addr,
                                     request.addr)),
                acc.read_en.eq(self.activate.valid | host_reads_acc),
                ub.read_addr.eq(Mux(self.matmul_pending, self.matmul.payload.ub_addr,
                                    request.addr)),
                ub.read_en.eq(issue | (host_issue & ~request.acc)),
            ]
        else:
            # The same reads, the addresses chosen by the whole issue decisions: the form
            # the slower boards were placed and routed with (on the iCEBreaker the one
            # above lost its 24 MHz to a different placement).
            with m.If(self.activate.valid):
                m.d.comb += [acc.read_addr.eq(self.activate.payload.acc_addr),
                             acc.read_en.eq(1)]
            with m.Elif(host_issue & request.acc):
                m.d.comb += [acc.read_addr.eq(request.addr), acc.read_en.eq(1)]
            with m.If(issue):
                m.d.comb += [ub.read_addr.eq(self.matmul.payload.ub_addr), ub.read_en.eq(1)]
            with m.Elif(host_issue & ~request.acc):
                m.d.comb += [ub.read_addr.eq(request.addr), ub.read_en.eq(1)]

        # --- UB write port: activated rows first, then the host -------------------------
        # The row, address and mask are the host's whenever no activated row is written,
        # so that only the write enable waits for the host's (late) valid.
        m.d.comb += [self.host_write.ready.eq(~act.o.valid),
                     ub.write_en.eq(act.o.valid | self.host_write.valid)]
        with m.If(act.o.valid):
            m.d.comb += [ub.write_addr.eq(act.o.payload.tag),
                         ub.write_mask.eq((1 << cfg.cols) - 1)]
            for lane in range(cfg.cols):
                m.d.comb += ub.write_data[lane].eq(act.o.payload.data[lane])
        with m.Else():
            m.d.comb += [ub.write_addr.eq(self.host_write.payload.addr),
                         ub.write_data.eq(self.host_write.payload.data),
                         ub.write_mask.eq(self.host_write.payload.mask)]

        m.d.comb += [
            self.matmul_busy.eq(any_of(valid for valid, _ in reads) | feed.r_rdy | mxu.busy |
                                acc.write_pending),

            self.busy.eq(self.matmul_busy | self.activate_busy),
            self.vector_issued.eq(mxu.rows.valid & mxu.rows.ready),
            self.weight_stall.eq(mxu.weight_stall),
            self.overflow.eq(acc.overflow),
            self.range_error.eq(ub.range_error | acc.range_error),
        ]
        return m


def _held_back_next(m, feed, feed_layout, entered, entering):
    """The feed head's hold-back flag, decided in the cycle before from registers: the
    head of the next cycle (``feed``'s lookahead, whichever way ``entering`` goes) against
    the rows that will then have entered the matrix unit in the cycles before it (this
    cycle's head if it enters, and ``entered`` but its oldest). Latency: the flag is a
    register, so the matrix unit's handshake no longer waits on address comparisons."""
    head = data.View(feed_layout, feed.r_data)

    def adds_to_any(candidate, recent):
        row = data.View(feed_layout, candidate)
        return any_of([0] + [was & row.tag.accumulate & (row.tag.acc_addr == addr)
                           for was, addr in recent])

    after_read = adds_to_any(feed.next_if_read, [(1, head.tag.acc_addr)] + entered[:-1])
    after_kept = adds_to_any(feed.next_if_kept, entered[:-1])
    held_back = Signal()
    m.d.sync += held_back.eq(Mux(entering, after_read, after_kept))
    return held_back


def _delayed(m, cfg, valid, payload, name):
    """A memory read's flag and payload (registered as the read is issued), and copies of
    them 1 ... ``cfg.memory_read_latency - 1`` cycles later: a list of ``(valid,
    payload)`` whose last pair goes with the memory's data."""
    cycles = cfg.memory_read_latency - 1
    return list(zip(delayed(m, valid, cycles, name=name),
                    delayed(m, payload, cycles, name=f"{name}_payload", reset_less=True)))


def host_answer_slots(cfg):
    """Rows the queue of answers to the host's reads holds: ``cfg.host_read_queue``, and
    with ``cfg.memory_read_latency`` 2 two more, so that a reader that keeps up still gets
    a row per cycle: one for the read's cycle more, one because the room for a read then
    counts only what registers hold, not an answer taken in the same cycle (whose ``ready``
    comes from the host's side, through the DMA engine). The cycle model uses it too."""
    return cfg.host_read_queue + 2 * (cfg.memory_read_latency - 1)


def _serve_host_reads(m, cfg, request, response, acc_data, ub_data, *, blocked):
    """Host reads of either memory on its shared read port, one per cycle.

    A request is taken when ``blocked`` (the datapath's own read of that memory) is low and
    its row is sure to find room in the answer queue (:func:`host_answer_slots` rows), which
    holds the rows until ``response`` takes them: the rows queued and the ones still being
    read, less one taken this cycle (with ``cfg.memory_read_latency`` 1), leave room for
    one more. (A reader that takes every
    answer at once so gets a row per cycle with ``cfg.host_read_queue`` 2, every other
    cycle with 1.) The row is widened into the answer layout as it enters the queue.
    With ``cfg.memory_read_latency`` 2 (fast clocks) the queue is a
    :class:`~tpuer.hw.ring_queue.RingQueue`: the host's ``ready``, which comes late through
    the DMA engine, then drives a pointer and not the enables of all the rows.
    Returns the signal that is high in the cycle the host's address must be on the port,
    and the one that says the answer queue has room.
    """
    depth = host_answer_slots(cfg)
    kind = RingQueue if cfg.memory_read_latency > 1 else ShiftQueue
    queue = kind(width=len(response.payload.as_value()), depth=depth)
    m.submodules.host_answers = queue
    fresh = Signal()             # a host read was issued last cycle
    fresh_acc = Signal()         # ... of the accumulators
    reads = _delayed(m, cfg, fresh, fresh_acc, "host_reading")
    arrived, arrived_acc = reads[-1]     # its row is on the port's output this cycle
    held = queue.level + count_of(valid for valid, _ in reads)
    if cfg.memory_read_latency == 1:
        taken = queue.r_rdy & response.ready
        # level + reads in flight - taken < depth, with the late ``taken`` last
        room = (held < depth) | (taken & (held < depth + 1))
    else:               # from registers only, for fast clocks (a slot more, above)
        room = held < depth
    issue = request.valid & ~blocked & room
    row = Signal(response.payload.shape())
    for lane in range(cfg.ub_lanes):
        from_acc = acc_data[lane] if lane < cfg.cols else 0
        m.d.comb += row[lane].eq(Mux(arrived_acc, from_acc, ub_data[lane]))
    m.d.comb += [
        request.ready.eq(~blocked & room),
        queue.w_data.eq(row),
        queue.w_en.eq(arrived),
        response.valid.eq(queue.r_rdy),
        response.payload.eq(queue.r_data),
        queue.r_en.eq(response.ready),
    ]
    m.d.sync += [fresh.eq(issue), fresh_acc.eq(request.payload.acc)]
    return issue, room
