"""The Unified Buffer: on-chip memory of int8 activation rows."""

from amaranth.hdl import Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .block_ram import BlockRAM
from .memory_ports import bounded_read

__all__ = ["UnifiedBuffer", "RegisteredUnifiedBuffer", "unified_buffer"]


class UnifiedBuffer(wiring.Component):
    """``cfg.ub_depth`` rows of ``cfg.ub_lanes`` operands, one read and one write port, so the
    matrix unit can be fed while activated results are written back.

    Writes take a per-lane mask, so a result vector narrower than a row (``cols <
    ub_lanes``) leaves the other lanes alone. An address at or past ``cfg.ub_depth`` is never
    written; ``range_error`` goes high for one cycle when either port is given one, and such
    a read returns zeros.

    Members
    -------
    read_addr, read_en : In
        Read request.
    read_data : Out(ArrayLayout(operand, ub_lanes))
        The row requested in the cycle before (held until the next request's row).
    write_addr, write_data, write_mask, write_en : In
        Write request; lane ``k`` is written when bit ``k`` of ``write_mask`` is set.
    range_error : Out(1)
        An out-of-range address was presented with its enable in the previous cycle.

    Latency: a read returns data a cycle after its request, for ``cfg.memory_read_latency``
    1. A write requested in cycle ``t`` is seen by a read requested in cycle ``t + 1`` or
    later; a read of the row being written in the same cycle returns the old row, or on an
    iCE40 an undefined one (the memory is block RAM without Yosys's bypass there; the
    sequencer never lets the two meet).
    """

    #: The ``cfg.memory_read_latency`` this form serves.
    READ_LATENCY = 1
    #: Whether the word read goes through the block RAM's own output register.
    _registered_output = False

    def __init__(self, cfg):
        if cfg.memory_read_latency != self.READ_LATENCY:
            raise ValueError(f"a {type(self).__name__} reads in {self.READ_LATENCY} "
                             f"cycle(s), not the configuration's {cfg.memory_read_latency}: "
                             f"unified_buffer(cfg) picks the form")
        self._cfg = cfg
        self.row_layout = data.ArrayLayout(cfg.operand_shape, cfg.ub_lanes)
        super().__init__({
            "read_addr": In(cfg.ub_addr_width),
            "read_en": In(1),
            "read_data": Out(self.row_layout),
            "write_addr": In(cfg.ub_addr_width),
            "write_data": In(self.row_layout),
            "write_mask": In(cfg.ub_lanes),
            "write_en": In(1),
            "range_error": Out(1),
        })

    @property
    def depth(self):
        return self._cfg.ub_depth

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        m.submodules.storage = storage = self._storage()
        read_data, read_bad = self._read(m, storage)
        write_ok = self.write_addr < cfg.ub_depth
        m.d.comb += [
            self.read_data.eq(read_data),
            storage.write_addr.eq(self.write_addr),
            storage.write_data.eq(self.write_data),
            storage.write_en.eq(self.write_mask &
                                (self.write_en & write_ok).replicate(cfg.ub_lanes)),
        ]
        m.d.sync += self.range_error.eq(read_bad | (self.write_en & ~write_ok))
        return m

    def _storage(self):
        cfg = self._cfg
        return BlockRAM(width=self.row_layout.size, depth=cfg.ub_depth,
                        granularity=cfg.operand_width,
                        registered_output=self._registered_output)

    def _read(self, m, storage):
        return bounded_read(m, storage.read_addr, storage.read_en, storage.read_data,
                            addr=self.read_addr, en=self.read_en, depth=self._cfg.ub_depth)


class RegisteredUnifiedBuffer(UnifiedBuffer):
    """A :class:`UnifiedBuffer` whose read goes through the block RAM's own output register
    (see :class:`~tpuer.hw.block_ram.BlockRAM`) before any logic, for fast clocks.

    Latency: a read returns data 2 cycles after its request, for
    ``cfg.memory_read_latency`` 2; a read of the row being written in the same cycle
    returns an undefined row (the sequencer never lets the two meet). Writes as
    :class:`UnifiedBuffer`'s.
    """

    READ_LATENCY = 2
    _registered_output = True

    def _read(self, m, storage):
        return bounded_read(m, storage.read_addr, storage.read_en, storage.read_data,
                            addr=self.read_addr, en=self.read_en, depth=self._cfg.ub_depth,
                            latency=2, port_output_en=storage.output_en)


def unified_buffer(cfg):
    """The Unified Buffer ``cfg`` asks for: :class:`RegisteredUnifiedBuffer` for
    ``cfg.memory_read_latency`` 2, else :class:`UnifiedBuffer`."""
    kind = RegisteredUnifiedBuffer if cfg.memory_read_latency == 2 else UnifiedBuffer
    return kind(cfg)
