"""Accumulator memory: int32 result rows that a write either overwrites or adds to."""

from amaranth.hdl import Cat, Module, Mux, Signal, Value
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from .block_ram import BlockRAM
from .delay_line import delayed, pipeline_busy
from .carry_chain import add_or_pass
from .memory_ports import bounded_read
from .targets import is_ice40

__all__ = ["AccumulatorMemory", "SkewedAccumulatorMemory", "accumulator_memory", "add_spacing"]


def add_spacing(cfg):
    """Cycles by which a write that adds to an accumulator row must follow the write
    before it to that row: 2, or 3 with ``cfg.memory_read_latency`` 2, where the sum has a
    register stage of its own before it is saturated and stored. (Also the cycles from a
    write's request to the end of the cycle it is stored in, with the stored-row register.)
    """
    return 1 + cfg.memory_read_latency


class AccumulatorMemory(wiring.Component):
    """``cfg.acc_depth`` rows of ``cfg.cols`` accumulator words.

    A write with ``write_accumulate`` low stores its row; with it high it adds the row to the
    stored one, lane by lane, so a product whose K is larger than the array is summed over
    several tiles. Additions **saturate**: a sum above the largest accumulator word stores
    the largest, one below the smallest stores the smallest, and ``overflow`` is high for a
    cycle. Saturation is the chosen overflow behaviour everywhere (the golden model does the
    same), because a clipped result is closer to the true one than a wrapped one.

    A write that adds to a row must come at least :func:`add_spacing` cycles (2, or 3 with
    ``cfg.memory_read_latency`` 2) after the write before it to the same row (the datapath
    holds such a row back); any other sequence of writes is fine, back-to-back overwrites
    of a row and additions that far apart included. An address
    at or past ``cfg.acc_depth`` is never written; ``range_error`` pulses instead, and such
    a read returns zeros.

    Members
    -------
    write_addr, write_data, write_accumulate, write_en : In
        One write per cycle, always accepted.
    next_write_addr, next_write_en : In
        The address and enable that ``write_addr`` and ``write_en`` will have in the next
        cycle (used only by :class:`SkewedAccumulatorMemory`).
    read_addr, read_en : In
        Read request.
    read_data : Out(ArrayLayout(acc, cols))
        The row requested ``cfg.memory_read_latency`` cycles before (1 or 2; with 2 the
        row comes through the block RAM's own output register, see
        :class:`~tpuer.hw.block_ram.BlockRAM`, before any logic).
    overflow : Out(1)
        High :func:`add_spacing` cycles after a write's request when it saturated in at
        least one lane.
    range_error : Out(1)
        An out-of-range address was presented with its enable in the previous cycle.
    write_pending : Out(1)
        A write requested in one of the :func:`add_spacing` cycles before may not yet be
        stored.

    Latency: a write requested in cycle ``t`` is stored at the end of cycle ``t + S``
    (``S`` is :func:`add_spacing`); a read requested later returns it (after
    ``cfg.memory_read_latency`` cycles), and ``write_pending`` and ``overflow`` tell of it
    until then. A read from outside in the cycle the row is stored returns an undefined row
    (the datapath reads a row once the matrix unit and ``write_pending`` are idle), so the
    outside reader's port needs no bypass.

    This form (for the ECP5, :func:`accumulator_memory`) reads the stored row straight into
    a register before the addition, so no path runs from the memory through the adder back
    into it; with ``cfg.memory_read_latency`` 2 the sum is registered too, before it is
    saturated and stored, and the outside reader's rows come through the block RAM's own
    output register. ``next_write_addr`` and ``next_write_en`` are unused.
    """

    def __init__(self, cfg):
        self._cfg = cfg
        self.row_layout = data.ArrayLayout(cfg.acc_shape, cfg.cols)
        per_lane = self._per_lane
        super().__init__({
            "write_addr": In(per_lane(cfg.acc_addr_width)),
            "write_data": In(self.row_layout),
            "write_accumulate": In(per_lane(1)),
            "write_en": In(per_lane(1)),
            "next_write_addr": In(per_lane(cfg.acc_addr_width)),
            "next_write_en": In(per_lane(1)),
            "read_addr": In(cfg.acc_addr_width),
            "read_en": In(1),
            "read_data": Out(self.row_layout),
            "overflow": Out(1),
            "range_error": Out(1),
            "write_pending": Out(1),
        })

    def _per_lane(self, shape):
        """The shape of a write member that is one for the row."""
        return shape

    @property
    def depth(self):
        return self._cfg.acc_depth

    def take_results(self, m, mxu):
        """Joins the write members to a :class:`~tpuer.hw.matrix_unit.MatrixUnit`'s
        lined-up ``results`` and ``upcoming`` in module ``m``."""
        m.d.comb += [
            self.write_addr.eq(mxu.results.payload.tag.acc_addr),
            self.write_accumulate.eq(mxu.results.payload.tag.accumulate),
            self.write_data.eq(mxu.results.payload.data),
            self.write_en.eq(mxu.results.valid),
            self.next_write_addr.eq(mxu.upcoming.tag.acc_addr),
            self.next_write_en.eq(mxu.upcoming.valid),
        ]

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        lanes = self._lanes()
        last_en, last_addr = lanes[-1][0], lanes[-1][1]
        write_ok = last_addr < cfg.acc_depth
        # A write's valid flag in each cycle after its request, up to its commit.
        stages = add_spacing(cfg)
        valid = delayed(m, last_en & write_ok, stages, name="write_valid")[1:]
        read_port, output_en = self._store(m, platform, lanes, valid, stages)
        pipeline_busy(m, self.write_pending, last_en & write_ok, valid,
                      ahead=cfg.control_registers)
        read_data, read_bad = bounded_read(m, *read_port, addr=self.read_addr, en=self.read_en,
                                           depth=cfg.acc_depth,
                                           latency=cfg.memory_read_latency,
                                           port_output_en=output_en)
        m.d.comb += self.read_data.eq(read_data)
        m.d.sync += self.range_error.eq(read_bad | (last_en & ~write_ok))
        return m

    def _lanes(self):
        """What each lane writes: ``(en, addr, accumulate, next_en, next_addr)``, here the
        row's write for every lane."""
        return [(self.write_en, self.write_addr, self.write_accumulate,
                 self.next_write_en, self.next_write_addr)] * self._cfg.cols

    def _store(self, m, platform, lanes, valid, stages):
        """The memory, the addition and the commit. Returns the outside reader's port
        (address, enable, data) and its output register's enable (or ``None``)."""
        cfg = self._cfg
        # With memory_read_latency 2, the outside reader's rows come through the block
        # RAM's own output register (a copy of the memory of its own).
        registered_output = cfg.memory_read_latency == 2
        output_en = None
        # ``no_rw_check``: the outside reader's port below needs no read-during-write
        # logic (``old`` is transparent all the same).
        m.submodules.storage = storage = memory.Memory(
            shape=self.row_layout, depth=cfg.acc_depth, init=[],
            attrs={"no_rw_check": 1})
        commit = storage.write_port()
        # Transparent, so a write add_spacing cycles after the one it adds to sees that
        # one's commit.
        old = storage.read_port(transparent_for=[commit])
        # Stage 0 (cycle t): read the row the write may add to. Stage 1 (t + 1): the
        # stored row straight into a register. Stage 2 (t + 2): add and commit, or with
        # memory_read_latency 2 add, and stage 3 (t + 3): saturate and commit.
        m.d.comb += [old.addr.eq(self.write_addr), old.en.eq(self.write_en)]
        s1_addr = Signal.like(self.write_addr)
        s1_data, s1_accumulate = Signal(self.row_layout), Signal()
        s2_addr, s2_data = Signal.like(self.write_addr), Signal(self.row_layout)
        s2_accumulate, s2_old = Signal(), Signal(self.row_layout)
        m.d.sync += [s1_addr.eq(self.write_addr), s1_data.eq(self.write_data),
                     s1_accumulate.eq(self.write_accumulate),
                     s2_addr.eq(s1_addr), s2_data.eq(s1_data),
                     s2_accumulate.eq(s1_accumulate), s2_old.eq(old.data)]
        registered_sum = stages == 3
        new_row, clipped = self._add(m, platform, [s2_old[j] for j in range(cfg.cols)],
                                     s2_data, [s2_accumulate] * cfg.cols,
                                     registered=registered_sum)
        commit_addr = s2_addr
        if registered_sum:
            commit_addr = Signal.like(s2_addr, name="s3_addr")
            m.d.sync += commit_addr.eq(s2_addr)
        m.d.comb += [commit.addr.eq(commit_addr), commit.data.eq(new_row),
                     commit.en.eq(valid[-1]), self.overflow.eq(valid[-1] & clipped.any())]
        if is_ice40(platform) or registered_output:
            # The outside reader's copy without Yosys's bypass: the datapath never reads
            # a row in the cycle it is committed. (With memory_read_latency 2, through
            # the block RAM's own output register.)
            m.submodules.read_copy = read_copy = BlockRAM(
                width=self.row_layout.size, depth=cfg.acc_depth,
                registered_output=registered_output)
            m.d.comb += [read_copy.write_addr.eq(commit.addr),
                         read_copy.write_data.eq(commit.data),
                         read_copy.write_en.eq(commit.en)]
            read_port = read_copy.read_addr, read_copy.read_en, read_copy.read_data
            if registered_output:
                output_en = read_copy.output_en
        else:
            # Without Yosys's bypass too (see BlockRAM): an asynchronous port into a
            # register of its own, which Yosys merges into the block RAM.
            read = storage.read_port(domain="comb")
            read_en = Signal()
            read_held = Signal(self.row_layout.size, reset_less=True)
            with m.If(read_en):
                m.d.sync += read_held.eq(read.data)
            read_port = read.addr, read_en, read_held
        return read_port, output_en

    def _add(self, m, platform, stored, words, accumulate, registered=False):
        """The last stage: each lane's word added (saturating) to the stored one, or
        overwriting it (``accumulate[j]`` low). Returns the new row and a bit per lane that
        is high where the addition saturated. With ``registered`` the sum, its sign and
        whether it saturates are registered first: the row and the bits come a cycle
        later."""
        cfg = self._cfg
        new_row = Signal(self.row_layout)
        clipped = Signal(cfg.cols)
        # The sum overflowed when its operands have one sign and it has the other; it then
        # saturates towards the operands' sign.
        largest, smallest = (1 << (cfg.acc_width - 1)) - 1, -(1 << (cfg.acc_width - 1))
        for lane in range(cfg.cols):
            old_word, word = Value.cast(stored[lane]), Value.cast(words[lane])
            total = add_or_pass(m, platform, old_word, word, accumulate[lane],
                                name=f"sum{lane}")
            sign = old_word[-1]
            lane_clipped = accumulate[lane] & (sign == word[-1]) & (total[-1] != sign)
            if registered:
                registers = (Signal.like(total, name=f"s3_sum{lane}", reset_less=True),
                             Signal(name=f"s3_sign{lane}", reset_less=True),
                             Signal(name=f"s3_clipped{lane}", reset_less=True))
                m.d.sync += [register.eq(value) for register, value in
                             zip(registers, (total, sign, lane_clipped))]
                total, sign, lane_clipped = registers
            m.d.comb += [
                new_row[lane].eq(Mux(lane_clipped, Mux(sign, smallest, largest), total)),
                clipped[lane].eq(lane_clipped),
            ]
        return new_row, clipped


