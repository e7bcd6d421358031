"""ISA-level golden model of the TPU core: executes a program on NumPy state, bit-exactly,
with the same error codes as the hardware and the counters that are exact."""

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..isa import (ALL_LANES, DEFINED_FLAGS, PER_LANE, RANGE_CHECKS, STATE_CHECKS,
                   ConfigParam, CoreState, ErrorCode, Instruction, MatmulFlag, Opcode,
                   WriteHostFlag, config_defaults, config_lane_bad, config_ranges,
                   memory_depths, tiles_held)
from .accumulator_model import AccumulatorModel
from .activation_model import ActivationParams, requantize
from .numerics import check_range
from .timing_model import CoreTiming
from .unified_buffer_model import UnifiedBufferModel

__all__ = ["CoreModel", "RunResult", "estimate_cycles"]


@dataclass
class RunResult:
    """What a run ends with: the state, the error and where it happened, the rows sent to
    the host, and the counters. ``cycles`` and ``weight_stall_cycles`` come from the cycle
    model (:class:`~tpuer.sim.timing_model.CoreTiming`) and are ``None`` for an untimed
    run."""
    state: CoreState
    error: ErrorCode = ErrorCode.NONE
    error_pc: int = 0
    host_out: list = field(default_factory=list)
    instructions: int = 0
    mxu_busy_cycles: int = 0
    macs: int = 0
    cycles: int | None = None
    weight_stall_cycles: int | None = None


