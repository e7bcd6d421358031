"""ISA-level golden model of the TPU core: executes a program on NumPy state, bit-exactly,
with the same error codes as the hardware and the counters that are exact."""

import functools
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import numpy as np

from ..isa import (ALL_LANES, DEFINED_FLAGS, PER_LANE, RANGE_CHECKS, STATE_CHECKS,
                   ConfigParam, CoreState, ErrorCode, Instruction, MatmulFlag, Opcode,
                   WriteHostFlag, config_defaults, config_lane_bad, config_ranges,
                   memory_depths, tiles_held)
from .accumulator_model import AccumulatorModel
from .activation_model import ActivationParams, requantize
from .numerics import check_range
from .timing_model import CoreTiming, timing_key
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
        self._program_end = 0           # words past this one are still zero
        self.weights = np.zeros((cfg.weight_tiles, cfg.rows, cfg.cols), dtype=np.int64)
        self.ub = UnifiedBufferModel(cfg)
        self.acc = AccumulatorModel(cfg)
        self.tiles = deque()
        self.active = np.zeros((cfg.rows, cfg.cols), dtype=np.int64)
        #: The activation parameters, by :class:`~tpuer.isa.ConfigParam`: an array of a
        #: value per lane for the per-lane ones.
        self.params = {param: np.full(cfg.cols, value, dtype=np.int64) if param in PER_LANE
                       else value for param, value in config_defaults(cfg).items()}
        self._activation = None         # ActivationParams of self.params, once made
        self._params_seen = {}          # ActivationParams by the values of self.params

    # --- what the host does directly ----------------------------------------------------

    def load_program(self, words, start=0):
        words = [w.word if type(w) is Instruction else int(w) for w in words]
        if start < 0 or start + len(words) > self.cfg.program_depth:
            raise ValueError(f"a program of {len(words)} instructions at {start} does not fit "
                             f"the instruction memory of {self.cfg.program_depth}")
        self.program[start:start + len(words)] = words
        self._program_end = max(self._program_end, start + len(words))

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

    def configure(self, instr):
        """Do what CONFIG ``instr`` (checked) does: set its parameter of its lane, or of
        every lane."""
        self._set_params([(*_config_target(instr), instr.value)])

    def _set_params(self, settings):
        """Set each ``(param, lanes or None, value)`` of ``settings``, in order."""
        self._activation = None
        for param, lanes, value in settings:
            if lanes is None:
                self.params[param] = value
            else:
                self.params[param][lanes] = value

    def _known_params(self):
        """:meth:`activation_params`, made once for each set of values (every block of a
        layer sets the same ones again)."""
        key = tuple(value.tobytes() if isinstance(value, np.ndarray) else value
                    for value in self.params.values())
        params = self._params_seen.get(key)
        if params is None:
            params = self._params_seen[key] = self.activation_params()
        return params

    # --- execution ----------------------------------------------------------------------

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

    def run(self, start=0, host_in=(), *, timed=True, max_cycles=10_000_000, recorder=None):
        """Execute from ``start`` until HALT or an error (the program ends at the last
        word of the instruction memory at the latest). ``host_in`` supplies the rows that
        READ_HOST takes, in order. Returns a :class:`RunResult`; with ``timed``, its
        ``cycles`` and ``weight_stall_cycles`` are those of a host that offers every row at
        once and takes every answer at once, and a run that passes ``max_cycles`` raises
        :class:`~tpuer.device.CycleBudgetError`. ``recorder`` (a
        :class:`~tpuer.sim.trace.Recorder`) receives the run cycle by cycle."""
        cfg = self.cfg
        host_rows = np.asarray(host_in, dtype=np.int64)
        if host_rows.size == 0:
            host_rows = host_rows.reshape(0, cfg.ub_lanes)
        if host_rows.ndim != 2 or host_rows.shape[1] != cfg.ub_lanes:
            raise ValueError(f"host rows have {cfg.ub_lanes} lanes, not of shape "
                             f"{host_rows.shape}")
        host_rows = check_range("host rows", host_rows, cfg.operand_min, cfg.operand_max)
        walk = self._walk(start)
        if walk.host_rows > len(host_rows):
            raise RuntimeError("READ_HOST wants more host rows than were supplied")
        result = walk.result()
        self._apply(walk, host_rows, result)
        if timed:
            self._time(walk, result, len(host_rows), max_cycles, recorder)
        return result

    def time(self, start=0, host_rows=0, *, max_cycles=10_000_000):
        """The :class:`RunResult` of a run from ``start`` with its counters, by the cycle
        model alone: the instructions are checked and timed, no data moves (nor does the
        weight queue of the ISA state: :attr:`timing` advances)."""
        walk = self._walk(start)
        result = walk.result()
        self._time(walk, result, host_rows, max_cycles, None)
        return result

    def _time(self, walk, result, host_rows, max_cycles, recorder):
        timing = self.timing.run(walk.words, error=result.state is CoreState.ERROR,
                                 host_rows=host_rows, max_cycles=max_cycles,
                                 recorder=recorder, key=walk.timing_key)
        result.cycles = timing["cycles"]
        result.weight_stall_cycles = timing["weight_stall_cycles"]
        assert timing["mxu_busy_cycles"] == result.mxu_busy_cycles
        assert timing["instructions"] == result.instructions

    def _walk(self, start):
        """The :class:`_Walk` of a run from ``start``: it depends on nothing but the
        instruction memory and the number of weight tiles queued, so it is made once for
        each (the driver runs the same programs again and again)."""
        key = (self.cfg, tuple(self.program[:self._program_end]), start, len(self.tiles))
        walk = _walks.get(key)
        if walk is None:
            walk = _walks[key] = _Walk(self, start)
            if len(_walks) > WALKS_REMEMBERED:
                del _walks[next(iter(_walks))]
        return walk

    def _apply(self, walk, host_rows, result):
        """Do what the instructions of ``walk`` do to the state, in order; the products
        of each group of MATMULs as one batched NumPy product."""
        cfg = self.cfg
        # Every tile a MATMUL may switch to, as an index into one bank: the active tile,
        # the queued ones, then the weight memory (which does not change during a run).
        bank = np.concatenate([self.active[None], *[tile[None] for tile in self.tiles],
                               self.weights])
        taken = 0
        for op in walk.ops:
            kind = op[0]
            if kind == "products":
                self._products(bank, op[1])
            elif kind == "read_host":
                _, a, n = op
                self.ub.write_block(a, host_rows[taken:taken + n])
                taken += n
            elif kind == "write_host":
                _, from_acc, a, n = op
                result.host_out.extend((self.acc if from_acc else self.ub).read_block(a, n))
            elif kind == "activate":
                _, a, b, n = op
                if self._activation is None:      # looked up again only after a CONFIG
                    self._activation = self._known_params()
                rows = np.zeros((n, cfg.ub_lanes), dtype=np.int64)
                rows[:, :cfg.cols] = requantize(self.acc.read_block(a, n), self._activation,
                                                in_range=True)
                self.ub.write_block(b, rows, np.arange(cfg.ub_lanes) < cfg.cols)
            else:
                self._set_params(op[1])
        self.active = bank[walk.active].copy()
        self.tiles = deque(bank[index].copy() for index in walk.queue)

    def _products(self, bank, group):
        """A :class:`_Products` group of MATMULs, with one batched product."""
        cfg = self.cfg
        products = np.matmul(self.ub.rows[group.ub_rows][:, :, :cfg.rows], bank[group.tiles])
        acc = self.acc.rows
        # No sum can saturate when the accumulator words there, plus or minus the most that
        # all the products can add, stay in range: then plain additions in any order are
        # exact.
        window = acc[group.acc_span]
        if (int(window.max()) + group.most <= cfg.acc_max and
                int(window.min()) - group.most >= cfg.acc_min):
            if len(group.cleared):
                acc[group.cleared] = 0
            counted = products.reshape(-1, cfg.cols)[group.counted]
            if group.distinct:          # no row twice: a plain indexed addition
                acc[group.counted_rows] += counted
            else:
                np.add.at(acc, group.counted_rows, counted)
        else:
            for rows, product, add in zip(group.acc_rows, products, group.accumulate):
                self.acc.write_block(int(rows[0]), product, add)


