"""Assembler and disassembler: exact round trips, the documented syntax, errors that name
the line; ``tpuer asm``, ``disasm`` and ``run``; ``Device.run_program`` against the model."""

import random
import subprocess
import sys

import numpy as np
import pytest

import tpuer
from tpuer import isa
from tpuer.assembler import AsmError, assemble, disassemble, read_program, write_program
from tpuer.isa import CoreState, ErrorCode, Instruction, Opcode
from tpuer.sim.isa_model import CoreModel

EXAMPLE = """
; multiply two tiles of input rows, requantise, send both results
N = 4
BASE = 2 * N          ; constants may use constants
start:
    read_weights 0, 2
    read_host 0, 2 * N
    matmul 0, BASE, N, switch
    MATMUL N, BASE, N, SWITCH, Accumulate   # any case
    config multiplier, 0x40000000
    config shift, 3, 1
    config zero_point, -5
    activate BASE, 16, N
end: write_host 16, N
    write_host BASE, N, from_acc
    .word 0x1
"""


def test_the_example_assembles_to_the_isa_words():
    program = assemble(EXAMPLE)
    assert program == [
        isa.read_weights(0, 2), isa.read_host(0, 8),
        isa.matmul(0, 8, 4), isa.matmul(4, 8, 4, accumulate=True),
        isa.config(isa.ConfigParam.MULTIPLIER, 0x40000000),
        isa.config(isa.ConfigParam.SHIFT, 3, 1), isa.config(isa.ConfigParam.ZERO_POINT, -5),
        isa.activate(8, 16, 4), isa.write_host(16, 4), isa.write_host(8, 4, from_acc=True),
        isa.halt()]


def test_whitespace_line_ends_and_unicode_are_text_as_any_editor_writes_it():
    """Tabs or any run of blanks between a mnemonic and its operands, CRLF and CR line
    ends, non-breaking spaces and Unicode in comments give the same program."""
    want = assemble(EXAMPLE)
    variants = [
        EXAMPLE.replace(" ", "\t"),
        EXAMPLE.replace("\n", "\r\n"),
        EXAMPLE.replace("\n", "\r"),
        EXAMPLE.replace("    ", "\u00a0\t ").replace("; multiply", "; multiplie \u00e9 \u2192"),
    ]
    for text in variants:
        assert assemble(text) == want
    with pytest.raises(AsmError, match="line 1|:1:|unknown instruction"):
        assemble("read\u00a0host 0, 1")


def test_round_trips_are_exact_for_any_word():
    rng = random.Random(5)
    words = [rng.getrandbits(64) for _ in range(3000)]
    # mostly well-formed words too: a defined opcode, small fields, no reserved bits
    words += [rng.randrange(len(Opcode)) | rng.randrange(16) << 4 | rng.getrandbits(48) << 8
              for _ in range(3000)]
    program = [Instruction.decode(w) for w in words]
    text = disassemble(program)
    assert [i.encode() for i in assemble(text)] == words
    assert disassemble(assemble(text)) == text
    assert ".word" in text and "matmul" in text and "config" in text


def test_program_files_round_trip(tmp_path):
    program = assemble(EXAMPLE)
    write_program(tmp_path / "p.bin", program)
    assert (tmp_path / "p.bin").stat().st_size == 8 * len(program)
    assert read_program(tmp_path / "p.bin") == program
    (tmp_path / "bad.bin").write_bytes(b"\0" * 12)
    with pytest.raises(ValueError, match="12 bytes is not a whole number"):
        read_program(tmp_path / "bad.bin")


@pytest.mark.parametrize("text, message", [
    ("nop\nmatmul 1, 2", "t.s:2: matmul needs 3 operands"),
    ("jump 3", "t.s:1: unknown instruction 'jump'"),
    ("matmul 1, 2, 3, swtch", "t.s:1: 'swtch' is not a flag of matmul"),
    ("halt 1", "t.s:1: halt takes 0 operands, got 1"),
    ("read_host 70000, 1", "t.s:1: instruction field a must fit 16 bits, not 70000"),
    ("read_host -1, 1", "t.s:1: instruction field a must fit 16 bits, not -1"),
    ("\n\nread_host X, 1", "t.s:3: unknown name 'X'"),
    ("A = 1\nA = 2", "t.s:2: 'A' is defined twice"),
    ("config speed, 1", "t.s:1: 'speed' is not a parameter"),
    ("config bias, 1 << 40", "t.s:1: '1 << 40' is not an operand"),
    ("config bias, 0x100000000", "t.s:1: a config value must fit 32 bits"),
    ("read_host 1,, 2", "t.s:1: an operand is missing"),
    (".word 1, 2", "t.s:1: .word takes one value"),
    (".word 0x10000000000000000", "t.s:1: an instruction word has 64 bits"),
])
def test_errors_name_the_line_and_the_problem(text, message):
    with pytest.raises(AsmError, match=message):
        assemble(text, name="t.s")


