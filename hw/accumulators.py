"""Accumulator memory: int32 result rows that a write either overwrites or adds to."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from .arith import saturate
from .block_ram import BlockRAM
from .memory_ports import bounded_read
from .targets import is_ice40

__all__ = ["AccumulatorMemory"]


class AccumulatorMemory(wiring.Component):
    """``cfg.acc_depth`` rows of ``cfg.cols`` accumulator words.

    A write with ``write_accumulate`` low stores its row; with it high it adds the row to the
    stored one, lane by lane, so a product whose K is larger than the array is summed over
    several tiles. Additions **saturate**: a sum above the largest accumulator word stores
    the largest, one below the smallest stores the smallest, and ``overflow`` is high for a
    cycle. Saturation is the chosen overflow behaviour everywhere (the golden model does the
    same), because a clipped result is closer to the true one than a wrapped one.

    A write that adds to a row must not follow a write to the same row in the cycle just
    before (the datapath holds such a row back a cycle); any other sequence of writes is
    fine, back-to-back overwrites of a row and additions a cycle apart included. An address
    at or past ``cfg.acc_depth`` is never written; ``range_error`` pulses instead, and such
    a read returns zeros.

    Members
    -------
    write_addr, write_data, write_accumulate, write_en : In
        One write per cycle, always accepted.
    next_write_addr, next_write_en : In
        The address and enable that ``write_addr`` and ``write_en`` will have in the next
        cycle (used only without ``register_stored_row``, see below).
    read_addr, read_en : In
        Read request.
    read_data : Out(ArrayLayout(acc, cols))
        The row requested in the previous cycle.
    overflow : Out(1)
        High two cycles after a write's request when it saturated in at least one lane.
    range_error : Out(1)
        An out-of-range address was presented with its enable in the previous cycle.
    write_pending : Out(1)
        A write requested in one of the two cycles before may not yet be stored.

    Latency: a write requested in cycle ``t`` is stored at the end of cycle ``t + 2``; a read
    requested in cycle ``t + 2`` or later returns it (1 cycle read latency), and
    ``write_pending`` and ``overflow`` tell of it until then. With ``register_stored_row``
    the stored row goes straight from the memory into a register before the addition, so
    no path runs from the memory through the adder back into it. Without it (for slow
    devices: three rows of registers fewer) the row a write adds to is read a cycle ahead,
    from ``next_write_addr``, and the write is added as it leaves the memory and stored at
    the end of its own cycle ``t`` (reads from ``t + 1`` on see it); ``write_pending`` and
    ``overflow`` keep their timing. ``register_stored_row=None`` (the default) leaves it out
    on an iCE40 only. Without it the memory is block RAM without a bypass (on an iCE40
    without Yosys's): the rule above means that a row is never read for an addition in the
    cycle it is stored, and a read from outside in that cycle returns an undefined row (the
    datapath reads a row only once the matrix unit and ``write_pending`` are idle).
    """

    def __init__(self, cfg, *, register_stored_row=None):
        self._cfg = cfg
        self._register_stored_row = register_stored_row
        self.row_layout = data.ArrayLayout(cfg.acc_shape, cfg.cols)
        super().__init__({
            "write_addr": In(cfg.acc_addr_width),
            "write_data": In(self.row_layout),
            "write_accumulate": In(1),
            "write_en": In(1),
            "next_write_addr": In(cfg.acc_addr_width),
            "next_write_en": In(1),
            "read_addr": In(cfg.acc_addr_width),
            "read_en": In(1),
            "read_data": Out(self.row_layout),
            "overflow": Out(1),
            "range_error": Out(1),
            "write_pending": Out(1),
        })

    @property
    def depth(self):
        return self._cfg.acc_depth

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        register_stored_row = self._register_stored_row
        if register_stored_row is None:         # an iCE40 (24 MHz) can do without it
            register_stored_row = not is_ice40(platform)
        if register_stored_row:
            m.submodules.storage = storage = memory.Memory(
                shape=self.row_layout, depth=cfg.acc_depth, init=[])
            commit = storage.write_port()
            # Transparent, so a write a cycle after the one it adds to sees that one's commit.
            old = storage.read_port(transparent_for=[commit])
            commit_addr, commit_data, commit_en = commit.addr, commit.data, commit.en
            old_addr, old_en, old_data = old.addr, old.en, old.data
        else:
            # Stored a cycle after its write, a row is read again a cycle later at the
            # earliest (the rule above), so the memory needs no bypass.
            m.submodules.storage = storage = BlockRAM(width=self.row_layout.size,
                                                      depth=cfg.acc_depth)
            commit_addr, commit_data, commit_en = (storage.write_addr, storage.write_data,
                                                   storage.write_en)
            old_addr, old_en = storage.read_addr, storage.read_en
            old_data = data.View(self.row_layout, storage.read_data)
        if is_ice40(platform) or not register_stored_row:
            # The outside reader's copy without Yosys's bypass: the datapath never reads a
            # row in the cycle it is committed.
            m.submodules.read_copy = read_copy = BlockRAM(width=self.row_layout.size,
                                                          depth=cfg.acc_depth)
            m.d.comb += [read_copy.write_addr.eq(commit_addr),
                         read_copy.write_data.eq(commit_data),
                         read_copy.write_en.eq(commit_en)]
            read_port = read_copy.read_addr, read_copy.read_en, read_copy.read_data
        else:
            read = storage.read_port(transparent_for=[commit])
            read_port = read.addr, read.en, read.data

        write_ok = self.write_addr < cfg.acc_depth
        s1_valid, s2_valid = Signal(), Signal()
        m.d.sync += [s1_valid.eq(self.write_en & write_ok), s2_valid.eq(s1_valid)]
        if register_stored_row:
            # Stage 0 (cycle t): read the row the write may add to. Stage 1 (t + 1): the
            # stored row straight into a register. Stage 2 (t + 2): add and commit.
            m.d.comb += [old_addr.eq(self.write_addr), old_en.eq(self.write_en)]
            s1_addr = Signal.like(self.write_addr)
            s1_data, s1_accumulate = Signal(self.row_layout), Signal()
            s2_addr, s2_data = Signal.like(self.write_addr), Signal(self.row_layout)
            s2_accumulate, s2_old = Signal(), Signal(self.row_layout)
            m.d.sync += [s1_addr.eq(self.write_addr), s1_data.eq(self.write_data),
                         s1_accumulate.eq(self.write_accumulate),
                         s2_addr.eq(s1_addr), s2_data.eq(s1_data),
                         s2_accumulate.eq(s1_accumulate), s2_old.eq(old_data)]
            stored = [s2_old[lane] for lane in range(cfg.cols)]
            add_valid, add_addr, add_data, add_accumulate = s2_valid, s2_addr, s2_data, \
                s2_accumulate
        else:
            # The row a write may add to is read a cycle ahead (``next_write_*``), so that
            # in cycle t the row is added as it leaves the memory and committed: the
            # written row needs no register.
            m.d.comb += [old_addr.eq(self.next_write_addr), old_en.eq(self.next_write_en)]
            stored = [old_data[lane] for lane in range(cfg.cols)]
            add_valid, add_addr, add_data, add_accumulate = (
                self.write_en & write_ok, self.write_addr, self.write_data,
                self.write_accumulate)

        # The last stage: add (saturating) or overwrite, and commit.
        new_row = Signal(self.row_layout)
        clipped = Signal(cfg.cols)
        for lane in range(cfg.cols):
            total, lane_clipped = saturate(stored[lane] + add_data[lane], cfg.acc_shape)
            m.d.comb += [
                new_row[lane].eq(Mux(add_accumulate, total, add_data[lane])),
                clipped[lane].eq(add_accumulate & lane_clipped),
            ]
        overflow = add_valid & clipped.any()
        if register_stored_row:
            m.d.comb += self.overflow.eq(overflow)
        else:                                           # shown in cycle t + 2 all the same
            overflow_late = Signal()
            m.d.sync += [overflow_late.eq(overflow), self.overflow.eq(overflow_late)]
        m.d.comb += [
            commit_addr.eq(add_addr),
            commit_data.eq(new_row),
            commit_en.eq(add_valid),
            self.write_pending.eq(s1_valid | s2_valid),
        ]

        read_data, read_bad = bounded_read(m, *read_port, addr=self.read_addr, en=self.read_en,
                                           depth=cfg.acc_depth)
        m.d.comb += self.read_data.eq(read_data)
        m.d.sync += self.range_error.eq(read_bad | (self.write_en & ~write_ok))
        return m

