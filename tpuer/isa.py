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

import functools
import numbers
from dataclasses import dataclass

from amaranth.hdl import unsigned
from amaranth.lib import data, enum

__all__ = ["Opcode", "MatmulFlag", "WriteHostFlag", "ConfigParam", "Rounding",
           "MAX_LEFT_SHIFT", "PER_LANE", "ErrorCode",
           "INSTRUCTION_LAYOUT", "INSTRUCTION_BITS", "FIELD_BITS", "END_BITS", "Instruction",
           "ALL_LANES",
           "CoreState", "OPERANDS", "DEFINED_FLAGS", "config_defaults", "DMAKind", "dma_kind",
           "RangeCheck", "RANGE_CHECKS", "STATE_CHECKS", "DMA_HAZARDS", "memory_depths",
           "config_lane_bad", "config_ranges", "tiles_held"]


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
    """The activation parameters that CONFIG sets (the requantisation of
    :func:`tpuer.sim.activation_model.requantize`)."""
    #: Per lane: added to the accumulator word, saturating.
    BIAS = 0
    #: Per lane: a signed Q0.31 multiplier.
    MULTIPLIER = 1
    #: Per lane: a right shift of 0 to ``max_shift``, or a negative value: a left shift of
    #: the biased word before the multiply, of up to :data:`MAX_LEFT_SHIFT` places.
    SHIFT = 2
    #: Added after the scaling.
    ZERO_POINT = 3
    #: 1: the lower clamp bound is the zero point (CLAMP_MIN is not used).
    RELU = 4
    #: A :class:`Rounding`: how the scaling rounds.
    ROUNDING = 5
    #: The lowest output value (RELU6 and RELU_N1_TO_1 as clamps in the quantised domain).
    #: Should the bounds cross, a value below the lower one takes it, any other the upper.
    CLAMP_MIN = 6
    #: The highest output value.
    CLAMP_MAX = 7


class Rounding(enum.IntEnum, shape=unsigned(1)):
    """How the requantisation's scaling rounds (:data:`ConfigParam.ROUNDING`)."""
    #: gemmlowp's (TFLite's MultiplyByQuantizedMultiplier): the doubling high multiply
    #: rounds to nearest, then the right shift rounds half away from zero.
    DOUBLE = 0
    #: TFLite's single rounding (``TFLITE_SINGLE_ROUNDING``): the product and the right
    #: shift as one division by a power of two, rounded half up.
    SINGLE = 1


#: The largest left shift (a negative SHIFT) of the biased word before the multiply: it
#: makes scales from 1 up to ``2**MAX_LEFT_SHIFT``.
MAX_LEFT_SHIFT = 7

#: The parameters set a value per lane; every other is one value for the whole row.
PER_LANE = (ConfigParam.BIAS, ConfigParam.MULTIPLIER, ConfigParam.SHIFT)


def config_defaults(cfg):
    """Each activation parameter after reset, until a CONFIG sets it: a multiplier of about
    1.0 (2**31 - 1), double rounding, the clamp bounds the operand range's ends,
    everything else 0."""
    return {ConfigParam.BIAS: 0, ConfigParam.MULTIPLIER: (1 << 31) - 1,
            ConfigParam.SHIFT: 0, ConfigParam.ZERO_POINT: 0, ConfigParam.RELU: 0,
            ConfigParam.ROUNDING: int(Rounding.DOUBLE),
            ConfigParam.CLAMP_MIN: cfg.operand_min, ConfigParam.CLAMP_MAX: cfg.operand_max}


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
#: Bits of the row fields ``a``, ``b`` and ``count``, and of an end ``a + count``, which the
#: hardware keeps one bit wider so that a range past the end of a memory is seen.
FIELD_BITS = INSTRUCTION_LAYOUT["a"].shape.width
END_BITS = FIELD_BITS + 1
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



class DMAKind(enum.Enum, shape=unsigned(2)):
    """What a host transfer moves: READ_HOST, WRITE_HOST and the host's direct memory
    commands, as the host DMA engine carries them out."""
    #: Host rows into Unified Buffer rows.
    READ_HOST = 0
    #: Unified Buffer rows to the host.
    WRITE_UB = 1
    #: Accumulator rows to the host.
    WRITE_ACC = 2