def test_run_program_matches_the_model_and_reports_errors():
    cfg = tpuer.Config(rows=4, cols=4, ub_depth=16, acc_depth=16, weight_tiles=4)
    rng = np.random.default_rng(3)
    weights = rng.integers(-128, 128, (2, 4, 4)).astype(np.int8)
    rows = rng.integers(-128, 128, (8, 4)).astype(np.int8)
    program = assemble(EXAMPLE.replace("activate BASE, 16, N", "activate BASE, 12, N")
                       .replace("write_host 16, N", "write_host 12, N"))
    device = tpuer.Device(cfg)
    result = device.run_program(program, weights=weights, host_in=rows)
    model = CoreModel(cfg)
    model.load_weights(0, weights.astype(np.int64))
    model.load_program(program)
    want = model.run(0, host_in=list(rows.astype(np.int64)))
    assert result.state is CoreState.HALTED
    assert [list(r[:len(w)]) for r, w in zip(result.host_out, want.host_out)] == \
        [list(w) for w in want.host_out]
    assert device.stats["cycles"] == want.cycles and device.stats["instructions"] == 11

    bad = device.run_program([isa.read_host(0, 1), isa.matmul(0, 0, 1)],
                             host_in=rows[:1])
    assert (bad.state, bad.error, bad.error_pc) == (CoreState.ERROR, ErrorCode.NO_WEIGHTS, 1)
    with pytest.raises(ValueError, match="READ_HOST instructions take 8 rows, but host_in "
                                         "has 2"):
        device.run_program(program, weights=weights, host_in=rows[:2])
    with pytest.raises(ValueError, match=r"shape \(tiles, 4, 4\) with at most 4 tiles"):
        device.run_program(program, weights=np.zeros((5, 4, 4), np.int8))
    with pytest.raises(TypeError, match="host_in must have dtype int8"):
        device.run_program(program, host_in=rows.astype(np.int16))
    with pytest.raises(ValueError, match="a program has 1 to 1024 instructions"):
        device.run_program([])


def tpuer_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tpuer", *args], capture_output=True,
                          text=True, cwd=cwd)


def test_asm_disasm_and_run_commands(tmp_path):
    source = tmp_path / "prog.s"
    source.write_text(EXAMPLE)
    done = tpuer_cli("asm", str(source))
    assert done.returncode == 0, done.stderr
    assert read_program(tmp_path / "prog.bin") == assemble(EXAMPLE)
    listing = tpuer_cli("disasm", str(tmp_path / "prog.bin"), "--bare")
    assert listing.returncode == 0 and assemble(listing.stdout) == assemble(EXAMPLE)

    rng = np.random.default_rng(4)
    np.save(tmp_path / "w.npy", rng.integers(-128, 128, (2, 8, 8)).astype(np.int8))
    np.save(tmp_path / "x.npy", rng.integers(-128, 128, (8, 8)).astype(np.int8))
    ran = tpuer_cli("run", str(tmp_path / "prog.bin"), "--weights", str(tmp_path / "w.npy"),
                    "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "out.npy"))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "state HALTED" in ran.stdout and "instructions 11" in " ".join(ran.stdout.split())
    assert np.load(tmp_path / "out.npy").shape == (8, 8)

    source.write_text("matmul 1, 2\n")
    failed = tpuer_cli("asm", str(source))
    assert failed.returncode == 2 and "prog.s:1: matmul needs 3 operands" in failed.stderr
    no_rows = tpuer_cli("run", str(tmp_path / "prog.bin"), "--weights", str(tmp_path / "w.npy"))
    assert no_rows.returncode == 2 and "take 8 rows, but host_in has 0" in no_rows.stderr
