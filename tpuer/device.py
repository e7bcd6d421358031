"""``tpuer.Device``: the public API of a TPU, whatever runs it."""

import contextlib
import functools
import sys
from dataclasses import dataclass

import numpy as np

from .config import Config
from .driver import MAX_EXACT_K, Step, plan_matmul
from .isa import CoreState, ErrorCode, Instruction, Opcode
from .protocol import check_lane_width

__all__ = ["Device", "TPUError", "CycleBudgetError", "ProgramResult", "CYCLE_BUDGETS"]

#: The default cycle budget of a call on each back end: about ten minutes of its work on
#: an 8x8 core at its slowest (the golden model 30,000 cycles/s on programs it has not seen,
#: amaranth.sim 1,800, Verilator with its host in C++ 200,000, Icarus 740; a board at 100
#: MHz, 100 s).
CYCLE_BUDGETS = {"golden": 30_000_000, "pysim": 1_000_000, "verilator": 100_000_000,
                 "icarus": 500_000, "serial": 10_000_000_000}
#: A call estimated above this many cycles shows a progress bar on a terminal.
PROGRESS_CYCLES = 1_000_000
#: A refused call's estimate times each program up to this many cycles (or the budget).
ESTIMATE_LIMIT = 1_000_000


@dataclass
class ProgramResult:
    """How a program ended: ``state`` (HALTED or ERROR), ``error`` and ``error_pc`` (the
    failing instruction), and ``host_out``, the rows WRITE_HOST sent (int32, one row of
    ``ub_lanes`` a row; accumulator rows fill the first ``cols`` lanes)."""
    state: CoreState
    error: ErrorCode
    error_pc: int
    host_out: np.ndarray


class TPUError(RuntimeError):
    """The core stopped with an error (the message has the code and the instruction)."""


class CycleBudgetError(TPUError):
    """A call needs more cycles than its budget (``max_cycles``): refused before it ran,
    with the cycle model's estimate, or stopped when the core passed the budget."""


def _check_int8_array(name, value, ndim):
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a NumPy array of dtype int8, not {type(value).__name__}")
    if value.dtype != np.int8:
        raise TypeError(f"{name} must have dtype int8, not {value.dtype}")
    if value.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, not of shape {value.shape}")


def _check_int8_matrix(name, value):
    _check_int8_array(name, value, 2)
    if 0 in value.shape:
        raise ValueError(f"{name} must not be empty, its shape is {value.shape}")


def _instruction(index, item):
    """Item ``index`` of a program: an :class:`Instruction` or a 64-bit word (a Python
    or NumPy integer; never a float or a bool, which would be read as some instruction)."""
    if isinstance(item, Instruction):
        return item
    if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, np.integer)):
        raise TypeError(f"program[{index}] must be an Instruction or a 64-bit integer word, "
                        f"not {type(item).__name__} {item!r}")
    if not 0 <= int(item) < 1 << 64:
        raise ValueError(f"program[{index}] = {int(item):#x} is not a 64-bit instruction word")
    return Instruction.decode(int(item))


def _tally(totals, run, where):
    """Add ``run``'s counters to ``totals`` (a counter the back end does not report makes
    the total ``None``); raise :class:`TPUError` naming ``where`` unless it halted."""
    if run.state is not CoreState.HALTED:
        raise TPUError(f"{where} stopped in {run.state.name} with {run.error.name} at "
                       f"instruction {run.error_pc}")
    _add_counters(totals, {name: getattr(run, name) for name in totals})


def _add_counters(totals, counts):
    """Add ``counts`` to ``totals``, name by name; a count the back end does not report
    (``None``) makes the total ``None``."""
    for name in totals:
        value = counts.get(name)
        totals[name] = None if value is None or totals[name] is None else totals[name] + value


def _traced(call):
    """A :class:`Device` call that records its trace when the device traces."""
    @functools.wraps(call)
    def traced(self, *args, **kwargs):
        with self._traced_call():
            return call(self, *args, **kwargs)
    return traced


def _unit_name(model, unit):
    """How a trace names a unit of a compiled plan: its layers (a chain of them, or one
    layer's part)."""
    seg = unit[-1]
    if len(seg.layers) > 1:
        return f"layers {seg.layers[0]}-{seg.layers[-1]}"
    layer = model.layers[seg.layers[0]]
    name = f"layer {seg.layers[0]} {layer.kind} {layer.k}x{layer.n}"
    if seg.n_tiles is not None:
        name += f", output tiles {seg.n_tiles[0]}-{seg.n_tiles[1] - 1}"
    return name


