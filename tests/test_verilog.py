"""Verilog export and its lint."""

import re
import subprocess
import sys

import pytest

from tpuer import Config
from tpuer.hw.export import blocks, build_block
from tpuer.sim.lint import LintFailed, lint_block, lint_verilog

from conftest import require_simulator


def tpuer(*args):
    return subprocess.run([sys.executable, "-m", "tpuer", *args], capture_output=True, text=True)


@pytest.mark.parametrize("cfg", [Config(rows=2, cols=2), Config(rows=8, cols=8),
                                 Config(rows=4, cols=8, ub_depth=100, acc_depth=60),
                                 Config(rows=3, cols=5, operand_width=6, acc_width=15)],
                         ids=lambda c: c.name)
@pytest.mark.parametrize("block", list(blocks()))
def test_generated_verilog_is_lint_clean(block, cfg):
    if block == "tpu" and cfg.operand_width != 8:
        with pytest.raises(ValueError, match="carries int8 lanes"):
            build_block(block, cfg)
        return
    require_simulator("verilator")
    lint_block(block, cfg)


def test_lint_catches_a_real_defect():
    require_simulator("verilator")
    bad = "module top(input clk, output reg [3:0] q, output [1:0] never_driven);\n" \
          "  always @(posedge clk) q <= q + 1;\nendmodule\n"
    with pytest.raises(LintFailed, match="never_driven"):
        lint_verilog(bad)


def test_verilog_command_writes_the_ports_of_the_configuration(tmp_path):
    out = tmp_path / "mxu.v"
    result = tpuer("verilog", "--block", "matrix_unit", "--rows", "4", "--cols", "8",
                   "-o", str(out))
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert re.search(r"^module top\(", text, re.M)
    # An input vector: 4 int8 lanes, the new_tile flag and a 16-bit tag.
    assert re.search(r"input \[48:0\] rows__payload;", text)
    # A result vector: 8 int32 lanes and the tag.
    assert re.search(r"output \[271:0\] results__payload;", text)
    assert re.search(r"input \[63:0\] weights__payload;", text)


def test_verilog_command_writes_every_block_once(tmp_path):
    out = tmp_path / "all.v"
    assert tpuer("verilog", "--block", "all", "-o", str(out)).returncode == 0
    modules = re.findall(r"^module (tpuer_\w+)\(", out.read_text(), re.M)
    assert sorted(modules) == sorted(f"tpuer_{name}" for name in blocks())


@pytest.mark.parametrize("args, message", [
    (["--rows", "0"], "rows must be between 1 and 256, not 0"),
    (["--acc-width", "12"], "acc_width must be at least"),
    (["--block", "nonsense"], "invalid choice: 'nonsense'"),
])
def test_verilog_command_refuses_bad_parameters(args, message):
    result = tpuer("verilog", *args)
    assert result.returncode == 2
    assert message in result.stderr