class _Products:
    """Consecutive MATMULs of ``n`` rows each, as a :class:`_Walk` collects them: for MATMUL
    ``i``, ``acc[acc_rows[i]] (+)= ub[ub_rows[i], :rows] @ bank[tiles[i]]`` (the tiles as
    indices into the bank of :meth:`CoreModel._apply`), in order, with saturation.

    Without saturation the order does not matter but for overwrites: a row's sum starts
    at its last overwrite. So :attr:`cleared` are the rows that some MATMUL overwrites,
    and :attr:`counted` marks the products (flattened, their rows :attr:`counted_rows`)
    that no later MATMUL overwrites."""

    def __init__(self, n):
        self.n = n
        self.entries = []             # (ub row, tile, acc row, accumulate)

    def add(self, a, tile, b, accumulate):
        self.entries.append((a, tile, b, accumulate))

    def close(self, cfg):
        steps = np.arange(self.n)
        starts = np.array([entry[0] for entry in self.entries])
        self.ub_rows = starts[:, None] + steps
        self.tiles = np.array([entry[1] for entry in self.entries])
        self.acc_rows = np.array([entry[2] for entry in self.entries])[:, None] + steps
        self.accumulate = [entry[3] for entry in self.entries]
        last_overwrite = np.full(cfg.acc_depth, -1)
        for index, (_, _, b, accumulate) in enumerate(self.entries):
            if not accumulate:
                last_overwrite[b:b + self.n] = index
        order = np.repeat(np.arange(len(self.entries)), self.n)
        flat = self.acc_rows.reshape(-1)
        self.counted = order >= last_overwrite[flat]
        self.counted_rows = flat[self.counted]
        self.cleared = np.flatnonzero(last_overwrite >= 0)
        self.distinct = len(np.unique(self.counted_rows)) == len(self.counted_rows)
        self.acc_span = slice(int(self.acc_rows.min()), int(self.acc_rows.max()) + 1)
        # the largest magnitude of one product's word, times the products
        self.most = len(self.entries) * cfg.rows * (1 << (2 * cfg.operand_width - 2))
        del self.entries
        return self