class _Reporter:
    """Progress told to a function of the programs done, or to no one."""

    def __init__(self, report):
        self.report = report

    def update(self, done):
        if self.report is not None:
            self.report(done)

    def close(self):
        pass


class Device:
    """A TPU with configuration ``config``, run by ``backend``:

    * ``"golden"``: the ISA-level NumPy model, timed by its cycle model (fast; the same
      results and the same counters as the RTL);
    * ``"pysim"``: the RTL in amaranth.sim;
    * ``"verilator"``, ``"icarus"``: the RTL's Verilog, through cocotb;
    * ``"serial"``: a TPU on a board, over its serial port: ``port=`` (for example
      ``/dev/ttyUSB1``, or the pseudo-terminal of a simulated board) and ``baud=``.

    **State between calls.** Each call (:meth:`run_program`, :meth:`matmul`, :meth:`run`)
    starts from a core as it is after reset: every memory (Unified Buffer, accumulators,
    weight memory, instruction memory) holds zeros, the Weight FIFO is empty, the active
    weights are zero and the activation parameters have their defaults. Within a call,
    its programs share the core, one after another. Every back end keeps exactly this; the
    serial one clears, before a call, what the previous call left on the board.

    **Cycle budget.** Every call takes ``max_cycles`` (default :data:`CYCLE_BUDGETS` of the
    back end): a call whose estimate is larger is refused before it runs, and a run that
    passes it is stopped, both with :class:`CycleBudgetError`.

    After each call, :attr:`stats` holds ``cycles``, ``mxu_busy_cycles``,
    ``weight_stall_cycles``, ``macs`` (useful multiply-accumulates), ``instructions`` and
    ``programs`` of that call.

    **Cycle trace.** With ``trace=True``, :attr:`trace` holds after each call its
    :class:`~tpuer.sim.trace.Trace`: every unit's work cycle by cycle, why the matrix unit
    was idle, the programs and the model's layers or operators around them
    (``device.trace.save("call.json")`` writes a file Perfetto's UI opens; see
    ``docs/profiling.md``). The cycle model records it; on an RTL back end, what the RTL
    did in every cycle, as far as its ports and counters show it, must equal the trace
    (else :class:`~tpuer.sim.core_backends.TraceMismatch`); on a board (``serial``), its
    counters, and the trace has the link's frames and retries of each program.
    """

    def __init__(self, config=None, backend="golden", *, trace=False, **options):
        from .sim.core_backends import BACKENDS, TRACING_BACKENDS, TracedBackend, make_backend
        config = Config() if config is None else config
        if not isinstance(config, Config):
            raise TypeError(f"config must be a tpuer.Config, not {type(config).__name__}")
        check_lane_width(config)
        if not isinstance(backend, str) or backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        if not isinstance(trace, (bool, np.bool_)):
            raise TypeError(f"trace must be True or False, not {trace!r}")
        if trace and backend not in TRACING_BACKENDS:
            raise ValueError(f"the {backend} back end gives no cycle trace; trace with "
                             f"{' or '.join(TRACING_BACKENDS)}")
        self.config = config
        self.backend = backend
        self._backend = make_backend(backend, config, **options)
        # what runs the steps of a traced call
        self._tracer = self._backend if backend == "golden" else TracedBackend(self._backend,
                                                                                config)
        self.stats = {}
        self.tracing = bool(trace)
        #: the :class:`~tpuer.sim.trace.Trace` of the last call (with ``trace=True``)
        self.trace = None
        self._trace = None           # the trace of the call under way

    # --- traces --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _traced_call(self):
        """Around a call: a new trace for it, unless it is part of a call under way."""
        if not self.tracing or self._trace is not None:
            yield
            return
        from .sim.trace import Trace
        self._trace = Trace(self.config, self.backend)
        try:
            yield
            self.trace = self._trace
        finally:
            self._trace = None

    def _scope(self, track, name, **args):
        """A slice of ``track`` around what runs inside, in the call's trace if any."""
        if self._trace is None:
            return contextlib.nullcontext()
        return self._trace.scope(track, name, **args)

    def _run_steps(self, steps, max_cycles):
        """The back end's runs of ``steps``, recorded into the call's trace if any."""
        if self._trace is None:
            return self._backend.run(steps, max_cycles=max_cycles)
        return self._tracer.run(steps, max_cycles=max_cycles, trace=self._trace)

    # --- cycle budgets and progress ------------------------------------------------------

    def _budget(self, max_cycles):
        if max_cycles is None:
            return CYCLE_BUDGETS[self.backend]
        if isinstance(max_cycles, (bool, np.bool_)) or not isinstance(max_cycles,
                                                                      (int, np.integer)):
            raise TypeError(f"max_cycles must be a positive integer, not {max_cycles!r}")
        if max_cycles < 1:
            raise ValueError(f"max_cycles must be a positive integer, not {max_cycles}")
        return int(max_cycles)

    def _refuse_above(self, budget, templates, what):
        """Refuse the call if the cycle model's estimate of ``templates`` ((count, program)
        pairs) exceeds ``budget``, the estimate in the message (each program timed up to
        :data:`ESTIMATE_LIMIT` cycles, or ``budget`` if larger); return the estimate."""
        from .sim.isa_model import estimate_cycles
        estimate, cut = 0, False
        limit = max(budget, ESTIMATE_LIMIT)
        for count, program in templates:
            cycles = estimate_cycles(self.config, program, limit)
            cut = cut or cycles > limit
            estimate += count * cycles
        if estimate > budget:
            raise CycleBudgetError(
                f"{what} needs {'more than' if cut else 'about'} {estimate:,} cycles by the "
                f"cycle model, over its budget of max_cycles={budget:,} (the "
                f"{self.backend} back end's default is {CYCLE_BUDGETS[self.backend]:,}); "
                f"pass a larger max_cycles or split the work")
        return estimate

    @staticmethod
    def _progress(progress, estimate, total, label):
        """What shows the progress of a call of ``total`` programs: ``update(done)``
        after each program, ``close()`` at the end."""
        if callable(progress):
            return _Reporter(lambda done: progress(done, total))
        if progress is None:
            progress = estimate >= PROGRESS_CYCLES and sys.stderr.isatty()
        if not progress:
            return _Reporter(None)
        from .progress import ProgressBar
        return ProgressBar(label, total)

    # --- calls ---------------------------------------------------------------------------

    @_traced
    def run_program(self, program, *, weights=None, host_in=None, max_cycles=None):
        """Run one program (a list of :class:`~tpuer.isa.Instruction` or 64-bit words)
        from instruction 0, with ``weights`` (int8, shape (tiles, rows, cols)) loaded at
        tile 0 and ``host_in`` (int8, shape (n, ub_lanes)) offered to READ_HOST. Returns a
        :class:`ProgramResult`; :attr:`stats` holds the counters. A program that stops
        with an error is a result too, not an exception; so is one that runs past the end
        of the instruction memory (``PROGRAM_END``: the words after the program are zero,
        NOP)."""
        cfg = self.config
        if isinstance(program, (str, bytes)) or not hasattr(program, "__iter__"):
            raise TypeError(f"program must be a list of Instructions or 64-bit words, not "
                            f"{type(program).__name__}")
        program = [_instruction(index, item) for index, item in enumerate(program)]
        if not 1 <= len(program) <= cfg.program_depth:
            raise ValueError(f"a program has 1 to {cfg.program_depth} instructions "
                             f"(Config.program_depth), not {len(program)}")
        if weights is None:
            weights = np.zeros((0, cfg.rows, cfg.cols), np.int8)
        _check_int8_array("weights", weights, 3)
        if weights.shape[1:] != (cfg.rows, cfg.cols) or len(weights) > cfg.weight_tiles:
            raise ValueError(f"weights must have shape (tiles, {cfg.rows}, {cfg.cols}) with at "
                             f"most {cfg.weight_tiles} tiles, not {weights.shape}")
        if host_in is None:
            host_in = np.zeros((0, cfg.ub_lanes), np.int8)
        _check_int8_array("host_in", host_in, 2)
        if host_in.shape[1] != cfg.ub_lanes:
            raise ValueError(f"host_in rows must have {cfg.ub_lanes} lanes (ub_lanes), not "
                             f"{host_in.shape[1]}")
        wanted = 0
        for instr in program:
            if instr.op is Opcode.HALT:
                break
            if instr.op is Opcode.READ_HOST:
                wanted += instr.count
        if wanted > len(host_in):
            raise ValueError(f"the program's READ_HOST instructions take {wanted} rows, but "
                             f"host_in has {len(host_in)}: the core would wait for them")
        budget = self._budget(max_cycles)
        if self.backend != "golden":       # there the run itself is the cycle model's
            self._refuse_above(budget, [(1, program)], "this program")
        step = Step(program, weights.astype(np.int64), host_in.astype(np.int64))
        [(_, run)] = list(self._run_steps([step], budget))
        self._set_stats({"cycles": run.cycles, "mxu_busy_cycles": run.mxu_busy_cycles,
                         "weight_stall_cycles": run.weight_stall_cycles,
                         "macs": run.mxu_busy_cycles * cfg.rows * cfg.cols,
                         "instructions": run.instructions, "programs": 1})
        rows = np.zeros((len(run.host_out), cfg.ub_lanes), dtype=np.int64)
        for index, row in enumerate(run.host_out):
            rows[index, :len(row)] = row
        return ProgramResult(state=run.state, error=run.error, error_pc=run.error_pc,
                             host_out=rows.astype(np.int32))

    @_traced
    def run(self, model, x, *, progress=None, max_cycles=None):
        """The int8 output of quantised ``model`` (:func:`tpuer.quantize`) for int8 input
        ``x``, computed on the TPU; equal, bit for bit, to ``model.reference(x)``.
        :attr:`stats` holds the counters of every program it ran. ``progress``: a function
        called with (programs done, programs in all) after each program, ``True`` or
        ``False`` for a progress bar on standard error or none, or ``None`` (a bar on a
        terminal for long work). ``max_cycles``: the cycle budget (see :class:`Device`)."""
        from .compiler import compiled, segment_outputs, segment_steps, segment_templates
        from .quantize import QuantizedModel
        from .tflite_model import TFLiteModel
        if isinstance(model, TFLiteModel):
            return self._run_tflite(model, x, progress=progress, max_cycles=max_cycles)
        if not isinstance(model, QuantizedModel):
            raise TypeError(f"model must be a tpuer.QuantizedModel (from tpuer.quantize) or "
                            f"a tpuer.TFLiteModel (from tpuer.from_tflite), not "
                            f"{type(model).__name__}")
        model.check_input(x)
        budget = self._budget(max_cycles)
        plan = compiled(self.config, model)
        batch = len(x)
        templates = [template for seg in plan.segments
                     for template in segment_templates(plan, seg,
                                                       self._segment_items(model, seg, batch))]
        estimate = self._refuse_above(budget, templates, f"this batch of {batch}")
        programs_total = sum(count for count, _ in templates)
        totals = {"cycles": 0, "mxu_busy_cycles": 0, "weight_stall_cycles": 0,
                  "instructions": 0}
        bar = self._progress(progress, estimate, programs_total, "tpuer run")
        act, pieces, programs = x, [], 0
        try:
            for unit in plan.units:
                seg = unit[-1]
                first = model.layers[seg.layers[0]]
                rows = first.rows_of(act)
                scope = self._scope("layers", _unit_name(model, unit), layers=seg.layers)
                # The parts of a layer cut along K alternate block by block: the partial
                # sums of a block stay in the accumulators until its last part.
                parts = [segment_steps(plan, part, rows) for part in unit]
                steps = (step for block in zip(*parts) for step in block)
                finished, outputs = [], []
                left = budget - (totals["cycles"] or 0)
                with scope:
                    for index, (step, run) in enumerate(self._run_steps(steps, left)):
                        _tally(totals, run, f"a program of layers {seg.layers}")
                        if index % len(unit) == len(unit) - 1:
                            finished.append(step)
                            outputs.append(run.host_out)
                        programs += 1
                        bar.update(programs)
                columns = segment_outputs(plan, seg, finished, outputs)
                last = model.layers[seg.layers[-1]]
                pieces.append(columns)
                if sum(piece.shape[1] for piece in pieces) == last.n:
                    act = last.output_of(np.concatenate(pieces, axis=1).astype(np.int8), batch)
                    pieces = []
        finally:
            bar.close()
        self._set_stats({**totals, "macs": model.macs_per_sample * batch, "programs": programs})
        return act

    def _run_tflite(self, model, x, *, progress, max_cycles):
        """:meth:`run` of a TFLite model: each matrix operator on the TPU, with its
        requantisation where the activation unit computes it as the kernel does (a run of
        them as one program, :meth:`~tpuer.tflite_model.TFLiteModel.runs`), else its int8
        product (:meth:`matmul`) and the requantisation on the host; the rest on the host
        as LiteRT's reference kernels compute it. :attr:`operator_cycles` maps the index of
        each TPU operator (of a run of them: the first) to its cycles."""
        model.check_input(x)
        budget = self._budget(max_cycles)
        on_tpu = sum(operation.on_tpu for operation in model.operations)
        totals = dict.fromkeys(("cycles", "mxu_busy_cycles", "weight_stall_cycles",
                                "instructions", "programs"), 0)
        # At best every multiplier busy every cycle: a lower bound, to decide on a bar.
        least = model.macs_per_sample() * len(x) // (self.config.rows * self.config.cols)
        bar = self._progress(progress, least, on_tpu, "tpuer run")
        done = 0
        self.operator_cycles = {}

        def on_tpu(work, operators):
            nonlocal done
            left = budget - (totals["cycles"] or 0)
            if left < 1:
                raise CycleBudgetError(f"the model used its budget of max_cycles={budget:,} "
                                       f"before its operator {done + 1} on the TPU")
            result = work(left)
            _add_counters(totals, self.stats)
            done += operators
            bar.update(done)
            return result

        def matmul(a, b):
            return on_tpu(lambda left: self.matmul(a, b, max_cycles=left, progress=False), 1)

        def layers(run, quantized, rows):
            marks["first"] = run[0].index
            result = on_tpu(lambda left: self.run(quantized, rows, max_cycles=left,
                                                  progress=False), len(run))
            self.operator_cycles[run[0].index] = self.stats["cycles"]
            return result

        marks = {"cycles": 0, "first": None}

        def after(operation, output):
            # An operator requantised on the host made one product: the last matmul.
            if operation.on_tpu and operation.layer is None:
                self.operator_cycles[operation.index] = self.stats["cycles"]
            if self._trace is not None and self._trace.cycles > marks["cycles"]:
                first = operation.index if marks["first"] is None else marks["first"]
                name = (f"op {operation.index} {operation.name}" if first == operation.index
                        else f"ops {first}-{operation.index} {operation.name}")
                operators = [op for op in model.operations
                             if first <= op.index <= operation.index]
                self._trace.add_scope("operators", name, marks["cycles"], self._trace.cycles,
                                      operators=[op.index for op in operators],
                                      MACs=sum(op.macs(model) for op in operators) * len(x))
                marks["cycles"] = self._trace.cycles
            marks["first"] = None

        try:
            result = model.run(x, matmul, layers=layers, after=after)
        finally:
            bar.close()
        # Useful products only (a depthwise convolution multiplies zeros off its diagonal).
        self._set_stats({**totals, "macs": model.macs_per_sample() * len(x)})
        return result

    def _set_stats(self, stats):
        """Keep ``stats``; a back end with a serial link adds the retransmissions it
        needed since the last call (``link_retries``)."""
        retries = getattr(self._backend, "retries", None)
        if retries is not None:
            stats["link_retries"] = retries - getattr(self, "_retries_seen", 0)
            self._retries_seen = retries
        self.stats = stats

    @staticmethod
    def _segment_items(model, segment, batch):
        layer = model.layers[segment.layers[0]]
        if layer.kind == "conv2d":
            return batch * int(np.prod(layer.output_shape[:-1]))
        return batch

    @_traced
    def matmul(self, a, b, *, max_cycles=None, progress=None):
        """The exact int32 product of int8 ``a`` (M, K) and int8 ``b`` (K, N).
        ``max_cycles`` and ``progress`` as for :meth:`run`. The programs are made one at a
        time as the back end runs them, so memory stays bounded for any M, K and N."""
        _check_int8_matrix("a", a)
        _check_int8_matrix("b", b)
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"a has {a.shape[1]} columns but b has {b.shape[0]} rows")
        if a.shape[1] > MAX_EXACT_K:
            raise ValueError(f"K = {a.shape[1]} could overflow int32; at most {MAX_EXACT_K}")
        budget = self._budget(max_cycles)
        plan = plan_matmul(self.config, a, b)
        estimate = self._refuse_above(budget, plan.templates(),
                                      f"the {a.shape[0]}x{a.shape[1]}x{b.shape[1]} product")
        result = np.zeros((a.shape[0], plan.n_tiles * self.config.cols), dtype=np.int32)
        totals = dict.fromkeys(("cycles", "mxu_busy_cycles", "weight_stall_cycles",
                                "instructions"), 0)
        programs = 0
        bar = self._progress(progress, estimate, len(plan), "tpuer matmul")
        try:
            for step, run in self._run_steps(plan.steps(), budget):
                _tally(totals, run, f"program {programs} of the matmul")
                plan.place(result, step, run.host_out)
                programs += 1
                bar.update(programs)
        finally:
            bar.close()
        self._set_stats({**totals, "macs": int(a.shape[0] * a.shape[1] * b.shape[1]),
                         "programs": programs})
        return result[:, :b.shape[1]]
