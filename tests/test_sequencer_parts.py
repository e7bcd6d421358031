"""The sequencer's parts on their own, under amaranth.sim, against the golden models: the
instruction checks against the ISA model's, the parameter registers against its CONFIG,
the hazard tracker against the cycle model's rules, the counters against a count of their
events. Every form of each part."""

from dataclasses import replace

import numpy as np
import pytest
from amaranth.sim import Simulator

from tpuer import Config
from tpuer.hw.counters import PerformanceCounters, PipelinedCounters
from tpuer.hw.hazard_tracker import HazardTracker, RegisteredHazardTracker
from tpuer.hw.instruction_checks import InstructionChecks
from tpuer.hw.parameter_registers import ParameterRegisters, RegisteredParameterRegisters
from tpuer.isa import (ALL_LANES, DEFINED_FLAGS, ConfigParam, DMAKind, ErrorCode, Instruction,
                       Opcode, WriteHostFlag, config, config_ranges, dma_kind)
from tpuer.sim.activation_model import shift_places
from tpuer.sim.isa_model import CoreModel
from tpuer.sim.timing_model import WorkUnderWay, may_go

from conftest import seed

CONFIGS = [
    Config(rows=2, cols=2, ub_depth=12, acc_depth=8, weight_tiles=4, program_depth=64),
    Config(rows=4, cols=8, ub_depth=100, acc_depth=60, weight_tiles=6, weight_fifo_tiles=2),
    Config(rows=8, cols=8, multiply_latency=3, memory_read_latency=2),
]


def _simulate(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8, if_exists=True)
    sim.add_testbench(bench)
    sim.run()


