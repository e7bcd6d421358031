"""cocotb jobs that do work for the command line rather than check a block: the demo's
matrix product and the simulator-speed measurement.

Inputs and outputs travel as ``.npz`` files named by ``TPUER_JOB_IN`` and
``TPUER_JOB_OUT``; the configuration arrives as in :mod:`tpuer.tb.cocotb_entry`.
"""

import json
import os
import time

import cocotb
import numpy as np

from ..config import Config
from .harness import CocotbIO
from .matrix_unit_tb import check_products, random_batches

CONFIG = Config(**json.loads(os.environ.get("TPUER_CONFIG", "{}")))


def _save(**arrays):
    np.savez(os.environ["TPUER_JOB_OUT"], **arrays)


@cocotb.test()
async def matmul(dut):
    """Multiply ``a`` (M x rows) by each tile in ``tiles`` back to back; the results are
    checked against the golden model inside, and saved with the cycle count."""
    job = np.load(os.environ["TPUER_JOB_IN"])
    io = await CocotbIO.start(dut)
    a, tiles = job["a"], job["tiles"]
    collected = {}
    figures = await check_products(io, CONFIG, [(tile, a) for tile in tiles],
                                   rng=np.random.default_rng(0), collect=collected)
    _save(results=np.array(collected["results"]), cycles=figures["cycles"],
          first_result_cycle=collected["first_result_cycle"],
          last_result_cycle=collected["last_result_cycle"],
          weight_stall_cycles=figures["weight_stall_cycles"])


@cocotb.test()
async def speed(dut):
    """Stream random tiles and vectors through the checked testbench loop for a while and
    report simulated cycles per wall-clock second."""
    job = np.load(os.environ["TPUER_JOB_IN"])
    io = await CocotbIO.start(dut)
    rng = np.random.default_rng(int(job["seed"]))
    batches = random_batches(CONFIG, rng, int(job["tiles"]), min_rows=CONFIG.rows,
                             max_rows=2 * CONFIG.rows)
    start_cycle, start = io.cycle, time.perf_counter()
    await check_products(io, CONFIG, batches, rng=rng)
    seconds = time.perf_counter() - start
    checked_cycles = io.cycle - start_cycle

    # Free-running: a vector every cycle with no Python per cycle (the inputs hold still,
    # the array still multiplies every cycle).
    from cocotb.triggers import ClockCycles
    dut.rows__payload.value = int(rng.integers(1 << 62))
    dut.rows__valid.value = 1
    free_cycles = 20 * checked_cycles
    start = time.perf_counter()
    await ClockCycles(dut.clk, free_cycles)
    free_seconds = time.perf_counter() - start
    _save(cycles=checked_cycles, seconds=seconds, free_cycles=free_cycles,
          free_seconds=free_seconds)


@cocotb.test()
async def core_steps(dut):
    """Run the driver's program steps (pickles, one after another, in ``TPUER_JOB_IN``) on
    the core within ``TPUER_MAX_CYCLES`` cycles, and pickle each run into
    ``TPUER_JOB_OUT`` as it ends; a message string, last, if the budget ran out."""
    import pickle
    from ..device import CycleBudgetError
    from .core_tb import run_steps

    def steps(file):
        while True:
            try:
                yield pickle.load(file)
            except EOFError:
                return

    io = await CocotbIO.start(dut)
    with open(os.environ["TPUER_JOB_IN"], "rb") as job_in, \
            open(os.environ["TPUER_JOB_OUT"], "wb") as job_out:
        try:
            await run_steps(io, CONFIG, steps(job_in),
                            max_cycles=int(os.environ["TPUER_MAX_CYCLES"]),
                            emit=lambda _step, run: pickle.dump(run, job_out))
        except CycleBudgetError as error:
            pickle.dump(str(error), job_out)