def _config_target(instr):
    """The parameter a CONFIG sets, and its lanes: an index or every lane (a slice) for a
    per-lane parameter, ``None`` for the others."""
    param = ConfigParam(instr.flags)
    if param not in PER_LANE:
        return param, None
    return param, slice(None) if instr.count == ALL_LANES else instr.count


def _settled(settings):
    """What consecutive CONFIGs (``(param, lanes, value)`` each, in order) leave set, as
    few settings: a parameter's last value, or for a per-lane one, its last value for
    every lane (``slice(None)``) and then the lanes set after it (an index array and a
    value array)."""
    scalars, lanes_of = {}, {}
    for param, lanes, value in settings:
        if lanes is None:
            scalars[param] = value
        elif isinstance(lanes, slice):
            lanes_of[param] = (value, {})
        else:
            lanes_of.setdefault(param, (None, {}))[1][lanes] = value
    settled = [(param, None, value) for param, value in scalars.items()]
    for param, (every, single) in lanes_of.items():
        if every is not None:
            settled.append((param, slice(None), every))
        if single:
            settled.append((param, np.array(list(single)), np.array(list(single.values()))))
    return settled


#: How many runs' :class:`_Walk` s are remembered (the least recently made go).
WALKS_REMEMBERED = 1024
_walks = OrderedDict()


