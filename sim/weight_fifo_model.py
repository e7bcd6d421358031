"""Golden model of the Weight FIFO."""

from collections import deque

__all__ = ["WeightFIFOModel"]


class WeightFIFOModel:
    """A bounded queue of weight rows: what goes in comes out once, in order."""

    def __init__(self, cfg):
        self.depth = cfg.weight_fifo_depth
        self._rows = deque()

    def __len__(self):
        return len(self._rows)

    @property
    def full(self):
        return len(self._rows) == self.depth

    def push(self, row):
        if self.full:
            raise OverflowError(f"Weight FIFO full ({self.depth} rows)")
        self._rows.append(tuple(int(v) for v in row))

    def pop(self):
        if not self._rows:
            raise IndexError("Weight FIFO empty")
        return self._rows.popleft()
