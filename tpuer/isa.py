"""The instruction set, defined once: opcodes, flags, fields, encoding and error codes.

The sequencer's decoder (``tpuer.hw.sequencer``), the ISA-level golden model
(``tpuer.sim.isa_model``), the driver and the assembler all use these definitions.

An instruction is one 64-bit word (:data:`INSTRUCTION_LAYOUT`)::

    bits  0..3   opcode
    bits  4..7   flags (their meaning depends on the opcode)
    bits  8..23  a      first address
    bits 24..39  b      second address
    bits 40..55  count  rows (or tiles, or a lane for CONFIG)
    bits 56..63  reserved, must be zero

A ``count`` of zero makes an instruction do nothing. Every instruction takes one cycle per
row it moves (at least one cycle) when it does not wait.
"""

import numbers
from dataclasses import dataclass

from amaranth.hdl import unsigned
from amaranth.lib import data, enum

__all__ = ["Opcode", "MatmulFlag", "WriteHostFlag", "ConfigParam", "ErrorCode",
           "INSTRUCTION_LAYOUT", "INSTRUCTION_BITS", "Instruction", "ALL_LANES",
           "CoreState", "OPERANDS", "DEFINED_FLAGS", "CONFIG_DEFAULTS"]


class Opcode(enum.Enum, shape=unsigned(4)):
    """What an instruction does (``a``, ``b`` and ``count`` are its fields)."""
    #: Nothing, for one cycle.
    NOP = 0
    #: Wait until all earlier work is done, then stop; the host sees ``HALTED``.
    HALT = 1
    #: Wait until all earlier work (products, activations, weight reads) is done.
    SYNC = 2
    #: Read_Host_Memory: take ``count`` rows from the host stream into UB rows ``a...``.
    READ_HOST = 3
    #: Write_Host_Memory: send UB rows ``a...`` (or accumulator rows with ``FROM_ACC``) to
    #: the host stream, ``count`` of them.
    WRITE_HOST = 4
    #: Read_Weights: queue ``count`` weight tiles, from tile ``a`` of the weight memory,
    #: into the Weight FIFO. Retires once the weight reader has taken it.
    READ_WEIGHTS = 5
    #: MatrixMultiply: UB rows ``a...`` times the weight tile into accumulator rows ``b...``,
    #: ``count`` rows, one per cycle. Flags: ``ACCUMULATE``, ``SWITCH``.
    MATMUL = 6
    #: Activate: accumulator rows ``a...`` through the activation unit into UB rows ``b...``.
    ACTIVATE = 7
    #: Set an activation parameter: flags name it (:class:`ConfigParam`), ``count`` is the
    #: lane (or :data:`ALL_LANES`), ``a | b << 16`` the 32-bit value.
    CONFIG = 8


class MatmulFlag(enum.IntFlag):
    #: Add to the accumulator rows instead of overwriting them.
    ACCUMULATE = 1
    #: Switch to the next weight tile before the first row.
    SWITCH = 2


class WriteHostFlag(enum.IntFlag):
    #: Send accumulator rows (int32) instead of Unified Buffer rows.
    FROM_ACC = 1


class ConfigParam(enum.IntEnum):
    BIAS = 0
    MULTIPLIER = 1
    SHIFT = 2
    ZERO_POINT = 3
    RELU = 4


#: Each activation parameter after reset, until a CONFIG sets it: a multiplier of about
#: 1.0 (2**31 - 1), everything else 0.
CONFIG_DEFAULTS = {ConfigParam.BIAS: 0, ConfigParam.MULTIPLIER: (1 << 31) - 1,
                   ConfigParam.SHIFT: 0, ConfigParam.ZERO_POINT: 0, ConfigParam.RELU: 0}

#: ``count`` of a CONFIG instruction that sets a per-lane parameter in every lane.
ALL_LANES = 0xFFFF


class ErrorCode(enum.Enum, shape=unsigned(4)):
    """Why the core stopped with an error (the status register holds it and the index of
    the failing instruction)."""
    NONE = 0
    #: The opcode is not one of :class:`Opcode`.
    BAD_OPCODE = 1
    #: Reserved bits or flags not defined for the opcode are set.
    BAD_FIELD = 2
    #: An address range runs past the end of the Unified Buffer.
    UB_RANGE = 3
    #: An address range runs past the end of the accumulator memory.
    ACC_RANGE = 4
    #: A tile range runs past the end of the weight memory.
    WEIGHT_RANGE = 5
    #: A MATMUL with ``SWITCH`` while no weight tile was read for it.
    NO_WEIGHTS = 6
    #: READ_WEIGHTS would queue more tiles than the Weight FIFO and the shadow weights hold.
    WEIGHT_OVERFLOW = 7
    #: A CONFIG value or lane out of range.
    BAD_CONFIG = 8
    #: The program counter ran past the end of the instruction memory without a HALT.
    PROGRAM_END = 9


