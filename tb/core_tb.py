"""Testbenches of the TPU core: programs run on the RTL and on the ISA-level golden model
(:class:`tpuer.sim.isa_model.CoreModel`), compared in everything the host can see: the
rows sent to the host, the memories (dumped by a second program), the status register and
the exact counters."""

import random
from dataclasses import dataclass, field

import numpy as np
from amaranth.lib import data

from .. import isa
from ..hw.matrix_unit import matrix_unit_latency
from ..hw.sequencer import fetch_fill_cycles
from ..isa import CoreState, ErrorCode, Instruction, Opcode
from ..sim.isa_model import CoreModel
from ..sim.trace import Recorder, first_difference
from .harness import StreamSink, StreamSource, TestbenchError, run_cycles
from .packing import Codec

__all__ = ["CoreRun", "run_on_core", "random_program", "dump_program", "BENCHES"]


@dataclass
class CoreRun:
    state: CoreState
    error: ErrorCode
    error_pc: int
    host_out: list = field(default_factory=list)
    cycles: int = 0
    mxu_busy_cycles: int = 0
    weight_stall_cycles: int = 0
    instructions: int = 0
    #: what the RTL did in each cycle, as far as its ports show (:func:`rtl_activity`)
    activity: dict = None


def idle_inputs(io):
    """Drive every input of the core to its idle value (undriven inputs are X in Icarus)."""
    for name in ("control__start", "control__abort", "program_write__en", "weight_write__en", "weight_write__armed",
                 "host_in__valid", "host_out__ready", "memory_request__valid"):
        io.set(name, 0)


async def load_program(io, cfg, words, start=0):
    for offset, word in enumerate(words):
        io.set("program_write__addr", start + offset)
        io.set("program_write__data", int(word.encode() if isinstance(word, Instruction) else word))
        io.set("program_write__en", 1)
        await io.tick()
    io.set("program_write__en", 0)


async def load_weights(io, cfg, tiles, first_tile=0):
    codec = Codec(data.ArrayLayout(cfg.operand_shape, cfg.cols))
    for t, tile in enumerate(tiles):
        for r, row in enumerate(tile):
            io.set("weight_write__addr", (first_tile + t) * cfg.rows + r)
            io.set("weight_write__data", codec.encode(row))
            io.set("weight_write__en", 1)
            io.set("weight_write__armed", 1)
            await io.tick()
    io.set("weight_write__en", 0)
    io.set("weight_write__armed", 0)


def rest_cycles(cfg):
    """Idle cycles before every start: enough for a weight tile left in the Weight FIFO to
    shift into the shadow weights, so that the core is at rest, as the cycle model assumes
    (:meth:`tpuer.sim.timing_model.CoreTiming.settle`)."""
    return cfg.rows + 4


def host_out_codec(cfg):
    """The codec of the rows the core sends the host (accumulator words, a lane each)."""
    return Codec(data.ArrayLayout(cfg.acc_shape, cfg.ub_lanes))


async def pulse_start(io, start):
    """START at instruction ``start``: ``start`` high for one cycle."""
    io.set("control__start_pc", start)
    io.set("control__start", 1)
    await io.tick()
    io.set("control__start", 0)


