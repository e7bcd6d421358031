"""The Weight FIFO: weight rows staged on their way into the matrix unit."""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .arith import wrapped_increment
from .block_ram import BlockRAM

__all__ = ["WeightFIFO"]


class WeightFIFO(wiring.Component):
    """A first-in first-out queue of weight rows, ``cfg.weight_fifo_tiles`` whole tiles deep.

    One row (``cfg.cols`` weights) moves in per cycle when ``w.valid & w.ready`` and out
    when ``r.valid & r.ready``; rows are never dropped or repeated, whatever the
    back-pressure on either side. ``w.ready`` is high whenever fewer than
    ``cfg.weight_fifo_depth`` rows are held; the registered read side may hold one more.

    Members
    -------
    w : In(stream.Signature(ArrayLayout(operand, cols)))
        Rows in; ``w.ready`` is low only when the FIFO is full.
    r : Out(stream.Signature(ArrayLayout(operand, cols)))
        Rows out, in order.
    level : Out(range(depth + 2))
        Rows held.

    Latency: a row written in cycle ``t`` into an empty FIFO is offered on ``r`` in cycle
    ``t + 2`` (the read side is registered, so block RAM can hold the rows).
    """

    def __init__(self, cfg):
        self._cfg = cfg
        row = data.ArrayLayout(cfg.operand_shape, cfg.cols)
        super().__init__({
            "w": In(stream.Signature(row)),
            "r": Out(stream.Signature(row)),
            "level": Out(range(cfg.weight_fifo_depth + 2)),
        })

    @property
    def depth(self):
        """Rows always accepted (the registered read side may hold one more)."""
        return self._cfg.weight_fifo_depth

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        # Rows wait in block RAM; the head row is the one on the RAM's output (read_data,
        # which holds until the next read), so no register copies it. ``stored`` counts
        # the rows in the RAM that have not been read yet; a row read is on the output from
        # the next cycle on, until it is taken.
        depth = cfg.weight_fifo_depth
        m.submodules.rows = rows = BlockRAM(width=cfg.cols * cfg.operand_width, depth=depth)
        write_ptr = Signal(range(depth))
        read_ptr = Signal(range(depth))
        stored = Signal(range(depth + 1))
        head_valid = Signal()           # read_data holds a row not yet taken
        write = self.w.valid & self.w.ready
        read = (stored != 0) & (~head_valid | self.r.ready)
        m.d.comb += [
            self.w.ready.eq(stored != depth),
            rows.write_addr.eq(write_ptr),
            rows.write_data.eq(self.w.payload),
            rows.write_en.eq(write),
            rows.read_addr.eq(read_ptr),
            rows.read_en.eq(read),
            self.r.payload.eq(rows.read_data),
            self.r.valid.eq(head_valid),
            self.level.eq(stored + head_valid),
        ]
        with m.If(write):
            m.d.sync += write_ptr.eq(wrapped_increment(write_ptr, depth))
        with m.If(read):
            m.d.sync += read_ptr.eq(wrapped_increment(read_ptr, depth))
        m.d.sync += stored.eq(stored + write - read)
        with m.If(read):
            m.d.sync += head_valid.eq(1)
        with m.Elif(self.r.ready):
            m.d.sync += head_valid.eq(0)
        return m
