"""``tpuer profile``: run a program, a matrix product, a TFLite model or a demo network
with a cycle trace, and report where the cycles went.

It writes the trace (Chrome trace-event JSON, for Perfetto's UI), a timeline of the units
over a window of cycles, and a roofline, and prints a table per operator, layer or program:
cycles, useful MACs, MXU utilisation, the top causes of the matrix unit's idle cycles.
"""

import re
from pathlib import Path

import numpy as np

from . import protocol

__all__ = ["Roofs", "profile_rows", "bound_by", "run_profile", "UART_BITS_PER_BYTE"]

#: Bits on the line per byte of a UART frame: a start bit, 8 data bits, a stop bit.
UART_BITS_PER_BYTE = 10


class Roofs:
    """The roofline's ceilings for configuration ``cfg``: the array's peak in MACs per
    cycle, and the bandwidths of the host word stream and (for a board) of its UART, in
    bytes per cycle."""

    def __init__(self, cfg, board=None):
        self.peak = cfg.rows * cfg.cols
        self.stream = protocol.WORD_BITS // 8       # a word a cycle, each way
        self.board = board
        if board is not None:
            self.uart = board.baud / UART_BITS_PER_BYTE / (board.clock_mhz * 1e6)
            self.uart_name = f"{board.name} UART, {board.baud} baud at {board.clock_mhz:g} MHz"
        else:
            self.uart = None

    def bound(self, intensity):
        """The roof at ``intensity`` MACs per byte, and which one it is."""
        roofs = [(self.peak, "compute"), (self.stream * intensity, "host stream")]
        if self.uart is not None:
            roofs.append((self.uart * intensity, "UART"))
        return min(roofs)


def bound_by(cfg, macs, host_bytes, board=None):
    """Which roof bounds work of ``macs`` MACs moving ``host_bytes`` bytes over the host
    link: ``"compute"``, ``"host stream"`` or ``"UART"``."""
    return Roofs(cfg, board).bound(macs / max(host_bytes, 1))[1]


def profile_rows(trace):
    """A row per operator (TFLite), layer (a compiled model) or program (anything else)
    of ``trace``: name, the scope's arguments, first cycle, end cycle, cycles, useful MACs,
    host bytes, busy cycles, and the matrix unit's idle cycles by cause (most first)."""
    tracks = {scope[0] for scope in trace.scopes}
    track = next(t for t in ("operators", "layers", "programs") if t in tracks)
    programs = [scope for scope in trace.scopes if scope[0] == "programs"]
    rows = []
    for kind, name, start, end, args in trace.scopes:
        if kind != track or end <= start:
            continue
        inside = [p for p in programs if start <= p[2] and p[3] <= end]
        macs = args.get("MACs") if track == "operators" else None
        if macs is None:
            macs = sum(p[4].get("useful MACs", p[4]["MACs"]) for p in inside)
        busy, stalls = trace.stalls_within(start, end)
        rows.append({"name": name, "args": args, "start": start, "end": end,
                     "cycles": end - start,
                     "macs": macs, "host_bytes": sum(p[4]["host bytes"] for p in inside),
                     "busy": busy,
                     "stalls": sorted(stalls.items(), key=lambda item: -item[1])})
    return rows


def print_table(cfg, rows, out, board=None):
    """The report: a row each, then the whole call."""
    limits = Roofs(cfg, board)
    out(f"| {'operator / layer / program':<34} | {'cycles':>9} | {'MACs':>11} | {'MXU util':>8} "
        f"| {'bound by':<11} | top stall causes (share of its cycles) |")
    out(f"| {'-' * 34} | {'-' * 8}: | {'-' * 10}: | {'-' * 7}: | {'-' * 11} | {'-' * 38} |")
    for row in rows + [_total(rows)]:
        utilisation = row["macs"] / (limits.peak * row["cycles"]) if row["cycles"] else 0
        causes = ", ".join(f"{cause.value} {100 * count / row['cycles']:.0f}%"
                           for cause, count in row["stalls"][:3]) or "-"
        bound = limits.bound(row["macs"] / max(row["host_bytes"], 1))[1]
        out(f"| {row['name'][:34]:<34} | {row['cycles']:>9,} | {row['macs']:>11,} | "
            f"{100 * utilisation:>7.1f}% | {bound:<11} | {causes} |")


