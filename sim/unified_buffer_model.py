"""Golden model of the Unified Buffer."""

import numpy as np

from .numerics import check_range

__all__ = ["UnifiedBufferModel"]


class UnifiedBufferModel:
    """Rows of ``cfg.ub_lanes`` operands; masked writes; out-of-range accesses are errors
    that change nothing (a read of one returns zeros), as in the RTL."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.rows = np.zeros((cfg.ub_depth, cfg.ub_lanes), dtype=np.int64)

    def in_range(self, addr):
        return 0 <= addr < self.cfg.ub_depth

    def write(self, addr, row, mask=None):
        cfg = self.cfg
        row = check_range("UB row", row, cfg.operand_min, cfg.operand_max)
        mask = np.ones(cfg.ub_lanes, dtype=bool) if mask is None else np.asarray(mask, bool)
        if self.in_range(addr):
            self.rows[addr, mask] = row[mask]
            return True
        return False

    def read(self, addr):
        if self.in_range(addr):
            return self.rows[addr].copy()
        return np.zeros(self.cfg.ub_lanes, dtype=np.int64)

    def write_block(self, addr, rows, mask=None):
        """:meth:`write` of consecutive int64 rows from ``addr``, all inside the buffer,
        whose values the caller has checked."""
        cfg = self.cfg
        window = self.rows[addr:addr + len(rows)]
        if len(window) != len(rows):
            raise IndexError(f"UB rows {addr}..{addr + len(rows) - 1} outside {cfg.ub_depth}")
        if mask is None:
            window[:] = rows
        else:
            window[:, mask] = rows[:, mask]

    def read_block(self, addr, count):
        """Rows ``addr ... addr + count - 1``, all inside the buffer (a copy)."""
        return self.rows[addr:addr + count].copy()