async def run_on_core(io, cfg, *, start=0, host_in=(), rng=None, in_idle=0.0, out_stall=0.0,
                      max_cycles=20000):
    """Let the core rest, start the loaded program at ``start``, feed ``host_in``, collect
    the host rows, and return a :class:`CoreRun` when the core stops."""
    rng = rng or np.random.default_rng(0)
    for _ in range(rest_cycles(cfg)):
        await io.tick()
    in_codec = Codec(data.ArrayLayout(cfg.operand_shape, cfg.ub_lanes))
    source = StreamSource("host_in", in_codec, list(host_in), idle=in_idle,
                          rng=random.Random(int(rng.integers(1 << 31))))
    sink = StreamSink("host_out", host_out_codec(cfg), stall=out_stall,
                      rng=random.Random(int(rng.integers(1 << 31))))
    await pulse_start(io, start)
    status = {"running": True}
    samples = []

    def watch(io):      # sampled when settled, so every simulator agrees on the cycle
        status["running"] = io.get("status__state") == CoreState.RUNNING.value
        samples.append((io.cycle, *(io.get(f"status__{name}") for name in ACTIVITY_COUNTERS)))

    await run_cycles(io, [source, sink], until=lambda: not status["running"],
                     max_cycles=max_cycles, on_cycle=watch)
    await io.settle()
    samples.append((io.cycle, *(io.get(f"status__{name}") for name in ACTIVITY_COUNTERS)))
    result = CoreRun(state=CoreState(io.get("status__state")), error=ErrorCode(io.get("status__error")),
                     error_pc=io.get("status__error_pc"), host_out=sink.items,
                     cycles=io.get("status__cycles"), mxu_busy_cycles=io.get("status__mxu_busy_cycles"),
                     weight_stall_cycles=io.get("status__weight_stall_cycles"),
                     instructions=io.get("status__instructions"),
                     activity=rtl_activity(samples, source.sent_cycles, sink.cycles))
    await io.tick()
    return result


#: The counters whose step from one cycle to the next tells what the core did in it.
ACTIVITY_COUNTERS = ("cycles", "mxu_busy_cycles", "weight_stall_cycles", "instructions")


def rtl_activity(samples, rows_in, rows_out):
    """What the RTL did in each cycle of a run, as far as its ports show it: for every
    cycle the counters count (``cycles`` of them), whether a vector entered the matrix
    unit, a vector waited for its weight tile, an instruction retired (each counter's step
    into the next cycle: a counter shows an event the cycle after it), a host row came in
    and one went out (the streams' handshakes, in the cycle the counters show as under
    way). ``samples``: (bench cycle, the :data:`ACTIVITY_COUNTERS`) of every cycle and of
    the end; ``rows_in``, ``rows_out``: the bench cycles of the handshakes. The fields
    are those of :class:`~tpuer.sim.trace.Activity`, as lists."""
    count_at = {cycle: counters[0] for cycle, *counters in samples}
    first = {}
    for _, *counters in samples:
        first.setdefault(counters[0], counters)
    total = samples[-1][1]
    before = first.get(0, [0, 0, 0, 0])
    activity = {"vector": [], "weight_stall": [], "retired": []}
    for index in range(total):
        after = first.get(index + 1)
        if after is None:
            raise TestbenchError(f"the cycle counter skipped {index + 1}")
        for position, name in enumerate(("vector", "weight_stall", "retired"), start=1):
            activity[name].append(after[position] - before[position])
        before = after
    for name, cycles in (("host_in", rows_in), ("host_out", rows_out)):
        activity[name] = [0] * total
        for cycle in cycles:
            if 0 <= count_at[cycle] < total:
                activity[name][count_at[cycle]] += 1
    return activity


def clearing_program(cfg):
    """A program (and its host rows) that zeroes the Unified Buffer and the accumulators,
    so that a bench does not depend on what an earlier one left there."""
    clear = [isa.read_host(0, cfg.ub_depth), isa.read_weights(0, 1)]
    for first in range(0, cfg.acc_depth, cfg.ub_depth):
        clear.append(isa.matmul(0, first, min(cfg.ub_depth, cfg.acc_depth - first),
                                switch=first == 0))
    clear.append(isa.halt())
    return clear, [np.zeros(cfg.ub_lanes, dtype=np.int64)] * cfg.ub_depth


def dump_program(cfg):
    """WRITE_HOST of every UB row, then of every accumulator row, then HALT."""
    return [isa.write_host(0, cfg.ub_depth), isa.write_host(0, cfg.acc_depth, from_acc=True),
            isa.halt()]