def _total(rows):
    stalls = {}
    for row in rows:
        for cause, count in row["stalls"]:
            stalls[cause] = stalls.get(cause, 0) + count
    return {"name": "all", "start": rows[0]["start"] if rows else 0,
            "end": rows[-1]["end"] if rows else 0,
            "cycles": sum(r["cycles"] for r in rows), "macs": sum(r["macs"] for r in rows),
            "host_bytes": sum(r["host_bytes"] for r in rows),
            "busy": sum(r["busy"] for r in rows),
            "stalls": sorted(stalls.items(), key=lambda item: -item[1])}


# --- pictures --------------------------------------------------------------------------

#: Colours of the matrix unit's states in the timeline.
_CAUSE_COLOURS = {None: "#2a9d3f", "fetch": "#7f7f7f", "weight tile": "#d62728",
                  "accumulator spacing": "#9467bd", "start-up": "#bcbd22",
                  "host input": "#1f77b4", "result path": "#ff7f0e", "hazard": "#e377c2",
                  "sequencer": "#8c564b", "drain": "#c7c7c7"}


def default_window(trace, rows, length=400):
    """A window of ``length`` cycles at the start of the longest row."""
    longest = max(rows, key=lambda row: row["cycles"])
    return longest["start"], min(longest["start"] + length, trace.cycles)


