"""Transaction-level golden model of the whole datapath, composed of the block models."""

import numpy as np

from .accumulator_model import AccumulatorModel
from .activation_model import requantize
from .matrix_unit_model import MatrixUnitModel
from .unified_buffer_model import UnifiedBufferModel

__all__ = ["DatapathModel"]


class DatapathModel:
    """What :class:`tpuer.hw.Datapath` does with each command, in order."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.ub = UnifiedBufferModel(cfg)
        self.mxu = MatrixUnitModel(cfg)
        self.acc = AccumulatorModel(cfg)

    def host_write(self, addr, row, mask=None):
        self.ub.write(addr, row, mask)

    def push_weight_row(self, row):
        self.mxu.push_weight_row(row)

    def matmul(self, ub_addr, acc_addr, accumulate=False, new_tile=False):
        """Returns whether the accumulation saturated."""
        x = self.ub.read(ub_addr)[:self.cfg.rows]
        return self.acc.write(acc_addr, self.mxu.vector(x, new_tile), accumulate)

    def activate(self, acc_addr, ub_addr, params):
        cfg = self.cfg
        row = np.zeros(cfg.ub_lanes, dtype=np.int64)
        row[:cfg.cols] = requantize(self.acc.read(acc_addr), params)
        self.ub.write(ub_addr, row, np.arange(cfg.ub_lanes) < cfg.cols)

    def host_read(self, addr):
        return self.ub.read(addr)

    def host_acc_read(self, addr):
        return self.acc.read(addr)