def random_program(cfg, rng, length=24, *, invalid=0.0):
    """A random program that keeps the rules (tile accounting, ranges) except where
    ``invalid`` asks for a random bad instruction; returns (instructions, host rows)."""
    program, host_rows = [], []
    tiles = 0
    lo, hi = cfg.operand_min, cfg.operand_max + 1

    def span(depth):
        count = int(rng.integers(0, min(depth, 2 * cfg.rows + 2) + 1))
        return int(rng.integers(0, depth - count + 1)), count

    for _ in range(length):
        if rng.random() < invalid:
            program.append(_bad_instruction(cfg, rng, tiles))
            continue
        kind = rng.choice(["read_host", "read_weights", "matmul", "matmul", "activate",
                           "config", "write_host", "sync", "nop"])
        if kind == "read_host":
            a, n = span(cfg.ub_depth)
            program.append(isa.read_host(a, n))
            host_rows.extend(rng.integers(lo, hi, (n, cfg.ub_lanes)))
        elif kind == "read_weights" and tiles < isa.tiles_held(cfg):
            n = int(rng.integers(1, min(cfg.weight_fifo_tiles + 2 - tiles, cfg.weight_tiles + 1)))
            program.append(isa.read_weights(int(rng.integers(0, cfg.weight_tiles - n + 1)), n))
            tiles += n
        elif kind == "matmul":
            a, n = span(cfg.ub_depth)
            b = int(rng.integers(0, cfg.acc_depth - n + 1)) if n <= cfg.acc_depth else 0
            n = min(n, cfg.acc_depth - b)
            switch = bool(tiles and n and rng.random() < 0.6)
            program.append(isa.matmul(a, b, n, accumulate=bool(rng.random() < 0.5),
                                      switch=switch))
            tiles -= int(switch)
        elif kind == "activate":
            n = int(rng.integers(0, min(cfg.acc_depth, cfg.ub_depth, 2 * cfg.rows) + 1))
            program.append(isa.activate(int(rng.integers(0, cfg.acc_depth - n + 1)),
                                        int(rng.integers(0, cfg.ub_depth - n + 1)), n))
        elif kind == "config":
            program.append(_random_config(cfg, rng))
        elif kind == "write_host":
            from_acc = bool(rng.random() < 0.5)
            a, n = span(cfg.acc_depth if from_acc else cfg.ub_depth)
            program.append(isa.write_host(a, n, from_acc=from_acc))
        elif kind == "sync":
            program.append(isa.sync())
        else:
            program.append(isa.nop())
    program.append(isa.halt())
    return program, host_rows


def _random_config(cfg, rng):
    param = isa.ConfigParam(int(rng.integers(0, len(isa.ConfigParam))))
    lane = isa.ALL_LANES if rng.random() < 0.4 else int(rng.integers(0, cfg.cols))
    value = {isa.ConfigParam.BIAS: lambda: rng.integers(-(1 << 16), 1 << 16),
             isa.ConfigParam.MULTIPLIER: lambda: rng.integers(1 << 30, 1 << 31),
             isa.ConfigParam.SHIFT: lambda: rng.integers(-isa.MAX_LEFT_SHIFT, 12),
             isa.ConfigParam.ZERO_POINT: lambda: rng.integers(cfg.operand_min, cfg.operand_max + 1),
             isa.ConfigParam.RELU: lambda: rng.integers(0, 2),
             isa.ConfigParam.ROUNDING: lambda: rng.integers(0, 2),
             isa.ConfigParam.CLAMP_MIN: lambda: rng.integers(cfg.operand_min, 1),
             isa.ConfigParam.CLAMP_MAX: lambda: rng.integers(0, cfg.operand_max + 1)}[param]()
    return isa.config(param, int(value), lane)


