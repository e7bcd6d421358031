"""Every block under amaranth.sim, against its golden model."""

import functools
import gc
import importlib
import warnings
import zlib

import numpy as np
import pytest
from amaranth.hdl import UnusedElaboratable

from tpuer import Config
from tpuer.hw import DiagonalSkew, SystolicArray, WeightFIFO
from tpuer.hw.pe import processing_element
from tpuer.hw.export import build_block
from tpuer.tb import blocks_tb
from tpuer.tb.pysim import run_pysim

from conftest import CORE_CONFIGS, seed

PYSIM_CONFIGS = [
    Config(rows=2, cols=2),
    Config(rows=3, cols=5, ub_depth=20, acc_depth=12, weight_fifo_tiles=2),
    Config(rows=4, cols=8, ub_depth=100, acc_depth=60, multiply_latency=3,
           memory_read_latency=2),
    Config(rows=1, cols=1, operand_width=4, acc_width=8, ub_depth=3, acc_depth=3,
           weight_fifo_tiles=2),
]
BLOCKS = ["matrix_unit", "unified_buffer", "accumulators", "activation", "datapath"]
#: The lane-serial activation unit (``activation_steps``), in the blocks that hold it.
SERIAL_ACTIVATION_CONFIGS = [
    Config(rows=3, cols=5, ub_depth=20, acc_depth=12, weight_fifo_tiles=2, activation_steps=4),
    Config(rows=2, cols=2, activation_steps=32),
    Config(rows=1, cols=1, operand_width=4, acc_width=8, ub_depth=3, acc_depth=3,
           weight_fifo_tiles=2, activation_steps=1),
]


def rng_for(*names):
    return np.random.default_rng([seed(), *(zlib.crc32(str(n).encode()) for n in names)])


def _cases():
    for block in BLOCKS:
        benches = importlib.import_module(f"tpuer.tb.{block}_tb").BENCHES
        extra = SERIAL_ACTIVATION_CONFIGS if block in ("activation", "datapath") else []
        for cfg in PYSIM_CONFIGS + extra:
            for name in benches:
                yield pytest.param(block, cfg, name, id=f"{block}-{name}-{cfg.name}")


@pytest.mark.parametrize("block, cfg, bench", list(_cases()))
def test_block(block, cfg, bench):
    benches = importlib.import_module(f"tpuer.tb.{block}_tb").BENCHES
    cycles = run_pysim(build_block(block, cfg), benches[bench], cfg, rng_for(block, bench, cfg))
    assert cycles > 0


@pytest.mark.parametrize("bench", list(importlib.import_module("tpuer.tb.accumulators_tb").BENCHES))
@pytest.mark.parametrize("cfg", PYSIM_CONFIGS, ids=lambda c: c.name)
def test_accumulators_with_skewed_lanes(cfg, bench):
    """The accumulator memory as the iCE40's datapath uses it: each lane written as its
    column leaves the array, ``cols - 1 - j`` cycles before the row's last lane, on the same
    benches (a row read while its lanes are being written is undefined)."""
    from tpuer.hw.accumulators import SkewedAccumulatorMemory
    benches = importlib.import_module("tpuer.tb.accumulators_tb").BENCHES
    run_pysim(SkewedAccumulatorMemory(cfg),
              functools.partial(benches[bench], skewed_lanes=True), cfg,
              rng_for("accumulators-skewed", bench, cfg))


@pytest.mark.parametrize("bench", list(importlib.import_module("tpuer.tb.core_tb").BENCHES))
@pytest.mark.parametrize("cfg", CORE_CONFIGS[:2], ids=lambda c: c.name)
def test_core(cfg, bench):
    benches = importlib.import_module("tpuer.tb.core_tb").BENCHES
    run_pysim(build_block("core", cfg), benches[bench], cfg, rng_for("core", bench, cfg))


@pytest.mark.parametrize("bench", list(importlib.import_module("tpuer.tb.tpu_tb").BENCHES))
@pytest.mark.parametrize("cfg", CORE_CONFIGS[:2], ids=lambda c: c.name)
def test_tpu_host_command_set(cfg, bench):
    benches = importlib.import_module("tpuer.tb.tpu_tb").BENCHES
    run_pysim(build_block("tpu", cfg), benches[bench], cfg, rng_for("tpu", bench, cfg))


@pytest.mark.parametrize("cfg", PYSIM_CONFIGS, ids=lambda c: c.name)
def test_processing_element(cfg):
    pe = processing_element(operand_shape=cfg.operand_shape, acc_shape=cfg.acc_shape,
                            multiply_latency=cfg.multiply_latency)
    run_pysim(pe, blocks_tb.bench_pe, cfg, rng_for("pe", cfg))


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("cfg", PYSIM_CONFIGS, ids=lambda c: c.name)
def test_diagonal_skew(cfg, reverse):
    skew = DiagonalSkew(lane_shape=cfg.operand_shape, lanes=cfg.rows, reverse=reverse)
    run_pysim(skew, blocks_tb.bench_skew, cfg, rng_for("skew", cfg, reverse), reverse)


@pytest.mark.parametrize("cfg", PYSIM_CONFIGS, ids=lambda c: c.name)
def test_systolic_array_timing_and_products(cfg):
    run_pysim(SystolicArray(cfg), blocks_tb.bench_array, cfg, rng_for("array", cfg))


