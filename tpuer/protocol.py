"""The host command set, defined once: what the host sends the TPU and what it answers, as
32-bit words on one pair of valid/ready streams (``tpuer.hw.host_interface`` implements
it; a UART carries exactly these words).

Every command and every reply starts with a header word: ``count`` in bits 0..23, the
opcode in bits 24..31. Payloads:

* ``WRITE_PROGRAM`` (count = n instructions): an address word, then 2n words (each
  instruction's low word, then its high word). Refused (``REFUSED``, its words read and
  dropped) while a program runs: a running program cannot change under the sequencer.
* ``WRITE_WEIGHTS`` (count = n rows): a row-address word, then n weight rows of
  :func:`weight_row_words` words (int8 lanes, four to a word, lane 0 in the low byte).
* ``START``: a word with the start address. The core runs; rows that WRITE_HOST sends come
  back as ``ROW`` replies while it runs.
* ``DATA`` (count = n rows): n host rows of :func:`host_row_words` words, for READ_HOST.
  Rows sent while the core is not running are dropped.
* ``STATUS``: answered by a ``STATUS`` reply. Its words are read as they are sent: while a
  program runs, its counters go on between them; once it has stopped, they stand still.
* ``ABORT``: stops a running program.
* ``READ_MEMORY`` (count = n rows): a :data:`MEMORY_ADDRESS_LAYOUT` word (row address,
  :class:`Memory`); rows ``address...`` come back as ``ROW`` replies, without a program.
* ``WRITE_MEMORY`` (count = n rows): a :data:`MEMORY_ADDRESS_LAYOUT` word (Unified Buffer
  only), then n rows as in ``DATA``; they are written into UB rows ``address...``.

Both memory commands run only while no program runs, and only on rows inside the memory;
otherwise the TPU answers ``REFUSED`` and does nothing (the rows of a refused
``WRITE_MEMORY`` are read and dropped, so the stream stays in step).

Replies: ``ROW`` (count = lanes): one word per lane, a signed 32-bit value; ``STATUS``
(count = 6): the words of :data:`STATUS_FIELDS` (state | error << 8, error_pc, cycles,
MXU-busy cycles, weight-stall cycles, instructions); ``BAD_COMMAND`` (count = the opcode
received): the header was not a command; the interface reads the next word as a header;
``REFUSED`` (count = the opcode): a memory command, or a program write, that could not run.
"""

import numpy as np
from amaranth.hdl import unsigned
from amaranth.lib import data, enum

from .isa import CoreState, ErrorCode, Instruction

__all__ = ["Command", "Reply", "Memory", "HEADER_LAYOUT", "MEMORY_ADDRESS_LAYOUT", "WORD_BITS",
           "weight_row_words", "host_row_words", "encode", "decode_replies", "Status",
           "STATUS_FIELDS", "STATUS_WORDS", "STATUS_STATE_LAYOUT", "int8_lanes", "LANE_BITS",
           "check_lane_width", "run_bytes"]

WORD_BITS = 32
HEADER_LAYOUT = data.StructLayout({"count": unsigned(24), "opcode": unsigned(8)})
MAX_COUNT = (1 << 24) - 1


class Command(enum.Enum, shape=unsigned(8)):
    WRITE_PROGRAM = 0x01
    WRITE_WEIGHTS = 0x02
    START = 0x03
    DATA = 0x04
    STATUS = 0x05
    ABORT = 0x06
    READ_MEMORY = 0x07
    WRITE_MEMORY = 0x08


class Reply(enum.Enum, shape=unsigned(8)):
    ROW = 0x81
    STATUS = 0x82
    REFUSED = 0x8E
    BAD_COMMAND = 0x8F


class Memory(enum.Enum, shape=unsigned(8)):
    """Which memory a READ_MEMORY or WRITE_MEMORY names."""
    UNIFIED_BUFFER = 0
    ACCUMULATORS = 1


#: The address word of READ_MEMORY and WRITE_MEMORY.
MEMORY_ADDRESS_LAYOUT = data.StructLayout({"row": unsigned(16), "memory": unsigned(8),
                                           "reserved": unsigned(8)})


#: The words of a ``STATUS`` reply, in order: the state word (:data:`STATUS_STATE_LAYOUT`),
#: then the sequencer's status outputs of these names (``error_pc`` and the counters), each
#: a word. The host interface sends them and :func:`decode_replies` reads them by this list.
STATUS_FIELDS = ("state_word", "error_pc", "cycles", "mxu_busy_cycles", "weight_stall_cycles",
                 "instructions")
STATUS_WORDS = len(STATUS_FIELDS)
#: The first word of a ``STATUS`` reply: the core's :class:`~tpuer.isa.CoreState` and
#: :class:`~tpuer.isa.ErrorCode`; the bits above are 0.
STATUS_STATE_LAYOUT = data.StructLayout({"state": unsigned(8), "error": unsigned(8)})


#: Bits of a lane in the rows the host command set carries (int8, four to a word).
LANE_BITS = 8


def check_lane_width(cfg):
    """Refuse a configuration whose operands are not the host command set's int8 lanes:
    the blocks take other widths, a TPU behind the host interface does not."""
    if cfg.operand_width != LANE_BITS:
        raise ValueError(f"the host command set carries int8 lanes, so operand_width must be "
                         f"{LANE_BITS} for a TPU behind it, not {cfg.operand_width} (the blocks "
                         f"alone take 2 to 16)")


