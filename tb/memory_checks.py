"""Cycle-by-cycle checks of a memory block with one read and one write port."""

from .harness import TestbenchError, run_cycles

__all__ = ["MemoryPorts", "check_memory"]


class MemoryPorts:
    """Drives one read and one write per cycle from a schedule and records what the block
    returns one cycle later (its read latency)."""

    def __init__(self, schedule, write_fields, flags):
        self.schedule = schedule            # list of (read or None, write or None)
        self.write_fields = write_fields    # {port suffix: (key, encode)}
        self.flags = flags                  # output flags sampled each cycle
        self.index = 0
        self.samples = []

    @property
    def done(self):
        return self.index > len(self.schedule)

    def drive(self, io):
        read, write = self.schedule[self.index] if self.index < len(self.schedule) else (None, None)
        io.set("read_en", int(read is not None))
        if read is not None:
            io.set("read_addr", read)
        io.set("write_en", int(write is not None))
        if write is not None:
            io.set("write_addr", write["addr"])
            for suffix, (key, encode) in self.write_fields.items():
                io.set(f"write_{suffix}", encode(write[key]))

    def sample(self, io):
        self.samples.append({name: io.get(name) for name in ("read_data", *self.flags)})
        self.index += 1


async def check_memory(io, ports, expected, decode, label):
    """Run ``ports`` and compare, for each cycle ``t`` with a read, the data sampled in cycle
    ``t + 1`` and the flags, with ``expected[t] = (data or None, {flag: value})``."""
    await run_cycles(io, [ports], until=lambda: ports.done,
                     max_cycles=len(ports.schedule) + 4)
    for cycle, (want_data, want_flags) in enumerate(expected):
        got = ports.samples[cycle + 1]
        if want_data is not None:
            data = decode(got["read_data"])
            if list(data) != list(want_data):
                raise TestbenchError(f"[{io.simulator} {label}] cycle {cycle}: read "
                                     f"{list(data)}, expected {list(want_data)}")
        for flag, value in want_flags.items():
            if got[flag] != value:
                raise TestbenchError(f"[{io.simulator} {label}] cycle {cycle}: {flag} is "
                                     f"{got[flag]}, expected {value}")
