"""Testbenches of the matrix unit (Weight FIFO, data setup, systolic array, de-skew),
checked against :class:`tpuer.sim.matrix_unit_model.MatrixUnitModel`."""

import random

import numpy as np

from ..hw.matrix_unit import matrix_unit, matrix_unit_latency
from ..sim.matrix_unit_model import MatrixUnitModel
from .harness import StreamSink, StreamSource, TestbenchError, reference_instance, run_cycles
from .packing import Codec

__all__ = ["check_products", "random_batches", "edge_batches", "BENCHES"]


def random_batches(cfg, rng, count, *, min_rows=1, max_rows=None):
    """``count`` pairs of (weight tile, input rows) with random values and batch sizes."""
    max_rows = max_rows or 2 * cfg.rows + 2
    lo, hi = cfg.operand_min, cfg.operand_max + 1
    return [(rng.integers(lo, hi, (cfg.rows, cfg.cols)),
             rng.integers(lo, hi, (int(rng.integers(min_rows, max_rows + 1)), cfg.rows)))
            for _ in range(count)]


def edge_batches(cfg, rng):
    """Extreme operands: the largest and smallest column sums, mixed signs, zeros."""
    lo, hi = cfg.operand_min, cfg.operand_max
    shape_w, shape_x = (cfg.rows, cfg.cols), (3, cfg.rows)
    checker = np.where((np.add.outer(np.arange(cfg.rows), np.arange(cfg.cols)) % 2) == 0, lo, hi)
    mixed_x = np.array([[lo if (lane + r) % 2 else hi for lane in range(cfg.rows)]
                        for r in range(3)])
    return [
        (np.full(shape_w, lo), np.full(shape_x, lo)),      # largest positive sums
        (np.full(shape_w, hi), np.full(shape_x, lo)),      # most negative sums
        (np.full(shape_w, hi), np.full(shape_x, hi)),
        (checker, mixed_x),                                # mixed signs
        (np.zeros(shape_w, int), rng.integers(lo, hi + 1, shape_x)),
        (rng.integers(lo, hi + 1, shape_w), np.zeros(shape_x, int)),
    ]


