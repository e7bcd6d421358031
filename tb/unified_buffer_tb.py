"""Testbenches of the Unified Buffer against :class:`UnifiedBufferModel`."""

import numpy as np

from ..hw.unified_buffer import unified_buffer
from ..sim.unified_buffer_model import UnifiedBufferModel
from .harness import reference_instance
from .memory_checks import MemoryPorts, check_memory, clearing_writes
from .packing import Codec

__all__ = ["BENCHES"]


def _schedule(cfg, rng, cycles, *, values, hot_addresses=None):
    top = 1 << cfg.ub_addr_width        # every address the port can carry, some out of range
    schedule = []
    for _ in range(cycles):
        def address():
            if hot_addresses is not None and rng.random() < 0.7:
                return int(rng.choice(hot_addresses))
            return int(rng.integers(0, top))
        read = address() if rng.random() < 0.7 else None
        write = None
        if rng.random() < 0.7:
            write = {"addr": address(), "data": values(), "mask": rng.random(cfg.ub_lanes) < 0.7}
        schedule.append((read, write))
    return schedule


async def _run(io, cfg, schedule, read_meets_write="old"):
    """``read_meets_write``: what a read of the row written in the same cycle returns,
    ``"old"`` (checked) or ``"undefined"`` (the block RAM without a bypass; not checked)."""
    dut = reference_instance(unified_buffer(cfg))
    zeros = np.zeros(cfg.ub_lanes, dtype=np.int64)
    everything = np.ones(cfg.ub_lanes, dtype=bool)
    schedule = clearing_writes(cfg.ub_depth, lambda addr: {
        "addr": addr, "data": zeros, "mask": everything}) + schedule
    model = UnifiedBufferModel(cfg)
    expected = []
    for read, write in schedule:
        bad = (read is not None and not model.in_range(read)) or \
              (write is not None and not model.in_range(write["addr"]))
        unchecked = (read is None or (read_meets_write == "undefined" and write is not None
                                      and write["addr"] == read))
        expected.append((None if unchecked else model.read(read), {"range_error": int(bad)}))
        if write is not None:
            model.write(write["addr"], write["data"], write["mask"])
    fields = {"data": ("data", Codec(dut.row_layout).encode),
              "mask": ("mask", lambda mask: sum(1 << lane for lane, on in enumerate(mask) if on))}
    ports = MemoryPorts(schedule, fields, flags=("range_error",),
                        read_latency=cfg.memory_read_latency)
    await check_memory(io, ports, expected, Codec(dut.row_layout).decode, f"UB {cfg.name}")


async def bench_random(io, cfg, rng, read_meets_write="old"):
    """Random reads and masked writes, including addresses past the end."""
    lo, hi = cfg.operand_min, cfg.operand_max + 1
    values = lambda: rng.integers(lo, hi, cfg.ub_lanes)
    await _run(io, cfg, _schedule(cfg, rng, 400, values=values), read_meets_write)


async def bench_edges(io, cfg, rng, read_meets_write="old"):
    """Rows of all -128 and all 127 on a few hot addresses: read-after-write in the next
    cycle and writes that only change some lanes."""
    rows = [np.full(cfg.ub_lanes, cfg.operand_min), np.full(cfg.ub_lanes, cfg.operand_max)]
    hot = [0, 1, cfg.ub_depth - 1]
    await _run(io, cfg, _schedule(cfg, rng, 200, values=lambda: rows[int(rng.integers(2))],
                                  hot_addresses=hot), read_meets_write)


BENCHES = {"random": bench_random, "edges": bench_edges}
