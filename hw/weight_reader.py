"""The weight memory and its reader: whole tiles out to the Weight FIFO on request."""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..isa import FIELD_BITS
from .block_ram import BlockRAM

__all__ = ["WeightReader", "WeightWrite"]


class WeightWrite(wiring.Signature):
    """The host's write port into the weight memory, as the host drives it: row ``data``
    into row ``addr`` (``tile * rows + row``) while ``en``; ``armed`` is high in every cycle
    in which ``en`` may be high, from registers."""

    def __init__(self, cfg):
        super().__init__({"addr": Out(cfg.weight_addr_width),
                          "data": Out(data.ArrayLayout(cfg.operand_shape, cfg.cols)),
                          "en": Out(1), "armed": Out(1)})


class WeightReader(wiring.Component):
    """On-chip weight memory of ``cfg.weight_tiles`` tiles, and the engine that streams
    requested tiles out, row 0 of each tile first, one row per cycle while ``weights`` takes
    them.

    Members
    -------
    write : In(WeightWrite)
        The host's write port. ``armed`` lets the reader keep clear of the write without
        waiting for the late ``en``.
    request : In(stream.Signature(StructLayout({"tile", "tiles"})))
        Read ``tiles`` tiles from ``tile`` on; taken whenever the previous request has
        issued its last read. The requester checks the range.
    weights : Out(stream.Signature(ArrayLayout(operand, cols)))
        The rows, in order.
    busy : Out(1)
        A requested row has not yet left on ``weights``.

    The memory is block RAM without a bypass (:class:`~tpuer.hw.block_ram.BlockRAM`): the
    reader reads no row in a cycle in which the host may write one (``write.armed``) but
    waits, so it reads a row's new value and never the undefined one of a read meeting a
    write. (It waits whatever row the host writes: comparing the rows would put a
    comparator before the memory's read enable, and the host's rows come many cycles
    apart.)

    Latency: the first row of a request is offered 1 cycle after the request is taken
    (later while the host may write a row).
    """

    def __init__(self, cfg):
        self._cfg = cfg
        self.row_layout = data.ArrayLayout(cfg.operand_shape, cfg.cols)
        self.request_layout = data.StructLayout({"tile": FIELD_BITS, "tiles": FIELD_BITS})
        super().__init__({
            "write": In(WeightWrite(cfg)),
            "request": In(stream.Signature(self.request_layout)),
            "weights": Out(stream.Signature(self.row_layout)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        m.submodules.storage = storage = BlockRAM(width=self.row_layout.size,
                                                  depth=cfg.weight_memory_depth)
        m.d.comb += [storage.write_addr.eq(self.write.addr),
                     storage.write_data.eq(self.write.data),
                     storage.write_en.eq(self.write.en)]

        next_addr = Signal(range(cfg.weight_memory_depth + 1))
        remaining = Signal(range(cfg.weight_memory_depth + 1))
        idle = Signal(init=1)       # remaining == 0, kept in a register for ``request.ready``
        have_row = Signal()         # read_data holds a row not yet taken
        # No row is read in a cycle in which the host may write one (the block RAM's
        # output would be undefined if it is the same): the read waits, and the row
        # already read is kept.
        hazard = self.write.armed
        taken = have_row & self.weights.ready
        advance = (~have_row | self.weights.ready) & ~hazard
        m.d.comb += [
            self.weights.valid.eq(have_row),
            self.weights.payload.eq(storage.read_data),
            storage.read_addr.eq(next_addr),
            storage.read_en.eq(advance & ~idle),
            self.request.ready.eq(idle),
            self.busy.eq(~idle | have_row),
        ]
        with m.If(taken):
            m.d.sync += have_row.eq(0)
        with m.If(advance):
            m.d.sync += have_row.eq(~idle)
            with m.If(~idle):
                m.d.sync += [next_addr.eq(next_addr + 1), remaining.eq(remaining - 1),
                             idle.eq(remaining == 1)]
        with m.If(self.request.valid & self.request.ready):
            m.d.sync += [next_addr.eq(self.request.payload.tile * cfg.rows),
                         remaining.eq(self.request.payload.tiles * cfg.rows),
                         idle.eq(self.request.payload.tiles == 0)]
        return m
