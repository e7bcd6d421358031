"""The command line and the main job."""

import pickle
import subprocess
import sys

import numpy as np
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


@pytest.mark.parametrize("network", ["mlp", "cnn"])
def test_network_demo_runs_and_writes_its_pictures(network, tmp_path):
    import os
    env = dict(os.environ, TPUER_BUILD_DIR=str(tmp_path))
    result = subprocess.run([sys.executable, "-m", "tpuer", "demo", network, "--backend",
                             "golden", "--samples", "50"], capture_output=True, text=True,
                            env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "equal to the reference, every output bit for bit" in out
    for figure in ("float accuracy", "int8 reference accuracy", "cycles per inference",
                   "MXU utilisation", "inferences per second"):
        assert figure in out
    assert "50/50" in result.stderr                          # the progress bar ran to the end
    for picture in ("digits", "utilisation"):
        png = tmp_path / "demo" / f"{network}-{picture}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_network_demo_on_verilator_equals_the_reference():
    require_simulator("verilator")
    result = tpuer("demo", "--samples", "80")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "equal to the reference, every output bit for bit" in result.stdout


def test_demo_refuses_bad_arguments():
    assert "--samples must be between 1 and 360, not 0" in tpuer("demo", "--samples", "0").stderr
    assert "--clock-mhz must be positive" in tpuer("demo", "--clock-mhz", "0").stderr


def test_verilog_takes_every_configuration_field_and_refuses_a_bad_one():
    """Every Config field is an option; the lane-serial activation unit is chosen by
    --activation-steps, and a value the configuration refuses is an error that says so."""
    from dataclasses import fields
    from tpuer import Config
    help_text = tpuer("verilog", "--help").stdout
    for field in fields(Config):
        assert f"--{field.name.replace('_', '-')}" in help_text
    serial = tpuer("verilog", "--block", "activation", "--rows", "2", "--cols", "2",
                   "--activation-steps", "4")
    assert serial.returncode == 0, serial.stderr
    parallel = tpuer("verilog", "--block", "activation", "--rows", "2", "--cols", "2")
    assert "shifts_left" in serial.stdout and "shifts_left" not in parallel.stdout
    bad = tpuer("verilog", "--block", "activation", "--activation-steps", "3")
    assert bad.returncode != 0 and "activation_steps must be one of 0, 1, 2, 4" in bad.stderr


def _bad_files(folder):
    (folder / "latin1.s").write_bytes(b"\xff\xfe halt\n")
    (folder / "odd.bin").write_bytes(b"1234567")
    (folder / "ok.s").write_text("halt\n")
    (folder / "squares.s").write_text("A0 = 3\n" + "".join(f"A{i} = A{i - 1} * A{i - 1}\n"
                                                           for i in range(1, 41)) + "halt\n")
    (folder / "nested.s").write_text("read_host " + "(" * 300 + "1" + ")" * 300 + ", 1\nhalt\n")
    (folder / "negated.s").write_text("read_host " + "-" * 5000 + "1, 1\nhalt\n")
    (folder / "text.npy").write_text("not an array")
    np.save(folder / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (folder / "pickled.npy").write_bytes(pickle.dumps([1, 2, 3]))
    np.save(folder / "wide.npy", np.zeros((2, 8), np.int64))


@pytest.mark.parametrize("args, message", [
    (["asm", "latin1.s"], "latin1.s: not UTF-8 text"),
    (["asm", "odd.bin"], "7 bytes is not a whole number of 8-byte instructions"),
    (["asm", "ok.s", "-o", "missing/ok.bin"], "the folder"),
    (["asm", "squares.s"], "squares.s:8: 'A6 * A6' is 2**202 or more"),
    (["asm", "nested.s"], "is not an operand"),
    (["asm", "negated.s"], "longer than 1000 characters"),
    (["asm", "no-such-file.s"], "No such file or directory"),
    (["disasm", "odd.bin"], "7 bytes is not a whole number"),
    (["run", "ok.s", "-o", "missing/out.npy"], "the folder"),
    (["run", "ok.s", "--input", "text.npy"], "--input text.npy: not a NumPy .npy file"),
    (["run", "ok.s", "--input", "objects.npy"], "--input objects.npy: not a NumPy .npy file"),
    (["run", "ok.s", "--input", "pickled.npy"], "--input pickled.npy: not a NumPy .npy file"),
    (["run", "ok.s", "--weights", "objects.npy"], "--weights objects.npy: not a NumPy .npy"),
    (["run", "ok.s", "--input", "wide.npy"], "host_in must have dtype int8, not int64"),
    (["run", "ok.s", "--rows", "0"], "rows must be between 1 and 256, not 0"),
    (["build", "--board", "icebreaker", "--rows", "0"], "rows must be between 1 and 256, not 0"),
    (["verilog", "--cols", "300"], "cols must be between 1 and 256, not 300"),
    (["bench", "--rows", "-1"], "rows must be between 1 and 256, not -1"),
    (["demo", "--samples", "0"], "--samples must be between 1 and 360, not 0"),
    (["demo", "--clock-mhz", "-1"], "--clock-mhz must be positive, not -1.0"),
    (["demo", "matrix-unit", "-m", "0"], "-m must be between 1 and 4096, not 0"),
    (["demo", "matrix-unit", "--tiles", "65"], "--tiles must be between 1 and 64, not 65"),
])
def test_bad_input_gets_one_line_and_exit_code_2(tmp_path, args, message):
    """Every bad input of every command: one line naming the problem, exit code 2, no
    traceback, and in time (``squares.s`` once took forever)."""
    _bad_files(tmp_path)
    result = subprocess.run([sys.executable, "-m", "tpuer", *args], capture_output=True,
                            text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert result.stderr.startswith(f"tpuer {args[0]}: ")
    assert not (tmp_path / "missing").exists()
