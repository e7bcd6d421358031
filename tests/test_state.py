"""The state model of ``tpuer.Device``: every call starts from a core as it is after reset,
whatever the calls before it left, on every back end; and every call has a cycle budget."""

import numpy as np
import pytest

import tpuer
from tpuer import isa
from tpuer.isa import CoreState, ErrorCode

from conftest import require_simulator

CFG = tpuer.Config(rows=2, cols=2, ub_depth=12, acc_depth=8, weight_tiles=4, program_depth=64)


def dirty_everything(device):
    """A call that leaves something in every part of the core: UB rows, accumulator rows,
    weight memory, a tile in the Weight FIFO, non-zero active weights, activation
    parameters, and instruction words past the next programs."""
    cfg = device.config
    rows = np.full((4, cfg.ub_lanes), 7, np.int8)
    weights = np.full((3, cfg.rows, cfg.cols), 5, np.int8)
    program = [isa.read_weights(0, 2), isa.read_host(2, 4), isa.matmul(2, 3, 4),
               isa.config(isa.ConfigParam.BIAS, 1000), isa.config(isa.ConfigParam.RELU, 1),
               isa.activate(3, 8, 4)] + [isa.nop()] * 20 + [isa.halt()]
    result = device.run_program(program, weights=weights, host_in=rows)
    assert result.state is CoreState.HALTED


def check_fresh(device):
    """The calls after it see a core just out of reset."""
    cfg = device.config
    n = 4
    # What a program reads before writing is zero: UB rows, accumulator rows, products
    # of the active weights; ACTIVATE uses the default parameters (0 stays 0); the Weight
    # FIFO is empty, so a switch fails at once.
    program = [isa.write_host(0, cfg.ub_depth), isa.write_host(0, cfg.acc_depth, from_acc=True),
               isa.matmul(8, 0, n, switch=False), isa.write_host(0, n, from_acc=True),
               isa.activate(0, 0, n), isa.write_host(0, n),
               isa.read_weights(0, 1), isa.matmul(0, 0, 1),
               isa.write_host(0, 1, from_acc=True),
               isa.matmul(0, 0, 1), isa.halt()]
    result = device.run_program(program)
    assert (result.state, result.error, result.error_pc) == \
        (CoreState.ERROR, ErrorCode.NO_WEIGHTS, 9)
    rows = cfg.ub_depth + cfg.acc_depth + 2 * n + 1
    assert result.host_out.shape == (rows, cfg.ub_lanes)
    assert not result.host_out.any()
    # A program without HALT runs on through zero words (NOP) to the end of the
    # instruction memory, whatever the calls before left there.
    dirty_everything(device)
    result = device.run_program([isa.nop()])
    assert (result.state, result.error, result.error_pc) == \
        (CoreState.ERROR, ErrorCode.PROGRAM_END, cfg.program_depth)
    assert device.stats["instructions"] == cfg.program_depth


@pytest.mark.parametrize("backend", ["golden", "pysim", "verilator", "icarus"])
def test_every_call_starts_from_reset(backend):
    if backend in ("verilator", "icarus"):
        require_simulator(backend)
    device = tpuer.Device(CFG, backend=backend)
    dirty_everything(device)
    check_fresh(device)


def test_the_issues_reproductions_give_the_documented_results():
    device = tpuer.Device()
    device.run_program([isa.read_weights(0, 1), isa.halt()])
    result = device.run_program([isa.matmul(0, 0, 1, switch=True), isa.halt()])
    assert (result.state, result.error, result.error_pc) == \
        (CoreState.ERROR, ErrorCode.NO_WEIGHTS, 0)
    device.run_program([isa.nop(), isa.nop(), isa.read_host(0, 1), isa.halt()],
                       host_in=np.ones((1, 8), np.int8))
    result = device.run_program([isa.nop()])
    assert (result.state, result.error, result.error_pc) == \
        (CoreState.ERROR, ErrorCode.PROGRAM_END, 1024)


