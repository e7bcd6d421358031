"""What a faulty serial line does to the bytes it carries, for the simulated boards
(:class:`~tpuer.sim.board_sim.SimulatedBoard` and
:class:`~tpuer.sim.model_board.ModelBoard`): per-byte rates of ``flip`` (a bit),
``drop``, ``duplicate`` and ``break_stop`` (a framing error, towards the board only);
``pause`` each board applies in its own time."""

__all__ = ["FAULTS", "LineFaults"]

FAULTS = ("flip", "drop", "duplicate", "break_stop", "pause")


class LineFaults:
    """One direction of the line (``name``: ``to_board`` or ``from_board``), drawing from
    ``rng`` at ``rates`` and counting each fault done in ``counts`` under
    ``<name>_<fault>``."""

    def __init__(self, rates, rng, counts, name):
        self.rates, self.rng, self.counts, self.name = rates, rng, counts, name

    def hit(self, fault):
        """Whether ``fault`` strikes now (counted if it does)."""
        if self.rng.random() < self.rates.get(fault, 0.0):
            key = f"{self.name}_{fault}"
            self.counts[key] = self.counts.get(key, 0) + 1
            return True
        return False

    def carry(self, byte):
        """The bytes that arrive for one byte sent: (byte, broken stop bit) pairs."""
        if self.hit("drop"):
            return []
        if self.hit("flip"):
            byte ^= 1 << self.rng.randrange(8)
        out = [(byte, self.name == "to_board" and self.hit("break_stop"))]
        if self.hit("duplicate"):
            out.append(out[0])
        return out