def _bad_instructions(cfg, tiles):
    """One instruction for every way an instruction can be wrong, given ``tiles`` read
    but not yet switched in; each with the error it must raise."""
    return [
        (Instruction(len(Opcode)), ErrorCode.BAD_OPCODE),
        (Instruction(15), ErrorCode.BAD_OPCODE),
        (Instruction(Opcode.NOP.value, reserved=1), ErrorCode.BAD_FIELD),
        (Instruction(Opcode.ACTIVATE.value, flags=1), ErrorCode.BAD_FIELD),
        (Instruction(Opcode.MATMUL.value, flags=4), ErrorCode.BAD_FIELD),
        (Instruction(Opcode.CONFIG.value, flags=len(isa.ConfigParam)), ErrorCode.BAD_FIELD),
        (isa.read_host(cfg.ub_depth - 1, 2), ErrorCode.UB_RANGE),
        (isa.write_host(cfg.ub_depth, 1), ErrorCode.UB_RANGE),
        (isa.write_host(cfg.acc_depth - 2, 3, from_acc=True), ErrorCode.ACC_RANGE),
        (isa.matmul(cfg.ub_depth, 0, 1, switch=False), ErrorCode.UB_RANGE),
        (isa.matmul(0, cfg.acc_depth, 1, switch=False), ErrorCode.ACC_RANGE),
        (isa.activate(cfg.acc_depth, 0, 1), ErrorCode.ACC_RANGE),
        (isa.activate(0, cfg.ub_depth - 1, 2), ErrorCode.UB_RANGE),
        (isa.read_weights(cfg.weight_tiles, 1), ErrorCode.WEIGHT_RANGE),
        (isa.read_weights(cfg.weight_tiles - 1, 2), ErrorCode.WEIGHT_RANGE),
        (isa.config(isa.ConfigParam.SHIFT, cfg.max_shift + 1, 0), ErrorCode.BAD_CONFIG),
        (isa.config(isa.ConfigParam.SHIFT, -isa.MAX_LEFT_SHIFT - 1), ErrorCode.BAD_CONFIG),
        (isa.config(isa.ConfigParam.ROUNDING, 2), ErrorCode.BAD_CONFIG),
        (isa.config(isa.ConfigParam.CLAMP_MIN, cfg.operand_min - 1), ErrorCode.BAD_CONFIG),
        (isa.config(isa.ConfigParam.CLAMP_MAX, cfg.operand_max + 1), ErrorCode.BAD_CONFIG),
        (isa.config(isa.ConfigParam.ZERO_POINT, cfg.operand_max + 1), ErrorCode.BAD_CONFIG),
        (isa.config(isa.ConfigParam.ZERO_POINT, cfg.operand_min - 1), ErrorCode.BAD_CONFIG),
        (isa.config(isa.ConfigParam.RELU, 2), ErrorCode.BAD_CONFIG),
        (isa.config(isa.ConfigParam.BIAS, 1, cfg.cols), ErrorCode.BAD_CONFIG),
    ] + ([(isa.matmul(0, 0, 1, switch=True), ErrorCode.NO_WEIGHTS)] if tiles == 0 else []) \
      + ([(isa.read_weights(0, cfg.weight_fifo_tiles + 2 - tiles), ErrorCode.WEIGHT_OVERFLOW)]
         if cfg.weight_fifo_tiles + 2 - tiles <= cfg.weight_tiles else [])


def _bad_instruction(cfg, rng, tiles):
    choices = _bad_instructions(cfg, tiles)
    return choices[int(rng.integers(0, len(choices)))][0]


