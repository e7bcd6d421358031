"""A model of a whole board, in simulated time: the serial line with its faults, the board's
end of the link (by the rules of :mod:`tpuer.link`, as ``hw/serial_link.py`` keeps them),
the host command set (:mod:`tpuer.protocol`) and the core (the golden model).

It is a serial port to :class:`~tpuer.link.SerialLink` (``write``, ``read``,
``in_waiting``) with a clock of its own (``clock``, ``sleep``), so a run over it takes no
wall-clock time for its timeouts and the same seed gives the same run every time::

    board = ModelBoard(cfg, faults={"flip": 3e-4, "drop": 2e-4, "seed": 5})
    device = tpuer.Device(cfg, backend="serial", port=board)

Faults are per byte and per direction, as on :class:`~tpuer.sim.board_sim.SimulatedBoard`:
``flip`` (a bit), ``drop``, ``duplicate``, ``break_stop`` (a framing error, towards the
board) and ``pause`` (the line rests longer than the byte timeout before the byte).
"""

import random
from collections import deque

import numpy as np

from ..link import (BYTE_TIMEOUT_BITS, COMMAND_QUEUE_WORDS, CRC_BYTES, FLAG_NEW_SESSION,
                    MAX_REQUEST_WORDS, REQUEST_FLAGS, SYNC, Kind, encode_reply, frame_crc,
                    plausible_seq, reply_limit)
from ..isa import CoreState, Instruction, Opcode
from ..protocol import (STATUS_WORDS, Command, Memory, Reply, header, host_row_words,
                        int8_lanes, weight_row_words)
from .isa_model import CoreModel
from .line_faults import FAULTS, LineFaults

__all__ = ["ModelBoard"]

class _Line:
    """One direction of the line: bytes leave one after another, a byte time each, and
    arrive with the faults done to them (a pause rests the line past the byte timeout)."""

    def __init__(self, rates, rng, byte_time, counts, name):
        self.faults = LineFaults(rates, rng, counts, name)
        self.byte_time = byte_time
        self.free = 0.0              # when the sender may start its next byte

    def carry(self, data, start):
        """(arrival time, byte, framing error) of the bytes ``data`` sent from ``start``."""
        t = max(start, self.free)
        out = []
        for byte in data:
            if self.faults.hit("pause"):
                t += (BYTE_TIMEOUT_BITS + 10) * self.byte_time / 10
            t += self.byte_time
            out += [(t + k * self.byte_time, arrived, broken)
                    for k, (arrived, broken) in enumerate(self.faults.carry(byte))]
        self.free = t
        return out