class CoreModel:
    """The architectural state of one TPU core and a program interpreter over it.

    State: instruction memory, weight memory (tiles), Unified Buffer, accumulators, the
    queue of weight tiles read but not yet switched in, the active tile, and the activation
    parameters. Memories keep their contents from run to run, as in the hardware; so does
    the timing state of :attr:`timing`, the cycle model that times every run.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        self.timing = CoreTiming(cfg)
        self.program = [0] * cfg.program_depth
        self.weights = np.zeros((cfg.weight_tiles, cfg.rows, cfg.cols), dtype=np.int64)
        self.ub = UnifiedBufferModel(cfg)
        self.acc = AccumulatorModel(cfg)
        self.tiles = deque()
        self.active = np.zeros((cfg.rows, cfg.cols), dtype=np.int64)
        #: The activation parameters, by :class:`~tpuer.isa.ConfigParam`: an array of a
        #: value per lane for the per-lane ones.
        self.params = {param: np.full(cfg.cols, value, dtype=np.int64) if param in PER_LANE
                       else value for param, value in config_defaults(cfg).items()}

    # --- what the host does directly ----------------------------------------------------

    def load_program(self, words, start=0):
        words = [int(w.encode() if isinstance(w, Instruction) else w) for w in words]
        if start < 0 or start + len(words) > self.cfg.program_depth:
            raise ValueError(f"a program of {len(words)} instructions at {start} does not fit "
                             f"the instruction memory of {self.cfg.program_depth}")
        self.program[start:start + len(words)] = words

    def load_weights(self, tile_index, tiles):
        cfg = self.cfg
        tiles = check_range("weights", tiles, cfg.operand_min, cfg.operand_max)
        if tiles.ndim != 3 or tiles.shape[1:] != (cfg.rows, cfg.cols):
            raise ValueError(f"weight tiles must have shape (n, {cfg.rows}, {cfg.cols}), "
                             f"not {tiles.shape}")
        if tile_index < 0 or tile_index + len(tiles) > cfg.weight_tiles:
            raise ValueError(f"{len(tiles)} tiles at {tile_index} do not fit the weight "
                             f"memory of {cfg.weight_tiles} tiles")
        self.weights[tile_index:tile_index + len(tiles)] = tiles

    def memory_access_error(self, accumulators, row, rows, *, write=False):
        """Why the host may not read (or write) ``rows`` rows from ``row`` of the Unified
        Buffer (or the accumulators) directly, or ``None`` if it may. The host interface
        refuses exactly these (``READ_MEMORY``, ``WRITE_MEMORY``)."""
        name, depth = (("accumulators", self.cfg.acc_depth) if accumulators else
                       ("Unified Buffer", self.cfg.ub_depth))
        if write and accumulators:
            return "the host writes only the Unified Buffer"
        if rows >= 1 << 16:
            return f"at most {(1 << 16) - 1} rows at a time, not {rows}"
        if row < 0 or row + rows > depth:
            return f"rows {row}..{row + rows - 1} are outside the {name} of {depth} rows"
        return None

    def read_memory(self, accumulators, row, rows):
        """The host's direct read: ``rows`` rows from ``row``, as the host receives them."""
        error = self.memory_access_error(accumulators, row, rows)
        if error:
            raise ValueError(error)
        source = self.acc if accumulators else self.ub
        return [source.read(row + k) for k in range(rows)]

    def write_memory(self, row, values):
        """The host's direct write of Unified Buffer rows from ``row``."""
        values = check_range("rows", np.asarray(values).reshape(-1, self.cfg.ub_lanes),
                             self.cfg.operand_min, self.cfg.operand_max)
        error = self.memory_access_error(False, row, len(values), write=True)
        if error:
            raise ValueError(error)
        for k, value in enumerate(values):
            self.ub.write(row + k, value)

    def activation_params(self):
        p = self.params
        return ActivationParams(
            self.cfg, bias=p[ConfigParam.BIAS], multiplier=p[ConfigParam.MULTIPLIER],
            shift=p[ConfigParam.SHIFT], zero_point=p[ConfigParam.ZERO_POINT],
            relu=bool(p[ConfigParam.RELU]), rounding=p[ConfigParam.ROUNDING],
            clamp_min=p[ConfigParam.CLAMP_MIN], clamp_max=p[ConfigParam.CLAMP_MAX])

    # --- execution ----------------------------------------------------------------------

    def check(self, instr):
        """The error an instruction raises in the current state, or ``ErrorCode.NONE``:
        the checks of :data:`~tpuer.isa.RANGE_CHECKS`'s description, in its order."""
        error = self.static_check(instr)
        if error is not ErrorCode.NONE:
            return error
        op = instr.op
        if op is Opcode.READ_WEIGHTS and \
                len(self.tiles) + instr.count > tiles_held(self.cfg):
            return STATE_CHECKS[op]
        if op is Opcode.MATMUL and instr.count and instr.flags & MatmulFlag.SWITCH and \
                not self.tiles:
            return STATE_CHECKS[op]
        return ErrorCode.NONE

    def static_check(self, instr):
        """The first failing check of those that do not depend on the core's state (the
        RTL's :class:`~tpuer.hw.instruction_checks.InstructionChecks`), or
        ``ErrorCode.NONE``."""
        cfg = self.cfg
        op = instr.op
        if op is None:
            return ErrorCode.BAD_OPCODE
        if instr.reserved:
            return ErrorCode.BAD_FIELD
        if op is Opcode.CONFIG:
            if instr.flags > DEFINED_FLAGS[op]:
                return ErrorCode.BAD_FIELD
        elif instr.flags & ~DEFINED_FLAGS.get(op, 0):
            return ErrorCode.BAD_FIELD
        depths = memory_depths(cfg)
        for check in RANGE_CHECKS.get(op, ()):
            if check.applies(instr.flags) and \
                    getattr(instr, check.field) + instr.count > depths[check.memory]:
                return check.error
        if op is Opcode.CONFIG:
            lane, value = instr.count, instr.value
            low, high = config_ranges(cfg)[ConfigParam(instr.flags)]
            if config_lane_bad(lane, cfg) or not low <= value <= high:
                return ErrorCode.BAD_CONFIG
        return ErrorCode.NONE

    def run(self, start=0, host_in=(), *, timed=True, max_cycles=10_000_000):
        """Execute from ``start`` until HALT or an error (the program ends at the last
        word of the instruction memory at the latest). ``host_in`` supplies the rows that
        READ_HOST takes, in order. Returns a :class:`RunResult`; with ``timed``, its
        ``cycles`` and ``weight_stall_cycles`` are those of a host that offers every row at
        once and takes every answer at once, and a run that passes ``max_cycles`` raises
        :class:`~tpuer.device.CycleBudgetError`."""
        result = self._interpret(start, host_in)
        if timed:
            timing = self.timing.run(result.trace, error=result.state is CoreState.ERROR,
                                     host_rows=len(host_in), max_cycles=max_cycles)
            result.cycles = timing["cycles"]
            result.weight_stall_cycles = timing["weight_stall_cycles"]
            assert timing["mxu_busy_cycles"] == result.mxu_busy_cycles
            assert timing["instructions"] == result.instructions
        del result.trace
        return result

    def _interpret(self, start, host_in):
        cfg = self.cfg
        host_rows = deque(np.asarray(row, dtype=np.int64) for row in host_in)
        result = RunResult(state=CoreState.RUNNING)
        result.trace = []
        pc = start
        while True:
            if pc >= cfg.program_depth:
                result.state, result.error, result.error_pc = \
                    CoreState.ERROR, ErrorCode.PROGRAM_END, pc
                return result
            instr = Instruction.decode(self.program[pc])
            error = self.check(instr)
            if error is not ErrorCode.NONE:
                result.state, result.error, result.error_pc = CoreState.ERROR, error, pc
                return result
            self._execute(instr, host_rows, result)
            result.trace.append(instr)
            result.instructions += 1
            if instr.op is Opcode.HALT:
                result.state = CoreState.HALTED
                return result
            pc += 1

    def _execute(self, instr, host_rows, result):
        cfg = self.cfg
        op, a, b, n = instr.op, instr.a, instr.b, instr.count
        if op is Opcode.READ_HOST:
            for k in range(n):
                if not host_rows:
                    raise RuntimeError("READ_HOST wants more host rows than were supplied")
                row = host_rows.popleft()
                if row.shape != (cfg.ub_lanes,):
                    raise ValueError(f"a host row has {cfg.ub_lanes} lanes, not {row.shape}")
                self.ub.write(a + k, row)
        elif op is Opcode.WRITE_HOST:
            source = self.acc if instr.flags & WriteHostFlag.FROM_ACC else self.ub
            for k in range(n):
                result.host_out.append(source.read(a + k))
        elif op is Opcode.READ_WEIGHTS:
            for t in range(n):
                self.tiles.append(self.weights[a + t].copy())
        elif op is Opcode.MATMUL:
            if n and instr.flags & MatmulFlag.SWITCH:
                self.active = self.tiles.popleft()
            accumulate = bool(instr.flags & MatmulFlag.ACCUMULATE)
            for k in range(n):
                x = self.ub.read(a + k)[:cfg.rows]
                self.acc.write(b + k, x @ self.active, accumulate)
            result.mxu_busy_cycles += n
            result.macs += n * cfg.rows * cfg.cols
        elif op is Opcode.ACTIVATE:
            params = self.activation_params()
            mask = np.arange(cfg.ub_lanes) < cfg.cols
            for k in range(n):
                row = np.zeros(cfg.ub_lanes, dtype=np.int64)
                row[:cfg.cols] = requantize(self.acc.read(a + k), params)
                self.ub.write(b + k, row, mask)
        elif op is Opcode.CONFIG:
            param, value = ConfigParam(instr.flags), instr.value
            if param in PER_LANE:
                lanes = slice(None) if instr.count == ALL_LANES else instr.count
                self.params[param][lanes] = value
            else:
                self.params[param] = value


def estimate_cycles(cfg, program, limit=10_000_000):
    """The cycles of ``program`` (instructions) run alone on a core just out of reset,
    by the cycle model, with zero data; ``limit + 1`` if it would run longer."""
    from ..device import CycleBudgetError
    model = CoreModel(cfg)
    model.load_program(program)
    rows = sum(i.count for i in program if i.op is Opcode.READ_HOST)
    try:
        return model.run(0, host_in=np.zeros((rows, cfg.ub_lanes), np.int64),
                         max_cycles=limit + 1).cycles
    except CycleBudgetError:
        return limit + 1
