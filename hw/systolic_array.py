"""A rows x cols grid of processing elements, weight-stationary."""

from amaranth.hdl import Module, signed
from amaranth.utils import ceil_log2
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .delay_line import delayed
from .dual_multiplier import DualMultiplier, uses_sb_mac16
from .pe import SharedMultiplierCell, processing_element

__all__ = ["SystolicArray", "SharedDSPSystolicArray", "systolic_array"]


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

    Partial sums are only as wide as they must be (``2 * operand_width + ceil(log2(i + 1))``
    bits below row ``i``). Each cell has a multiplier of its own
    (:func:`~tpuer.hw.pe.processing_element` picks its form by ``cfg.multiply_latency``);
    on an iCE40 UltraPlus the cells share DSPs instead (:class:`SharedDSPSystolicArray`;
    :func:`systolic_array` picks).

    Latency: an activation entering lane ``i`` in cycle ``t`` is multiplied in column ``j``
    in cycle ``t + j`` and its product summed ``cfg.multiply_latency`` cycles later; the
    sum of a vector whose lane 0 entered in cycle ``t`` leaves column ``j`` in cycle
    ``t + rows + j + multiply_latency`` (``psum_out`` is a register output). With
    ``multiply_latency`` 2 each cell's operands are registered as well as its product (on
    an ECP5 in the MULT18X18D's own registers); with 3 the product once more, in the
    fabric.

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

    def _cell_accumulator_shape(self, i):
        """The partial sum leaving row ``i`` holds ``i + 1`` products: no wider than it
        must be."""
        return signed(2 * self._cfg.operand_width + ceil_log2(i + 1))

    def _cells(self):
        """The grid of processing elements, each with a multiplier of its own."""
        cfg = self._cfg
        return [[processing_element(operand_shape=cfg.operand_shape,
                                    acc_shape=self._cell_accumulator_shape(i),
                                    multiply_latency=cfg.multiply_latency)
                 for j in range(cfg.cols)] for i in range(cfg.rows)]

    def _share_multipliers(self, m, pes):
        """Nothing to share: each cell multiplies on its own."""

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        pes = self._cells()
        for i, row in enumerate(pes):
            for j, pe in enumerate(row):
                m.submodules[f"pe_{i}_{j}"] = pe
        self._share_multipliers(m, pes)

        # Column j sees the weight bus j cycles late.
        for j in range(cfg.cols):
            weight = delayed(m, self.weight_row[j], j, name=f"weight_c{j}", reset_less=True)[-1]
            index = delayed(m, self.weight_index, j, name=f"weight_index_c{j}",
                            reset_less=True)[-1]
            valid = delayed(m, self.weight_valid, j, name=f"weight_valid_c{j}")[-1]
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
                    m.d.comb += pe.psum_in.eq(0)
                else:
                    m.d.comb += pe.psum_in.eq(pes[i - 1][j].psum_out)
        for j in range(cfg.cols):
            m.d.comb += self.psum_out[j].eq(pes[cfg.rows - 1][j].psum_out)
        return m


class SharedDSPSystolicArray(SystolicArray):
    """A :class:`SystolicArray` for the iCE40 UltraPlus, whose cells share its SB_MAC16 DSPs
    two to a block (:class:`~tpuer.hw.dual_multiplier.DualMultiplier`), so that a 4 x 4
    array needs its 8 DSPs. Two cells of one anti-diagonal, which switch weights in the
    same cycle, keep their active weights in the DSP's B register, and the cells of the top
    two rows keep their partial sums in the DSP's accumulator registers (17 bits at most:
    see :class:`~tpuer.hw.pe.SharedMultiplierCell`).

    Latency: as :class:`SystolicArray`'s with ``cfg.multiply_latency`` 1, the only one it
    takes (the SB_MAC16's products come a cycle after its operands).
    """

    def __init__(self, cfg):
        if cfg.multiply_latency != 1:
            raise ValueError(f"the iCE40 UltraPlus's cells share SB_MAC16 blocks, whose "
                             f"products come a cycle after the operands: multiply_latency "
                             f"must be 1 there, not {cfg.multiply_latency}")
        super().__init__(cfg)
        self._pairs, self._single = self._dsp_pairs()
        # The DSP's 16-bit adders hold the partial sums of the top two rows.
        self._summed = {(i, j) for i in range(min(cfg.rows, 2)) for j in range(cfg.cols)}

    def _dsp_pairs(self):
        """The cells that share a DSP: ``(pairs, single)``. ``pairs`` are two cells of one
        anti-diagonal (``i + j`` equal: a switch flag reaches both in the same cycle); the
        cells left over, one per odd diagonal, are paired in ``single`` (the last alone
        when their count is odd)."""
        cfg = self._cfg
        pairs, rest = [], []
        for diagonal in range(cfg.rows + cfg.cols - 1):
            cells = [(i, diagonal - i) for i in range(cfg.rows) if 0 <= diagonal - i < cfg.cols]
            pairs += [tuple(cells[k:k + 2]) for k in range(0, len(cells) - 1, 2)]
            if len(cells) % 2:
                rest.append(cells[-1])
        single = [tuple(rest[k:k + 2]) for k in range(0, len(rest), 2)]
        return pairs, single

    def _cells(self):
        cfg = self._cfg
        outside = {cell for pair in self._pairs for cell in pair}
        return [[SharedMultiplierCell(operand_shape=cfg.operand_shape,
                                      acc_shape=self._cell_accumulator_shape(i),
                                      active_outside=(i, j) in outside,
                                      sum_outside=(i, j) in self._summed)
                 for j in range(cfg.cols)] for i in range(cfg.rows)]

    def _share_multipliers(self, m, pes):
        """A DualMultiplier for each pair of cells: with the active weights in its B
        register for two cells of one anti-diagonal (their switch flag loads it)."""
        for k, (pair, same_diagonal) in enumerate([(p, True) for p in self._pairs] +
                                                  [(p, False) for p in self._single]):
            m.submodules[f"dsp_{k}"] = dsp = DualMultiplier(
                self._cfg.operand_shape, registered_b=same_diagonal,
                summed=[half for cell, half in zip(pair, ("high", "low"))
                        if cell in self._summed])
            for (i, j), half in zip(pair, ("high", "low")):
                pe = pes[i][j]
                m.d.comb += [getattr(dsp, f"{half}_a").eq(pe.factor_act),
                             getattr(dsp, f"{half}_b").eq(pe.factor_weight),
                             pe.product.eq(getattr(dsp, half))]
                if (i, j) in self._summed:
                    m.d.comb += getattr(dsp, f"{half}_addend").eq(pe.addend)
            if same_diagonal:
                i, j = pair[0]
                m.d.comb += dsp.load_b.eq(pes[i][j].switch_in)
            elif len(pair) == 1:        # an odd cell count: the DSP's other half idles
                m.d.comb += [dsp.low_a.eq(0), dsp.low_b.eq(0)]


def systolic_array(cfg, platform):
    """The systolic array for ``platform``: :class:`SharedDSPSystolicArray` where the
    products go into SB_MAC16 blocks (an iCE40 UltraPlus, operands of 8 bits or fewer),
    else :class:`SystolicArray`."""
    shared = uses_sb_mac16(platform, cfg.operand_shape)
    return (SharedDSPSystolicArray if shared else SystolicArray)(cfg)
