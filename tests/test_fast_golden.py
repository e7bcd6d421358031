"""The golden model's fast paths against plain interpretation: every MATMUL group as one
batched product (with saturation), whole-block memory writes, remembered walks and
timings. The oracle here runs the instructions one row at a time, as the hardware does."""

import copy
from collections import deque

import numpy as np
import pytest

import tpuer
from tpuer import isa
from tpuer.isa import ConfigParam, CoreState, MatmulFlag, Opcode, WriteHostFlag
from tpuer.sim import timing_model
from tpuer.sim.activation_model import ActivationParams, requantize
from tpuer.sim.isa_model import CoreModel
from tpuer.sim.numerics import saturate
from tpuer.tb.core_tb import random_program

from conftest import seed as suite_seed

# acc_width 18 is the least a 4-row array allows: a few accumulating products saturate.
NARROW = tpuer.Config(rows=4, cols=4, acc_width=18, ub_depth=32, acc_depth=32, weight_tiles=4,
                      weight_fifo_tiles=2)
SQUARE = tpuer.Config(rows=4, cols=4, ub_depth=32, acc_depth=32, weight_tiles=4)


def plain_run(model, program, host_rows):
    """The state ``model`` ends in after ``program`` (no errors), one row at a time."""
    cfg = model.cfg
    rows = deque(np.asarray(host_rows, np.int64))
    out = []
    tiles = deque(model.tiles)
    active = model.active.copy()
    params = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in model.params.items()}
    for instr in program:
        op, a, b, n = instr.op, instr.a, instr.b, instr.count
        if op is Opcode.HALT:
            break
        if op is Opcode.READ_HOST:
            for k in range(n):
                model.ub.rows[a + k] = rows.popleft()
        elif op is Opcode.WRITE_HOST:
            source = model.acc if instr.flags & WriteHostFlag.FROM_ACC else model.ub
            out.extend(source.rows[a + k].copy() for k in range(n))
        elif op is Opcode.READ_WEIGHTS:
            tiles.extend(model.weights[a + t].copy() for t in range(n))
        elif op is Opcode.MATMUL and n:
            if instr.flags & MatmulFlag.SWITCH:
                active = tiles.popleft()
            for k in range(n):
                product = model.ub.rows[a + k, :cfg.rows] @ active
                if instr.flags & MatmulFlag.ACCUMULATE:
                    product = saturate(model.acc.rows[b + k] + product, cfg.acc_width)
                model.acc.rows[b + k] = product
        elif op is Opcode.ACTIVATE:
            p = ActivationParams(cfg, bias=params[ConfigParam.BIAS],
                                 multiplier=params[ConfigParam.MULTIPLIER],
                                 shift=params[ConfigParam.SHIFT],
                                 zero_point=params[ConfigParam.ZERO_POINT],
                                 relu=bool(params[ConfigParam.RELU]),
                                 rounding=params[ConfigParam.ROUNDING],
                                 clamp_min=params[ConfigParam.CLAMP_MIN],
                                 clamp_max=params[ConfigParam.CLAMP_MAX])
            for k in range(n):
                model.ub.rows[b + k, :cfg.cols] = requantize(model.acc.rows[a + k], p)
        elif op is Opcode.CONFIG:
            param = ConfigParam(instr.flags)
            if isinstance(params[param], np.ndarray):
                params[param][slice(None) if n == isa.ALL_LANES else n] = instr.value
            else:
                params[param] = instr.value
    return out, tiles, active


