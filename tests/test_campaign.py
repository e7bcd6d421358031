"""A random differential campaign: sessions of random programs (valid ones, some with bad
instructions, some without HALT that run on into what earlier programs left) run on the
RTL, on amaranth.sim, Verilator and Icarus, and on the golden model; every program's
status, error, rows and counters must be equal, and so must the memories at the end.

The seed is fresh every run and printed (``TPUER_SEED`` repeats a run). A session runs
its programs in one call, so the core's state carries from program to program: memories,
the Weight FIFO, the active weights, the activation parameters and instruction words.
CI runs :data:`CI_INSTRUCTIONS` random instructions over the three simulators; ``make
fuzz`` runs ``TPUER_CAMPAIGN_INSTRUCTIONS`` of them (or for ``TPUER_CAMPAIGN_SECONDS``), in
``TPUER_CAMPAIGN_SHARDS`` shards per simulator that ``pytest-xdist`` spreads over every
core (and, with its ``--dist`` and ``--tx`` options, over several machines). A mismatch
is shrunk to few programs and instructions and printed as assembly with the command that
repeats it."""

import os
import time

import numpy as np
import pytest

import tpuer
from tpuer import isa
from tpuer.assembler import disassemble
from tpuer.driver import Step
from tpuer.isa import Opcode
from tpuer.sim.core_backends import make_backend
from tpuer.tb.core_tb import dump_program, random_program

from conftest import CORE_CONFIGS, require_simulator, seed

#: Random instructions per CI run, and the share of each simulator (by its speed).
CI_INSTRUCTIONS = 30_000
SHARE = {"pysim": 0.2, "verilator": 0.5, "icarus": 0.3}
SHARDS = int(os.environ.get("TPUER_CAMPAIGN_SHARDS", "1"))
TOTAL = int(os.environ.get("TPUER_CAMPAIGN_INSTRUCTIONS", str(CI_INSTRUCTIONS)))
#: A shard stops after this many seconds, if given, however few instructions it ran.
SECONDS = float(os.environ.get("TPUER_CAMPAIGN_SECONDS", "inf"))
#: Programs a session runs in one call.
SESSION_PROGRAMS = 24


def _rows_wanted(image, cfg):
    """Host rows the program in instruction memory ``image`` takes, run from 0 until
    HALT or the memory's end (an error may stop it sooner)."""
    rows = 0
    for word in image:
        instr = isa.Instruction.decode(word)
        if instr.op is Opcode.HALT:
            break
        if instr.op is Opcode.READ_HOST:
            rows += instr.count
    return rows


def random_session(cfg, rng, instructions):
    """Steps of about ``instructions`` random instructions in all."""
    steps, image, made = [], [0] * cfg.program_depth, 0
    lo, hi = cfg.operand_min, cfg.operand_max + 1
    while made < instructions:
        length = int(rng.integers(1, cfg.program_depth - 1))
        program, _ = random_program(cfg, rng, length=length,
                                    invalid=0.05 if rng.random() < 0.3 else 0.0)
        if rng.random() < 0.1:
            program = program[:-1]          # no HALT: runs on into what is left
        words = [int(i.encode()) for i in program]
        image[:len(words)] = words
        rows = rng.integers(lo, hi, (_rows_wanted(image, cfg), cfg.ub_lanes))
        tiles = int(rng.integers(0, cfg.weight_tiles + 1))
        weights = rng.integers(lo, hi, (tiles, cfg.rows, cfg.cols))
        steps.append(Step(program, weights, rows))
        made += len(program)
    return steps


def _with_dump(cfg, steps):
    return steps + [Step(dump_program(cfg), np.zeros((0, cfg.rows, cfg.cols), np.int64),
                         np.zeros((0, cfg.ub_lanes), np.int64))]


