"""A rows x cols grid of processing elements, weight-stationary."""

from amaranth.hdl import Const, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .pe import ProcessingElement

__all__ = ["SystolicArray"]


class SystolicArray(wiring.Component):
    """The matrix multiply unit proper: ``cfg.rows x cfg.cols`` processing elements.

    Activations enter on the left, one lane per row, already skewed (lane ``i`` one cycle
    behind lane ``i - 1``); partial sums start at zero at the top and leave at the bottom,
    skewed the same way (column ``j`` one cycle behind column ``j - 1``). Cell ``(i, j)``
    multiplies by weight ``W[i][j]``, so an input vector ``x`` gives ``x @ W``.

    Weight rows are written into the shadow weights through ``weight_row``,
    ``weight_index`` (which row of the tile) and ``weight_valid``. The array delays the write
    of column ``j`` by ``j`` cycles, the same skew the activations have, so a write presented
    in cycle ``t`` reaches row ``i`` of every column in the cycle that a switch flag entering
    lane ``i`` in cycle ``t`` reaches it.

    Latency: an activation entering lane ``i`` in cycle ``t`` is summed into column ``j`` in
    cycle ``t + j``; the sum of a vector whose lane 0 entered in cycle ``t`` leaves column
    ``j`` in cycle ``t + rows + j`` (``psum_out`` is a register output).

    Members
    -------
    act_in : In(ArrayLayout(operand, rows))
        Skewed activation lanes.
    switch_in : In(rows)
        Skewed "use the shadow weights after this cycle" flags, one per lane.
    weight_row, weight_index, weight_valid : In
        One row of the next weight tile.
    psum_out : Out(ArrayLayout(acc, cols))
        Skewed column sums.
    """

    def __init__(self, cfg):
        self._cfg = cfg
        super().__init__({
            "act_in": In(data.ArrayLayout(cfg.operand_shape, cfg.rows)),
            "switch_in": In(cfg.rows),
            "weight_row": In(data.ArrayLayout(cfg.operand_shape, cfg.cols)),
            "weight_index": In(range(cfg.rows)),
            "weight_valid": In(1),
            "psum_out": Out(data.ArrayLayout(cfg.acc_shape, cfg.cols)),
        })

    @property
    def config(self):
        return self._cfg

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()

        pes = [[ProcessingElement(operand_shape=cfg.operand_shape, acc_shape=cfg.acc_shape)
                for _ in range(cfg.cols)] for _ in range(cfg.rows)]
        for i, row in enumerate(pes):
            for j, pe in enumerate(row):
                m.submodules[f"pe_{i}_{j}"] = pe

        # Column j sees the weight bus j cycles late.
        for j in range(cfg.cols):
            weight, index, valid = self.weight_row[j], self.weight_index, self.weight_valid
            for hop in range(j):
                next_weight = Signal.like(weight, name=f"weight_c{j}_d{hop + 1}")
                next_index = Signal.like(index, name=f"weight_index_c{j}_d{hop + 1}")
                next_valid = Signal(name=f"weight_valid_c{j}_d{hop + 1}")
                m.d.sync += [next_weight.eq(weight), next_index.eq(index),
                             next_valid.eq(valid)]
                weight, index, valid = next_weight, next_index, next_valid
            for i in range(cfg.rows):
                m.d.comb += [
                    pes[i][j].weight_in.eq(weight),
                    pes[i][j].weight_load.eq(valid & (index == i)),
                ]

        for i in range(cfg.rows):
            for j in range(cfg.cols):
                pe = pes[i][j]
                if j == 0:
                    m.d.comb += [pe.act_in.eq(self.act_in[i]),
                                 pe.switch_in.eq(self.switch_in[i])]
                else:
                    left = pes[i][j - 1]
                    m.d.comb += [pe.act_in.eq(left.act_out), pe.switch_in.eq(left.switch_out)]
                if i == 0:
                    m.d.comb += pe.psum_in.eq(Const(0, cfg.acc_shape))
                else:
                    m.d.comb += pe.psum_in.eq(pes[i - 1][j].psum_out)
        for j in range(cfg.cols):
            m.d.comb += self.psum_out[j].eq(pes[cfg.rows - 1][j].psum_out)
        return m