class _Commands:
    """The host command set over the golden model of the core: command words in, reply
    words out. A program runs, all at once, as soon as the rows its READ_HOSTs take have
    come; until then the status says RUNNING."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.core = CoreModel(cfg)
        self.words = deque()
        self.replies = []
        self.running = None          # (start, rows wanted, rows so far)
        self.status = [CoreState.IDLE.value] + [0] * (STATUS_WORDS - 1)

    def take(self, words):
        self.words.extend(words)
        while self._step():
            pass

    def _step(self):
        """Execute the first command if all its words are here."""
        if not self.words:
            return False
        head = self.words[0]
        opcode, count = head >> 24, head & 0xFFFFFF
        cfg = self.cfg
        sizes = {Command.WRITE_PROGRAM.value: 1 + 2 * count,
                 Command.WRITE_WEIGHTS.value: 1 + count * weight_row_words(cfg),
                 Command.START.value: 1, Command.DATA.value: count * host_row_words(cfg),
                 Command.STATUS.value: 0, Command.ABORT.value: 0,
                 Command.READ_MEMORY.value: 1,
                 Command.WRITE_MEMORY.value: 1 + count * host_row_words(cfg)}
        if opcode not in sizes:
            self.words.popleft()
            self.replies.append(header(Reply.BAD_COMMAND, opcode))
            return True
        if len(self.words) < 1 + sizes[opcode]:
            return False
        self.words.popleft()
        body = [self.words.popleft() for _ in range(sizes[opcode])]
        getattr(self, "_" + Command(opcode).name.lower())(count, body)
        return True

    def _write_program(self, count, body):
        if self.running:
            self.replies.append(header(Reply.REFUSED, Command.WRITE_PROGRAM.value))
            return
        words = [body[1 + 2 * k] | body[2 + 2 * k] << 32 for k in range(count)]
        self.core.load_program(words, start=body[0])

    def _write_weights(self, count, body):
        per = weight_row_words(self.cfg)
        for k in range(count):
            row = body[0] + k
            if row < self.cfg.weight_memory_depth:
                self.core.weights[row // self.cfg.rows, row % self.cfg.rows] = \
                    int8_lanes(body[1 + k * per:1 + (k + 1) * per], self.cfg.cols)

    def _start(self, count, body):
        wanted = 0
        for word in self.core.program[body[0]:]:
            instr = Instruction.decode(word)
            if instr.op is Opcode.HALT:
                break
            if instr.op is Opcode.READ_HOST:
                wanted += instr.count
        self.running = (body[0], wanted, [])
        self.status = [CoreState.RUNNING.value] + [0] * (STATUS_WORDS - 1)
        self._run_if_ready()

    def _data(self, count, body):
        if not self.running:
            return                   # rows while nothing runs are dropped
        per = host_row_words(self.cfg)
        for k in range(count):
            self.running[2].append(int8_lanes(body[k * per:(k + 1) * per], self.cfg.ub_lanes))
        self._run_if_ready()

    def _run_if_ready(self):
        start, wanted, rows = self.running
        if len(rows) < wanted:
            return
        result = self.core.run(start, host_in=rows[:wanted])
        for row in result.host_out:
            lanes = np.zeros(self.cfg.ub_lanes, np.int64)
            lanes[:len(row)] = row
            self.replies += [header(Reply.ROW, self.cfg.ub_lanes)] + \
                [int(v) & 0xFFFFFFFF for v in lanes]
        self.status = [result.state.value | result.error.value << 8, result.error_pc,
                       result.cycles, result.mxu_busy_cycles, result.weight_stall_cycles,
                       result.instructions]
        self.running = None

    def _status(self, count, body):
        self.replies += [header(Reply.STATUS, STATUS_WORDS)] + \
            [word & 0xFFFFFFFF for word in self.status]

    def _abort(self, count, body):
        pass                          # a program here runs whole or waits for rows

    def _read_memory(self, count, body):
        row, memory = body[0] & 0xFFFF, (body[0] >> 16) & 0xFF
        error = None if memory in (0, 1) and not self.running and body[0] >> 24 == 0 else "no"
        error = error or self.core.memory_access_error(memory == Memory.ACCUMULATORS.value,
                                                       row, count)
        if error:
            self.replies.append(header(Reply.REFUSED, Command.READ_MEMORY.value))
            return
        for values in self.core.read_memory(memory == Memory.ACCUMULATORS.value, row, count):
            lanes = np.zeros(self.cfg.ub_lanes, np.int64)
            lanes[:len(values)] = values
            self.replies += [header(Reply.ROW, self.cfg.ub_lanes)] + \
                [int(v) & 0xFFFFFFFF for v in lanes]

    def _write_memory(self, count, body):
        row, memory = body[0] & 0xFFFF, (body[0] >> 16) & 0xFF
        if (memory != Memory.UNIFIED_BUFFER.value or body[0] >> 24 or self.running or
                self.core.memory_access_error(False, row, count, write=True)):
            self.replies.append(header(Reply.REFUSED, Command.WRITE_MEMORY.value))
            return
        per = host_row_words(self.cfg)
        self.core.write_memory(row, [int8_lanes(body[1 + k * per:1 + (k + 1) * per],
                                            self.cfg.ub_lanes) for k in range(count)])


class ModelBoard:
    """A board and its serial line in simulated time (see the module's text)."""

    def __init__(self, cfg, *, baud=115200, faults=None, read_timeout=0.05):
        faults = dict(faults or {})
        unknown = set(faults) - set(FAULTS) - {"seed"}
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; the faults are {FAULTS}")
        rng = random.Random(faults.pop("seed", 1))
        self.byte_time = 10 / baud
        self.read_timeout = read_timeout
        self.faults_injected = {}
        self._to_board = _Line(faults, rng, self.byte_time, self.faults_injected, "to_board")
        self._to_host = _Line(faults, rng, self.byte_time, self.faults_injected, "from_board")
        self._arrived = deque()          # (time, byte) on their way to the host
        self.now = 0.0
        self.tpu = _Commands(cfg)
        # the board's end of the link
        self._frame = None               # the bytes of the frame being received
        self._last_byte = 0.0
        self._deaf_until = 0.0           # sending a reply: received bytes are lost
        self._last = None                # (seq, reply frame) stored for a retransmission

    # --- the port ----------------------------------------------------------------------

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds

    def write(self, data):
        for t, byte, framing_error in self._to_board.carry(bytes(data), self.now):
            self._until(t)
            self._receive(t, byte, framing_error)

    def read(self, size=1):
        if not self._ready():
            due = self.now + self.read_timeout
            if self._arrived:
                due = min(due, max(self.now, self._arrived[0][0]))
            self._until(due)
            self.now = due
        out = bytearray()
        while self._arrived and self._arrived[0][0] <= self.now and len(out) < size:
            out.append(self._arrived.popleft()[1])
        return bytes(out)

    @property
    def in_waiting(self):
        return self._ready()

    def _ready(self):
        return sum(1 for t, _ in self._arrived if t <= self.now)

    # --- the board's end of the link ----------------------------------------------------

    def _until(self, t):
        """Let the board's byte timeout fire if it falls before ``t``."""
        timeout = BYTE_TIMEOUT_BITS * self.byte_time / 10
        if self._frame is not None and t - self._last_byte > timeout:
            frame, self._frame = self._frame, None
            self._nak(frame, self._last_byte + timeout)   # cut short

    def _receive(self, t, byte, framing_error):
        if t < self._deaf_until:
            return
        if self._frame is None:
            if byte == SYNC and not framing_error:
                self._frame, self._bad, self._last_byte = bytearray(), False, t
            return
        self._frame.append(byte)
        self._bad |= framing_error
        self._last_byte = t
        frame = self._frame
        if len(frame) == 4 and int.from_bytes(frame[2:4], "little") > MAX_REQUEST_WORDS:
            self._frame = None
            self._nak(frame, t)
        elif len(frame) >= 4 and len(frame) == 4 + 4 * int.from_bytes(frame[2:4], "little") + CRC_BYTES:
            self._frame = None
            self._check(frame, t)

    def _nak(self, frame, t):
        """A NAK naming the frame's seq, if the frame got that far and may be the host's."""
        last = self._last[0] if self._last else None
        if len(frame) >= 2 and frame[0] & ~REQUEST_FLAGS == 0 and \
                plausible_seq(frame[1], last):
            self._send(encode_reply(Kind.NAK, frame[1]), t)

    def _check(self, frame, t):
        flags, seq = frame[0], frame[1]
        if self._bad or frame_crc(frame) != 0:
            self._nak(frame, t)
            return
        if flags & FLAG_NEW_SESSION:
            self._last = None
        if self._last is not None and seq == self._last[0]:
            self._send(self._last[1], t)         # a retransmission: the same reply
            return
        words = [int.from_bytes(frame[4 + 4 * k:8 + 4 * k], "little")
                 for k in range((len(frame) - 4 - CRC_BYTES) // 4)]
        kind = Kind.ACK if len(words) <= COMMAND_QUEUE_WORDS else Kind.BUSY
        if kind == Kind.ACK:
            self.tpu.take(words)
        limit = reply_limit(flags)
        reply = encode_reply(kind, seq, self.tpu.replies[:limit],
                             took=kind == Kind.ACK and bool(words))
        del self.tpu.replies[:limit]
        self._last = (seq, reply)
        self._send(reply, t)

    def _send(self, reply, t):
        arrivals = self._to_host.carry(reply, t)
        self._deaf_until = self._to_host.free
        self._arrived.extend((at, byte) for at, byte, _ in arrivals)