async def check_products(io, cfg, batches, *, rng, row_idle=0.0, weight_idle=0.0,
                         row_start=0, leading_vectors=0, expect_back_to_back=False,
                         expect_back_pressure=False, collect=None):
    """Stream ``batches`` of (tile, rows) through the matrix unit and compare every result
    row, its tag and its latency with the golden model.

    The rows start in cycle ``row_start``. ``leading_vectors`` rows go first without a
    tile switch (they must give zeros after reset). With ``expect_back_to_back``, also
    check that after the first tile no vector waited for weights and the results left in
    consecutive cycles (no drain, no bubble).
    With ``expect_back_pressure``, check that the Weight FIFO did push back. A ``collect``
    dict receives the result rows and the cycles of the first and last one.
    Returns a dict of measured figures.
    """
    dut = reference_instance(matrix_unit(cfg))
    model = MatrixUnitModel(cfg)
    weights, vectors, expected = [], [], []
    lo, hi = cfg.operand_min, cfg.operand_max + 1
    for _ in range(leading_vectors):
        x = rng.integers(lo, hi, cfg.rows)
        vectors.append({"data": x, "new_tile": 0, "tag": len(vectors)})
        expected.append(model.vector(x))
    for tile, rows in batches:
        weights.extend(tile)
        model.push_tile(tile)
        for k, x in enumerate(rows):
            vectors.append({"data": x, "new_tile": int(k == 0), "tag": len(vectors) % 65536})
            expected.append(model.vector(x, new_tile=(k == 0)))

    weight_source = StreamSource("weights", Codec(dut.weights.payload.shape()), weights,
                                 idle=weight_idle, rng=random.Random(int(rng.integers(1 << 31))))
    row_source = StreamSource("rows", Codec(dut.row_layout), vectors, idle=row_idle,
                              rng=random.Random(int(rng.integers(1 << 31))), start=row_start)
    # The input register takes the payload in every cycle, valid or not, and its tag shows
    # on ``upcoming``: the payload is driven from the start, as the datapath drives it
    # from its registers (left undriven it is Z in Icarus until the first vector).
    io.set("rows__payload", 0)
    sink = StreamSink("results", Codec(dut.result_layout), has_ready=False)
    stalls = []
    result_codec = Codec(dut.result_layout)
    upcoming, present = [], []    # (valid, tag) announced for the next cycle, and as it came

    def watch(io):
        if io.get("weight_stall"):
            stalls.append(io.cycle)
        announced = io.get("upcoming")
        upcoming.append((announced & 1, announced >> 1))
        valid = io.get("results__valid")
        present.append((valid, result_codec.decode(io.get("results__payload"))["tag"]
                        if valid else None))

    budget = 200 + row_start + 2 * matrix_unit_latency(cfg) + \
        4 * (len(vectors) + len(weights)) * (1 + 4 * max(row_idle, weight_idle))
    await run_cycles(io, [weight_source, row_source, sink],
                     until=lambda: len(sink.items) == len(vectors),
                     max_cycles=int(budget), on_cycle=watch)

    for index, (item, want) in enumerate(zip(sink.items, expected)):
        if not np.array_equal(item["data"], want) or item["tag"] != vectors[index]["tag"]:
            raise TestbenchError(
                f"[{io.simulator} {cfg.name}] result {index}: got {item['data'].tolist()} "
                f"tag {item['tag']}, expected {np.asarray(want).tolist()} tag "
                f"{vectors[index]['tag']}")
    for cycle, ((valid, tag), (next_valid, next_tag)) in enumerate(zip(upcoming, present[1:])):
        if valid != next_valid or (valid and tag != next_tag):
            raise TestbenchError(f"[{io.simulator} {cfg.name}] cycle {cycle}: upcoming said "
                                 f"valid {valid} tag {tag}, the next cycle's result has valid "
                                 f"{next_valid} tag {next_tag}")
    latencies = set(np.array(sink.cycles) - np.array(row_source.sent_cycles))
    if latencies != {dut.latency}:
        raise TestbenchError(f"[{io.simulator} {cfg.name}] latency {sorted(latencies)}, "
                             f"documented {dut.latency}")
    first_switch_done = row_source.sent_cycles[leading_vectors]
    late_stalls = [c for c in stalls if c > first_switch_done]
    if expect_back_to_back:
        if late_stalls:
            raise TestbenchError(f"[{io.simulator} {cfg.name}] {len(late_stalls)} weight-stall "
                                 f"cycles after the first tile (cycles {late_stalls[:8]})")
        gaps = np.diff(sink.cycles)
        if len(gaps) and gaps.max() != 1:
            raise TestbenchError(f"[{io.simulator} {cfg.name}] results not back to back: "
                                 f"gap of {gaps.max()} cycles")
    if expect_back_pressure and weight_source.waiting_cycles == 0:
        raise TestbenchError(f"[{io.simulator} {cfg.name}] the Weight FIFO never pushed back")
    if collect is not None:
        collect.update(results=[item["data"] for item in sink.items],
                       first_result_cycle=sink.cycles[0], last_result_cycle=sink.cycles[-1])
    return {"vectors": len(vectors), "tiles": len(batches), "cycles": io.cycle,
            "weight_stall_cycles": len(stalls),
            "weight_backpressure_cycles": weight_source.waiting_cycles}


async def bench_random(io, cfg, rng):
    """Random tiles and batch sizes, random idle cycles on both input streams."""
    await check_products(io, cfg, random_batches(cfg, rng, 6), rng=rng,
                         row_idle=0.3, weight_idle=0.3, leading_vectors=2)


async def bench_edges(io, cfg, rng):
    """Extreme values: all -128, all 127, mixed signs, zeros."""
    await check_products(io, cfg, edge_batches(cfg, rng), rng=rng)


async def bench_back_to_back(io, cfg, rng):
    """Tiles of exactly ``rows`` vectors, streamed without a gap: the weight shift must hide
    behind the multiply, so there is no stall after the first tile and no bubble."""
    batches = random_batches(cfg, rng, 2 * cfg.weight_fifo_tiles + 2,
                             min_rows=cfg.rows, max_rows=cfg.rows)
    await check_products(io, cfg, batches, rng=rng, expect_back_to_back=True)


async def bench_weight_backpressure(io, cfg, rng):
    """More tiles than the Weight FIFO and the shadow weights hold, offered a row per cycle
    while no vector takes a tile (the vectors start once the FIFO could have filled twice
    over) and then while vectors trickle in: the FIFO must push back and still deliver
    every tile exactly once."""
    batches = random_batches(cfg, rng, 2 * cfg.weight_fifo_tiles + 3, min_rows=1, max_rows=3)
    await check_products(io, cfg, batches, rng=rng, row_idle=0.9, expect_back_pressure=True,
                         row_start=2 * (cfg.weight_fifo_tiles + 1) * cfg.rows + 10)


BENCHES = {
    "random": bench_random,
    "edges": bench_edges,
    "back_to_back": bench_back_to_back,
    "weight_backpressure": bench_weight_backpressure,
}
