"""Cycle traces: what every unit of the core did in every cycle of a call, and why the
matrix unit sat idle, as the cycle model (or the RTL) reports it.

A back end hands a :class:`Recorder` one :class:`Activity` per cycle of a program's run;
the recorder keeps each field as intervals of equal value. A :class:`Trace` lays the runs
of a call one after another, encloses them in the model's operators, layers and programs,
sums them (the sums equal ``Device.stats``) and writes Chrome's trace-event JSON, which
Perfetto's UI (ui.perfetto.dev) and ``chrome://tracing`` open. One cycle is shown as one
microsecond.
"""

import contextlib
import enum
import json
from collections import Counter
from typing import NamedTuple

from ..isa import Instruction

__all__ = ["Activity", "StallCause", "Recorder", "Trace", "TRACKS", "per_cycle",
           "first_difference"]


class StallCause(enum.Enum):
    """Why no vector entered the matrix unit in a cycle (each idle cycle has exactly one;
    the cycle model's :meth:`~tpuer.sim.timing_model.CoreTiming._idle_cause` decides)."""
    #: the sequencer fills its fetch stage after START
    FETCH = "fetch"
    #: a vector waits for its weight tile to be in the shadow weights
    WEIGHT_TILE = "weight tile"
    #: a vector that adds to an accumulator row waits for the row's last write
    ACC_SPACING = "accumulator spacing"
    #: a MATMUL's rows are on their way from the Unified Buffer
    START_UP = "start-up"
    #: the MATMUL waits for the host's input rows (a READ_HOST into its rows)
    HOST_INPUT = "host input"
    #: the MATMUL waits for results to leave (a WRITE_HOST of its accumulator rows, or
    #: the feed queue full)
    RESULT_PATH = "result path"
    #: the MATMUL waits on an activation's rows
    HAZARD = "hazard"
    #: the sequencer holds another instruction than a MATMUL
    SEQUENCER = "sequencer"
    #: the sequencer holds HALT, or has stopped at an error, while work drains
    DRAIN = "drain"


class Activity(NamedTuple):
    """What the core did in one cycle."""
    #: the index (in the run's retired instructions) of the instruction the sequencer
    #: held, or ``None`` (filling its fetch stage, or stopping at an error)
    index: int | None
    #: that instruction retired in this cycle
    retired: bool
    #: a vector entered the matrix unit
    vector: bool
    #: a vector waited for its weight tile
    weight_stall: bool
    #: rows in the Weight FIFO at the end of the cycle
    fifo_level: int
    #: the weight reader had rows to move
    weight_reader: bool
    #: the weight loader shifted a row into the shadow weights
    loading: bool
    #: a result row was written into the accumulators
    committing: bool
    #: the activation unit had rows under way
    activating: bool
    #: a host row came in (READ_HOST)
    host_in: int
    #: a row went out to the host (WRITE_HOST)
    host_out: int
    #: why the matrix unit was idle (:class:`StallCause`), or ``None`` when it was busy
    cause: StallCause | None


#: The units' tracks, in the order shown: (field of :class:`Activity`, track name, the
#: name of a busy slice).
TRACKS = (("weight_reader", "weight reader", "reading"),
          ("loading", "weight loader", "loading"),
          ("committing", "accumulators", "writing"),
          ("activating", "activation unit", "activating"),
          ("host_in", "host input", "rows in"),
          ("host_out", "host output", "rows out"))


class Recorder:
    """The :class:`Activity` of every cycle of one run, kept as intervals ``(first cycle,
    end cycle, value)`` per field (:attr:`intervals`)."""

    def __init__(self):
        self.cycles = 0
        self._open = None
        self.intervals = {name: [] for name in Activity._fields}

    def cycle(self, activity):
        now = self.cycles
        if self._open is None:
            self._open = [(value, now) for value in activity]
        else:
            for position, value in enumerate(activity):
                held, since = self._open[position]
                if value != held:
                    self.intervals[Activity._fields[position]].append((since, now, held))
                    self._open[position] = (value, now)
        self.cycles = now + 1

    def finish(self):
        """Close the open intervals (at the end of the run)."""
        if self._open is not None:
            for position, (held, since) in enumerate(self._open):
                self.intervals[Activity._fields[position]].append((since, self.cycles, held))
            self._open = None
        return self


