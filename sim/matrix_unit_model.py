"""Transaction-level golden model of the matrix unit (Weight FIFO + systolic array)."""

from collections import deque

import numpy as np

from .numerics import check_range

__all__ = ["MatrixUnitModel"]


class MatrixUnitModel:
    """What :class:`tpuer.hw.MatrixUnit` computes, one transaction at a time.

    Weight rows are queued in order; every ``cfg.rows`` of them make a tile. A vector with
    ``new_tile`` set first makes the next queued tile active. Each vector ``x`` gives
    ``x @ active_tile`` exactly (the configuration guarantees no overflow). Before any
    switch, the active tile is all zeros, as after reset.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        self._rows = deque()
        self.active = np.zeros((cfg.rows, cfg.cols), dtype=np.int64)

    @property
    def queued_rows(self):
        return len(self._rows)

    def push_weight_row(self, row):
        cfg = self.cfg
        row = check_range("weight row", row, cfg.operand_min, cfg.operand_max)
        if row.shape != (cfg.cols,):
            raise ValueError(f"a weight row has {cfg.cols} weights, not shape {row.shape}")
        self._rows.append(row)

    def push_tile(self, tile):
        tile = np.asarray(tile)
        if tile.shape != (self.cfg.rows, self.cfg.cols):
            raise ValueError(f"a weight tile has shape {(self.cfg.rows, self.cfg.cols)}, "
                             f"not {tile.shape}")
        for row in tile:
            self.push_weight_row(row)

    def vector(self, x, new_tile=False):
        """Multiply one input vector; returns the ``cfg.cols`` accumulator words."""
        cfg = self.cfg
        x = check_range("input vector", x, cfg.operand_min, cfg.operand_max)
        if x.shape != (cfg.rows,):
            raise ValueError(f"an input vector has {cfg.rows} operands, not shape {x.shape}")
        if new_tile:
            if len(self._rows) < cfg.rows:
                raise RuntimeError("new_tile with no complete weight tile queued")
            self.active = np.array([self._rows.popleft() for _ in range(cfg.rows)])
        return x @ self.active

    def matmul(self, a, new_tile=True):
        """All rows of ``a``, the first one switching tiles when ``new_tile``."""
        return np.array([self.vector(x, new_tile and k == 0) for k, x in enumerate(a)])
