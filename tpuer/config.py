"""The one definition of every TPU parameter and number format.

The RTL (``tpuer.hw``), the golden models (``tpuer.sim``), the testbenches (``tpuer.tb``)
and the command line all take a :class:`Config`; nothing restates a width or a depth.
"""

import functools
import numbers
from dataclasses import dataclass, field, fields

from amaranth.hdl import signed, unsigned
from amaranth.utils import ceil_log2

__all__ = ["Config", "ConfigError", "Parameter"]


class ConfigError(ValueError):
    """A configuration value is out of range or of the wrong type."""


def _check_int(name, value, low, high):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer, not {value!r}")
    if not low <= value <= high:
        raise ConfigError(f"{name} must be between {low} and {high}, not {value}")


@dataclass(frozen=True)
class Parameter:
    """One field of :class:`Config`: its range (and, where the range has gaps, its
    choices), a one-line summary, and whether ``tpuer build`` may change it from a board's
    own. The command line's options and :meth:`Config.__post_init__`'s checks both come
    from these, so the two cannot disagree."""
    name: str
    default: int
    low: int
    high: int
    summary: str
    choices: tuple = None
    build: bool = False

    def check(self, value):
        _check_int(self.name, value, self.low, self.high)
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"{self.name} must be one of {', '.join(map(str, self.choices))}, "
                              f"not {value!r}")

    @property
    def allowed(self):
        """The allowed values, as the command line's help states them."""
        if self.choices is not None:
            return ", ".join(map(str, self.choices))
        return f"{self.low} to {self.high}"


def _parameter(default, low, high, summary, *, choices=None, build=False):
    return field(default=default, metadata={"parameter": dict(
        default=default, low=low, high=high, summary=summary, choices=choices, build=build)})