class SkewedAccumulatorMemory(AccumulatorMemory):
    """An :class:`AccumulatorMemory` whose lanes of a row are written apart, as a skewed
    wavefront leaves the systolic array, for the iCE40 (:func:`accumulator_memory`):
    ``write_addr``, ``write_accumulate``, ``write_en``, ``next_write_addr`` and
    ``next_write_en`` have a lane each, and lane ``j`` of a row comes ``cols - 1 - j``
    cycles before its last lane, so that no de-skew register lines the columns up. The row
    is stored with its last lane, whose write ``write_pending``, ``overflow`` and
    ``range_error`` tell of as above (``overflow`` for every lane of the row).

    Each lane has a block RAM of its own (with a copy for the outside reader), without a
    bypass and without a register before the addition (three rows of registers fewer, for
    slow devices): the lane a write may add to is read a cycle ahead, from
    ``next_write_addr``, added as it leaves the memory and stored at the end of the write's
    own cycle ``t`` (reads from ``t + 1`` on see it); by the spacing rule above a lane is
    never read for an addition in the cycle it is stored.

    Latency: as :class:`AccumulatorMemory`'s.
    """

    def _per_lane(self, shape):
        return data.ArrayLayout(shape, self._cfg.cols)

    def take_results(self, m, mxu):
        """Joins the write members to a :class:`~tpuer.hw.matrix_unit.MatrixUnit`'s
        ``columns`` as they leave the array, in module ``m``."""
        for j in range(self._cfg.cols):
            column = mxu.columns[j]
            m.d.comb += [
                self.write_addr[j].eq(column.tag.acc_addr),
                self.write_accumulate[j].eq(column.tag.accumulate),
                self.write_data[j].eq(column.sum),
                self.write_en[j].eq(column.valid),
                self.next_write_addr[j].eq(column.next_tag.acc_addr),
                self.next_write_en[j].eq(column.next_valid),
            ]

    def _lanes(self):
        return [(self.write_en[j], self.write_addr[j], self.write_accumulate[j],
                 self.next_write_en[j], self.next_write_addr[j])
                for j in range(self._cfg.cols)]

    def _store(self, m, platform, lanes, valid, stages):
        cfg = self._cfg
        output_en = None
        # A lane a write may add to is read a cycle ahead (``next_write_*``), so that in
        # cycle t it is added as it leaves the memory and committed: the written lane
        # needs no register. Stored a cycle after its write, a lane is read again a
        # cycle later at the earliest (the rule above), so the memories need no bypass;
        # nor does the outside reader's copy, as the datapath never reads a row in the
        # cycle it is committed.
        read_addr, read_en = Signal.like(self.read_addr), Signal()
        stored, read_words = [], []
        for j, (en, addr, _, next_en, next_addr) in enumerate(lanes):
            m.submodules[f"lane{j}"] = storage = BlockRAM(width=cfg.acc_width,
                                                          depth=cfg.acc_depth)
            m.submodules[f"lane{j}_read_copy"] = read_copy = BlockRAM(
                width=cfg.acc_width, depth=cfg.acc_depth)
            m.d.comb += [storage.read_addr.eq(next_addr), storage.read_en.eq(next_en),
                         read_copy.read_addr.eq(read_addr), read_copy.read_en.eq(read_en)]
            stored.append(storage.read_data)
            read_words.append(read_copy.read_data)
        new_row, clipped = self._add(m, platform, stored, self.write_data,
                                     [lane[2] for lane in lanes])
        for j, (en, addr, _, _, _) in enumerate(lanes):
            for ram in (getattr(m.submodules, f"lane{j}"),
                        getattr(m.submodules, f"lane{j}_read_copy")):
                m.d.comb += [ram.write_addr.eq(addr), ram.write_data.eq(new_row[j]),
                             ram.write_en.eq(en & (addr < cfg.acc_depth))]
        # A lane's saturation shows with its row's last lane, add_spacing cycles later.
        lined_up = []
        for j, (en, addr, _, _, _) in enumerate(lanes):
            flag = en & (addr < cfg.acc_depth) & clipped[j]
            lined_up.append(delayed(m, flag, cfg.cols - 1 - j,
                                    name=f"lane{j}_clipped")[-1])
        overflow_late = delayed(m, Cat(*lined_up).any(), stages - 1, name="overflow")[-1]
        m.d.sync += self.overflow.eq(overflow_late)
        read_port = read_addr, read_en, Cat(*read_words)
        return read_port, output_en


def accumulator_memory(cfg, platform):
    """The accumulator memory for ``platform``: :class:`SkewedAccumulatorMemory` on an iCE40,
    else :class:`AccumulatorMemory`."""
    return (SkewedAccumulatorMemory if is_ice40(platform) else AccumulatorMemory)(cfg)