def _compare(io, cfg, label, got, want, *, timed=True):
    """Compare a run with the model's: status, host rows, and the counters (those that
    depend on timing only when ``timed``: the model's host never idles or stalls)."""
    where = f"[{io.simulator} core {cfg.name}] {label}"
    if (got.state, got.error, got.error_pc) != (want.state, want.error, want.error_pc):
        raise TestbenchError(f"{where}: status {got.state.name} {got.error.name} at "
                             f"{got.error_pc}, expected {want.state.name} {want.error.name} "
                             f"at {want.error_pc}")
    if len(got.host_out) != len(want.host_out):
        raise TestbenchError(f"{where}: {len(got.host_out)} host rows, expected "
                             f"{len(want.host_out)}")
    for k, (row, expected) in enumerate(zip(got.host_out, want.host_out)):
        padded = np.zeros(cfg.ub_lanes, dtype=np.int64)
        padded[:len(expected)] = expected
        if not np.array_equal(row, padded):
            raise TestbenchError(f"{where}: host row {k} is {row.tolist()}, expected "
                                 f"{padded.tolist()}")
    counters = ["cycles", "weight_stall_cycles"] if timed else []
    if want.state is CoreState.HALTED:
        counters += ["instructions", "mxu_busy_cycles"]
    for name in counters:
        if getattr(got, name) != getattr(want, name):
            raise TestbenchError(f"{where}: counter {name} is {getattr(got, name)}, "
                                 f"expected {getattr(want, name)}")


def compare_activity(io, cfg, label, rtl, recorder):
    """The cycle model's trace (``recorder``) against what the RTL did (``rtl``,
    :func:`rtl_activity`), cycle for cycle: vectors into the matrix unit, weight stalls,
    instructions retired, host rows in and out."""
    difference = first_difference(rtl, recorder)
    if difference is not None:
        name, cycle, seen, said = difference
        raise TestbenchError(f"[{io.simulator} core {cfg.name}] {label}: the trace's {name} "
                             f"differs from the cycle model's first in cycle {cycle} (RTL "
                             f"{seen[:8]}, model {said[:8]})")


async def check_program(io, cfg, rng, program, host_rows, weights, label, model, **stream):
    """Run ``program`` (then a dump program) on the core and on ``model``; compare."""
    dump_at = cfg.program_depth - 3
    await load_program(io, cfg, program)
    model.load_program(program)
    timed = not any(stream.values())
    got = await run_on_core(io, cfg, host_in=host_rows, rng=rng, **stream)
    recorder = Recorder() if timed else None
    want = model.run(0, host_in=host_rows, recorder=recorder)
    _compare(io, cfg, label, got, want, timed=timed)
    if timed:
        compare_activity(io, cfg, label, got.activity, recorder.finish())
    got_dump = await run_on_core(io, cfg, start=dump_at, rng=rng, **stream)
    want_dump = model.run(dump_at)
    _compare(io, cfg, f"{label}, memory dump after it", got_dump, want_dump, timed=timed)
    return got


async def _setup(io, cfg, rng):
    idle_inputs(io)
    model = CoreModel(cfg)
    weights = rng.integers(cfg.operand_min, cfg.operand_max + 1,
                           (cfg.weight_tiles, cfg.rows, cfg.cols))
    await load_weights(io, cfg, weights)
    model.load_weights(0, weights)
    dump = dump_program(cfg)
    await load_program(io, cfg, dump, start=cfg.program_depth - 3)
    model.load_program(dump, start=cfg.program_depth - 3)
    # Start from known memories: the dump program also proves the core comes up clean.
    clear, zeros = clearing_program(cfg)
    await check_program(io, cfg, rng, clear, zeros, weights, "clearing program", model)
    return model, weights


async def bench_random_programs(io, cfg, rng, programs=8):
    """Random valid programs: every other one with idle host input and a stalling host
    output, the others with a host that keeps up, where the cycle counts must match the
    cycle model's too."""
    model, weights = await _setup(io, cfg, rng)
    for k in range(programs):
        program, host_rows = random_program(cfg, rng, length=int(rng.integers(4, 24)))
        host = {"in_idle": 0.2, "out_stall": 0.3} if k % 2 else {}
        await check_program(io, cfg, rng, program, host_rows, weights, f"random program {k}",
                            model, **host)