def _mismatch(cfg, backend, steps):
    """The first step whose run differs from the golden model's, as (index, what), or
    ``None``."""
    golden = [run for _, run in make_backend("golden", cfg).run(steps, max_cycles=10**9)]
    got = [run for _, run in backend.run(steps, max_cycles=10**9)]
    for index, (want, have) in enumerate(zip(golden, got)):
        for name in ("state", "error", "error_pc", "instructions", "cycles",
                     "mxu_busy_cycles", "weight_stall_cycles"):
            if getattr(want, name) != getattr(have, name):
                return index, f"{name} {getattr(have, name)}, golden {getattr(want, name)}"
        if len(want.host_out) != len(have.host_out):
            return index, f"{len(have.host_out)} host rows, golden {len(want.host_out)}"
        for k, (row, expected) in enumerate(zip(have.host_out, want.host_out)):
            padded = np.zeros(cfg.ub_lanes, np.int64)
            padded[:len(expected)] = expected
            if not np.array_equal(np.asarray(row), padded):
                return index, (f"host row {k} {np.asarray(row).tolist()}, golden "
                               f"{padded.tolist()}")
    if len(golden) != len(got):
        return len(got), f"{len(got)} runs, golden {len(golden)}"
    return None


def _shrink(cfg, backend, steps, budget=40):
    """Fewer steps and instructions that still mismatch (at most ``budget`` tries)."""
    tries = 0

    def still(candidate):
        nonlocal tries
        tries += 1
        return _mismatch(cfg, backend, _with_dump(cfg, candidate)) is not None

    index, _ = _mismatch(cfg, backend, _with_dump(cfg, steps))
    steps = steps[:index + 1]
    k = 0
    while k < len(steps) - 1 and tries < budget:       # drop whole earlier programs
        candidate = steps[:k] + steps[k + 1:]
        if still(candidate):
            steps = candidate
        else:
            k += 1
    last = steps[-1]
    i = 0
    while i < len(last.program) and tries < budget:    # then instructions of the last
        program = last.program[:i] + last.program[i + 1:]
        if not program:
            break
        candidate = steps[:-1] + [Step(program, last.weights, last.host_in)]
        if still(candidate):
            steps, last = candidate, candidate[-1]
        else:
            i += 1
    return steps


def _report(cfg, simulator, steps, what, session_seed):
    lines = [f"{simulator} differs from the golden model ({what}) on {cfg!r}.",
             f"Shrunk to {len(steps)} programs of one call; repeat the whole campaign with",
             f"    TPUER_SEED={session_seed} python -m pytest tests/test_campaign.py "
             f"-k {simulator}",
             "The programs, in order (weights and host rows: the seed's):"]
    for index, step in enumerate(steps):
        lines.append(f"; program {index} ({len(step.weights)} weight tiles, "
                     f"{len(step.host_in)} host rows)")
        lines.append(disassemble(step.program).rstrip())
    return "\n".join(lines)


def _shards():
    return [(simulator, shard) for simulator in SHARE for shard in range(SHARDS)]


@pytest.mark.parametrize("simulator, shard", _shards(),
                         ids=[f"{s}-{k}" for s, k in _shards()])
def test_random_sessions_match_the_golden_model(simulator, shard):
    if simulator != "pysim":
        require_simulator(simulator)
    session_seed = seed()
    rng = np.random.default_rng([session_seed, list(SHARE).index(simulator), shard])
    budget = int(TOTAL * SHARE[simulator] / SHARDS)
    done = sessions = 0
    deadline = time.monotonic() + SECONDS
    while done < budget and time.monotonic() < deadline:
        cfg = CORE_CONFIGS[int(rng.integers(len(CORE_CONFIGS)))]
        backend = make_backend(simulator, cfg)
        steps = random_session(cfg, rng, min(budget - done, SESSION_PROGRAMS * 30))
        found = _mismatch(cfg, backend, _with_dump(cfg, steps))
        if found is not None:
            shrunk = _shrink(cfg, backend, steps)
            pytest.fail(_report(cfg, simulator, shrunk, found[1], session_seed),
                        pytrace=False)
        done += sum(len(step.program) for step in steps)
        sessions += 1
    print(f"{simulator} shard {shard}: {done} random instructions in {sessions} sessions "
          f"(TPUER_SEED={session_seed})")
