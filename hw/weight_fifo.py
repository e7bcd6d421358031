"""The Weight FIFO: weight rows staged on their way into the matrix unit."""

from amaranth.hdl import Module
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

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
        m.submodules.queue = queue = fifo.SyncFIFOBuffered(
            width=cfg.cols * cfg.operand_width, depth=cfg.weight_fifo_depth + 1)
        m.d.comb += [
            queue.w_data.eq(self.w.payload),
            queue.w_en.eq(self.w.valid),
            self.w.ready.eq(queue.w_rdy),
            self.r.payload.eq(queue.r_data),
            self.r.valid.eq(queue.r_rdy),
            queue.r_en.eq(self.r.ready),
            self.level.eq(queue.r_level),
        ]
        return m