async def bench_invalid_programs(io, cfg, rng):
    """Every kind of bad instruction, after a few good ones: the core must stop with the
    model's error code at the model's instruction (and the code the ISA names), and then
    run the next program correctly."""
    model, weights = await _setup(io, cfg, rng)
    for k, (bad, code) in enumerate(_bad_instructions(cfg, 0)):
        prefix, host_rows = random_program(cfg, rng, length=int(rng.integers(0, 5)))
        prefix = [i for i in prefix[:-1]
                  if i.op not in (Opcode.READ_WEIGHTS, Opcode.MATMUL, Opcode.HALT)]
        program = prefix + [bad, isa.halt()]
        got = await check_program(io, cfg, rng, program, host_rows, weights,
                                  f"bad instruction {bad}", model)
        if (got.error, got.error_pc) != (code, len(prefix)):
            raise TestbenchError(f"[{io.simulator} core {cfg.name}] {bad}: {got.error.name} at "
                                 f"{got.error_pc}, the ISA says {code.name} at {len(prefix)}")
    for k in range(4):   # and bad instructions in random places of random programs
        program, host_rows = random_program(cfg, rng, length=int(rng.integers(2, 12)),
                                            invalid=0.2)
        await check_program(io, cfg, rng, program, host_rows, weights,
                            f"random invalid program {k}", model)


