"""The ``serial`` back end of ``tpuer.Device``: a TPU on a board (or a simulated board behind
a pseudo-terminal), driven through the host command set (:mod:`tpuer.protocol`) over the
serial link (:mod:`tpuer.link`)."""

import numpy as np

from .. import isa
from ..isa import ALL_LANES, CoreState, MatmulFlag, Opcode, config_defaults
from ..link import LinkError, SerialLink
from ..protocol import decode_replies, encode

__all__ = ["SerialBackend", "open_port", "Residue"]


def open_port(port, baud):
    """``port`` opened with pyserial, or a clear error naming it; a port object (with
    ``read`` and ``write``, such as :class:`~tpuer.sim.model_board.ModelBoard`) as it is."""
    if hasattr(port, "read") and hasattr(port, "write"):
        return port
    try:
        import serial
    except ImportError:
        raise LinkError("the serial back end needs pyserial: pip install pyserial") from None
    try:
        return serial.Serial(port, baudrate=baud, timeout=0.05, write_timeout=5)
    except (serial.SerialException, OSError) as error:
        raise LinkError(f"cannot open {port}: {error}") from None


def _add(ranges, start, count, depth):
    if count:
        ranges.add((min(start, depth), min(start + count, depth)))


class Residue:
    """What the programs run since the board was last cleared may have left in the core:
    row ranges of the Unified Buffer and the accumulators, weight tiles, instruction
    words, tiles in the Weight FIFO, and whether the active weights or the activation
    parameters changed. A board not yet seen may hold anything (:meth:`everything`)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.ub, self.acc, self.tiles = set(), set(), set()
        self.program_words = 0
        self.fifo = False           # tiles may wait in the Weight FIFO
        self.active = False
        self.params = False

    @classmethod
    def everything(cls, cfg):
        residue = cls(cfg)
        residue.ub, residue.acc = {(0, cfg.ub_depth)}, {(0, cfg.acc_depth)}
        residue.tiles = set(range(cfg.weight_tiles))
        residue.program_words = cfg.program_depth
        residue.fifo = residue.active = residue.params = True
        return residue

    def ran(self, program, executed):
        """The first ``executed`` instructions of ``program`` ran."""
        cfg = self.cfg
        pending = 0
        for instr in program[:executed]:
            op = instr.op
            if op is Opcode.READ_HOST:
                _add(self.ub, instr.a, instr.count, cfg.ub_depth)
            elif op is Opcode.ACTIVATE:
                _add(self.ub, instr.b, instr.count, cfg.ub_depth)
            elif op is Opcode.MATMUL:
                _add(self.acc, instr.b, instr.count, cfg.acc_depth)
                if instr.count and instr.flags & MatmulFlag.SWITCH:
                    self.active = True
                    pending -= 1
            elif op is Opcode.READ_WEIGHTS:
                pending += instr.count
            elif op is Opcode.CONFIG:
                self.params = True
        self.fifo = self.fifo or pending > 0


class SerialBackend:
    """Runs driver steps on a TPU over a serial port: weights, program, START and the
    input rows go out; the status is polled until the core stops; the ROW replies are the
    rows WRITE_HOST sent. Counts the link's retransmissions in :attr:`retries`.

    Before each call it clears what the calls before left in the core (see
    :class:`Residue`), so that every call starts from a core as after reset, as on the
    other back ends."""

    name = "serial"

    def __init__(self, cfg, *, port=None, baud=115200, timeout=0.5, max_polls=1_000_000):
        if port is None:
            raise ValueError("the serial back end needs port=, the board's serial port "
                             "(for example /dev/ttyUSB1)")
        if isinstance(baud, bool) or not (isinstance(baud, int) and baud > 0):
            raise ValueError(f"baud must be a positive integer, not {baud!r}")
        if isinstance(timeout, bool) or not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        self.cfg = cfg
        self.max_polls = max_polls
        name = str(port) if isinstance(port, str) else type(port).__name__
        self.link = SerialLink(open_port(port, baud), name=name, timeout=timeout)
        self._words = []
        self._loaded = None          # the weight tiles the board holds at tile 0
        self._program = None         # and the program at instruction 0
        self._residue = Residue.everything(cfg)

    @property
    def retries(self):
        return self.link.retries

    def _replies(self):
        """The replies completed since the last call (a reply may span link frames)."""
        self._words += self.link.replies
        self.link.replies.clear()
        replies, self._words = decode_replies(self._words)
        for kind, value in replies:
            if kind in ("bad_command", "refused"):
                raise LinkError(f"{self.link.name}: the TPU answered {kind} to command "
                                f"{value:#04x}; are the board and this driver of one version?")
        return replies

    # --- clearing what earlier calls left ------------------------------------------------

    def _write_program(self, program, words):
        if program != self._program:
            words += encode.write_program(0, program)
            self._program = program

    def _clear(self, first_weights):
        """Bring the core to its state after reset, but for the weight tiles that
        ``first_weights`` (the first step's, loaded at tile 0 next) will overwrite."""
        cfg, residue = self.cfg, self._residue
        # A program that clears the accumulators and the active weights needs a zero tile:
        # one the next weights do not overwrite, or tile 0.
        needs_program = residue.fifo or residue.active or residue.acc or residue.params
        zero_tile = cfg.weight_tiles - 1 if len(first_weights) < cfg.weight_tiles else 0
        to_zero = {t for t in residue.tiles if t >= len(first_weights)}
        if needs_program:
            to_zero.add(zero_tile)
        if self._loaded is not None and any(t < len(self._loaded) for t in to_zero):
            self._loaded = None
        words = []
        zero_row = np.zeros(cfg.cols, np.int64)
        for tile in sorted(to_zero):
            words += encode.write_weights(cfg, tile * cfg.rows, [zero_row] * cfg.rows)
        zero = np.zeros(cfg.ub_lanes, np.int64)
        for start, end in sorted(residue.ub):
            for row in range(start, end, 1 << 12):
                words += encode.write_memory(cfg, row, [zero] * min(1 << 12, end - row))
        if words:
            self.link.send(words)
        written = 0
        if needs_program:
            acc = set(residue.acc)
            if residue.fifo:        # drain the Weight FIFO: stops at NO_WEIGHTS when empty
                drain = [isa.matmul(0, 0, 1)] * isa.tiles_held(cfg) + [isa.halt()]
                self._run_quietly(drain)
                written, acc = len(drain), acc | {(0, 1)}
            program = [isa.read_weights(zero_tile, 1)]
            for start, end in sorted(acc) or [(0, 1)]:
                for row in range(start, end, cfg.ub_depth):
                    program.append(isa.matmul(0, row, min(cfg.ub_depth, end - row),
                                              switch=len(program) == 1))
            program += [isa.config(param, value, ALL_LANES)
                        for param, value in config_defaults(cfg).items()]
            for start in range(0, len(program), cfg.program_depth - 1):
                part = program[start:start + cfg.program_depth - 1] + [isa.halt()]
                self._run_quietly(part)
                written = max(written, len(part))
        self._residue = Residue(cfg)
        # the instruction words the earlier calls and the clearing programs wrote
        self._residue.program_words = max(residue.program_words, written)

    def _run_quietly(self, program):
        words = []
        self._write_program([int(i.encode()) for i in program], words)
        self.link.send(words + encode.start(0))
        self._wait("a program that clears the core", 1 << 62)

    def _wait(self, what, cycles_left):
        """Poll the status until the core stops; returns (status, rows sent)."""
        rows, status, pending = [], None, 0
        for _ in range(self.max_polls):
            if status is not None and pending == 0:
                return status, rows
            if status is None:
                self.link.send(encode.status())
                pending += 1
            else:
                self.link.poll()   # the replies of STATUS commands still on their way
            for kind, value in self._replies():
                if kind == "row":
                    rows.append(value)
                elif kind == "status":
                    pending -= 1
                    # Every STATUS was sent after START: a stopped core is this run's
                    # end, and the core stops only when its last row has left.
                    if status is None and value["state"] is not CoreState.RUNNING:
                        status = value
                    elif status is None and value["cycles"] > cycles_left:
                        self.link.send(encode.abort())
                        from ..device import CycleBudgetError
                        raise CycleBudgetError(f"the core ran past the call's cycle budget "
                                               f"({value['cycles']:,} cycles in {what}); "
                                               f"it was stopped")
        raise LinkError(f"{self.link.name}: {what} still runs after {self.max_polls} polls")

    # --- a call --------------------------------------------------------------------------

    def run(self, steps, *, max_cycles, activity=False):
        from ..tb.core_tb import CoreRun
        cfg = self.cfg
        used, first = 0, True
        try:
            for step in steps:
                weights = np.asarray(step.weights)
                program = [int(i.encode()) for i in step.program]
                if first:
                    self._clear(weights)
                    # Words left past this program by earlier calls are cleared with it.
                    program_words = program + [0] * (self._residue.program_words - len(program))
                    first = False
                else:
                    program_words = program
                words = []
                # The weight memory keeps its tiles from program to program: send them only
                # when they change (every block of a layer uses the same ones).
                if len(weights) and not (self._loaded is not None and
                                         self._loaded.shape == weights.shape and
                                         np.array_equal(self._loaded, weights)):
                    words += encode.write_weights(cfg, 0, list(weights.reshape(-1, cfg.cols)))
                    self._loaded = weights.copy()
                self._residue.tiles |= set(range(len(weights)))
                self._write_program(program_words, words)
                self._residue.program_words = max(self._residue.program_words, len(program))
                words += encode.start(0)
                if len(step.host_in):
                    words += encode.data(cfg, step.host_in)
                self.link.send(words)
                status, rows = self._wait("the program", max_cycles - used)
                self._residue.ran(step.program, status["instructions"])
                used += status["cycles"]
                yield step, CoreRun(state=status["state"], error=status["error"],
                                    error_pc=status["error_pc"], host_out=rows,
                                    cycles=status["cycles"],
                                    mxu_busy_cycles=status["mxu_busy_cycles"],
                                    weight_stall_cycles=status["weight_stall_cycles"],
                                    instructions=status["instructions"])
        except BaseException:
            # A call cut short (an error, a budget, a caller that stopped asking) may have
            # left anything behind.
            self._residue = Residue.everything(cfg)
            raise
