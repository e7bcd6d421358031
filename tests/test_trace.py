"""Cycle traces: their sums equal the counters, every idle cycle of the matrix unit has one
cause and the right one, the file Perfetto opens has every track, and ``tpuer profile``
writes its trace, pictures and table."""

import json

import numpy as np
import pytest

import tpuer
from tpuer import isa
from tpuer.cli import main
from tpuer.demo import DEMO_CONFIG, DIGITS_CNN_TFLITE
from tpuer.hw.sequencer import fetch_fill_cycles
from tpuer.sim.trace import StallCause, TRACKS

from conftest import require_simulator, seed as suite_seed

SMALL = tpuer.Config(rows=4, cols=4, ub_depth=64, acc_depth=64, weight_tiles=8)


def check_sums(device):
    """The trace of the last call adds up to its counters, and every cycle of every run
    has the matrix unit either taking a vector or idle for one cause."""
    sums = device.trace.sums()
    for name in ("cycles", "mxu_busy_cycles", "weight_stall_cycles", "instructions"):
        assert sums[name] == device.stats[name], name
    assert sums["mxu_busy_cycles"] + sum(sums["stalls"].values()) == sums["cycles"]
    assert sums["stalls"].get(StallCause.WEIGHT_TILE, 0) >= sums["weight_stall_cycles"]
    assert len(device.trace.runs) == device.stats["programs"]
    for _, recorder, _, _, _ in device.trace.runs:
        covered = 0
        for start, end, _ in recorder.intervals["cause"]:
            assert start == covered
            covered = end
        assert covered == recorder.cycles
    return sums