@dataclass(frozen=True)
class Config:
    """Parameters of one TPU instance.

    Parameters
    ----------
    rows : int
        Rows of the systolic array: the length of an input vector (the K dimension of a
        tile). 1 to 256.
    cols : int
        Columns of the systolic array: the length of a result vector (the N dimension of a
        tile). 1 to 256.
    operand_width : int
        Bits of a signed activation or weight (8 for int8). 2 to 16 for the blocks alone;
        the TPU behind its host interface, and so :class:`tpuer.Device` and the boards,
        takes 8, the host command set's int8 lanes.
    acc_width : int
        Bits of a signed partial sum and accumulator word (32 for int32). At least
        ``2 * operand_width + ceil(log2(rows))``, so that no partial sum inside the array can
        overflow, and at most 32.
    ub_depth : int
        Rows of the Unified Buffer. 2 to 65536.
    acc_depth : int
        Rows of the accumulator memory. 2 to 65536.
    weight_fifo_tiles : int
        Depth of the Weight FIFO in whole weight tiles (``rows`` rows each). 1 to 64, and
        at least 2 rows in all.
    weight_tiles : int
        Tiles the on-chip weight memory holds (``rows x cols`` weights each). 1 to 4096.
    program_depth : int
        Instructions the instruction memory holds. 2 to 65536.
    activation_steps : int
        How the activation unit spends its multipliers. 0 (the default): every lane of a
        row at once, pipelined, one row per cycle. 1, 2, 4, 8, 16 or 32: one lane at a
        time, each lane's 32 x 32-bit multiplication done in that many steps of
        ``32 / activation_steps`` bits and its rounding shift a bit per cycle, for devices
        without multipliers or logic to spare (a row then takes
        ``cols * (activation_steps + 44) + 1`` cycles).
    host_read_queue : int
        Rows the queue of answers to the host's memory reads holds. 2 (the default) lets a
        host that keeps up read a row per cycle; 1 a row every other cycle, on a row's
        worth of flip-flops less, for small FPGAs.
    multiply_latency : int
        Cycles from an activation entering a cell of the systolic array to its product. 1
        (the default): the product is registered. 2: the operands are registered too, so
        that the multiplier (a DSP block that may sit far from the cell's logic) has a
        clock period of its own and neither the routing to it nor the routing from it
        shares one with the multiplication; for fast clocks on the ECP5, whose MULT18X18D
        holds all three registers. 3: as 2, and the product goes into a register of the
        fabric before the adder, so that the routing from the DSP block (which may sit far
        from the adder) and the add each have a clock period. The all-lanes activation
        unit's multipliers then keep their operands in such registers too (and with 3
        their products in the fabric too), and its latency grows from 8 to 11 (12)
        (:func:`~tpuer.hw.activation_units.activation_latency`). The matrix unit's latency
        grows by a cycle (two).
    memory_read_latency : int
        Cycles from a read request to the Unified Buffer or the accumulators to its row. 1
        (the default). 2: the block RAM's output goes into a register before any logic
        (a bounds check, a multiplexer) sees it, for fast clocks on the ECP5, whose DP16KD
        takes most of a 10 ns period from its clock to its data. Every read of either
        memory (the matrix unit's feed, the activation unit's input, the host's reads)
        then takes a cycle more. The handshakes around the reads are then decided from
        registers (the feed's hold-back check a cycle ahead, the host reads' room from the
        queue alone), which costs a few flip-flops and look-up tables and no cycles. It
        picks the form of the matmul feed (:func:`~tpuer.hw.matmul_feed.matmul_feed`) and
        of the read ports (:func:`~tpuer.hw.read_ports.read_ports`).
    control_registers : int
        1 (the default): the control path has the register stages that fast clocks need.
        They cost one more fill cycle at the start of every run, and the host interface
        sends a reply word every other cycle instead of every cycle (still far faster than
        any serial line): the sequencer decodes the next instruction a cycle before it is
        loaded, counts late events a cycle later and writes CONFIG's parameters a cycle
        after it retires; the host interface offers each reply word from a register and
        checks memory commands in a state of their own; the serial link registers its
        bytes, its CRC's inputs and its last-word checks, and has a register stage each
        way around the host streams. 0: none of these, for a small FPGA at a slow clock
        (the iCE40UP5K at 24 MHz, where the sequencer's and the host interface's stages
        alone took 144 logic cells). It picks the registered or the small form of each
        block that has both, each in one factory: the sequencer
        (:func:`~tpuer.hw.sequencer.sequencer`, built from its parts' matching forms), the
        host interface's parser and reply sender, the serial link and the board's top, the
        matrix unit, the host DMA engine and the activate path. With it a START must come
        two cycles after a program write at the earliest.

    Raises
    ------
    ConfigError
        When a value has the wrong type or is out of range; the message names it.
    """

    rows: int = _parameter(8, 1, 256, "rows of the systolic array (K of a tile)", build=True)
    cols: int = _parameter(8, 1, 256, "columns of the systolic array (N of a tile)", build=True)
    operand_width: int = _parameter(8, 2, 16, "bits of an activation or weight (8 behind the "
                                              "host interface)")
    acc_width: int = _parameter(32, 2, 32, "bits of an accumulator word")
    ub_depth: int = _parameter(256, 2, 65536, "rows of the Unified Buffer")
    acc_depth: int = _parameter(256, 2, 65536, "rows of the accumulator memory")
    weight_fifo_tiles: int = _parameter(4, 1, 64, "Weight FIFO depth in tiles")
    weight_tiles: int = _parameter(16, 1, 4096, "tiles in the weight memory")
    program_depth: int = _parameter(1024, 2, 65536, "instructions in the instruction memory")
    activation_steps: int = _parameter(
        0, 0, 32, "0: every activation lane at once; else one lane at a time, its "
        "multiplication in that many steps", choices=(0, 1, 2, 4, 8, 16, 32), build=True)
    host_read_queue: int = _parameter(
        2, 1, 2, "rows of the host read answer queue (2: a row per cycle; 1: every other "
        "cycle, smaller)")
    multiply_latency: int = _parameter(
        1, 1, 3, "cycles from a cell's activation to its product (2: the operands registered "
        "too; 3: the products also copied into the fabric; for fast clocks)", build=True)
    memory_read_latency: int = _parameter(
        1, 1, 2, "cycles from a Unified Buffer or accumulator read to its row (2: the block "
        "RAM's output registered, for fast clocks)", build=True)
    control_registers: int = _parameter(
        1, 0, 1, "1: the control path's register stages for fast clocks (one more fill "
        "cycle a run); 0: without them, smaller, for a slow clock")

    @classmethod
    @functools.cache
    def parameters(cls):
        """Every field as a :class:`Parameter`, in the order of the fields (made once:
        every ``Config`` checks itself against them)."""
        return tuple(Parameter(item.name, **item.metadata["parameter"]) for item in fields(cls))

    def __post_init__(self):
        # NumPy's integers are integers too; every field is kept as a Python int.
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, numbers.Integral) and not isinstance(value, bool):
                object.__setattr__(self, item.name, int(value))
        for parameter in self.parameters():
            parameter.check(getattr(self, parameter.name))
        needed = 2 * self.operand_width + ceil_log2(self.rows)
        if self.acc_width < needed:
            raise ConfigError(
                f"acc_width must be at least 2 * operand_width + ceil(log2(rows)) = {needed} "
                f"so that a column of {self.rows} products cannot overflow, not {self.acc_width}")
        if self.weight_fifo_tiles * self.rows < 2:
            raise ConfigError(
                "the Weight FIFO must hold at least 2 rows to pass one row per cycle: "
                f"with rows={self.rows}, weight_fifo_tiles must be at least 2")

    # --- number formats ---------------------------------------------------------------------

    @property
    def operand_shape(self):
        """Shape of an activation or a weight: ``signed(operand_width)``."""
        return signed(self.operand_width)

    @property
    def acc_shape(self):
        """Shape of a partial sum or an accumulator word: ``signed(acc_width)``."""
        return signed(self.acc_width)

    @property
    def operand_min(self):
        return -(1 << (self.operand_width - 1))

    @property
    def operand_max(self):
        return (1 << (self.operand_width - 1)) - 1

    @property
    def acc_min(self):
        return -(1 << (self.acc_width - 1))

    @property
    def acc_max(self):
        return (1 << (self.acc_width - 1)) - 1

    #: Requantisation multiplier: a signed Q0.31 fixed-point number (gemmlowp convention).
    multiplier_width = 32
    #: Largest rounding right shift of the requantisation step.
    max_shift = 31

    @property
    def multiplier_shape(self):
        return signed(self.multiplier_width)

    @property
    def shift_shape(self):
        return unsigned(5)

    @property
    def bias_shape(self):
        """The bias added before requantisation is an accumulator word."""
        return self.acc_shape

    # --- derived sizes ----------------------------------------------------------------------

    @property
    def ub_lanes(self):
        """int8 lanes in a Unified Buffer row: wide enough for an input vector (``rows``)
        and for a result vector (``cols``)."""
        return max(self.rows, self.cols)

    @property
    def weight_fifo_depth(self):
        """Weight FIFO depth in weight rows."""
        return self.weight_fifo_tiles * self.rows

    @property
    def weight_memory_depth(self):
        """Weight memory depth in weight rows."""
        return self.weight_tiles * self.rows

    @property
    def weight_addr_width(self):
        return max(1, ceil_log2(self.weight_memory_depth))

    @property
    def program_addr_width(self):
        return max(1, ceil_log2(self.program_depth))

    @property
    def ub_addr_width(self):
        return max(1, ceil_log2(self.ub_depth))

    @property
    def acc_addr_width(self):
        return max(1, ceil_log2(self.acc_depth))

    @property
    def row_bits(self):
        """Bits of a row number, a row range's end or a row count within either memory
        (up to the larger depth itself): what the sequencer's hazard checks, the activation
        issuer and the host DMA engine keep of ranges that passed the range checks."""
        return max(self.ub_depth, self.acc_depth).bit_length()

    @property
    def name(self):
        """A short name that identifies this configuration, e.g. ``8x8`` or
        ``4x8-i8a32-ub256-acc256-wf4``; used for build directories."""
        base = f"{self.rows}x{self.cols}"
        if self == Config(rows=self.rows, cols=self.cols):
            return base
        name = (f"{base}-i{self.operand_width}a{self.acc_width}-ub{self.ub_depth}"
                f"-acc{self.acc_depth}-wf{self.weight_fifo_tiles}")
        defaults = Config()
        if (self.weight_tiles, self.program_depth) != (defaults.weight_tiles,
                                                       defaults.program_depth):
            name += f"-wm{self.weight_tiles}-pm{self.program_depth}"
        if self.activation_steps:
            name += f"-as{self.activation_steps}"
        if self.host_read_queue != defaults.host_read_queue:
            name += f"-hq{self.host_read_queue}"
        if self.multiply_latency != defaults.multiply_latency:
            name += f"-ml{self.multiply_latency}"
        if self.memory_read_latency != defaults.memory_read_latency:
            name += f"-mr{self.memory_read_latency}"
        if self.control_registers != defaults.control_registers:
            name += f"-cr{self.control_registers}"
        return name

    def as_dict(self):
        return {f.name: getattr(self, f.name) for f in fields(self)}