class Trace:
    """The cycle trace of one call: its runs (programs) one after another, and the
    operators, layers and programs that enclose them (:meth:`scope`)."""

    def __init__(self, cfg, backend):
        self.cfg = cfg
        self.backend = backend
        self.cycles = 0
        self.runs = []          # (first cycle, Recorder, words, start pc, program number)
        self.scopes = []        # (track, name, first cycle, end cycle, args)
        self.link = []          # (cycle, name, args): the serial link's frames and retries

    def add_scope(self, track, name, start, end, **args):
        """A slice of ``track`` named ``name`` over cycles ``[start, end)``; returns it."""
        entry = [track, name, start, end, args]
        self.scopes.append(entry)
        return entry

    @contextlib.contextmanager
    def scope(self, track, name, **args):
        """Enclose the runs added inside the ``with`` block in a slice of ``track``
        (``"operators"`` or ``"layers"``) named ``name``."""
        entry = self.add_scope(track, name, self.cycles, self.cycles, **args)
        try:
            yield entry
        finally:
            entry[3] = self.cycles

    def add_run(self, recorder, words, *, start_pc=0, useful_macs=None, host_bytes=0):
        """Append one program's run (its :class:`Recorder`, finished, and the words of the
        instructions it retired); ``useful_macs``: of its products, those that are not
        padding, when the caller knows them; ``host_bytes``: what it moved over the host
        link (:func:`~tpuer.protocol.run_bytes`)."""
        program = len(self.runs)
        macs = recorder_sum(recorder, "vector") * self.cfg.rows * self.cfg.cols
        args = {"program": program, "cycles": recorder.cycles, "MACs": macs,
                "host bytes": host_bytes}
        if useful_macs is not None:
            args.update({"useful MACs": useful_macs, "padded MACs": macs - useful_macs})
        self.add_scope("programs", f"program {program}", self.cycles,
                       self.cycles + recorder.cycles, **args)
        self.runs.append((self.cycles, recorder, tuple(words), start_pc, program))
        self.cycles += recorder.cycles

    def add_link_event(self, name, **args):
        """A serial link event (a frame sent, a retry) at the current cycle."""
        self.link.append((self.cycles, name, args))

    # --- sums ----------------------------------------------------------------------------

    def sums(self):
        """Totals over the call: ``cycles``, ``mxu_busy_cycles``, ``weight_stall_cycles``,
        ``instructions`` (as ``Device.stats`` has them), ``host_rows_in``,
        ``host_rows_out``, the busy cycles of every unit of :data:`TRACKS`, and
        ``stalls``: idle cycles of the matrix unit by :class:`StallCause`."""
        totals = Counter()
        stalls = Counter()
        for _, recorder, _, _, _ in self.runs:
            totals["mxu_busy_cycles"] += recorder_sum(recorder, "vector")
            totals["weight_stall_cycles"] += recorder_sum(recorder, "weight_stall")
            totals["instructions"] += recorder_sum(recorder, "retired")
            totals["host_rows_in"] += recorder_sum(recorder, "host_in")
            totals["host_rows_out"] += recorder_sum(recorder, "host_out")
            for field, _, _ in TRACKS:
                totals[f"{field}_cycles"] += sum(end - start for start, end, value
                                                 in recorder.intervals[field] if value)
            for start, end, cause in recorder.intervals["cause"]:
                if cause is not None:
                    stalls[cause] += end - start
        return {"cycles": self.cycles, **totals, "stalls": dict(stalls)}

    def stalls_within(self, first, end):
        """Idle cycles of the matrix unit by cause within cycles ``[first, end)``, and
        its busy cycles there."""
        stalls, busy = Counter(), 0
        for offset, recorder, _, _, _ in self.runs:
            if offset >= end or offset + recorder.cycles <= first:
                continue
            for start, stop, cause in recorder.intervals["cause"]:
                overlap = min(stop + offset, end) - max(start + offset, first)
                if overlap > 0:
                    if cause is None:
                        busy += overlap
                    else:
                        stalls[cause] += overlap
        return busy, stalls

    # --- Chrome trace-event JSON -----------------------------------------------------------

    def events(self):
        """The trace as Chrome trace events (a list of dicts; one cycle = 1 us)."""
        names = ["operators", "layers", "programs", "sequencer", "matrix unit",
                 *(name for _, name, _ in TRACKS), "link"]
        tid = {name: index + 1 for index, name in enumerate(names)}
        events = [{"ph": "M", "pid": 1, "name": "process_name",
                   "args": {"name": f"tpuer core {self.cfg.name} ({self.backend})"}}]
        for name, number in tid.items():
            events.append({"ph": "M", "pid": 1, "tid": number, "name": "thread_name",
                           "args": {"name": name}})
            events.append({"ph": "M", "pid": 1, "tid": number, "name": "thread_sort_index",
                           "args": {"sort_index": number}})

        def slice_(track, name, start, end, args=None):
            event = {"ph": "X", "pid": 1, "tid": tid[track], "name": name, "ts": start,
                     "dur": end - start}
            if args:
                event["args"] = args
            events.append(event)

        for track, name, start, end, args in sorted(self.scopes, key=lambda s: (s[2], -s[3])):
            if end > start:
                slice_(track, name, start, end, args)
        for offset, recorder, words, start_pc, program in self.runs:
            for start, end, index in recorder.intervals["index"]:
                if index is None:
                    continue
                instr = Instruction.decode(words[index])
                op = instr.op.name if instr.op is not None else f"OPCODE_{instr.opcode}"
                slice_("sequencer", op, offset + start, offset + end,
                       {"pc": start_pc + index, "program": program, "a": instr.a, "b": instr.b,
                        "count": instr.count, "flags": instr.flags})
            for start, end, cause in recorder.intervals["cause"]:
                name = "vectors" if cause is None else cause.value
                slice_("matrix unit", name, offset + start, offset + end,
                       {"cycles": end - start})
            for field, track, busy in TRACKS:
                for start, end, value in recorder.intervals[field]:
                    if value:
                        slice_(track, busy, offset + start, offset + end)
            for start, _end, level in recorder.intervals["fifo_level"]:
                events.append({"ph": "C", "pid": 1, "name": "Weight FIFO rows",
                               "ts": offset + start, "args": {"rows": level}})
        for cycle, name, args in self.link:
            events.append({"ph": "i", "pid": 1, "tid": tid["link"], "s": "t", "name": name,
                           "ts": cycle, "args": args})
        return events

    def save(self, path):
        """Write the Chrome trace-event JSON file ``path``."""
        with open(path, "w") as file:
            json.dump({"traceEvents": self.events(),
                       "otherData": {"time unit": "1 us = 1 core cycle",
                                     "config": self.cfg.name, "backend": self.backend}},
                      file, separators=(",", ":"))


def recorder_sum(recorder, field):
    """The sum over the cycles of ``recorder`` of ``field`` (a flag counts 1)."""
    return sum((end - start) * int(value) for start, end, value in recorder.intervals[field]
               if value)


def per_cycle(recorder):
    """Every field of ``recorder``'s :class:`Activity`, as a list of a value per cycle."""
    fields = {}
    for name, intervals in recorder.intervals.items():
        values = []
        for start, end, value in intervals:
            values.extend([value] * (end - start))
        fields[name] = values
    return fields


def first_difference(activity, recorder):
    """Where ``activity`` (what the RTL did, per cycle: :func:`~tpuer.tb.core_tb.rtl_activity`)
    and ``recorder``'s trace first differ: ``(field, cycle, the RTL's values, the trace's
    values)``, the values from that cycle on, or ``None`` if they agree."""
    recorded = per_cycle(recorder)
    for name, seen in activity.items():
        said = [int(value) for value in recorded[name]]
        if seen != said:
            cycle = next((i for i, (a, b) in enumerate(zip(seen, said)) if a != b),
                         min(len(seen), len(said)))
            return name, cycle, seen[cycle:], said[cycle:]
    return None
