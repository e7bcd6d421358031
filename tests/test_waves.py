"""The waveform switch: every kind of simulation can write a file GTKWave and Surfer open."""

import numpy as np

from tpuer import Config
from tpuer.hw import UnifiedBuffer
from tpuer.sim import cocotb_backend as backend
from tpuer.tb.pysim import run_pysim
from tpuer.tb.unified_buffer_tb import BENCHES

import pytest

from conftest import require_simulator


def test_pysim_writes_a_vcd(tmp_path):
    cfg = Config(rows=2, cols=2)
    path = tmp_path / "ub.vcd"
    run_pysim(UnifiedBuffer(cfg), BENCHES["edges"], cfg, np.random.default_rng(0), waves=path)
    text = path.read_text()
    assert "$var" in text and "read_addr" in text


@pytest.mark.parametrize("simulator, header", [("verilator", b"$"), ("icarus", None)])
def test_simulators_write_a_waveform(simulator, header):
    require_simulator(simulator)
    built = backend.build("unified_buffer", Config(rows=2, cols=2), simulator, waves=True)
    path = backend.waves_file(built)
    if path.exists():
        path.unlink()
    backend.run(built, testcase="unified_buffer_edges")
    data = path.read_bytes()
    assert len(data) > 1000
    if header is not None:
        assert data.startswith(header)   # a VCD starts with a $date or $version section
