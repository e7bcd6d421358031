"""Testbenches of the accumulator memory against :class:`AccumulatorModel`."""

import numpy as np

from ..hw.accumulators import AccumulatorMemory, SkewedAccumulatorMemory, add_spacing
from ..sim.accumulator_model import AccumulatorModel
from .harness import reference_instance
from .memory_checks import MemoryPorts, check_memory, clearing_writes
from .packing import Codec

__all__ = ["BENCHES"]


async def _run(io, cfg, rng, cycles, values, hot_addresses=None, store_after=None,
               skewed_lanes=False):
    dut = reference_instance((SkewedAccumulatorMemory if skewed_lanes else AccumulatorMemory)(cfg))
    spacing = add_spacing(cfg)
    if skewed_lanes:
        store_after = 0
    elif store_after is None:
        store_after = spacing
    model = AccumulatorModel(cfg)
    top = 1 << cfg.acc_addr_width

    def address():
        if hot_addresses is not None and rng.random() < 0.8:
            return int(rng.choice(hot_addresses))
        return int(rng.integers(0, top))

    zeros = np.zeros(cfg.cols, dtype=np.int64)
    # With skewed lanes the first lanes of a write come cols - 1 cycles early: idle cycles
    # first, so that those of the first writes come too.
    schedule = [(None, None)] * (cfg.cols - 1 if skewed_lanes else 0)
    schedule += clearing_writes(cfg.acc_depth, lambda addr: {
        "addr": addr, "data": zeros, "accumulate": 0})
    # The rows written in the last add_spacing - 1 cycles, the latest first: the clearing
    # writes' last rows too, or an addition right after them would break the rule below.
    recently_written = ([write["addr"] if write else None for _, write in schedule[::-1]] +
                        [None] * spacing)[:spacing - 1]
    for _ in range(cycles):
        read = address() if rng.random() < 0.6 else None
        write = None
        if rng.random() < 0.8:
            write = {"addr": address(), "data": values(), "accumulate": int(rng.random() < 0.7)}
            # The memory's rule: no addition to a row written in the add_spacing - 1 cycles
            # before (an overwrite of it is fine, an addition add_spacing cycles later too).
            if write["accumulate"] and write["addr"] in recently_written:
                write["accumulate"] = 0
        recently_written = [write["addr"] if write else None] + recently_written[:-1]
        schedule.append((read, write))

    schedule += [(None, None)] * (spacing - 1)   # to see the last write's overflow

    # A read or a write's range_error shows in cycle t + 1; a write requested in cycle t
    # is stored at the end of cycle t + store_after (add_spacing, or 0 for the memory
    # without the stored-row register, which reads the row it adds to a cycle ahead), a
    # read of the row in that cycle is undefined, and reads requested after it see it;
    # its overflow shows in t + add_spacing. The next cycle's write is announced on
    # next_write_*.
    expected = [(None, {"overflow": 0, "range_error": 0}) for _ in schedule]
    in_flight = []

    def commit(requested, write):
        expected[requested + spacing - 1][1]["overflow"] = int(model.write(
            write["addr"], write["data"], bool(write["accumulate"])))

    for cycle, (read, write) in enumerate(schedule):
        while in_flight and in_flight[0][0] <= cycle - store_after:
            commit(*in_flight.pop(0))
        # Stored at the end of t, a row read in that very cycle is undefined; with skewed
        # lanes, so is one read while its lanes are being stored, in the cols - 1 cycles
        # before.
        window = range(cycle - store_after, cycle - store_after +
                       (cfg.cols if skewed_lanes else 1))
        being_stored = any(
            0 <= t < len(schedule) and schedule[t][1] is not None and
            schedule[t][1]["addr"] == read for t in window)
        if read is not None:
            if not being_stored:
                expected[cycle] = (model.read(read), expected[cycle][1])
            expected[cycle][1]["range_error"] |= int(not model.in_range(read))
        if write is not None:
            expected[cycle][1]["range_error"] |= int(not model.in_range(write["addr"]))
            in_flight.append((cycle, write))
    for requested, write in in_flight:     # still in flight when the schedule ends
        commit(requested, write)
    skew = (cfg.cols, {"addr": (cfg.acc_addr_width, False), "data": (cfg.acc_width, True),
                       "accumulate": (1, False)}) if skewed_lanes else None
    ports = MemoryPorts(schedule, {"data": ("data", Codec(dut.row_layout).encode),
                                   "accumulate": ("accumulate", int)},
                        flags=("overflow", "range_error"), lookahead=True, skew=skew,
                        read_latency=cfg.memory_read_latency)
    await check_memory(io, ports, expected, Codec(dut.row_layout).decode,
                       f"accumulators {cfg.name}")


async def bench_random(io, cfg, rng, store_after=None, skewed_lanes=False):
    """Random overwrites and accumulations of full-range words, back-to-back overwrites and
    additions a cycle apart on the same rows, out-of-range addresses."""
    await _run(io, cfg, rng, 400, lambda: rng.integers(cfg.acc_min, cfg.acc_max + 1, cfg.cols,
                                                        dtype=np.int64),
               hot_addresses=[0, 1, 2, cfg.acc_depth - 1], store_after=store_after,
               skewed_lanes=skewed_lanes)


async def bench_saturation(io, cfg, rng, store_after=None, skewed_lanes=False):
    """Sums that reach and pass the accumulator's limits, on a few rows: saturation and the
    overflow flag, lane by lane."""
    big = cfg.acc_max // 2 + 1
    choices = np.array([big, -big, cfg.acc_max, cfg.acc_min, 1, -1, 0], dtype=np.int64)
    await _run(io, cfg, rng, 300, lambda: rng.choice(choices, cfg.cols),
               hot_addresses=[0, 1], store_after=store_after, skewed_lanes=skewed_lanes)


BENCHES = {"random": bench_random, "saturation": bench_saturation}
