"""The blocks' cocotb testbenches on Verilator and Icarus, each configuration built once."""

import importlib
import json

import pytest

from tpuer.config import Config
from tpuer.hw.sequencer import program_word_bits

from tpuer.sim import cocotb_backend as backend

from conftest import CORE_CONFIGS, SIM_CONFIGS, ice40_models, require_simulator, seed

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
    benches = importlib.import_module("tpuer.tb.core_tb").BENCHES
    assert backend.run(built, seed=seed()) == len(benches)


@pytest.mark.parametrize("cfg", [CORE_CONFIGS[1], CORE_CONFIGS[3]], ids=lambda c: c.name)
@pytest.mark.parametrize("simulator", backend.SIMULATORS)
def test_tpu_through_its_host_command_set(simulator, cfg):
    """Programs and data over the word streams, against the golden model; bad commands."""
    require_simulator(simulator)
    built = backend.build("tpu", cfg, simulator)
    benches = importlib.import_module("tpuer.tb.tpu_tb").BENCHES
    assert backend.run(built, seed=seed()) == len(benches)


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


@pytest.mark.parametrize("cfg", [Config(rows=4, cols=4), Config(rows=3, cols=2),
                                 Config(rows=1, cols=3)],
                         ids=lambda c: c.name)
def test_matrix_unit_with_products_in_sb_mac16(cfg, tmp_path):
    """The matrix unit as the iCEBreaker's bitstream has it, two products in each SB_MAC16
    (8x8 mode) and the Weight FIFO in block RAM, on Icarus with Yosys's models of the
    primitives, against the golden model."""
    from amaranth_boards.icebreaker import ICEBreakerPlatform
    from tpuer.hw.matrix_unit import matrix_unit
    require_simulator("icarus")
    platform = ICEBreakerPlatform()
    component = matrix_unit(cfg)
    verilog = backend.to_verilog(component, platform=platform)
    assert verilog.count("SB_MAC16 ") == (cfg.rows * cfg.cols + 1) // 2
    built = backend.build("matrix_unit", cfg, "icarus", component=component, platform=platform,
                          extra_sources=[ice40_models(tmp_path, "SB_MAC16", "SB_RAM40_4K")],
                          variant="sb_mac16")
    assert backend.run(built, seed=seed()) >= 2


@pytest.mark.parametrize("block, cfg", [
    ("matrix_unit", Config(rows=4, cols=4, multiply_latency=2)),
    ("matrix_unit", Config(rows=3, cols=2, multiply_latency=3)),
    ("matrix_unit", Config(rows=2, cols=3)),
    ("activation", Config(rows=2, cols=3, multiply_latency=2)),
    ("activation", Config(rows=2, cols=3, multiply_latency=3)),
    ("datapath", Config(rows=3, cols=4, ub_depth=20, acc_depth=12, multiply_latency=3,
                        memory_read_latency=2)),
], ids=lambda value: getattr(value, "name", value))
def test_block_with_products_in_mult18x18d(block, cfg, tmp_path):
    """Blocks as the ULX3S's bitstream has them, on Icarus with tpuer's model of the
    MULT18X18D, against the golden model: with ``multiply_latency`` 2 each array cell's
    operands and product held in a MULT18X18D's own registers (with 3 the product copied
    into the fabric; with 1, no instance: Yosys maps the multiplication); the activation
    unit's biased words, multipliers and partial products in the registers of four of
    them a lane."""
    from importlib.resources import files
    from amaranth_boards.ulx3s import ULX3S_85F_Platform
    from tpuer.hw.export import build_block
    require_simulator("icarus")
    platform = ULX3S_85F_Platform()
    component = build_block(block, cfg)
    verilog = backend.to_verilog(component, platform=platform)
    in_array = cfg.rows * cfg.cols if cfg.multiply_latency >= 2 else 0
    instances = {"matrix_unit": in_array, "activation": 4 * cfg.cols,
                 "datapath": in_array + 4 * cfg.cols}[block]
    assert verilog.count("MULT18X18D ") == instances
    model = tmp_path / "ecp5_models.v"
    model.write_text((files("tpuer.tb") / "ecp5_models.v").read_text())
    built = backend.build(block, cfg, "icarus", component=component, platform=platform,
                          extra_sources=[model], variant="mult18x18d")
    assert backend.run(built, seed=seed()) >= 2