@pytest.mark.parametrize("shape", [(1, 3, 5), (40, 20, 9), (200, 16, 12), (30, 70, 4)])
def test_matmul_trace_adds_up(shape):
    rng = np.random.default_rng(suite_seed())
    m, k, n = shape
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    device = tpuer.Device(SMALL, trace=True)
    assert np.array_equal(device.matmul(a, b), a.astype(np.int64) @ b)
    sums = check_sums(device)
    assert sums["stalls"][StallCause.FETCH] == device.stats["programs"] * fetch_fill_cycles(SMALL)
    assert sums["host_rows_out"] == m * -(-n // SMALL.cols)
    useful = sum(scope[4]["useful MACs"] for scope in device.trace.scopes
                 if scope[0] == "programs")
    assert useful == m * k * n


def test_untraced_device_has_no_trace():
    device = tpuer.Device(SMALL)
    device.matmul(np.ones((2, 2), np.int8), np.ones((2, 2), np.int8))
    assert device.trace is None
    with pytest.raises(TypeError, match="trace must be"):
        tpuer.Device(SMALL, trace="yes")


def test_random_programs_trace_adds_up():
    """Random programs, valid and not (an error stops the run after its work drains)."""
    from tpuer.tb.core_tb import random_program
    rng = np.random.default_rng(suite_seed())
    device = tpuer.Device(SMALL, trace=True)
    for _ in range(30):
        program, rows = random_program(SMALL, rng, length=int(rng.integers(3, 30)),
                                       invalid=0.05)
        weights = rng.integers(-128, 128, (SMALL.weight_tiles, 4, 4)).astype(np.int8)
        # (a bad READ_HOST has no rows of its own, but the call counts them)
        wanted = sum(i.count for i in program if i.op is isa.Opcode.READ_HOST)
        host_in = np.zeros((max(wanted, len(rows)), SMALL.ub_lanes), np.int8)
        host_in[:len(rows)] = np.array(rows, np.int8).reshape(-1, SMALL.ub_lanes)
        device.run_program(program, weights=weights, host_in=host_in)
        check_sums(device)


def stalls_of(program, rows=0, tiles=2):
    device = tpuer.Device(SMALL, trace=True)
    result = device.run_program(program, weights=np.ones((tiles, 4, 4), np.int8),
                                host_in=np.ones((rows, SMALL.ub_lanes), np.int8))
    assert result.state is isa.CoreState.HALTED
    check_sums(device)
    return device.trace.sums()["stalls"]


def test_causes_host_input_result_path_hazard():
    """Programs built to wait for one thing show that cause, for about as long."""
    # The MATMUL reads the 40 rows the READ_HOST before it brings in: it waits for them.
    waits_for_input = stalls_of([isa.read_weights(0, 1), isa.read_host(0, 40),
                                 isa.matmul(0, 0, 40), isa.halt()], rows=40)
    assert waits_for_input.get(StallCause.HOST_INPUT, 0) >= 35
    # The second MATMUL writes the accumulator rows the WRITE_HOST is sending out.
    waits_for_output = stalls_of([isa.read_weights(0, 2), isa.matmul(0, 0, 30),
                                  isa.write_host(0, 30, from_acc=True),
                                  isa.matmul(0, 0, 30), isa.halt()])
    assert waits_for_output.get(StallCause.RESULT_PATH, 0) >= 20
    # The MATMUL reads the UB rows the ACTIVATE before it writes.
    waits_for_activation = stalls_of([isa.read_weights(0, 2), isa.matmul(0, 0, 20),
                                      isa.activate(0, 32, 20), isa.matmul(32, 32, 20),
                                      isa.halt()])
    assert waits_for_activation.get(StallCause.HAZARD, 0) >= 10
    # Nothing to wait for: only the fetch, the start-up and the drain.
    free = stalls_of([isa.read_weights(0, 1), isa.matmul(0, 0, 30), isa.halt()])
    assert set(free) <= {StallCause.FETCH, StallCause.START_UP, StallCause.DRAIN,
                         StallCause.SEQUENCER, StallCause.WEIGHT_TILE}
    assert StallCause.HOST_INPUT not in free and StallCause.HAZARD not in free


def test_model_trace_encloses_layers_and_operators(tmp_path):
    """A compiled model's programs sit inside its layers' slices; a TFLite model's inside
    its operators'; the saved file has every track and reads back."""
    model = tpuer.from_tflite(DIGITS_CNN_TFLITE)
    rng = np.random.default_rng(suite_seed())
    x = rng.random((3, *model.input_shape)).astype(np.dtype(model.input.dtype))
    device = tpuer.Device(DEMO_CONFIG, trace=True)
    assert np.array_equal(device.run(model, x), model.reference(x))
    check_sums(device)
    trace = device.trace
    operators = [s for s in trace.scopes if s[0] == "operators"]
    assert [s[1].split()[-1] for s in operators] == ["CONV_2D", "CONV_2D", "FULLY_CONNECTED"]
    for scope in (s for s in trace.scopes if s[0] == "programs"):
        assert any(o[2] <= scope[2] and scope[3] <= o[3] for o in operators)
    assert sum(o[4]["MACs"] for o in operators) == device.stats["macs"]

    path = tmp_path / "trace.json"
    trace.save(path)
    events = json.loads(path.read_text())["traceEvents"]
    threads = {e["args"]["name"]: e["tid"] for e in events if e["name"] == "thread_name"}
    assert set(threads) >= {"operators", "programs", "sequencer", "matrix unit",
                            *(name for _, name, _ in TRACKS)}
    slices = [e for e in events if e["ph"] == "X"]
    assert all(isinstance(e["ts"], int) and e["dur"] > 0 for e in slices)
    sequencer = [e for e in slices if e["tid"] == threads["sequencer"]]
    assert len(sequencer) == device.stats["instructions"]
    assert {"pc", "program", "a", "b", "count", "flags"} <= set(sequencer[0]["args"])
    matrix = [e for e in slices if e["tid"] == threads["matrix unit"]]
    assert sum(e["dur"] for e in matrix) == device.stats["cycles"]
    assert sum(e["dur"] for e in matrix if e["name"] == "vectors") == \
        device.stats["mxu_busy_cycles"]
    for track in ("sequencer", "matrix unit"):     # slices of a unit never overlap
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in slices
                       if e["tid"] == threads[track])
        assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
    assert any(e["ph"] == "C" and e["name"] == "Weight FIFO rows" for e in events)