def _random_instruction(rng, cfg):
    """An instruction word that lands near the checks' edges more often than not: a defined
    opcode (mostly), defined flags (mostly), fields around the memories' depths."""
    def field(depth):
        return int(rng.choice([rng.integers(0, 1 << 16), rng.integers(0, depth + 3),
                               max(0, depth - int(rng.integers(0, 4)))]))
    opcode = int(rng.integers(0, 16)) if rng.random() < 0.1 else int(rng.choice(
        [code.value for code in Opcode]))
    flags = int(rng.integers(0, 16)) if rng.random() < 0.2 else \
        DEFINED_FLAGS.get(Opcode(opcode) if opcode in {c.value for c in Opcode} else None, 0) \
        & int(rng.integers(0, 16))
    depth = max(cfg.ub_depth, cfg.acc_depth)
    reserved = int(rng.integers(0, 256)) if rng.random() < 0.05 else 0
    if opcode == Opcode.CONFIG.value and rng.random() < 0.8:
        param = ConfigParam(int(rng.integers(0, len(ConfigParam))))
        low, high = config_ranges(cfg)[param]
        value = int(rng.choice([low, high, low - 1, high + 1, rng.integers(low, high + 1)]))
        value &= (1 << 32) - 1
        lane = int(rng.choice([ALL_LANES, rng.integers(0, cfg.cols + 2)]))
        return Instruction(opcode, a=value & 0xFFFF, b=value >> 16, count=lane,
                           flags=int(param), reserved=reserved)
    return Instruction(opcode, a=field(depth), b=field(depth), count=field(depth // 2),
                       flags=flags, reserved=reserved)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_instruction_checks_match_the_isa_model(cfg):
    rng = np.random.default_rng([seed(), cfg.rows, cfg.cols, cfg.ub_depth])
    dut = InstructionChecks(cfg)
    model = CoreModel(cfg)
    words = [_random_instruction(rng, cfg) for _ in range(3000)]
    seen, wrong = set(), []

    async def bench(ctx):
        for instr in words:
            ctx.set(dut.instruction.as_value(), instr.encode())
            want = model.static_check(instr)
            got = ctx.get(dut.error)
            seen.add(want)
            if got != want or (ctx.get(dut.bad) != 0) != (want is not ErrorCode.NONE) or \
                    ctx.get(dut.a_end) != instr.a + instr.count:
                wrong.append((str(instr), got, want))

    _simulate(dut, bench)
    assert wrong == [], wrong[:5]
    # every static error was met
    assert seen >= {ErrorCode.NONE, ErrorCode.BAD_OPCODE, ErrorCode.BAD_FIELD,
                    ErrorCode.UB_RANGE, ErrorCode.ACC_RANGE, ErrorCode.BAD_CONFIG}


@pytest.mark.parametrize("form", [ParameterRegisters, RegisteredParameterRegisters])
@pytest.mark.parametrize("handed_on", [(), (ConfigParam.BIAS, ConfigParam.MULTIPLIER)])
def test_parameter_registers_follow_the_isa_models_config(form, handed_on):
    cfg = Config(rows=2, cols=3)
    rng = np.random.default_rng([seed(), len(handed_on)])
    dut = form(cfg, handed_on=handed_on)
    latency = 2 if form is RegisteredParameterRegisters else 1
    model = CoreModel(cfg)
    wrong = []

    def expected():
        right, left = shift_places(model.params[ConfigParam.SHIFT])
        per_lane = {"bias": model.params[ConfigParam.BIAS], "shift": right,
                    "multiplier": model.params[ConfigParam.MULTIPLIER], "left_shift": left}
        row = {name: int(model.params[ConfigParam[name.upper()]]) for name in
               ("zero_point", "relu", "rounding", "clamp_min", "clamp_max")}
        return {name: list(values) for name, values in per_lane.items()}, row

    async def bench(ctx):
        history = [expected()] * latency
        for step in range(400):
            writes = rng.random() < 0.5
            param = ConfigParam(int(rng.integers(0, len(ConfigParam))))
            low, high = config_ranges(cfg)[param]
            value = int(rng.integers(low, high + 1))
            lane = int(rng.choice([ALL_LANES, rng.integers(0, cfg.cols)]))
            instr = config(param, value, lane)
            ctx.set(dut.write, writes)
            ctx.set(dut.param, int(param))
            ctx.set(dut.lane, lane)
            ctx.set(dut.value, value)
            handed = writes and param in handed_on
            if ctx.get(dut.param_write.en) != handed or (handed and (
                    ctx.get(dut.param_write.value) != value & 0xFFFFFFFF or
                    ctx.get(dut.param_write.all_lanes) != (lane == ALL_LANES) or
                    (lane != ALL_LANES and ctx.get(dut.param_write.lane) != lane))):
                wrong.append((step, "param_write"))
            if writes and param not in handed_on:
                model.configure(instr)
            await ctx.tick()
            history.append(expected())
            per_lane, row = history[-latency]
            got = ctx.get(dut.params)
            for name, values in per_lane.items():
                if name in ("bias", "multiplier") and ConfigParam[name.upper()] in handed_on:
                    continue
                if [int(v) for v in getattr(got, name)] != values:
                    wrong.append((step, name, list(getattr(got, name)), values))
            for name, value in row.items():
                if int(getattr(got, name)) != value:
                    wrong.append((step, name, getattr(got, name), value))

    _simulate(dut, bench)
    assert wrong == [], wrong[:5]


@pytest.mark.parametrize("form", [PerformanceCounters, PipelinedCounters])
def test_counters_count_their_events_from_the_last_clear(form):
    rng = np.random.default_rng([seed(), form is PipelinedCounters])
    dut = form()
    counts = {"cycles": 0, "mxu_busy_cycles": 0, "weight_stall_cycles": 0, "instructions": 0}
    wrong = []

    async def bench(ctx):
        nonlocal counts
        for step in range(2000):
            clear = rng.random() < 0.02
            # (a run starts in a cycle without events)
            running, vector, stall, retires = (0, 0, 0, 0) if clear else \
                (int(x) for x in rng.integers(0, 2, 4))
            for name, value in (("clear", clear), ("running", running),
                                ("vector_issued", vector), ("weight_stall", stall),
                                ("retires", retires)):
                ctx.set(getattr(dut, name), value)
            got = {name: ctx.get(getattr(dut, name)) for name in counts}
            if got != counts:
                wrong.append((step, got, dict(counts)))
            await ctx.tick()
            if clear:
                counts = dict.fromkeys(counts, 0)
            else:
                counts["cycles"] += running
                counts["mxu_busy_cycles"] += running & vector
                counts["weight_stall_cycles"] += running & stall
                counts["instructions"] += retires

    _simulate(dut, bench)
    assert wrong == [], wrong[:5]


def _random_work(rng, cfg, *, busy=None):
    """A random :class:`~tpuer.sim.timing_model.WorkUnderWay` whose rows lie inside the
    memories (as every range the sequencer hands over does)."""
    def rows(depth):
        low = int(rng.integers(0, depth))
        return low, int(rng.integers(low, depth + 1))
    coin = (lambda: bool(rng.integers(0, 2))) if busy is None else (lambda: busy)
    kind = DMAKind(int(rng.integers(0, 3)))
    issuer_busy = coin()
    return WorkUnderWay(
        dma_busy=coin(), dma_kind=kind,
        dma_rows=rows(cfg.acc_depth if kind is DMAKind.WRITE_ACC else cfg.ub_depth),
        # (an ACTIVATE in the issuer is an activation under way)
        activate_busy=coin() or issuer_busy, issuer_busy=issuer_busy,
        issuer_acc=rows(cfg.acc_depth),
        issuer_ub=rows(cfg.ub_depth), banks_busy=(coin(), coin()))


def _random_checked(rng, cfg, ops):
    """An instruction of one of ``ops`` that passes its checks."""
    op = ops[int(rng.integers(0, len(ops)))]
    depth_a = {Opcode.ACTIVATE: cfg.acc_depth}.get(op, cfg.ub_depth)
    flags = int(rng.integers(0, 2)) if op is Opcode.WRITE_HOST else \
        int(rng.integers(0, 4)) if op is Opcode.MATMUL else 0
    if op is Opcode.WRITE_HOST and flags:
        depth_a = cfg.acc_depth
    depth_b = cfg.acc_depth if op is Opcode.MATMUL else cfg.ub_depth
    n = int(rng.integers(1, min(depth_a, depth_b) + 1))
    return Instruction(op.value, a=int(rng.integers(0, depth_a - n + 1)),
                       b=int(rng.integers(0, depth_b - n + 1)), count=n, flags=flags)


def _set_decoded(ctx, port, instr):
    ctx.set(port.instr.as_value(), instr.encode())
    ctx.set(port.a_end, instr.a + instr.count)
    ctx.set(port.b_end, instr.b + instr.count)
    ctx.set(port.count_zero, instr.count == 0)
    ctx.set(port.is_op.as_value(), 1 << list(Opcode).index(instr.op))


def _set_work(ctx, dut, work):
    ctx.set(dut.transfer.busy, work.dma_busy)
    ctx.set(dut.transfer.kind, work.dma_kind)
    ctx.set(dut.transfer.low, work.dma_rows[0])
    ctx.set(dut.transfer.high, work.dma_rows[1])
    ctx.set(dut.activation.busy, work.issuer_busy)
    ctx.set(dut.activation.acc_low, work.issuer_acc[0])
    ctx.set(dut.activation.acc_high, work.issuer_acc[1])
    ctx.set(dut.activation.ub_low, work.issuer_ub[0])
    ctx.set(dut.activation.ub_high, work.issuer_ub[1])
    ctx.set(dut.activate_busy, work.activate_busy)
    ctx.set(dut.acc_bank_busy, work.banks_busy[0] | (work.banks_busy[1] << 1))


def _handed_over(work, before, priming):
    """The work under way after ``before`` (the instruction under way as the next one is
    loaded) retires, as the DMA engine and the activation issuer take it."""
    if priming:
        return work
    if before.op in (Opcode.READ_HOST, Opcode.WRITE_HOST):
        return replace(work, dma_busy=True, dma_kind=dma_kind(
            before.op is Opcode.READ_HOST, before.flags & WriteHostFlag.FROM_ACC),
            dma_rows=(before.a, before.a + before.count))
    if before.op is Opcode.ACTIVATE:
        ub = (before.b, before.b + before.count)
        if work.activate_busy:                  # the rows before still drain
            ub = (min(ub[0], work.issuer_ub[0]), max(ub[1], work.issuer_ub[1]))
        return replace(work, issuer_busy=True, activate_busy=True,
                       issuer_acc=(before.a, before.a + before.count), issuer_ub=ub)
    return work


@pytest.mark.parametrize("form", [HazardTracker, RegisteredHazardTracker])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_hazard_tracker_matches_the_cycle_models_rules(form, cfg):
    """An instruction is loaded while the one before it retires (handed over to the DMA
    engine or the activation issuer, or the run's first load); then the work under way
    changes as it may (busy flags fall, matrix rows come and go) while the rows stay, and
    the tracker's flag for the instruction's kind must say what the cycle model's rules
    say, in every cycle."""
    rng = np.random.default_rng([seed(), cfg.ub_depth, form is HazardTracker])
    dut = form(cfg)
    waiting = (Opcode.MATMUL, Opcode.ACTIVATE, Opcode.READ_HOST, Opcode.WRITE_HOST)
    flag = {Opcode.MATMUL: "matmul_free", Opcode.ACTIVATE: "activate_free",
            Opcode.READ_HOST: "dma_free", Opcode.WRITE_HOST: "dma_free"}
    wrong, blocked = [], 0

    async def bench(ctx):
        nonlocal blocked
        for trial in range(400):
            before = _random_checked(rng, cfg, (*waiting, Opcode.ACTIVATE))
            after = _random_checked(rng, cfg, waiting)
            priming = bool(rng.integers(0, 4) == 0)
            work = _random_work(rng, cfg)
            _set_decoded(ctx, dut.current, before)
            _set_decoded(ctx, dut.upcoming, after)
            _set_work(ctx, dut, work)
            ctx.set(dut.load, 1)
            ctx.set(dut.priming, priming)
            await ctx.tick()
            ctx.set(dut.load, 0)
            ctx.set(dut.priming, 0)
            _set_decoded(ctx, dut.current, after)
            work = _handed_over(work, before, priming)
            for cycle in range(3):
                _set_work(ctx, dut, work)
                want = may_go(cfg, after, work)
                blocked += not want
                if ctx.get(getattr(dut, flag[after.op])) != want:
                    wrong.append((trial, cycle, str(before), str(after), priming, work))
                await ctx.tick()
                # busy flags may fall, matrix rows come and go; the rows stay
                issuer_busy = work.issuer_busy and bool(rng.integers(0, 2))
                work = replace(work, dma_busy=work.dma_busy and bool(rng.integers(0, 2)),
                               issuer_busy=issuer_busy,
                               activate_busy=issuer_busy or (work.activate_busy and
                                                             bool(rng.integers(0, 2))),
                               banks_busy=tuple(bool(b) for b in rng.integers(0, 2, 2)))

    _simulate(dut, bench)
    assert wrong == [], wrong[:3]
    assert blocked > 100          # the waits were exercised
