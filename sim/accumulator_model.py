"""Golden model of the accumulator memory."""

import numpy as np

from .numerics import check_range, saturate

__all__ = ["AccumulatorModel"]


class AccumulatorModel:
    """Rows of ``cfg.cols`` accumulator words. An accumulating write adds with saturation
    at the accumulator width; ``write`` returns whether any lane saturated. Out-of-range
    writes change nothing; out-of-range reads return zeros."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.rows = np.zeros((cfg.acc_depth, cfg.cols), dtype=np.int64)

    def in_range(self, addr):
        return 0 <= addr < self.cfg.acc_depth

    def write(self, addr, row, accumulate=False):
        cfg = self.cfg
        row = check_range("accumulator row", row, cfg.acc_min, cfg.acc_max)
        if not self.in_range(addr):
            return False
        if not accumulate:
            self.rows[addr] = row
            return False
        exact = self.rows[addr] + row
        self.rows[addr] = saturate(exact, cfg.acc_width)
        return bool(np.any(self.rows[addr] != exact))

    def read(self, addr):
        if self.in_range(addr):
            return self.rows[addr].copy()
        return np.zeros(self.cfg.cols, dtype=np.int64)

    def write_block(self, addr, rows, accumulate=False):
        """:meth:`write` of consecutive rows from ``addr``, all inside the memory."""
        cfg = self.cfg
        rows = check_range("accumulator row", rows, cfg.acc_min, cfg.acc_max)
        window = self.rows[addr:addr + len(rows)]
        if len(window) != len(rows):
            raise IndexError(f"accumulator rows {addr}..{addr + len(rows) - 1} outside "
                             f"{cfg.acc_depth}")
        window[:] = saturate(window + rows, cfg.acc_width) if accumulate else rows

    def read_block(self, addr, count):
        """Rows ``addr ... addr + count - 1``, all inside the memory (a copy)."""
        return self.rows[addr:addr + count].copy()