class _Walk:
    """A run's control flow, checked, without data: the words it retires (a final HALT
    included; an instruction that fails its checks stops it), its counters that do not
    depend on timing, and what it does to the state as :attr:`ops`, executed by
    :meth:`CoreModel._apply`:

    * ``("products", group)``: a :class:`_Products` group of MATMULs of as many rows,
      done after the other operations that come before it here, which touch nothing it
      reads or writes;
    * ``("read_host", a, n)``, ``("write_host", from_acc, a, n)``, ``("activate", a, b,
      n)``, ``("config", settings)``: consecutive CONFIGs, as what they leave set
      (:func:`_settled`).

    :attr:`active` and :attr:`queue` are the bank indices of the active tile and the
    queued tiles at the end."""

    def __init__(self, model, start):
        cfg = model.cfg
        self.state, self.error, self.error_pc = CoreState.RUNNING, ErrorCode.NONE, 0
        self.instructions = self.mxu_busy_cycles = self.host_rows = 0
        self.ops = []
        queue = deque(range(1, 1 + len(model.tiles)))
        active, memory = 0, 1 + len(model.tiles)
        group = None
        # what the open group's MATMULs read and write: an instruction after them that
        # writes those UB rows or reads those accumulator rows closes the group first
        ub_read = np.zeros(cfg.ub_depth, bool)
        acc_written = np.zeros(cfg.acc_depth, bool)

        def close():
            nonlocal group
            if group is not None:
                self.ops.append(("products", group.close(cfg)))
                group = None
                ub_read[:] = False
                acc_written[:] = False

        pc = start
        while True:
            if pc >= cfg.program_depth:
                self.state, self.error, self.error_pc = CoreState.ERROR, ErrorCode.PROGRAM_END, pc
                break
            instr = Instruction.decode(model.program[pc])
            error = model.static_check(instr)
            op, a, b, n = instr.op, instr.a, instr.b, instr.count
            if error is ErrorCode.NONE:
                if op is Opcode.READ_WEIGHTS and len(queue) + n > tiles_held(cfg):
                    error = STATE_CHECKS[op]
                elif op is Opcode.MATMUL and n and instr.flags & MatmulFlag.SWITCH and \
                        not queue:
                    error = STATE_CHECKS[op]
            if error is not ErrorCode.NONE:
                self.state, self.error, self.error_pc = CoreState.ERROR, error, pc
                break
            self.instructions += 1
            if op is Opcode.HALT:
                self.state = CoreState.HALTED
                break
            pc += 1
            if op is Opcode.READ_WEIGHTS:
                queue.extend(memory + a + t for t in range(n))
            elif op is Opcode.MATMUL and n:
                if instr.flags & MatmulFlag.SWITCH:
                    active = queue.popleft()
                self.mxu_busy_cycles += n
                if group is not None and group.n != n:
                    close()
                if group is None:
                    group = _Products(n)
                group.add(a, active, b, bool(instr.flags & MatmulFlag.ACCUMULATE))
                ub_read[a:a + n] = True
                acc_written[b:b + n] = True
            elif op is Opcode.CONFIG:
                if not self.ops or self.ops[-1][0] != "config":
                    self.ops.append(("config", []))
                self.ops[-1][1].append((*_config_target(instr), instr.value))
            elif op is Opcode.READ_HOST and n:
                if ub_read[a:a + n].any():
                    close()
                last = self.ops[-1] if self.ops else None
                if last is not None and last[0] == "read_host" and last[1] + last[2] == a:
                    self.ops[-1] = ("read_host", last[1], last[2] + n)   # one block write
                else:
                    self.ops.append(("read_host", a, n))
                self.host_rows += n
            elif op is Opcode.WRITE_HOST and n:
                from_acc = bool(instr.flags & WriteHostFlag.FROM_ACC)
                if from_acc and acc_written[a:a + n].any():
                    close()
                self.ops.append(("write_host", from_acc, a, n))
            elif op is Opcode.ACTIVATE and n:
                if acc_written[a:a + n].any() or ub_read[b:b + n].any():
                    close()
                self.ops.append(("activate", a, b, n))
        close()
        self.ops = [("config", _settled(op[1])) if op[0] == "config" else op
                    for op in self.ops]
        self.active, self.queue = active, tuple(queue)
        self.words = tuple(model.program[start:start + self.instructions])
        self.timing_key = timing_key(self.words)
        self.macs = self.mxu_busy_cycles * cfg.rows * cfg.cols

    def result(self):
        """A new :class:`RunResult` with this walk's outcome and counters."""
        return RunResult(state=self.state, error=self.error, error_pc=self.error_pc,
                         instructions=self.instructions, mxu_busy_cycles=self.mxu_busy_cycles,
                         macs=self.macs)


def estimate_cycles(cfg, program, limit=10_000_000):
    """The cycles of ``program`` (instructions) run alone on a core just out of reset,
    by the cycle model; ``limit + 1`` if it would run longer."""
    return _estimate(cfg, tuple(i.word for i in program), limit)


@functools.lru_cache(maxsize=4096)
def _estimate(cfg, words, limit):
    from ..device import CycleBudgetError
    model = CoreModel(cfg)
    model.load_program(words)
    rows = sum(i.count for i in map(Instruction.decode, words) if i.op is Opcode.READ_HOST)
    try:
        return model.time(0, host_rows=rows, max_cycles=limit + 1).cycles
    except CycleBudgetError:
        return limit + 1
