"""``tpuer.Device``: the public API of a TPU, whatever runs it."""

from dataclasses import dataclass

import numpy as np

from .config import Config
from .driver import MAX_EXACT_K, Step, assemble_matmul, plan_matmul
from .isa import CoreState, ErrorCode, Instruction, Opcode

__all__ = ["Device", "TPUError", "ProgramResult"]


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


class Device:
    """A TPU with configuration ``config``, run by ``backend``:

    * ``"golden"``: the ISA-level NumPy model, timed by its cycle model (fast; the same
      results and the same counters as the RTL);
    * ``"pysim"``: the RTL in amaranth.sim;
    * ``"verilator"``, ``"icarus"``: the RTL's Verilog, through cocotb;
    * ``"serial"``: a TPU on a board, over its serial port: ``port=`` (for example
      ``/dev/ttyUSB1``, or the pseudo-terminal of a simulated board) and ``baud=``.

    After each call, :attr:`stats` holds ``cycles``, ``mxu_busy_cycles``,
    ``weight_stall_cycles``, ``macs`` (useful multiply-accumulates), ``instructions`` and
    ``programs`` of that call.
    """

    def __init__(self, config=None, backend="golden", **options):
        from .sim.core_backends import BACKENDS, make_backend
        config = Config() if config is None else config
        if not isinstance(config, Config):
            raise TypeError(f"config must be a tpuer.Config, not {type(config).__name__}")
        if config.operand_width != 8:
            raise ValueError(f"Device speaks int8: the configuration's operand_width must be 8, "
                             f"not {config.operand_width}")
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        self.config = config
        self.backend = backend
        self._backend = make_backend(backend, config, **options)
        self.stats = {}

    def run_program(self, program, *, weights=None, host_in=None):
        """Run one program (a list of :class:`~tpuer.isa.Instruction` or 64-bit words)
        from instruction 0, with ``weights`` (int8, shape (tiles, rows, cols)) loaded at
        tile 0 and ``host_in`` (int8, shape (n, ub_lanes)) offered to READ_HOST. Returns a
        :class:`ProgramResult`; :attr:`stats` holds the counters. A program that stops
        with an error is a result too, not an exception."""
        cfg = self.config
        program = [item if isinstance(item, Instruction) else Instruction.decode(item)
                   for item in program]
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
        step = Step(program, weights.astype(np.int64), list(host_in.astype(np.int64)))
        run = self._backend.run([step])[0]
        self._set_stats({"cycles": run.cycles, "mxu_busy_cycles": run.mxu_busy_cycles,
                         "weight_stall_cycles": run.weight_stall_cycles,
                         "macs": run.mxu_busy_cycles * cfg.rows * cfg.cols,
                         "instructions": run.instructions, "programs": 1})
        rows = np.zeros((len(run.host_out), cfg.ub_lanes), dtype=np.int64)
        for index, row in enumerate(run.host_out):
            rows[index, :len(row)] = row
        return ProgramResult(state=run.state, error=run.error, error_pc=run.error_pc,
                             host_out=rows.astype(np.int32))

    def run(self, model, x, *, progress=None):
        """The int8 output of quantised ``model`` (:func:`tpuer.quantize`) for int8 input
        ``x``, computed on the TPU; equal, bit for bit, to ``model.reference(x)``.
        :attr:`stats` holds the counters of every program it ran; ``progress``, if given,
        is called with (programs done, programs in all) after each segment."""
        from .compiler import compile_model, segment_outputs, segment_steps
        model.check_input(x)
        plan = compile_model(self.config, model)
        batch = len(x)
        totals = {"cycles": 0, "mxu_busy_cycles": 0, "weight_stall_cycles": 0,
                  "instructions": 0}
        programs_total = sum(-(-self._segment_items(model, seg, batch) // seg.block)
                             for seg in plan.segments)
        programs = 0
        act, pieces = x, []
        for unit in plan.units:
            seg = unit[-1]
            first = model.layers[seg.layers[0]]
            rows = first.rows_of(act)
            # The parts of a layer cut along K alternate block by block: the partial sums
            # of a block stay in the accumulators until its last part.
            parts = [segment_steps(plan, part, rows) for part in unit]
            steps = [step for block in zip(*parts) for step in block]
            runs = self._backend.run(steps)
            for run in runs:
                if run.state is not CoreState.HALTED:
                    raise TPUError(f"a program of layers {seg.layers} stopped in "
                                   f"{run.state.name} with {run.error.name} at instruction "
                                   f"{run.error_pc}")
                for name in totals:
                    value = getattr(run, name)
                    totals[name] = None if value is None or totals[name] is None \
                        else totals[name] + value
            programs += len(runs)
            if progress is not None:
                progress(programs, programs_total)
            columns = segment_outputs(plan, seg, parts[-1],
                                      [run.host_out for run in runs[len(unit) - 1::len(unit)]])
            last = model.layers[seg.layers[-1]]
            pieces.append(columns)
            if sum(piece.shape[1] for piece in pieces) == last.n:
                act = last.output_of(np.concatenate(pieces, axis=1).astype(np.int8), batch)
                pieces = []
        self._set_stats({**totals, "macs": model.macs_per_sample * batch, "programs": programs})
        return act

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

    def matmul(self, a, b):
        """The exact int32 product of int8 ``a`` (M, K) and int8 ``b`` (K, N)."""
        _check_int8_matrix("a", a)
        _check_int8_matrix("b", b)
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"a has {a.shape[1]} columns but b has {b.shape[0]} rows")
        if a.shape[1] > MAX_EXACT_K:
            raise ValueError(f"K = {a.shape[1]} could overflow int32; at most {MAX_EXACT_K}")
        steps = plan_matmul(self.config, a.astype(np.int64), b.astype(np.int64))
        runs = self._backend.run(steps)
        for index, run in enumerate(runs):
            if run.state is not CoreState.HALTED:
                raise TPUError(f"program {index} of the matmul stopped in {run.state.name} "
                               f"with {run.error.name} at instruction {run.error_pc}")
        result = assemble_matmul(self.config, a.shape[0], b.shape[1], steps,
                                 [run.host_out for run in runs])

        def total(name):
            values = [getattr(run, name) for run in runs]
            return None if any(v is None for v in values) else int(sum(values))

        self._set_stats({
            "cycles": total("cycles"),
            "mxu_busy_cycles": total("mxu_busy_cycles"),
            "weight_stall_cycles": total("weight_stall_cycles"),
            "macs": int(a.shape[0] * a.shape[1] * b.shape[1]),
            "instructions": total("instructions"),
            "programs": len(runs),
        })
        return result
