"""Verilator with its host in C++ (the ``verilator`` back end of ``tpuer.Device``): the
same runs, rows and counters as the golden model, whose counters the cocotb benches hold
equal to the RTL's, on random programs valid and not, one after another on one core."""

import numpy as np
import pytest

import tpuer
from tpuer.driver import Step
from tpuer.sim.core_backends import GoldenBackend
from tpuer.tb.core_tb import random_program

from conftest import require_simulator, seed as suite_seed

CFG = tpuer.Config(rows=4, cols=4, ub_depth=64, acc_depth=64, weight_tiles=8)


def random_steps(rng, count):
    steps = []
    for _ in range(count):
        program, rows = random_program(CFG, rng, length=int(rng.integers(3, 40)), invalid=0.05)
        weights = rng.integers(-128, 128, (int(rng.integers(1, CFG.weight_tiles + 1)),
                                           CFG.rows, CFG.cols))
        steps.append(Step(program, weights, np.array(rows, np.int64).reshape(-1, CFG.ub_lanes)))
    return steps


def test_random_programs_equal_the_golden_model():
    require_simulator("verilator")
    from tpuer.sim.verilator_driver import VerilatorCoreBackend
    steps = random_steps(np.random.default_rng(suite_seed()), 60)
    golden = list(GoldenBackend(CFG).run(steps, max_cycles=10**9))
    rtl = list(VerilatorCoreBackend(CFG).run(steps, max_cycles=10**9))
    assert len(rtl) == len(golden)
    for index, ((_, got), (_, want)) in enumerate(zip(rtl, golden)):
        where = f"step {index}: " + "; ".join(map(str, steps[index].program))
        for name in ("state", "error", "error_pc", "cycles", "mxu_busy_cycles",
                     "weight_stall_cycles", "instructions"):
            assert getattr(got, name) == getattr(want, name), f"{name}, {where}"
        assert len(got.host_out) == len(want.host_out), where
        for g, w in zip(got.host_out, want.host_out):
            assert np.array_equal(np.asarray(g)[:len(w)], w), where


def test_device_on_verilator_keeps_its_budget():
    require_simulator("verilator")
    rng = np.random.default_rng(suite_seed())
    a = rng.integers(-128, 128, (50, 20)).astype(np.int8)
    b = rng.integers(-128, 128, (20, 9)).astype(np.int8)
    device = tpuer.Device(CFG, backend="verilator")
    assert np.array_equal(device.matmul(a, b), a.astype(np.int64) @ b)
    golden = tpuer.Device(CFG)
    golden.matmul(a, b)
    assert device.stats == golden.stats
    with pytest.raises(tpuer.CycleBudgetError):
        device.matmul(a, b, max_cycles=device.stats["cycles"] - 1)
