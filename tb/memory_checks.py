"""Cycle-by-cycle checks of a memory block with one read and one write port."""

from .harness import TestbenchError, run_cycles

__all__ = ["MemoryPorts", "check_memory", "clearing_writes"]


def clearing_writes(depth, write):
    """A schedule prefix that writes ``write(addr)`` to every row, so that a bench does not
    depend on what an earlier bench of the same simulation left in the memory."""
    return [(None, write(addr)) for addr in range(depth)]


class MemoryPorts:
    """Drives one read and one write per cycle from a schedule and records what the block
    returns: its flags every cycle, its read data ``read_latency`` cycles after a read."""

    def __init__(self, schedule, write_fields, flags, *, lookahead=False, skew=None,
                 read_latency=1):
        self.schedule = schedule            # list of (read or None, write or None)
        self.write_fields = write_fields    # {port suffix: (key, encode)}
        self.flags = flags                  # output flags sampled each cycle
        self.lookahead = lookahead          # drive next_write_en/addr: the next cycle's write
        # (lanes, {port suffix: (bits per lane, whether the encoded value has a part per
        # lane)}): every write port has a lane each, and lane j of a write comes
        # lanes - 1 - j cycles before its last lane, whose cycle the schedule gives.
        self.skew = skew
        self.read_latency = read_latency
        self.index = 0
        self.samples = []

    def _write(self, index):
        return self.schedule[index][1] if 0 <= index < len(self.schedule) else None

    def _drive_skewed(self, io, ports, at):
        """Each lane's part of the write whose last lane comes ``lanes - 1 - j`` cycles
        after ``at``, on ports ``{suffix: port name}``."""
        lanes, widths = self.skew
        values = {suffix: 0 for suffix in ports}
        for j in range(lanes):
            write = self._write(at + lanes - 1 - j)
            if write is None:
                continue
            values["en"] |= 1 << j
            for suffix in ports:
                if suffix == "en":
                    continue
                bits, per_lane = widths[suffix]
                key, encode = (("addr", int) if suffix == "addr"
                               else self.write_fields[suffix])
                value = int(encode(write[key]))
                part = (value >> (j * bits) if per_lane else value) & ((1 << bits) - 1)
                values[suffix] |= part << (j * bits)
        for suffix, port in ports.items():
            io.set(port, values[suffix])

    @property
    def done(self):
        return self.index >= len(self.schedule) + self.read_latency

    def drive(self, io):
        read, write = self.schedule[self.index] if self.index < len(self.schedule) else (None, None)
        io.set("read_en", int(read is not None))
        if read is not None:
            io.set("read_addr", read)
        if self.skew:
            self._drive_skewed(io, {"en": "write_en", "addr": "write_addr",
                                    **{suffix: f"write_{suffix}" for suffix in self.write_fields}},
                               self.index)
            if self.lookahead:
                self._drive_skewed(io, {"en": "next_write_en", "addr": "next_write_addr"},
                                   self.index + 1)
            return
        io.set("write_en", int(write is not None))
        if write is not None:
            io.set("write_addr", write["addr"])
            for suffix, (key, encode) in self.write_fields.items():
                io.set(f"write_{suffix}", encode(write[key]))
        if self.lookahead:
            following = self._write(self.index + 1)
            io.set("next_write_en", int(following is not None))
            if following is not None:
                io.set("next_write_addr", following["addr"])

    def sample(self, io):
        sample = {name: io.get(name) for name in self.flags}
        back = self.index - self.read_latency
        requested = self.schedule[back] if 0 <= back < len(self.schedule) else None
        if requested is not None and requested[0] is not None:
            # Only defined after a read; a read the bench does not check may give X, which
            # is an error only where it is checked.
            try:
                sample["read_data"] = io.get("read_data")
            except TestbenchError as undefined:
                sample["read_data"] = undefined
        self.samples.append(sample)
        self.index += 1


async def check_memory(io, ports, expected, decode, label):
    """Run ``ports`` and compare, for each cycle ``t`` with a read, the data sampled in cycle
    ``t + ports.read_latency``, and the flags sampled in cycle ``t + 1``, with
    ``expected[t] = (data or None, {flag: value})``."""
    await run_cycles(io, [ports], until=lambda: ports.done,
                     max_cycles=len(ports.schedule) + ports.read_latency + 3)
    for cycle, (want_data, want_flags) in enumerate(expected):
        got = ports.samples[cycle + 1]
        if want_data is not None:
            raw = ports.samples[cycle + ports.read_latency]["read_data"]
            if isinstance(raw, TestbenchError):
                raise TestbenchError(f"[{io.simulator} {label}] cycle {cycle}: {raw}")
            data = decode(raw)
            if [int(v) for v in data] != [int(v) for v in want_data]:
                raise TestbenchError(f"[{io.simulator} {label}] cycle {cycle}: read "
                                     f"{[int(v) for v in data]}, expected "
                                     f"{[int(v) for v in want_data]}")
        for flag, value in want_flags.items():
            if got[flag] != value:
                raise TestbenchError(f"[{io.simulator} {label}] cycle {cycle}: {flag} is "
                                     f"{got[flag]}, expected {value}")
