"""A simple dual-port block RAM without read-during-write logic: on an iCE40, SB_RAM40_4K
blocks instantiated directly, since Yosys adds a bypass (registers and multiplexers) to
every memory whose read may meet a write, which the users of this one rule out."""

from amaranth.hdl import Cat, ClockSignal, Instance, Module, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from .targets import is_ice40

__all__ = ["BlockRAM"]

_BLOCK_DEPTH = 256          # an SB_RAM40_4K in its 256 x 16 mode
_BLOCK_WIDTH = 16


class BlockRAM(wiring.Component):
    """``depth`` words of ``width`` bits, one write port and one read port.

    Members
    -------
    write_addr, write_data, write_en : In
        Stores ``write_data`` at ``write_addr`` at the end of the cycle; with a
        ``granularity``, ``write_en`` has a bit per ``granularity`` bits of the word and
        stores only those parts.
    read_addr, read_en : In
        Read request; ``read_data`` holds its value while ``read_en`` is low.
    read_data : Out(width)
        The word requested in the last cycle with ``read_en`` high.

    A read of the word being written in the same cycle returns an undefined value (the old
    one in simulation): its users never do that. On an iCE40 the memory is
    ``ceil(width / 16) x ceil(depth / 256)`` SB_RAM40_4K blocks and nothing else but the
    block select of the read data. Elsewhere it is an ``amaranth.lib.memory.Memory`` marked
    ``no_rw_check``, read through an asynchronous port into a register of its own, which
    Yosys merges into the block RAM: so it adds no read-during-write logic. (For a
    synchronous read port it would keep the old word on a read meeting a write with a
    bypass: for a 1024 x 64 memory on the ECP5, 140 flip-flops and 64 multiplexers behind
    its four DP16KD, the multiplexers on the read data's path.)

    Latency: 1 cycle from ``read_addr`` to ``read_data``.
    """

    def __init__(self, *, width, depth, granularity=None):
        for name, value in (("width", width), ("depth", depth)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if granularity is None:
            granularity = width
        if (isinstance(granularity, bool) or not isinstance(granularity, int) or
                granularity < 1 or width % granularity):
            raise ValueError(f"granularity must be a positive divisor of the width {width}, "
                             f"not {granularity!r}")
        self._width, self._depth, self._granularity = width, depth, granularity
        address = max(1, (depth - 1).bit_length())
        super().__init__({
            "write_addr": In(address), "write_data": In(width),
            "write_en": In(width // granularity),
            "read_addr": In(address), "read_en": In(1), "read_data": Out(width),
        })

    def elaborate(self, platform):
        m = Module()
        if not is_ice40(platform):
            m.submodules.words = words = memory.Memory(
                shape=self._width, depth=self._depth, init=[], attrs={"no_rw_check": 1})
            granularity = None if self._granularity == self._width else self._granularity
            write = words.write_port(granularity=granularity)
            read = words.read_port(domain="comb")
            m.d.comb += [write.addr.eq(self.write_addr), write.data.eq(self.write_data),
                         write.en.eq(self.write_en), read.addr.eq(self.read_addr)]
            held = Signal(self._width, reset_less=True)     # as the block RAM's own
            with m.If(self.read_en):
                m.d.sync += held.eq(read.data)
            m.d.comb += self.read_data.eq(held)
            return m

        banks = -(-self._depth // _BLOCK_DEPTH)
        slices = -(-self._width // _BLOCK_WIDTH)
        # A bit of write enable per data bit; the blocks' MASK is its inverse.
        bit_enables = Cat(*(en.replicate(self._granularity) for en in self.write_en))
        any_enable = self.write_en.any()
        read_bank = Signal(range(banks))          # the bank the last read came from
        with m.If(self.read_en):
            m.d.sync += read_bank.eq(self.read_addr[8:] if banks > 1 else 0)
        bank_words = []
        for bank in range(banks):
            selected = (lambda addr: addr[8:] == bank) if banks > 1 else (lambda addr: 1)
            pieces = []
            for piece in range(slices):
                data = Signal(_BLOCK_WIDTH, name=f"bank{bank}_slice{piece}")
                m.submodules[f"bank{bank}_slice{piece}"] = Instance(
                    "SB_RAM40_4K", p_READ_MODE=0, p_WRITE_MODE=0,
                    i_RCLK=ClockSignal(), i_RCLKE=1,
                    i_RE=self.read_en & selected(self.read_addr),
                    i_RADDR=Cat(self.read_addr[:8], 0, 0, 0),
                    i_WCLK=ClockSignal(), i_WCLKE=1,
                    i_WE=any_enable & selected(self.write_addr),
                    i_WADDR=Cat(self.write_addr[:8], 0, 0, 0),
                    i_MASK=~bit_enables[piece * _BLOCK_WIDTH:(piece + 1) * _BLOCK_WIDTH]
                    if self._granularity != self._width else 0,
                    i_WDATA=self.write_data[piece * _BLOCK_WIDTH:(piece + 1) * _BLOCK_WIDTH],
                    o_RDATA=data)
                pieces.append(data)
            bank_words.append(Cat(*pieces)[:self._width])
        with m.Switch(read_bank):
            for bank, word in enumerate(bank_words):
                with m.Case(bank):
                    m.d.comb += self.read_data.eq(word)
        return m