def dma_kind(reads_host, from_acc, select=None):
    """The :class:`DMAKind` of a READ_HOST (``reads_host``) or a WRITE_HOST (of the
    accumulators if ``from_acc``). Of Python truth values; or, with ``select`` Amaranth's
    ``Mux``, of signals, as the sequencer decides it."""
    if select is None:
        select = lambda condition, then, otherwise: then if condition else otherwise
    return select(reads_host, DMAKind.READ_HOST,
                  select(from_acc, DMAKind.WRITE_ACC, DMAKind.WRITE_UB))


def kind_in(kind, kinds):
    """Whether ``kind`` (a :class:`DMAKind`, or a signal of one) is one of ``kinds``."""
    kinds = list(kinds)
    if not kinds:
        return False
    result = kind == kinds[0]
    for each in kinds[1:]:
        result = result | (kind == each)
    return result


@dataclass(frozen=True)
class RangeCheck:
    """Rows (or tiles) ``field ... field + count`` must lie inside ``memory`` (``"ub"``,
    ``"acc"`` or ``"weights"``, see :func:`memory_depths`), or the instruction fails with
    ``error``. ``from_acc``: the check applies only when WRITE_HOST's ``FROM_ACC`` flag is
    set (``True``) or clear (``False``); ``None``: always."""
    field: str
    memory: str
    error: "ErrorCode"
    from_acc: bool = None

    def applies(self, flags):
        return self.from_acc is None or bool(flags & WriteHostFlag.FROM_ACC) == self.from_acc


def memory_depths(cfg):
    """The size of each memory that :class:`RangeCheck` names, in its rows or tiles."""
    return {"ub": cfg.ub_depth, "acc": cfg.acc_depth, "weights": cfg.weight_tiles}


def config_lane_bad(lane, cfg, *, greater=lambda value, limit: value > limit):
    """Whether ``lane`` is no CONFIG lane of ``cfg``: neither :data:`ALL_LANES` nor below
    ``cfg.cols`` (``BAD_CONFIG``). For an int, or for an Amaranth value with ``greater`` a
    comparison against a constant that makes logic (the RTL's ``arith.above``)."""
    return (lane != ALL_LANES) & greater(lane, cfg.cols - 1)


def config_ranges(cfg):
    """The values CONFIG takes for each parameter, ``(low, high)``; any other is
    ``BAD_CONFIG``, as is a lane that is neither :data:`ALL_LANES` nor below ``cfg.cols``."""
    return {ConfigParam.BIAS: (cfg.acc_min, cfg.acc_max),
            ConfigParam.MULTIPLIER: (-(1 << 31), (1 << 31) - 1),
            ConfigParam.SHIFT: (-MAX_LEFT_SHIFT, cfg.max_shift),
            ConfigParam.ZERO_POINT: (cfg.operand_min, cfg.operand_max),
            ConfigParam.RELU: (0, 1),
            ConfigParam.ROUNDING: (min(Rounding), max(Rounding)),
            ConfigParam.CLAMP_MIN: (cfg.operand_min, cfg.operand_max),
            ConfigParam.CLAMP_MAX: (cfg.operand_min, cfg.operand_max)}


#: The checks of an instruction, in the order the sequencer and the ISA model make them
#: (the first that fails is the error): ``BAD_OPCODE``; ``BAD_FIELD`` (reserved bits, or a
#: flag the opcode does not define, :data:`DEFINED_FLAGS`); then these range checks, per
#: opcode in order; CONFIG's ``BAD_CONFIG`` (:func:`config_ranges`); and last the checks
#: that depend on the core's state (:data:`STATE_CHECKS`).
RANGE_CHECKS = {
    Opcode.READ_HOST: (RangeCheck("a", "ub", ErrorCode.UB_RANGE),),
    Opcode.WRITE_HOST: (RangeCheck("a", "acc", ErrorCode.ACC_RANGE, from_acc=True),
                        RangeCheck("a", "ub", ErrorCode.UB_RANGE, from_acc=False)),
    Opcode.READ_WEIGHTS: (RangeCheck("a", "weights", ErrorCode.WEIGHT_RANGE),),
    Opcode.MATMUL: (RangeCheck("a", "ub", ErrorCode.UB_RANGE),
                    RangeCheck("b", "acc", ErrorCode.ACC_RANGE)),
    Opcode.ACTIVATE: (RangeCheck("a", "acc", ErrorCode.ACC_RANGE),
                      RangeCheck("b", "ub", ErrorCode.UB_RANGE)),
}