def dp16kd_blocks(width, byte_bits):
    """DP16KD blocks of a BlockRAM with its own output register: two bytes of
    ``byte_bits`` bits in each (8 with 8-bit granularity, else 9)."""
    word_bytes = -(-width // byte_bits)
    return -(-word_bytes // 2)


@pytest.mark.parametrize("block, cfg", [
    ("unified_buffer", Config(rows=2, cols=3, ub_depth=1024, memory_read_latency=2)),
    ("accumulators", Config(rows=2, cols=3, acc_depth=20, memory_read_latency=2)),
    ("datapath", Config(rows=3, cols=4, ub_depth=20, acc_depth=12, multiply_latency=3,
                        memory_read_latency=2)),
    ("core", Config(rows=2, cols=2, ub_depth=12, acc_depth=8, weight_tiles=4,
                    program_depth=64, memory_read_latency=2)),
], ids=lambda value: getattr(value, "name", value))
def test_block_with_reads_through_dp16kd_output_registers(block, cfg, tmp_path):
    """With ``memory_read_latency`` 2 on the ULX3S, the Unified Buffer's reads and the
    accumulator memory's outside reads come through DP16KD blocks' own output registers,
    and so do the sequencer's instructions (``control_registers``): on Icarus with tpuer's
    model of the DP16KD (and of the MULT18X18D), against the golden model, out-of-range
    reads and the Unified Buffer's lane masks included."""
    from importlib.resources import files
    from amaranth_boards.ulx3s import ULX3S_85F_Platform
    from tpuer.hw.export import build_block
    require_simulator("icarus")
    platform = ULX3S_85F_Platform()
    component = build_block(block, cfg)
    verilog = backend.to_verilog(component, platform=platform)
    ub = dp16kd_blocks(cfg.ub_lanes * cfg.operand_width, 8)
    acc = dp16kd_blocks(cfg.cols * cfg.acc_width, 9)
    program = dp16kd_blocks(program_word_bits(cfg), 9)   # the instruction, its checks
    expected = {"unified_buffer": ub, "accumulators": acc, "datapath": ub + acc,
                "core": program + ub + acc}[block]
    assert verilog.count("DP16KD ") == expected
    assert verilog.count('.REGMODE_B("OUTREG")') == expected
    model = tmp_path / "ecp5_models.v"
    model.write_text((files("tpuer.tb") / "ecp5_models.v").read_text())
    built = backend.build(block, cfg, "icarus", component=component, platform=platform,
                          extra_sources=[model], variant="dp16kd")
    # Without Yosys's bypass, a Unified Buffer row read as it is written is undefined (the
    # model gives X).
    options = {"read_meets_write": "undefined"} if block == "unified_buffer" else {}
    ran = backend.run(built, seed=seed(), extra_env={"TPUER_BENCH_OPTIONS": json.dumps(options)})
    if block == "core":
        assert ran == len(importlib.import_module("tpuer.tb.core_tb").BENCHES)
    else:
        assert ran >= 2


@pytest.mark.parametrize("block", ["skewed_accumulators", "datapath"])
def test_block_as_the_icebreaker_has_it(block, tmp_path):
    """The accumulator memory and the datapath elaborated for the iCEBreaker, on Icarus with
    Yosys's models of the primitives, against the golden model: each accumulator lane in
    block RAM of its own (in the datapath written as its column leaves the array), its sums
    made by an adder that passes the word through in the LUTs of its carry chain; the
    Weight FIFO in block RAM; the products in SB_MAC16 blocks."""
    from amaranth_boards.icebreaker import ICEBreakerPlatform
    from tpuer.hw.accumulators import SkewedAccumulatorMemory
    from tpuer.hw.export import build_block
    require_simulator("icarus")
    cfg = SIM_CONFIGS[3]        # memory depths that are not powers of two
    component, options = {
        "skewed_accumulators": (lambda: SkewedAccumulatorMemory(cfg),
                                {"skewed_lanes": True}),
        "datapath": (lambda: build_block("datapath", cfg), {}),
    }[block]
    built = backend.build(block.removeprefix("skewed_"), cfg, "icarus", component=component(),
                          platform=ICEBreakerPlatform(), variant=f"ice40-{block}",
                          extra_sources=[ice40_models(tmp_path, "SB_MAC16", "SB_RAM40_4K",
                                                       "SB_LUT4", "SB_CARRY")])
    ran = backend.run(built, seed=seed(), extra_env={"TPUER_BENCH_OPTIONS": json.dumps(options)})
    if block == "core":
        assert ran == len(importlib.import_module("tpuer.tb.core_tb").BENCHES)
    else:
        assert ran >= 2


def test_tpu_as_the_icebreaker_has_it(tmp_path):
    """The whole TPU elaborated for the iCEBreaker: products in SB_MAC16 blocks, the
    instruction memory in the four SB_SPRAM256KA blocks, the accumulator memory, the
    Unified Buffer and the activation unit's parameters in SB_RAM40_4K blocks, on Icarus
    with Yosys's models of the primitives; programs
    over the host command set against the golden model."""
    from amaranth_boards.icebreaker import ICEBreakerPlatform
    from tpuer.hw.export import build_block
    require_simulator("icarus")
    cfg = CORE_CONFIGS[1]
    platform = ICEBreakerPlatform()
    component = build_block("tpu", cfg)
    verilog = backend.to_verilog(component, platform=platform)
    assert verilog.count("SB_SPRAM256KA ") == 4
    assert verilog.count("SB_MAC16 ") == (cfg.rows * cfg.cols + 1) // 2
    # the accumulator memory (a lane at a time) and its outside read port's copy, the
    # Unified Buffer, the weight memory and the Weight FIFO (256 x 16-bit blocks), and the
    # activation unit's 32-bit parameters
    def blocks(width, depth):
        return -(-width // 16) * -(-depth // 256)
    acc_blocks = cfg.cols * blocks(cfg.acc_width, cfg.acc_depth)
    ub_blocks = blocks(cfg.ub_lanes * cfg.operand_width, cfg.ub_depth)
    weight_blocks = (blocks(cfg.cols * cfg.operand_width, cfg.weight_memory_depth) +
                     blocks(cfg.cols * cfg.operand_width, cfg.weight_fifo_depth))
    assert verilog.count("SB_RAM40_4K ") == 2 * acc_blocks + ub_blocks + weight_blocks + 2
    built = backend.build("tpu", cfg, "icarus", component=build_block("tpu", cfg),
                          platform=platform, variant="ice40",
                          extra_sources=[ice40_models(tmp_path, "SB_MAC16", "SB_SPRAM256KA",
                                                       "SB_RAM40_4K", "SB_LUT4", "SB_CARRY")])
    benches = importlib.import_module("tpuer.tb.tpu_tb").BENCHES
    assert backend.run(built, seed=seed()) == len(benches)