@pytest.mark.parametrize("backend", ["golden", "pysim", "verilator"])
def test_a_call_past_its_cycle_budget_is_stopped(backend, monkeypatch):
    """Refused up front by the estimate on the RTL back ends, and stopped as it passes the
    budget when the estimate lets it through; stopped on the golden one (whose run is the
    cycle model)."""
    if backend == "verilator":
        require_simulator(backend)
    device = tpuer.Device(CFG, backend=backend)
    program = [isa.read_weights(0, 1), isa.matmul(0, 0, 8)] + \
        [isa.matmul(0, 0, 8, switch=False)] * 30 + [isa.halt()]
    golden = tpuer.Device(CFG)
    assert golden.run_program(program).state is CoreState.HALTED
    cycles = golden.stats["cycles"]
    with pytest.raises(tpuer.CycleBudgetError, match="budget"):
        device.run_program(program, max_cycles=cycles - 1)
    assert device.run_program(program, max_cycles=cycles).state is CoreState.HALTED
    if backend != "golden":
        # An estimate too low to refuse it: the RTL's run itself stops at the budget.
        monkeypatch.setattr(device, "_refuse_above", lambda *args: 0)
        with pytest.raises(tpuer.CycleBudgetError, match="ran past the call's cycle budget"):
            device.run_program(program, max_cycles=cycles - 1)
        assert device.run_program(program, max_cycles=cycles).state is CoreState.HALTED


def test_a_product_over_its_budget_is_refused_with_the_estimate():
    device = tpuer.Device()
    a = np.zeros((10**6, 256), np.int8)
    b = np.zeros((256, 256), np.int8)
    with pytest.raises(tpuer.CycleBudgetError, match=r"about [\d,]+ cycles") as error:
        device.matmul(a, b)
    # at least the multiply's own cycles: a row of K tiles per N tile
    estimate = int(str(error.value).split("about ")[1].split(" cycles")[0].replace(",", ""))
    assert estimate >= 10**6 * 32 * 32
    assert "max_cycles=30,000,000" in str(error.value)
    for bad in (0, -5, 1.5, True, "10"):
        with pytest.raises((TypeError, ValueError), match="max_cycles"):
            device.matmul(a[:1], b, max_cycles=bad)
    assert device.matmul(a[:3], b, max_cycles=np.int64(10**7)).shape == (3, 256)


def test_a_tiny_budget_is_refused_with_the_whole_estimate():
    """A budget far below one program's cycles still gets the whole call's estimate, which
    is what the call then takes."""
    device = tpuer.Device(tpuer.Config(rows=4, cols=4))
    a, b = np.ones((64, 32), np.int8), np.ones((32, 16), np.int8)
    with pytest.raises(tpuer.CycleBudgetError, match=r"about [\d,]+ cycles") as error:
        device.matmul(a, b, max_cycles=22)
    estimate = int(str(error.value).split("about ")[1].split(" cycles")[0].replace(",", ""))
    device.matmul(a, b)
    assert estimate == device.stats["cycles"]


def test_the_board_clears_what_earlier_calls_left():
    """The serial back end on a simulated board (its RTL behind a UART on Verilator)
    clears, before each call, what the calls before it left in the core."""
    require_simulator("verilator")
    from tpuer.sim.board_sim import SimulatedBoard
    with SimulatedBoard(CFG) as board:
        device = tpuer.Device(CFG, backend="serial", port=board.port, timeout=2.0)
        dirty_everything(device)
        check_fresh(device)


def test_a_product_is_planned_in_bounded_memory():
    """The programs of a product are made as they run: the memory a product takes beyond
    its operands and result stays small however many programs it runs."""
    import tracemalloc
    rng = np.random.default_rng()
    cfg = tpuer.Config(rows=4, cols=4, ub_depth=32, acc_depth=16, weight_tiles=8)
    device = tpuer.Device(cfg)
    a = rng.integers(-128, 128, (3000, 40)).astype(np.int8)
    b = rng.integers(-128, 128, (40, 6)).astype(np.int8)
    device.matmul(a[:1], b)          # the modules it imports are not the product's memory
    tracemalloc.start()
    try:
        result = device.matmul(a, b)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert np.array_equal(result, a.astype(np.int64) @ b)
    assert device.stats["programs"] > 2000
    # All the programs and their input rows at once took 18.6 MB.
    assert peak < 2 * result.nbytes + 1_500_000, peak


def test_long_work_shows_its_progress(capsys):
    rng = np.random.default_rng()
    a = rng.integers(-128, 128, (40, 40)).astype(np.int8)
    b = rng.integers(-128, 128, (40, 6)).astype(np.int8)       # 10 K tiles, 8 fit: 20 programs
    device = tpuer.Device(tpuer.Config(rows=4, cols=4, ub_depth=32, acc_depth=16,
                                       weight_tiles=8))
    seen = []
    device.matmul(a, b, progress=lambda done, total: seen.append((done, total)))
    programs = device.stats["programs"]
    assert programs > 5 and seen == [(k, programs) for k in range(1, programs + 1)]
    device.matmul(a, b, progress=True)
    bar = capsys.readouterr().err
    assert f"tpuer matmul [{'#' * 30}] {programs}/{programs}" in bar
    device.matmul(a, b)                 # not a terminal, and short: no bar
    assert capsys.readouterr().err == ""