def tiles_held(cfg):
    """Weight tiles read and not yet switched in that the core holds at most: the Weight
    FIFO's and one in the shadow weights."""
    return cfg.weight_fifo_tiles + 1


#: The checks that depend on the tiles in the Weight FIFO, made after every other: a
#: READ_WEIGHTS that would queue more tiles than the core holds (:func:`tiles_held`); a
#: MATMUL with ``SWITCH`` and rows when no tile is waiting.
STATE_CHECKS = {Opcode.READ_WEIGHTS: ErrorCode.WEIGHT_OVERFLOW,
                Opcode.MATMUL: ErrorCode.NO_WEIGHTS}

#: The hazard matrix of host transfers: while the DMA engine moves rows of a kind listed
#: here, an instruction of that opcode waits if its rows ``a...`` or ``b...`` meet the
#: transfer's. A MATMUL reads UB rows ``a`` that READ_HOST writes and writes accumulator
#: rows ``b`` that WRITE_HOST reads; an ACTIVATE writes UB rows ``b`` that either moves.
DMA_HAZARDS = {
    Opcode.MATMUL: {"a": (DMAKind.READ_HOST,), "b": (DMAKind.WRITE_ACC,)},
    Opcode.ACTIVATE: {"b": (DMAKind.READ_HOST, DMAKind.WRITE_UB)},
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
        return self.word

    @functools.cached_property
    def word(self):
        """The 64-bit word (:meth:`encode`), computed once."""
        word = 0
        for name, (offset, _width) in _FIELDS.items():
            word |= int(getattr(self, name)) << offset
        return word

    @classmethod
    def decode(cls, word):
        word = int(word)
        if not 0 <= word < (1 << INSTRUCTION_BITS):
            raise ValueError(f"an instruction word has {INSTRUCTION_BITS} bits, not {word:#x}")
        if cls is not Instruction:
            return cls(**_fields_of(word))
        return _decode(word)

    @functools.cached_property
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


# Programs repeat the same few words thousands of times: an instruction is immutable, so
# one object per word serves every decode and every constructor call below.
_CODEC_CACHE = 1 << 16


def _fields_of(word):
    return {name: (word >> offset) & ((1 << width) - 1)
            for name, (offset, width) in _FIELDS.items()}


@functools.lru_cache(maxsize=_CODEC_CACHE)
def _decode(word):
    return Instruction(**_fields_of(word))


@functools.lru_cache(maxsize=_CODEC_CACHE, typed=True)
def nop():
    return Instruction(Opcode.NOP.value)


@functools.lru_cache(maxsize=_CODEC_CACHE, typed=True)
def halt():
    return Instruction(Opcode.HALT.value)


@functools.lru_cache(maxsize=_CODEC_CACHE, typed=True)
def sync():
    return Instruction(Opcode.SYNC.value)


@functools.lru_cache(maxsize=_CODEC_CACHE, typed=True)
def read_host(ub_addr, rows):
    return Instruction(Opcode.READ_HOST.value, a=ub_addr, count=rows)


@functools.lru_cache(maxsize=_CODEC_CACHE, typed=True)
def write_host(addr, rows, *, from_acc=False):
    return Instruction(Opcode.WRITE_HOST.value, a=addr, count=rows,
                       flags=int(WriteHostFlag.FROM_ACC) if from_acc else 0)


@functools.lru_cache(maxsize=_CODEC_CACHE, typed=True)
def read_weights(tile, tiles=1):
    return Instruction(Opcode.READ_WEIGHTS.value, a=tile, count=tiles)


@functools.lru_cache(maxsize=_CODEC_CACHE, typed=True)
def matmul(ub_addr, acc_addr, rows, *, accumulate=False, switch=True):
    flags = (MatmulFlag.ACCUMULATE if accumulate else 0) | (MatmulFlag.SWITCH if switch else 0)
    return Instruction(Opcode.MATMUL.value, a=ub_addr, b=acc_addr, count=rows, flags=int(flags))


@functools.lru_cache(maxsize=_CODEC_CACHE, typed=True)
def activate(acc_addr, ub_addr, rows):
    return Instruction(Opcode.ACTIVATE.value, a=acc_addr, b=ub_addr, count=rows)


@functools.lru_cache(maxsize=_CODEC_CACHE, typed=True)
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