@pytest.mark.parametrize("cfg", [NARROW, SQUARE], ids=["acc18", "acc32"])
def test_batched_model_equals_row_by_row(cfg):
    """Random valid programs, big UB values so that sums saturate with 18-bit words: the
    batched model ends in the same state and sends the same rows as plain interpretation."""
    rng = np.random.default_rng(suite_seed())
    saturated = 0
    for trial in range(150):
        program, host_rows = random_program(cfg, rng, length=int(rng.integers(4, 40)))
        fast = CoreModel(cfg)
        fast.load_weights(0, rng.integers(-128, 128, (cfg.weight_tiles, cfg.rows, cfg.cols)))
        fast.ub.rows[:] = rng.integers(-128, 128, fast.ub.rows.shape)
        fast.acc.rows[:] = rng.integers(cfg.acc_min, cfg.acc_max + 1, fast.acc.rows.shape)
        plain = copy.deepcopy(fast)
        fast.load_program(program)
        result = fast.run(0, host_in=np.array(host_rows, np.int64).reshape(-1, cfg.ub_lanes),
                          timed=False)
        out, tiles, active = plain_run(plain, program, host_rows)
        where = f"trial {trial}: " + "; ".join(map(str, program))
        assert result.state is CoreState.HALTED, where
        assert len(result.host_out) == len(out), where
        for got, want in zip(result.host_out, out):
            assert np.array_equal(got, want), where
        assert np.array_equal(fast.acc.rows, plain.acc.rows), where
        assert np.array_equal(fast.ub.rows, plain.ub.rows), where
        assert np.array_equal(fast.active, active), where
        assert len(fast.tiles) == len(tiles), where
        assert all(np.array_equal(x, y) for x, y in zip(fast.tiles, tiles)), where
        saturated += int(np.any(np.abs(plain.acc.rows) == cfg.acc_max))
    if cfg.acc_width == 18:
        assert saturated > 10         # the saturating path was taken


def test_remembered_timing_equals_stepping():
    """A run's remembered timing (counters and end state) equals stepping it again
    clock by clock, for random programs, valid and not, run one after another."""
    rng = np.random.default_rng(suite_seed())
    cfg = SQUARE
    model = CoreModel(cfg)
    for trial in range(60):
        program, host_rows = random_program(cfg, rng, length=int(rng.integers(4, 30)),
                                            invalid=0.05)
        model.load_program(program)
        start = model.timing.state()
        stepped = copy.deepcopy(model.timing)
        walk = model._walk(0)
        want = stepped._step_run(walk.words, walk.state is CoreState.ERROR, len(host_rows),
                                 10_000_000, None)
        for _ in range(2):            # the first run is stepped and kept, the second not
            model.timing.restore(start)
            got = model.timing.run(walk.words, error=walk.state is CoreState.ERROR,
                                   host_rows=len(host_rows))
            assert got == want, f"trial {trial}"
            assert model.timing.state() == stepped.state(), f"trial {trial}"
        model.timing.restore(start)    # the ISA state and the timing state run together
        model.run(0, host_in=np.array(host_rows, np.int64).reshape(-1, cfg.ub_lanes))


def test_remembered_timing_keeps_the_budget():
    """A remembered run longer than the budget is refused as a stepped one is."""
    cfg = SQUARE
    program = [isa.read_host(0, 8), isa.halt()]
    model = CoreModel(cfg)
    model.load_program(program)
    cycles = model.run(0, host_in=np.zeros((8, cfg.ub_lanes), np.int64)).cycles
    again = CoreModel(cfg)
    again.load_program(program)
    with pytest.raises(tpuer.CycleBudgetError):
        again.run(0, host_in=np.zeros((8, cfg.ub_lanes), np.int64), max_cycles=cycles - 1)
    assert again.run(0, host_in=np.zeros((8, cfg.ub_lanes), np.int64),
                     max_cycles=cycles).cycles == cycles


def test_timing_ignores_config_values_only():
    """The timing key drops a CONFIG's value (timing does not depend on it) and nothing
    else: two programs that differ in a MATMUL's rows have different keys."""
    one = isa.config(ConfigParam.BIAS, 5).word
    two = isa.config(ConfigParam.SHIFT, 3, 1).word
    assert timing_model._timing_word(one) == timing_model._timing_word(two)
    assert timing_model._timing_word(isa.matmul(0, 0, 3).word) != \
        timing_model._timing_word(isa.matmul(0, 0, 4).word)


def test_model_compiled_once():
    """A second run of a model reuses its plan (and its programs) for that configuration,
    and another configuration gets a plan of its own."""
    rng = np.random.default_rng(1)
    model = tpuer.quantize([tpuer.Dense(rng.normal(0, 0.1, (20, 12)), np.zeros(12))],
                           rng.normal(0, 1, (16, 20)))
    x = model.quantize_input(rng.normal(0, 1, (5, 20)))
    device = tpuer.Device(SQUARE)
    first = device.run(model, x)
    plan = model.plans[SQUARE]
    assert np.array_equal(device.run(model, x), first)
    assert model.plans[SQUARE] is plan
    other = tpuer.Config(rows=8, cols=8)
    assert np.array_equal(tpuer.Device(other).run(model, x), model.reference(x))
    assert set(model.plans) == {SQUARE, other}
