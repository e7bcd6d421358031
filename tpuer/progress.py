"""A one-line progress bar on standard error, for work that takes a while."""

import sys
import time

__all__ = ["ProgressBar"]


class ProgressBar:
    """``label [#####.....] done/total  12.3 s`` on one line of ``stream`` (standard
    error), redrawn by :meth:`update` at most ten times a second and at the end."""

    def __init__(self, label, total, width=30, stream=None):
        self.label, self.total, self.width = label, max(1, total), width
        self.stream = stream or sys.stderr
        self.started = time.perf_counter()
        self._drawn = None
        self.update(0)

    def update(self, done):
        now = time.perf_counter()
        if done < self.total and self._drawn is not None and now - self._drawn < 0.1:
            return
        self._drawn = now
        filled = int(self.width * min(done, self.total) / self.total)
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] "
                          f"{done}/{self.total} {now - self.started:5.1f} s")
        self.stream.flush()

    def close(self):
        self.stream.write("\n")
        self.stream.flush()