def test_systolic_array_form_follows_the_platform():
    """The iCE40 UltraPlus gets the array whose cells share its SB_MAC16s (whose products
    come a cycle late, so it refuses any other multiply latency); other targets a
    multiplier per cell."""
    from amaranth_boards.icebreaker import ICEBreakerPlatform
    from amaranth_boards.ulx3s import ULX3S_85F_Platform
    from tpuer.hw.systolic_array import SharedDSPSystolicArray, systolic_array
    cfg = Config(rows=2, cols=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)   # built only to be looked at
        assert type(systolic_array(cfg, ICEBreakerPlatform())) is SharedDSPSystolicArray
        assert type(systolic_array(cfg, ULX3S_85F_Platform())) is SystolicArray
        assert type(systolic_array(cfg, None)) is SystolicArray
        with pytest.raises(ValueError, match="multiply_latency must be 1 there, not 2"):
            systolic_array(Config(rows=2, cols=3, multiply_latency=2), ICEBreakerPlatform())
        gc.collect()


def test_unified_buffer_form_follows_the_read_latency():
    from tpuer.hw.unified_buffer import RegisteredUnifiedBuffer, UnifiedBuffer, unified_buffer
    slow = Config(rows=2, cols=2, memory_read_latency=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)   # built only to be looked at
        assert type(unified_buffer(Config(rows=2, cols=2))) is UnifiedBuffer
        assert type(unified_buffer(slow)) is RegisteredUnifiedBuffer
        with pytest.raises(ValueError, match="reads in 1 cycle.*unified_buffer"):
            UnifiedBuffer(slow)
        gc.collect()


@pytest.mark.parametrize("cfg", PYSIM_CONFIGS, ids=lambda c: c.name)
def test_weight_fifo_order_and_back_pressure(cfg):
    run_pysim(WeightFIFO(cfg), blocks_tb.bench_weight_fifo, cfg, rng_for("fifo", cfg))


def test_diagonal_skew_refuses_bad_lane_counts():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)   # the half-made object
        with pytest.raises(ValueError, match="lanes must be a positive integer, not 0"):
            DiagonalSkew(lane_shape=8, lanes=0)
        gc.collect()


@pytest.mark.parametrize("mode", ["StreamBuffer", "HalfRateStreamBuffer"])
@pytest.mark.parametrize("idle, stall", [(0.0, 0.0), (0.3, 0.5), (0.0, 0.7)])
def test_stream_buffer_keeps_order_and_loses_nothing(idle, stall, mode):
    """Random words through the register stage between the serial link and the TPU, with
    idle input and a stalling output: every word arrives once, in order; with neither,
    one word per cycle (every other cycle at half rate) after one cycle of latency."""
    import random
    from tpuer.hw import stream_buffer
    from tpuer.tb.harness import StreamSink, StreamSource, TestbenchError, run_cycles
    from tpuer.tb.packing import Codec
    rng = rng_for("stream_buffer", idle, stall)
    words = [int(w) for w in rng.integers(0, 1 << 32, 200, dtype=np.uint64)]

    async def bench(io):
        source = StreamSource("i", Codec(32), words, idle=idle, rng=random.Random(1))
        sink = StreamSink("o", Codec(32), stall=stall, rng=random.Random(2))
        await run_cycles(io, [source, sink], until=lambda: len(sink.items) == len(words),
                         max_cycles=5000)
        if [int(w) for w in sink.items] != words:
            raise TestbenchError("the words came out changed, lost or out of order")
        if not idle and not stall:
            latencies = set(np.array(sink.cycles) - np.array(source.sent_cycles))
            if latencies != {1}:
                raise TestbenchError(f"latencies {sorted(latencies)}, documented 1")
            gaps = set(np.diff(sink.cycles))
            if gaps != {2 if mode == "HalfRateStreamBuffer" else 1}:
                raise TestbenchError(f"words {sorted(gaps)} cycles apart in a {mode}")

    assert run_pysim(getattr(stream_buffer, mode)(32), bench) > 0


@pytest.mark.parametrize("kind", ["ShiftQueue", "RingQueue", "LookaheadRingQueue"])
@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_small_queues_against_a_deque(depth, kind):
    """Random writes and reads, full and empty included, against Python's deque: the head,
    the level and both ready flags every cycle; with ``lookahead``, that the next cycle's
    head (when there is one) is the lookahead member of this cycle's way (read or not)."""
    from collections import deque
    from tpuer.hw import queues
    from tpuer.tb.harness import TestbenchError
    rng = rng_for("small_queue", kind, depth)
    lookahead = kind.startswith("Lookahead")
    lookahead_checks = 0

    async def bench(io):
        model = deque()
        for cycle in range(600):
            got = {name: io.get(name) for name in ("level", "o__valid", "i__ready")}
            want = {"level": len(model), "o__valid": int(bool(model)),
                    "i__ready": int(len(model) < depth)}
            if got != want or (model and io.get("o__payload") != model[0]):
                raise TestbenchError(f"cycle {cycle}: {got}, head {io.get('o__payload')}; "
                                     f"expected {want}, head {model[0] if model else None}")
            w_en, r_en = int(rng.random() < 0.55), int(rng.random() < 0.5)
            word = int(rng.integers(0, 1 << 12))
            io.set("i__valid", w_en)
            io.set("i__payload", word)
            io.set("o__ready", r_en)
            read = bool(r_en and model)
            if lookahead:
                predicted = io.get("next_if_read" if read else "next_if_kept")
            await io.tick()
            if read:
                model.popleft()
            if w_en and got["i__ready"]:
                model.append(word)
            if lookahead and model:
                nonlocal lookahead_checks
                lookahead_checks += 1
                if predicted != model[0]:
                    raise TestbenchError(
                        f"cycle {cycle}: the lookahead ({'read' if read else 'kept'}) said "
                        f"{predicted}, the head is {model[0]}")

    queue = getattr(queues, kind)(shape=12, depth=depth)
    assert run_pysim(queue, bench) > 0
    assert lookahead_checks > 200 or not lookahead
