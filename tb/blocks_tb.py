"""Testbenches of the small blocks inside the matrix unit (processing element, diagonal
skew, systolic array, Weight FIFO), each against its golden model."""

import random

import numpy as np
from amaranth.lib import data

from ..hw.data_setup import DiagonalSkew
from ..hw.weight_fifo import WeightFIFO
from ..sim.data_setup_model import skew
from ..sim.matrix_unit_model import MatrixUnitModel
from ..sim.pe_model import ProcessingElementModel
from ..sim.weight_fifo_model import WeightFIFOModel
from .harness import StreamSink, StreamSource, TestbenchError, reference_instance, run_cycles
from .packing import Codec

__all__ = ["bench_pe", "bench_skew", "bench_array", "bench_weight_fifo"]


async def bench_pe(io, cfg, rng, cycles=300):
    """Random activations, partial sums, weight loads and switches, cycle by cycle."""
    model = ProcessingElementModel(cfg.acc_width, cfg.multiply_latency)
    op, acc = Codec(cfg.operand_shape), Codec(cfg.acc_shape)
    lo, hi = cfg.operand_min, cfg.operand_max + 1
    flag = Codec(1)
    for cycle in range(cycles):
        inputs = {"act_in": int(rng.integers(lo, hi)), "switch_in": int(rng.random() < 0.2),
                  "psum_in": int(rng.integers(cfg.acc_min // 2, cfg.acc_max // 2)),
                  "weight_in": int(rng.integers(lo, hi)), "weight_load": int(rng.random() < 0.3)}
        codecs = {"act_in": op, "weight_in": op, "psum_in": acc}
        for name, value in inputs.items():
            io.set(name, codecs.get(name, flag).encode(value))
        await io.settle()
        got = (op.decode(io.get("act_out")), io.get("switch_out"), acc.decode(io.get("psum_out")))
        want = (model.act_out, model.switch_out, model.psum_out)
        if got != want:
            raise TestbenchError(f"[{io.simulator} PE] cycle {cycle}: got {got}, expected {want}")
        await io.tick()
        model.step(**inputs)


async def bench_skew(io, cfg, rng, reverse=False, cycles=60):
    """Random vectors through the skew: lane k must come out delay(k) cycles later."""
    dut = reference_instance(DiagonalSkew(lane_shape=cfg.operand_shape, lanes=cfg.rows,
                                          reverse=reverse))
    codec = Codec(dut.i.shape())
    vectors = rng.integers(cfg.operand_min, cfg.operand_max + 1, (cycles, cfg.rows))
    outputs = []
    for vector in vectors:
        io.set("i", codec.encode(vector))
        await io.settle()
        outputs.append(codec.decode(io.get("o")))
        await io.tick()
    want = skew(vectors, [dut.delay(lane) for lane in range(cfg.rows)])
    if not np.array_equal(np.array(outputs), want):
        raise TestbenchError(f"[{io.simulator} skew {cfg.name}] output differs from the model")


async def bench_array(io, cfg, rng, tiles=3, batch=None):
    """Drives the bare array with hand-made skew: load a tile through the weight bus,
    switch, stream vectors; each column sum must leave at the documented cycle
    ``t + rows + j + multiply_latency`` and equal ``x @ W``."""
    batch = batch or cfg.rows + 1
    weight_codec = Codec(data.ArrayLayout(cfg.operand_shape, cfg.cols))
    act_codec = Codec(data.ArrayLayout(cfg.operand_shape, cfg.rows))
    acc = Codec(cfg.acc_shape)
    model = MatrixUnitModel(cfg)
    lo, hi = cfg.operand_min, cfg.operand_max + 1
    schedule = []   # per cycle: (weight row or None, index, vector or None, switch)
    expected = {}   # (cycle, column) -> value
    for _ in range(tiles):
        tile = rng.integers(lo, hi, (cfg.rows, cfg.cols))
        model.push_tile(tile)
        for index, row in enumerate(tile):
            schedule.append((row, index, None, 0))
        vectors = rng.integers(lo, hi, (batch, cfg.rows))
        schedule.append((None, 0, None, 1))     # switch after this (empty) cycle
        for k, x in enumerate(vectors):
            start = len(schedule)
            y = model.vector(x, new_tile=(k == 0))
            for j in range(cfg.cols):
                expected[(start + cfg.rows + j + cfg.multiply_latency, j)] = int(y[j])
            schedule.append((None, 0, x, 0))
    horizon = len(schedule) + cfg.rows + cfg.cols + cfg.multiply_latency + 1
    lanes_act = np.zeros((horizon, cfg.rows), dtype=np.int64)
    lanes_switch = np.zeros((horizon, cfg.rows), dtype=np.int64)
    for cycle, (_, _, x, switch) in enumerate(schedule):
        if x is not None:
            lanes_act[cycle] = x
        lanes_switch[cycle] = switch
    delays = list(range(cfg.rows))
    act_skewed, switch_skewed = skew(lanes_act, delays), skew(lanes_switch, delays)
    for cycle in range(horizon):
        weight, index, _, _ = schedule[cycle] if cycle < len(schedule) else (None, 0, None, 0)
        io.set("weight_valid", int(weight is not None))
        if weight is not None:
            io.set("weight_row", weight_codec.encode(weight))
            io.set("weight_index", index)
        io.set("act_in", act_codec.encode(act_skewed[cycle]))
        io.set("switch_in", sum(int(s) << k for k, s in enumerate(switch_skewed[cycle])))
        await io.settle()
        psums = io.get("psum_out")
        for j in range(cfg.cols):
            want = expected.get((cycle, j))
            if want is not None:
                got = acc.decode(psums >> (j * cfg.acc_width))
                if got != want:
                    raise TestbenchError(f"[{io.simulator} array {cfg.name}] cycle {cycle} "
                                         f"column {j}: {got}, expected {want}")
        await io.tick()


async def bench_weight_fifo(io, cfg, rng, rows=None):
    """Random pushes and pops with idle producer and stalling consumer: every row comes
    out once, in order; ``w.ready`` is low only when the FIFO holds its full depth."""
    dut = reference_instance(WeightFIFO(cfg))
    codec = Codec(dut.w.payload.shape())
    count = rows or 3 * cfg.weight_fifo_depth
    items = [rng.integers(cfg.operand_min, cfg.operand_max + 1, cfg.cols) for _ in range(count)]
    source = StreamSource("w", codec, items, idle=0.2,
                          rng=random.Random(int(rng.integers(1 << 31))))
    sink = StreamSink("r", codec, stall=0.6, rng=random.Random(int(rng.integers(1 << 31))))
    model = WeightFIFOModel(cfg)
    full_seen = []

    def watch(io):
        full_seen.append((io.get("w__ready") == 0, io.get("level")))

    # First with the reader stopped, so that the FIFO must fill and push back; then with
    # random stalls until every row is out.
    sink.stall = 1.0
    await run_cycles(io, [source, sink], until=lambda: any(full for full, _ in full_seen),
                     max_cycles=10 * count + 100, on_cycle=watch)
    sink.stall = 0.6
    await run_cycles(io, [source, sink], until=lambda: len(sink.items) == count,
                     max_cycles=40 * count + 100, on_cycle=watch)
    for k, (got, want) in enumerate(zip(sink.items, items)):
        if not np.array_equal(got, want):
            raise TestbenchError(f"[{io.simulator} weight FIFO] row {k}: {got}, expected {want}")
    for not_ready, level in full_seen:
        if (not_ready and level < model.depth) or level > model.depth + 1:
            raise TestbenchError(f"[{io.simulator} weight FIFO] w.ready={int(not not_ready)} "
                                 f"with {level} of {model.depth} rows held")
    if not any(not_ready for not_ready, _ in full_seen):
        raise TestbenchError(f"[{io.simulator} weight FIFO] never became full")
