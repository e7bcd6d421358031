"""The command line and the main job."""

import subprocess
import sys

import pytest

from conftest import require_simulator


def tpuer(*args):
    return subprocess.run([sys.executable, "-m", "tpuer", *args], capture_output=True, text=True)


def test_help_lists_every_command():
    result = tpuer("--help")
    assert result.returncode == 0
    for command in ("verilog", "lint", "demo", "bench", "asm", "disasm", "run"):
        assert command in result.stdout


@pytest.mark.parametrize("simulator, size", [("verilator", "4"), ("icarus", "2")])
def test_demo_multiplies_and_matches_numpy(simulator, size):
    require_simulator(simulator)
    result = tpuer("demo", "matrix-unit", "--simulator", simulator, "--rows", size, "--cols", size,
                   "-m", "5", "--tiles", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    values = 5 * 3 * int(size)
    assert f"all {values} values equal" in result.stdout
    assert "15 result rows in 15 cycles" in result.stdout   # back to back, no bubble


def test_demo_refuses_bad_sizes():
    result = tpuer("demo", "matrix-unit", "-m", "0")
    assert result.returncode != 0
    assert "-m must be between 1 and 4096, not 0" in result.stderr
