"""``verilator --lint-only -Wall`` over the generated Verilog, with the project's waivers."""

import subprocess
import tempfile
from pathlib import Path

from ..hw.export import build_block, to_verilog
from ..hw.lint_waivers import VERILATOR_WAIVERS
from .cocotb_backend import check_simulator

__all__ = ["lint_block", "lint_verilog", "LintFailed"]


class LintFailed(AssertionError):
    """Verilator reported warnings or errors that no waiver covers."""


def lint_verilog(text, *, top="top", label="design"):
    """Lint Verilog ``text`` whose top module is ``top``; returns Verilator's (empty) output
    or raises :class:`LintFailed` with it."""
    check_simulator("verilator")
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / f"{top}.v"
        source.write_text(text)
        command = ["verilator", "--lint-only", "-Wall", "--top-module", top,
                   *(f"-Wno-{rule}" for rule in VERILATOR_WAIVERS), str(source)]
        result = subprocess.run(command, capture_output=True, text=True)
    output = (result.stdout + result.stderr).strip()
    if result.returncode != 0 or "%Warning" in output or "%Error" in output:
        raise LintFailed(f"verilator lint of {label}:\n{output}")
    return output


def lint_block(block, cfg):
    """Lint the Verilog of ``block`` for ``cfg`` (see :func:`lint_verilog`)."""
    return lint_verilog(to_verilog(build_block(block, cfg), name="top"),
                        label=f"{block} ({cfg.name})")