def weight_row_words(cfg):
    return -(-cfg.cols // 4)


def host_row_words(cfg):
    return -(-cfg.ub_lanes // 4)


def run_bytes(cfg, instructions, weight_tiles, rows_in, rows_out):
    """The bytes a program's run moves over the host link, both ways, in this command
    set's words: WRITE_PROGRAM of ``instructions``, WRITE_WEIGHTS of ``weight_tiles``
    tiles, START, DATA of ``rows_in`` rows, ``rows_out`` ROW replies, and a STATUS command
    and its reply."""
    words = ((2 + 2 * instructions) + (2 + weight_tiles * cfg.rows * weight_row_words(cfg)) +
             2 + (1 + rows_in * host_row_words(cfg)) + rows_out * (1 + cfg.ub_lanes) +
             1 + (1 + STATUS_WORDS))
    return words * WORD_BITS // 8


def header(opcode, count=0):
    if not 0 <= count <= MAX_COUNT:
        raise ValueError(f"a count must fit 24 bits, not {count}")
    return (int(getattr(opcode, "value", opcode)) << 24) | count


def _pack_int8(lanes, words):
    lanes = np.asarray(lanes, dtype=np.int64)
    if lanes.size and (lanes.min() < -128 or lanes.max() > 127):
        raise ValueError("int8 lanes must lie in [-128, 127]")
    raw = np.zeros(4 * words, dtype=np.uint8)
    raw[:len(lanes)] = lanes.astype(np.int8).view(np.uint8)
    return [int(w) for w in raw.view("<u4")]


def int8_lanes(words, lanes):
    """The first ``lanes`` int8 lanes of row ``words``, as :func:`_pack_int8` packs them
    (four to a word, lane 0 in the low byte)."""
    raw = np.array(words, dtype="<u4").view(np.int8)
    return raw[:lanes].astype(np.int64)


def _memory_address(memory, row):
    memory = Memory(memory)
    if not 0 <= row < (1 << 16):
        raise ValueError(f"a memory row address must fit 16 bits, not {row}")
    return row | (memory.value << 16)


class encode:
    """Word lists for each command (a namespace of functions)."""

    @staticmethod
    def write_program(start, instructions):
        words = [header(Command.WRITE_PROGRAM, len(instructions)), start]
        for instruction in instructions:
            value = (instruction.encode() if isinstance(instruction, Instruction)
                     else int(instruction))
            words += [value & 0xFFFFFFFF, value >> 32]
        return words

    @staticmethod
    def write_weights(cfg, row_addr, rows):
        words = [header(Command.WRITE_WEIGHTS, len(rows)), row_addr]
        for row in rows:
            words += _pack_int8(row, weight_row_words(cfg))
        return words

    @staticmethod
    def start(pc=0):
        return [header(Command.START), pc]

    @staticmethod
    def data(cfg, rows):
        words = [header(Command.DATA, len(rows))]
        for row in rows:
            words += _pack_int8(row, host_row_words(cfg))
        return words

    @staticmethod
    def read_memory(memory, row, rows):
        return [header(Command.READ_MEMORY, rows), _memory_address(memory, row)]

    @staticmethod
    def write_memory(cfg, row, rows):
        words = [header(Command.WRITE_MEMORY, len(rows)),
                 _memory_address(Memory.UNIFIED_BUFFER, row)]
        for values in rows:
            words += _pack_int8(values, host_row_words(cfg))
        return words

    @staticmethod
    def status():
        return [header(Command.STATUS)]

    @staticmethod
    def abort():
        return [header(Command.ABORT)]


class Status(dict):
    """A decoded STATUS reply."""


def _signed32(word):
    return word - (1 << 32) if word >> 31 else word


def decode_replies(words):
    """Split reply words into ``("row", array)``, ``("status", Status)``,
    ``("bad_command", opcode)`` and ``("refused", opcode)``; returns (replies, words left
    over from an unfinished one)."""
    replies, position = [], 0
    words = list(words)
    while position < len(words):
        head = words[position]
        opcode, count = head >> 24, head & MAX_COUNT
        if opcode in (Reply.BAD_COMMAND.value, Reply.REFUSED.value):
            replies.append(("bad_command" if opcode == Reply.BAD_COMMAND.value else "refused",
                            count))
            position += 1
            continue
        size = count if opcode == Reply.ROW.value else STATUS_WORDS
        if opcode not in (Reply.ROW.value, Reply.STATUS.value):
            raise ValueError(f"reply word {position} is not a reply header: {head:#010x}")
        if position + 1 + size > len(words):
            break
        body = words[position + 1:position + 1 + size]
        if opcode == Reply.ROW.value:
            replies.append(("row", np.array([_signed32(w) for w in body], dtype=np.int64)))
        else:
            status = dict(zip(STATUS_FIELDS, body))
            first = STATUS_STATE_LAYOUT.from_bits(status.pop("state_word") &
                                                  ((1 << STATUS_STATE_LAYOUT.size) - 1))
            replies.append(("status", Status(state=CoreState(first.state),
                                             error=ErrorCode(first.error), **status)))
        position += 1 + size
    return replies, words[position:]
