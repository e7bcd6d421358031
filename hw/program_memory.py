"""The instruction memory: one write port for the host, one read port for the fetch stage;
on an iCE40 UltraPlus it is the device's single-ported SPRAM, which no other block uses."""

from amaranth.hdl import Cat, ClockSignal, Instance, Module, Signal

from ..isa import INSTRUCTION_BITS
from .block_ram import BlockRAM
from .targets import is_ice40_ultraplus

__all__ = ["ProgramMemory", "uses_spram"]

_SPRAM_DEPTH = 16384        # words of an SB_SPRAM256KA
_SPRAM_WIDTH = 16           # bits of a word


def uses_spram(platform, depth):
    """Whether the instruction memory goes into SB_SPRAM256KA blocks: on an iCE40
    UltraPlus (the one iCE40 with SPRAM), for up to 16384 instructions."""
    return is_ice40_ultraplus(platform) and depth <= _SPRAM_DEPTH


class ProgramMemory(BlockRAM):
    """``depth`` instructions of :data:`~tpuer.isa.INSTRUCTION_BITS` bits, each with
    ``extra_bits`` more beside it (above it in the word: what the sequencer works out from
    the instruction as it is written): the members and latency of a
    :class:`~tpuer.hw.block_ram.BlockRAM` (``registered_output`` included).

    Reads and writes must not fall in the same cycle: on an iCE40 UltraPlus the memory is
    four SB_SPRAM256KA blocks (16 bits each) sharing one address, the write has the port,
    and such a read returns garbage. (The sequencer reads only while it runs, and program
    writes are refused then.) With extra bits or ``registered_output``, or elsewhere, it is
    a :class:`~tpuer.hw.block_ram.BlockRAM`.
    """

    def __init__(self, depth, *, registered_output=False, extra_bits=0):
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 2:
            raise ValueError(f"depth must be an integer of at least 2, not {depth!r}")
        self._extra_bits = extra_bits
        super().__init__(width=INSTRUCTION_BITS + extra_bits, depth=depth,
                         registered_output=registered_output)

    @property
    def depth(self):
        return self._depth

    def elaborate(self, platform):
        if (self._extra_bits or self._registered_output or
                not uses_spram(platform, self._depth)):
            return super().elaborate(platform)
        m = Module()
        address = Signal(14)            # the write's, else the read's
        with m.If(self.write_en):
            m.d.comb += address.eq(self.write_addr)
        with m.Else():
            m.d.comb += address.eq(self.read_addr)
        words = []
        for k in range(-(-INSTRUCTION_BITS // _SPRAM_WIDTH)):
            word = Signal(_SPRAM_WIDTH, name=f"word{k}")
            m.submodules[f"spram{k}"] = Instance(
                "SB_SPRAM256KA",
                i_ADDRESS=address,
                i_DATAIN=self.write_data[k * _SPRAM_WIDTH:(k + 1) * _SPRAM_WIDTH],
                i_MASKWREN=0b1111, i_WREN=self.write_en,
                i_CHIPSELECT=self.write_en | self.read_en, i_CLOCK=ClockSignal(),
                i_STANDBY=0, i_SLEEP=0, i_POWEROFF=1,
                o_DATAOUT=word)
            words.append(word)
        m.d.comb += self.read_data.eq(Cat(*words))
        return m