class CoreState(enum.Enum, shape=unsigned(2)):
    IDLE = 0
    RUNNING = 1
    HALTED = 2
    ERROR = 3


INSTRUCTION_LAYOUT = data.StructLayout({
    "opcode": unsigned(4),      # raw, so that undefined opcodes can be decoded and refused
    "flags": unsigned(4),
    "a": unsigned(16),
    "b": unsigned(16),
    "count": unsigned(16),
    "reserved": unsigned(8),
})
INSTRUCTION_BITS = INSTRUCTION_LAYOUT.size
_FIELDS = {name: (field.offset, field.shape.width) for name, field in INSTRUCTION_LAYOUT}

#: The fields each opcode takes as operands, in assembly order (CONFIG has its own form:
#: parameter, value, lane).
OPERANDS = {
    Opcode.NOP: (), Opcode.HALT: (), Opcode.SYNC: (),
    Opcode.READ_HOST: ("a", "count"),
    Opcode.WRITE_HOST: ("a", "count"),
    Opcode.READ_WEIGHTS: ("a", "count"),
    Opcode.MATMUL: ("a", "b", "count"),
    Opcode.ACTIVATE: ("a", "b", "count"),
}

#: Flags each opcode defines; any other flag is a BAD_FIELD error.
DEFINED_FLAGS = {
    Opcode.MATMUL: int(MatmulFlag.ACCUMULATE | MatmulFlag.SWITCH),
    Opcode.WRITE_HOST: int(WriteHostFlag.FROM_ACC),
    Opcode.CONFIG: max(ConfigParam),   # the flags field holds the parameter number
}


@dataclass(frozen=True)
class Instruction:
    """One instruction; :meth:`encode` gives its 64-bit word."""
    opcode: int
    a: int = 0
    b: int = 0
    count: int = 0
    flags: int = 0
    reserved: int = 0

    def __post_init__(self):
        for name, (_offset, width) in _FIELDS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"instruction field {name} must be an integer, not {value!r}")
            if not 0 <= value < (1 << width):
                raise ValueError(f"instruction field {name} must fit {width} bits, not {value}")

    def encode(self):
        word = 0
        for name, (offset, _width) in _FIELDS.items():
            word |= int(getattr(self, name)) << offset
        return word

    @classmethod
    def decode(cls, word):
        word = int(word)
        if not 0 <= word < (1 << INSTRUCTION_BITS):
            raise ValueError(f"an instruction word has {INSTRUCTION_BITS} bits, not {word:#x}")
        return cls(**{name: (word >> offset) & ((1 << width) - 1)
                      for name, (offset, width) in _FIELDS.items()})

    @property
    def op(self):
        """The :class:`Opcode`, or ``None`` for an undefined one."""
        try:
            return Opcode(self.opcode)
        except ValueError:
            return None

    @property
    def value(self):
        """The 32-bit immediate of CONFIG, as a signed number."""
        raw = self.a | (self.b << 16)
        return raw - (1 << 32) if raw >> 31 else raw

    def __str__(self):
        op = self.op
        name = op.name if op is not None else f"OPCODE_{self.opcode}"
        return f"{name} a={self.a} b={self.b} count={self.count} flags={self.flags:#x}"


def nop():
    return Instruction(Opcode.NOP.value)


def halt():
    return Instruction(Opcode.HALT.value)


def sync():
    return Instruction(Opcode.SYNC.value)


def read_host(ub_addr, rows):
    return Instruction(Opcode.READ_HOST.value, a=ub_addr, count=rows)


def write_host(addr, rows, *, from_acc=False):
    return Instruction(Opcode.WRITE_HOST.value, a=addr, count=rows,
                       flags=int(WriteHostFlag.FROM_ACC) if from_acc else 0)


def read_weights(tile, tiles=1):
    return Instruction(Opcode.READ_WEIGHTS.value, a=tile, count=tiles)


def matmul(ub_addr, acc_addr, rows, *, accumulate=False, switch=True):
    flags = (MatmulFlag.ACCUMULATE if accumulate else 0) | (MatmulFlag.SWITCH if switch else 0)
    return Instruction(Opcode.MATMUL.value, a=ub_addr, b=acc_addr, count=rows, flags=int(flags))


def activate(acc_addr, ub_addr, rows):
    return Instruction(Opcode.ACTIVATE.value, a=acc_addr, b=ub_addr, count=rows)


def config(param, value, lane=ALL_LANES):
    """CONFIG: set activation parameter ``param`` (:class:`ConfigParam`) of ``lane`` to
    ``value``, a 32-bit number (signed or unsigned); the sequencer checks its range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"a CONFIG value must be an integer, not {value!r}")
    if not -(1 << 31) <= value < (1 << 32):
        raise ValueError(f"a CONFIG value must fit 32 bits, not {value}")
    raw = int(value) & 0xFFFFFFFF
    return Instruction(Opcode.CONFIG.value, a=raw & 0xFFFF, b=raw >> 16, count=lane,
                       flags=int(ConfigParam(param)))
