"""The instruction memory: one write port for the host, one read port for the fetch stage;
on an iCE40 UltraPlus it is the device's single-ported SPRAM, which no other block uses."""

from amaranth.hdl import Cat, ClockSignal, Instance, Module, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from ..isa import INSTRUCTION_BITS
from .targets import is_ice40_ultraplus

__all__ = ["ProgramMemory", "uses_spram"]

_SPRAM_DEPTH = 16384        # words of an SB_SPRAM256KA
_SPRAM_WIDTH = 16           # bits of a word


def uses_spram(platform, depth):
    """Whether the instruction memory goes into SB_SPRAM256KA blocks: on an iCE40
    UltraPlus (the one iCE40 with SPRAM), for up to 16384 instructions."""
    return is_ice40_ultraplus(platform) and depth <= _SPRAM_DEPTH


class ProgramMemory(wiring.Component):
    """``depth`` instructions of :data:`~tpuer.isa.INSTRUCTION_BITS` bits.

    Members
    -------
    write_addr, write_data, write_en : In
        Stores ``write_data`` at ``write_addr`` at the end of the cycle.
    read_addr, read_en : In
        Read request; ``read_data`` holds its value while ``read_en`` is low.
    read_data : Out(INSTRUCTION_BITS)
        The instruction requested in the last cycle with ``read_en`` high.

    Reads and writes must not fall in the same cycle: on an iCE40 UltraPlus the memory is
    four SB_SPRAM256KA blocks (16 bits each) sharing one address, the write has the port,
    and such a read returns garbage. (The sequencer reads only while it runs, and program
    writes are refused then.) Elsewhere it is a plain two-port memory (block RAM).

    Latency: 1 cycle from ``read_addr`` to ``read_data``.
    """

    def __init__(self, depth):
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 2:
            raise ValueError(f"depth must be an integer of at least 2, not {depth!r}")
        self._depth = depth
        address = max(1, (depth - 1).bit_length())
        super().__init__({
            "write_addr": In(address), "write_data": In(INSTRUCTION_BITS), "write_en": In(1),
            "read_addr": In(address), "read_en": In(1), "read_data": Out(INSTRUCTION_BITS),
        })

    @property
    def depth(self):
        return self._depth

    def elaborate(self, platform):
        m = Module()
        if not uses_spram(platform, self._depth):
            m.submodules.storage = storage = memory.Memory(
                shape=INSTRUCTION_BITS, depth=self._depth, init=[])
            write, read = storage.write_port(), storage.read_port()
            m.d.comb += [write.addr.eq(self.write_addr), write.data.eq(self.write_data),
                         write.en.eq(self.write_en), read.addr.eq(self.read_addr),
                         read.en.eq(self.read_en), self.read_data.eq(read.data)]
            return m

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