def test_compiled_model_trace_has_layers():
    rng = np.random.default_rng(1)
    model = tpuer.quantize([tpuer.Dense(rng.normal(0, 0.1, (30, 20)), np.zeros(20), relu=True),
                            tpuer.Dense(rng.normal(0, 0.1, (20, 6)), np.zeros(6))],
                           rng.normal(0, 1, (32, 30)))
    x = model.quantize_input(rng.normal(0, 1, (9, 30)))
    device = tpuer.Device(SMALL, trace=True)
    assert np.array_equal(device.run(model, x), model.reference(x))
    check_sums(device)
    layers = [s for s in device.trace.scopes if s[0] == "layers"]
    assert layers and layers[0][2] == 0 and layers[-1][3] == device.stats["cycles"]
    useful = sum(s[4]["useful MACs"] for s in device.trace.scopes if s[0] == "programs")
    assert useful == device.stats["macs"]


def test_profile_command(tmp_path, capsys):
    out = tmp_path / "profile"
    assert main(["profile", str(DIGITS_CNN_TFLITE), "-o", str(out), "--batch", "2"]) == 0
    printed = capsys.readouterr().out
    for name in ("trace.json", "timeline.png", "roofline.png"):
        assert (out / name).stat().st_size > 1000, name
        assert name in printed
    assert (out / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = [line for line in printed.splitlines() if line.startswith("| op ")]
    assert len(table) == 3 and "CONV_2D" in table[0]
    assert main(["profile", "64x24x8", "-o", str(out), "--board", "icebreaker",
                 "--window", "0:50"]) == 0
    assert "UART" in capsys.readouterr().out
    assert main(["profile", "nothing.xyz", "-o", str(out)]) == 2
    assert main(["profile", "8x8x8", "-o", str(out), "--window", "9:3"]) == 2


# --- the RTL traces as the cycle model does -----------------------------------------------

BENCH_CONFIG = tpuer.Config(rows=2, cols=2, ub_depth=12, acc_depth=8, weight_tiles=4,
                            program_depth=64, control_registers=0)


def run_core_bench(name="hazards"):
    from tpuer.hw.export import build_block
    from tpuer.tb.core_tb import BENCHES
    from tpuer.tb.pysim import run_pysim
    run_pysim(build_block("core", BENCH_CONFIG), BENCHES[name], BENCH_CONFIG,
              np.random.default_rng(suite_seed()))


def test_core_bench_compares_traces_with_a_mutated_rtl(monkeypatch):
    """Counters that see each vector a cycle late still add up to the right totals; the
    core bench's cycle-by-cycle comparison with the cycle model's trace catches them."""
    from amaranth.hdl import Signal
    from tpuer.hw import sequencer
    from tpuer.hw.counters import PerformanceCounters
    from tpuer.tb.harness import TestbenchError

    class LateVectorCounters(PerformanceCounters):
        def elaborate(self, platform):
            self._late = Signal()
            m = super().elaborate(platform)
            m.d.sync += self._late.eq(self.running & self.vector_issued)
            return m

        def _events(self):
            events = list(super()._events())
            events[1] = (self.mxu_busy_cycles, self._late)
            return events

    run_core_bench()                            # the design as it is passes
    monkeypatch.setattr(sequencer.Sequencer, "Counters", LateVectorCounters)
    with pytest.raises(TestbenchError, match="trace's vector differs"):
        run_core_bench()


def test_core_bench_compares_traces_with_a_mutated_cycle_model(monkeypatch):
    """A cycle model that tells of each host row a cycle late (its counters unchanged)
    fails the core bench."""
    from tpuer.sim.timing_model import CoreTiming
    from tpuer.tb.harness import TestbenchError
    original = CoreTiming._activity
    late = {"rows": 0}

    def activity(self, done, *args):
        record = original(self, done, *args)
        rows, late["rows"] = late["rows"], record.host_in
        return record._replace(host_in=rows)

    monkeypatch.setattr(CoreTiming, "_activity", activity)
    with pytest.raises(TestbenchError, match="trace's host_in differs"):
        run_core_bench()


@pytest.mark.parametrize("backend", ["pysim", "verilator", "icarus"])
def test_rtl_back_ends_trace_as_the_cycle_model(backend):
    """On an RTL back end the trace is checked, cycle by cycle, against what the RTL did;
    it adds up to the RTL's counters and equals the golden back end's trace."""
    if backend != "pysim":
        require_simulator(backend)
    rng = np.random.default_rng(suite_seed())
    a = rng.integers(-128, 128, (19, 10)).astype(np.int8)
    b = rng.integers(-128, 128, (10, 6)).astype(np.int8)
    device = tpuer.Device(SMALL, backend=backend, trace=True)
    assert np.array_equal(device.matmul(a, b), a.astype(np.int64) @ b)
    sums = check_sums(device)
    golden = tpuer.Device(SMALL, trace=True)
    golden.matmul(a, b)
    assert sums == golden.trace.sums()


def test_rtl_trace_refuses_a_mutated_cycle_model(monkeypatch):
    """A cycle model that tells of each vector a cycle late is caught on the Verilator
    back end (its counters unchanged)."""
    require_simulator("verilator")
    from tpuer.sim.core_backends import TraceMismatch
    from tpuer.sim.timing_model import CoreTiming
    original = CoreTiming._activity
    late = {"vector": False}

    def activity(self, done, *args):
        record = original(self, done, *args)
        vector, late["vector"] = late["vector"], record.vector
        return record._replace(vector=vector)

    monkeypatch.setattr(CoreTiming, "_activity", activity)
    device = tpuer.Device(SMALL, backend="verilator", trace=True)
    with pytest.raises(TraceMismatch, match="vector differs"):
        device.matmul(np.ones((9, 5), np.int8), np.ones((5, 3), np.int8))


def test_serial_back_end_traces_its_link():
    """A board behind a faulty serial line (the model board): the trace adds up to the
    board's counters and its link track has each program's frames and retries."""
    from tpuer.sim.model_board import ModelBoard
    cfg = tpuer.Config(rows=4, cols=4, ub_depth=64, acc_depth=64, weight_tiles=8,
                       program_depth=256)
    board = ModelBoard(cfg, faults={"flip": 3e-3, "drop": 2e-3, "seed": suite_seed()})
    device = tpuer.Device(cfg, backend="serial", port=board, trace=True)
    rng = np.random.default_rng(suite_seed())
    a = rng.integers(-128, 128, (40, 12)).astype(np.int8)
    b = rng.integers(-128, 128, (12, 7)).astype(np.int8)
    assert np.array_equal(device.matmul(a, b), a.astype(np.int64) @ b)
    check_sums(device)
    link = device.trace.link
    assert len(link) == device.stats["programs"]
    assert sum(args["retries"] for _, _, args in link) == device.stats["link_retries"]
    assert all(args["frames"] >= 1 for _, _, args in link)


def test_a_run_of_operators_from_the_first_is_one_slice():
    """Consecutive FULLY_CONNECTED operators from operator 0 run as one program: one slice
    names them all and carries all their MACs."""
    from pathlib import Path
    model = tpuer.from_tflite(Path(__file__).parent / "data" / "tflite" / "dense.tflite")
    rng = np.random.default_rng(suite_seed())
    x = rng.integers(-128, 128, (5, *model.input_shape)).astype(np.int8)
    device = tpuer.Device(DEMO_CONFIG, trace=True)
    assert np.array_equal(device.run(model, x), model.reference(x))
    operators = [s for s in device.trace.scopes if s[0] == "operators"]
    assert [s[1] for s in operators] == ["ops 0-2 FULLY_CONNECTED"]
    assert operators[0][4]["operators"] == [0, 1, 2]
    assert operators[0][4]["MACs"] == device.stats["macs"]
