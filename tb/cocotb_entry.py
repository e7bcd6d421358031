"""The cocotb test module: runs every testbench of one block on one configuration.

The simulator back end (:mod:`tpuer.sim.cocotb_backend`) passes, through the
environment: ``TPUER_BLOCK`` (e.g. ``matrix_unit``), ``TPUER_CONFIG`` (the configuration
as JSON), ``TPUER_SEED``, ``TPUER_SIMULATOR`` and ``TPUER_BENCH_OPTIONS`` (keyword
arguments for every testbench, as JSON; none by default). Each testbench of the block's
``BENCHES`` becomes one cocotb test.
"""

import importlib
import json
import os
import zlib

import cocotb
import numpy as np

from ..config import Config
from .harness import CocotbIO

BLOCK = os.environ.get("TPUER_BLOCK", "matrix_unit")
CONFIG = Config(**json.loads(os.environ.get("TPUER_CONFIG", "{}")))
SEED = int(os.environ.get("TPUER_SEED", "1"))
SIMULATOR = os.environ.get("TPUER_SIMULATOR", "unknown")
OPTIONS = json.loads(os.environ.get("TPUER_BENCH_OPTIONS", "{}"))
BENCHES = importlib.import_module(f"{__package__}.{BLOCK}_tb").BENCHES


def bench_rng(name, seed=SEED):
    """The random generator of testbench ``name``: the same seed gives the same case."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def _make_test(name, bench):
    async def run(dut):
        dut._log.info(f"{BLOCK}/{name} on {SIMULATOR}, config {CONFIG.name}, seed {SEED}")
        io = await CocotbIO.start(dut)
        try:
            await bench(io, CONFIG, bench_rng(name), **OPTIONS)
        except AssertionError as error:
            raise AssertionError(f"{error} (reproduce with TPUER_SEED={SEED})") from None
    run.__name__ = run.__qualname__ = f"{BLOCK}_{name}"
    return cocotb.test()(run)


for _name, _bench in BENCHES.items():
    globals()[f"test_{_name}"] = _make_test(_name, _bench)