def draw_timeline(trace, path, window):
    """A PNG of every unit's work over cycles ``window`` (first, end)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from .sim.trace import TRACKS
    first, end = window
    lanes = ["matrix unit", "sequencer", *(name for _, name, _ in TRACKS)]
    fig, (ax, fifo) = plt.subplots(2, 1, figsize=(14, 5), sharex=True,
                                   gridspec_kw={"height_ratios": [4, 1]})
    y = {name: len(lanes) - 1 - index for index, name in enumerate(lanes)}
    fifo_x, fifo_y = [], []

    def bar(lane, start, stop, colour):
        start, stop = max(start, first), min(stop, end)
        if stop > start:
            ax.broken_barh([(start, stop - start)], (y[lane] - 0.4, 0.8), color=colour,
                           linewidth=0)

    for offset, recorder, words, _, _ in trace.runs:
        if offset >= end or offset + recorder.cycles <= first:
            continue
        for start, stop, cause in recorder.intervals["cause"]:
            bar("matrix unit", offset + start, offset + stop,
                _CAUSE_COLOURS[None if cause is None else cause.value])
        for start, stop, index in recorder.intervals["index"]:
            if index is not None:
                from .isa import Instruction
                op = Instruction.decode(words[index]).op
                colour = "#2a9d3f" if op is not None and op.name == "MATMUL" else "#8c8c8c"
                bar("sequencer", offset + start, offset + stop - 0.15, colour)
        for field, name, _ in TRACKS:
            for start, stop, value in recorder.intervals[field]:
                if value:
                    bar(name, offset + start, offset + stop, "#4c72b0")
        for start, stop, level in recorder.intervals["fifo_level"]:
            fifo_x += [offset + start, offset + stop]
            fifo_y += [level, level]
    ax.set_yticks(list(y.values()), list(y))
    ax.set_xlim(first, end)
    ax.set_title(f"tpuer core {trace.cfg.name}: cycles {first:,} to {end:,} "
                 f"(sequencer: MATMUL green, other instructions grey)")
    ax.legend(handles=[Patch(color=colour, label="vector in" if cause is None else cause)
                       for cause, colour in _CAUSE_COLOURS.items()],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              title="matrix unit", title_fontsize=8)
    fifo.plot(fifo_x, fifo_y, color="#4c72b0", drawstyle="steps-post")
    fifo.set_ylabel("Weight FIFO\nrows")
    fifo.set_xlabel("cycle")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_roofline(cfg, rows, path, board=None):
    """A PNG of the roofline: MACs per cycle against MACs per byte of host traffic, a point
    per row."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    limits = Roofs(cfg, board)
    points = [(row["macs"] / max(row["host_bytes"], 1), row["macs"] / row["cycles"], row["name"])
              for row in rows if row["cycles"] and row["macs"]]
    x_low = min([p[0] for p in points] + [limits.peak / limits.stream]) / 10
    x_high = max([p[0] for p in points] + [limits.peak / limits.stream]) * 10
    xs = np.geomspace(x_low, x_high, 200)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.loglog(xs, np.minimum(limits.peak, limits.stream * xs), color="black",
              label=f"host word stream, {limits.stream} bytes/cycle")
    ax.axhline(limits.peak, color="black", linestyle=":",
               label=f"array peak, {limits.peak} MACs/cycle")
    if limits.uart is not None:
        ax.loglog(xs, np.minimum(limits.peak, limits.uart * xs), color="#d62728",
                  label=f"{limits.uart_name}")
    for x, y, name in points:
        ax.scatter([x], [y], s=25)
        ax.annotate(name, (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
    ax.set_xlabel("MACs per byte of host traffic")
    ax.set_ylabel("MACs per cycle")
    ax.set_title(f"roofline, tpuer core {cfg.name}\n(cycles of the core; a point above a "
                 f"link's roof is bound by that link on a TPU behind it)", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- what to profile ---------------------------------------------------------------------

_SHAPE = re.compile(r"^(\d+)x(\d+)x(\d+)$")


def run_profile(target, cfg, *, out_dir, input_path=None, weights_path=None, batch=8,
                window=None, board=None, seed=0, out=print, load_array=None,
                load_program=None, backend="golden"):
    """Profile ``target`` (a ``.tflite`` file, a ``.s`` / ``.bin`` program, ``MxKxN``, or
    a demo network ``mlp`` / ``cnn``) on ``backend`` with a trace; write ``trace.json``,
    ``timeline.png`` and ``roofline.png`` into ``out_dir``; print the table. Returns the
    :class:`~tpuer.sim.trace.Trace`."""
    from .device import Device
    device = Device(cfg, backend=backend, trace=True)
    rng = np.random.default_rng(seed)
    shape = _SHAPE.match(target)
    if shape:
        m, k, n = map(int, shape.groups())
        a = rng.integers(-128, 128, (m, k)).astype(np.int8)
        b = rng.integers(-128, 128, (k, n)).astype(np.int8)
        what = f"the {m}x{k}x{n} product of random int8 matrices"
        device.matmul(a, b, progress=False)
    elif target in ("mlp", "cnn"):
        what = _run_demo_network(device, target, cfg, batch)
    elif target.endswith(".tflite"):
        from .tflite_model import from_tflite
        model = from_tflite(target)
        x = load_array(input_path, "--input") if input_path else _random_input(model, batch, rng)
        what = f"{target}, batch of {len(x)}"
        device.run(model, x, progress=False)
    elif target.endswith((".s", ".bin")):
        program = load_program(target)
        device.run_program(program, weights=load_array(weights_path, "--weights"),
                           host_in=load_array(input_path, "--input"))
        what = f"program {target}"
    else:
        raise ValueError(f"cannot profile {target!r}: give a .tflite model, a .s or .bin "
                         f"program, a product MxKxN (for example 256x64x64), mlp or cnn")
    trace = device.trace
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = profile_rows(trace)
    trace.save(out_dir / "trace.json")
    window = window or default_window(trace, rows)
    draw_timeline(trace, out_dir / "timeline.png", window)
    draw_roofline(cfg, rows, out_dir / "roofline.png", board)
    sums = trace.sums()
    source = ("the cycle model" if backend == "golden" else
              f"the cycle model, checked cycle by cycle against the RTL on {backend}")
    out(f"tpuer profile: {what} on the {cfg.name} core ({source})")
    out(f"{sums['cycles']:,} cycles, {sums['mxu_busy_cycles']:,} with a vector in the matrix "
        f"unit, {sums['weight_stall_cycles']:,} weight-stall cycles, "
        f"{sums['instructions']:,} instructions, {len(trace.runs):,} programs")
    out("")
    print_table(cfg, rows, out, board)
    out("")
    out(f"trace    {out_dir / 'trace.json'}  (open it in https://ui.perfetto.dev; 1 us = 1 cycle)")
    out(f"timeline {out_dir / 'timeline.png'}  (cycles {window[0]:,} to {window[1]:,})")
    out(f"roofline {out_dir / 'roofline.png'}")
    return trace


def _random_input(model, batch, rng):
    dtype = np.dtype(model.input.dtype)
    shape = (batch, *model.input_shape)
    if dtype == np.int8:
        return rng.integers(-128, 128, shape).astype(np.int8)
    return rng.random(shape).astype(dtype)


def _run_demo_network(device, kind, cfg, batch):
    from .demo import build_network
    from .digits import load_digits
    from .quantize import quantize
    digits = load_digits()
    layers, x_train, x_test = build_network(kind, digits)
    model = quantize(layers, x_train)
    device.run(model, model.quantize_input(x_test[:batch]), progress=False)
    return f"the digits {kind.upper()} (demo), batch of {batch}"
