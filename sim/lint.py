"""``verilator --lint-only -Wall`` over the generated Verilog, with the project's waivers."""

import subprocess
import tempfile
from pathlib import Path

from ..hw.export import build_block, to_verilog
from ..hw.lint_waivers import VERILATOR_WAIVERS
from .cocotb_backend import check_simulator

__all__ = ["lint_block", "LintFailed"]


class LintFailed(AssertionError):
    """Verilator reported warnings or errors that no waiver covers."""


def lint_block(block, cfg):
    """Lint the Verilog of ``block`` for ``cfg``; returns Verilator's (empty) output or
    raises :class:`LintFailed` with it."""
    check_simulator("verilator")
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / f"{block}.v"
        source.write_text(to_verilog(build_block(block, cfg), name="top"))
        command = ["verilator", "--lint-only", "-Wall", "--top-module", "top",
                   *(f"-Wno-{rule}" for rule in VERILATOR_WAIVERS), str(source)]
        result = subprocess.run(command, capture_output=True, text=True)
    output = (result.stdout + result.stderr).strip()
    if result.returncode != 0 or "%Warning" in output or "%Error" in output:
        raise LintFailed(f"verilator lint of {block} ({cfg.name}):\n{output}")
    return output