async def bench_hazards(io, cfg, rng):
    """Dependent instructions back to back with no NOP between them: every hazard is kept
    in hardware."""
    model, weights = await _setup(io, cfg, rng)
    n = min(cfg.rows, cfg.ub_depth // 4, cfg.acc_depth // 2)
    lo, hi = cfg.operand_min, cfg.operand_max + 1
    rows = list(rng.integers(lo, hi, (2 * n, cfg.ub_lanes)))
    program = [
        isa.config(isa.ConfigParam.MULTIPLIER, 1 << 30), isa.config(isa.ConfigParam.SHIFT, 6),
        isa.read_host(0, 2 * n),                        # RAW: MATMUL reads these rows
        isa.read_weights(0, 2),
        isa.matmul(0, 0, n),                            # tile 0
        isa.matmul(n, 0, n, accumulate=True),           # tile 1, adds to the same rows
        isa.activate(0, 2 * n, n),                      # RAW on the accumulators
        isa.matmul(2 * n, n, n, switch=False),          # RAW on the activated UB rows
        isa.config(isa.ConfigParam.RELU, 1),            # must not change rows in flight
        isa.activate(n, 0, n),
        isa.write_host(0, n),                           # RAW on activated UB rows
        isa.matmul(1, n, 1, accumulate=True, switch=False),
        isa.matmul(2, n, 1, accumulate=True, switch=False),  # adds to the row just written
        isa.activate(0, 2 * n, n),
        isa.activate(n, 0, n),                  # taken while the rows before still drain:
        isa.matmul(2 * n, 0, n, switch=False),  # RAW on those (the issuer covers both)
        isa.activate(0, n, n),
        isa.activate(n, 2 * n, n),              # the same, the rows before lower down
        isa.matmul(n, 0, n, switch=False),
        isa.sync(),
        isa.matmul(0, 0, 1, accumulate=True, switch=False),  # one row into an idle half,
        isa.activate(0, 2 * n, 1),                           # read back at once (RAW)
        isa.write_host(0, 2 * n, from_acc=True),
        isa.halt(),
    ]
    await check_program(io, cfg, rng, program, rows, weights, "hazard program", model)

    # Host transfers run beside the sequencer: with a slow host, each of these pairs
    # would break if the hardware did not hold the second instruction back. More rows than
    # the answer queues hold, so that the transfers lag behind.
    n = min(cfg.acc_depth // 2, cfg.ub_depth // 2, 8)
    program = [
        isa.read_weights(0, 2),
        isa.matmul(0, 0, n, switch=True),                    # accumulator rows to read out
        isa.write_host(n, 1),                                # a transfer of other rows,
        isa.sync(),                                          # the products in,
        isa.read_host(0, n),                                 # then a slow one: the host idles
        isa.activate(0, 0, n),                               # WAW on UB rows 0..n
        isa.write_host(0, n),                                # must see the activated rows
        isa.activate(n, 0, n),                               # WAR: after WRITE_HOST read them
        isa.write_host(0, n, from_acc=True),                 # slow: the host stalls
        isa.matmul(n, 0, n, switch=True),                    # WAR on accumulator rows 0..n
        isa.write_host(0, 2 * n, from_acc=True),
        isa.halt(),
    ]
    rows = list(rng.integers(lo, hi, (n, cfg.ub_lanes)))
    await check_program(io, cfg, rng, program, rows, weights, "host transfer hazards", model,
                        in_idle=0.9, out_stall=0.8)

    # A transfer of UB rows to the host goes on while a MATMUL waits on the activation it
    # reads from: who has the UB's read port meanwhile decides the cycles, which the cycle
    # model must predict (the host takes every row at once).
    n = min(cfg.rows, cfg.ub_depth // 3, cfg.acc_depth // 2)
    program = [
        isa.read_weights(0, 1),
        isa.matmul(0, 0, n),                    # accumulator rows 0..n
        isa.sync(),
        isa.write_host(0, 2 * n),               # the DMA engine reads UB rows 0..2n,
        isa.activate(0, 2 * n, n),              # beside it UB rows 2n..3n are written,
        isa.matmul(2 * n, n, n, switch=False),  # which this reads: it waits (RAW)
        isa.activate(0, 0, 1),                  # WAR: waits for the transfer to end,
        isa.matmul(0, n, 1, switch=False),      # and this for it (RAW): the end shows
        isa.halt(),
    ]
    rows = list(rng.integers(lo, hi, (n, cfg.ub_lanes)))
    await check_program(io, cfg, rng, program, rows, weights,
                        "a transfer beside a waiting MATMUL", model)


async def bench_streaming(io, cfg, rng):
    """Back-to-back MATMULs over prefetched tiles: the counters say how busy the matrix
    unit was, and no vector waited for weights once the first tile was in."""
    model, weights = await _setup(io, cfg, rng)
    n = min(cfg.ub_depth, cfg.acc_depth)
    program = [isa.read_weights(0, 2)]
    for t in range(4):
        program.append(isa.matmul(0, 0, n, accumulate=t > 0))
        program.append(isa.read_weights(2 + t, 1))
    program.append(isa.halt())
    got = await check_program(io, cfg, rng, program, [], weights, "streaming program", model)
    if n >= cfg.rows and got.weight_stall_cycles > cfg.rows + 4:
        raise TestbenchError(f"[{io.simulator} core {cfg.name}] {got.weight_stall_cycles} "
                             f"weight-stall cycles for tiles of {n} >= {cfg.rows} rows")
    ideal = 4 * n
    if got.cycles > ideal + 2 * matrix_unit_latency(cfg) + 20:
        raise TestbenchError(f"[{io.simulator} core {cfg.name}] {got.cycles} cycles for "
                             f"{ideal} rows of products")


async def bench_abort(io, cfg, rng):
    """Abort a read-out that the host does not take: the core must stop, and no row of it
    may leak into the next program's read-out."""
    model, weights = await _setup(io, cfg, rng)
    rows = list(rng.integers(cfg.operand_min, cfg.operand_max + 1, (cfg.ub_depth, cfg.ub_lanes)))
    fill = [isa.read_host(0, cfg.ub_depth), isa.halt()]      # rows that differ from each other
    await check_program(io, cfg, rng, fill, rows, weights, "filling program", model)
    program = [isa.write_host(0, cfg.ub_depth), isa.write_host(0, cfg.acc_depth, from_acc=True),
               isa.halt()]
    await load_program(io, cfg, program)      # it only reads: the memories stay as they are
    stuck = StreamSink("host_out", host_out_codec(cfg), stall=1.0)
    await pulse_start(io, 0)
    until = io.cycle + 12
    await run_cycles(io, [stuck], until=lambda: io.cycle >= until, max_cycles=100)
    io.set("control__abort", 1)
    await io.tick()
    io.set("control__abort", 0)
    await io.settle()
    state = CoreState(io.get("status__state"))
    await io.tick()
    if state is not CoreState.IDLE:
        raise TestbenchError(f"[{io.simulator} core {cfg.name}] state {state.name} after abort")
    dump_at = cfg.program_depth - 3
    got = await run_on_core(io, cfg, start=dump_at, rng=rng)
    _compare(io, cfg, "memory dump after an aborted read-out", got, model.run(dump_at))


async def bench_abort_while_filling(io, cfg, rng):
    """Abort in each cycle in which the fetch stage fills (:func:`fetch_fill_cycles`): the
    core must stop before its first instruction does anything (no host row, state IDLE,
    and it stays so), and the memories must be as the model left them. The counters must
    read 0 from the cycle after START on."""
    model, weights = await _setup(io, cfg, rng)
    await load_program(io, cfg, [isa.write_host(0, 1), isa.halt()])
    for cycle in range(fetch_fill_cycles(cfg)):
        for _ in range(rest_cycles(cfg)):
            await io.tick()
        sink = StreamSink("host_out", host_out_codec(cfg))
        await pulse_start(io, 0)
        for k in range(cycle + 1):          # abort in the cycle'th cycle after START
            io.set("control__abort", int(k == cycle))
            if k == 0:
                await io.settle()
                counters = {name: io.get(f"status__{name}") for name in (
                    "cycles", "mxu_busy_cycles", "weight_stall_cycles", "instructions")}
                if any(counters.values()):  # START clears them (the last run left some)
                    raise TestbenchError(f"[{io.simulator} core {cfg.name}] counters "
                                         f"{counters} in the cycle after START")
            await io.tick()
        io.set("control__abort", 0)
        states = set()
        until = io.cycle + 4 * cfg.rows + 20
        await run_cycles(io, [sink], until=lambda: io.cycle >= until, max_cycles=200,
                         on_cycle=lambda io: states.add(CoreState(io.get("status__state"))))
        if sink.items or states != {CoreState.IDLE}:
            raise TestbenchError(f"[{io.simulator} core {cfg.name}] aborted {cycle} cycles "
                                 f"into the fill: states {sorted(s.name for s in states)}, "
                                 f"{len(sink.items)} host rows")
    dump_at = cfg.program_depth - 3
    got = await run_on_core(io, cfg, start=dump_at, rng=rng)
    _compare(io, cfg, "memory dump after the aborted starts", got, model.run(dump_at))


BENCHES = {
    "random_programs": bench_random_programs,
    "abort": bench_abort,
    "abort_while_filling": bench_abort_while_filling,
    "invalid_programs": bench_invalid_programs,
    "hazards": bench_hazards,
    "streaming": bench_streaming,
}


async def run_steps(io, cfg, steps, *, max_cycles=10_000_000, emit=None):
    """Run driver :class:`~tpuer.driver.Step` s (any iterable) one after another on the
    core (weights loaded before each); returns one :class:`CoreRun` per step, or hands
    each to ``emit(step, run)`` as it ends. Raises :class:`~tpuer.device.CycleBudgetError`
    when the core's cycles pass ``max_cycles`` in all."""
    from ..device import CycleBudgetError
    idle_inputs(io)
    runs, used = [], 0
    for step in steps:
        await load_weights(io, cfg, step.weights)
        await load_program(io, cfg, step.program)
        # A core that hangs fails the bench at this bound, long before any budget.
        bound = 100 * (len(step.host_in) + 100) + sum(4 * i.count + 50 for i in step.program)
        left = max_cycles - used
        try:
            run = await run_on_core(io, cfg, host_in=step.host_in,
                                    max_cycles=min(bound, left + 2))
        except TestbenchError:
            if bound <= left + 2:
                raise
            run = None
        if run is None or run.cycles > left:
            raise CycleBudgetError(f"the core ran past the call's cycle budget of "
                                   f"{max_cycles:,} cycles (max_cycles)")
        used += run.cycles
        if emit is None:
            runs.append(run)
        else:
            emit(step, run)
    return runs
