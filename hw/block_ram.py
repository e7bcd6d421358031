"""A simple dual-port block RAM without read-during-write logic: on an iCE40, SB_RAM40_4K
blocks instantiated directly, since Yosys adds a bypass (registers and multiplexers) to
every memory whose read may meet a write, which the users of this one rule out; on an
ECP5, DP16KD blocks instantiated directly where the read goes through the block's own
output register, which Yosys does not infer."""

from amaranth.hdl import Cat, ClockSignal, Const, Instance, Module, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from .targets import is_ecp5, is_ice40

__all__ = ["BlockRAM"]

_BLOCK_DEPTH = 256          # an SB_RAM40_4K in its 256 x 16 mode
_BLOCK_WIDTH = 16
_DP16KD_DEPTH = 1024        # a DP16KD in its 1024 x 18 mode: two 9-bit bytes a word
_DP16KD_BYTE = 9


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

    With ``registered_output`` the word read goes through a second register:

    output_en : In
        In a cycle with ``output_en`` high, ``read_data`` takes the word the last read
        fetched (its value from the next cycle on).

    so a word requested in cycle ``t`` with ``output_en`` high in ``t + 1`` is on
    ``read_data`` from ``t + 2`` on. On an ECP5, for up to 1024 words without write
    granularity or with 8-bit granularity, that register is the DP16KD's own (``REGMODE_B``
    ``OUTREG``, enabled by ``OCEB``): its clock-to-out is under a nanosecond, against
    about 5.8 ns from the block's unregistered output (nextpnr's figures, speed grade 6).
    Each DP16KD holds 1024 words of two 9-bit bytes (port A writes, with a byte enable
    each on ``ADA0``/``ADA1``; port B reads). Elsewhere it is a flip-flop register.

    A read of the word being written in the same cycle returns an undefined value (the old
    one in simulation): its users never do that. On an iCE40 the memory is
    ``ceil(width / 16) x ceil(depth / 256)`` SB_RAM40_4K blocks and nothing else but the
    block select of the read data. Elsewhere it is an ``amaranth.lib.memory.Memory`` marked
    ``no_rw_check``, read through an asynchronous port into a register of its own, which
    Yosys merges into the block RAM: so it adds no read-during-write logic. (For a
    synchronous read port it would keep the old word on a read meeting a write with a
    bypass: for a 1024 x 64 memory on the ECP5, 140 flip-flops and 64 multiplexers behind
    its four DP16KD, the multiplexers on the read data's path.)

    Latency: 1 cycle from ``read_addr`` to ``read_data``; 2 with ``registered_output``.
    """

    def __init__(self, *, width, depth, granularity=None, registered_output=False):
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
        self._registered_output = bool(registered_output)
        address = max(1, (depth - 1).bit_length())
        super().__init__({
            "write_addr": In(address), "write_data": In(width),
            "write_en": In(width // granularity),
            "read_addr": In(address), "read_en": In(1), "read_data": Out(width),
            **({"output_en": In(1)} if registered_output else {}),
        })

    def _fits_dp16kd(self):
        """Whether the memory maps onto DP16KD blocks in their 1024 x 18 mode."""
        return (self._depth <= _DP16KD_DEPTH and
                self._granularity in (self._width, _DP16KD_BYTE - 1))

    def elaborate(self, platform):
        if self._registered_output and is_ecp5(platform) and self._fits_dp16kd():
            return self._elaborate_dp16kd()
        m = Module()
        if self._registered_output:
            # The word read, then a register of its own.
            m.submodules.ram = ram = BlockRAM(width=self._width, depth=self._depth,
                                              granularity=self._granularity)
            m.d.comb += [ram.write_addr.eq(self.write_addr), ram.write_data.eq(self.write_data),
                         ram.write_en.eq(self.write_en),
                         ram.read_addr.eq(self.read_addr), ram.read_en.eq(self.read_en)]
            with m.If(self.output_en):
                m.d.sync += self.read_data.eq(ram.read_data)
            return m
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

    def _elaborate_dp16kd(self):
        """DP16KD blocks side by side, each two 9-bit bytes of the word: with 8-bit
        granularity a byte of the word in each (its ninth bit unused), else 18 bits of the
        word in each."""
        m = Module()
        byte_bits = _DP16KD_BYTE - 1 if self._granularity != self._width else _DP16KD_BYTE
        bytes_per_word = -(-self._width // byte_bits)
        data = Cat(self.write_data, Const(0, bytes_per_word * byte_bits - self._width))
        if self._granularity != self._width:
            byte_enables = self.write_en
        else:
            byte_enables = self.write_en.replicate(bytes_per_word)
        any_enable = self.write_en.any()
        # In the 1024 x 18 mode the address is on bits 4-13; port A's bits 0 and 1 are its
        # byte enables.
        write_addr = Cat(Const(0, 4), self.write_addr, Const(0, 10 - len(self.write_addr)))
        read_addr = Cat(Const(0, 4), self.read_addr, Const(0, 10 - len(self.read_addr)))
        pieces = []
        for block in range(-(-bytes_per_word // 2)):
            ports = {}
            word_in = Signal(2 * _DP16KD_BYTE, name=f"block{block}_in")
            word_out = Signal(2 * _DP16KD_BYTE, name=f"block{block}_out")
            enables = Signal(2, name=f"block{block}_byte_en")
            for half in range(2):
                index = 2 * block + half
                if index < bytes_per_word:
                    m.d.comb += [
                        word_in[half * _DP16KD_BYTE:half * _DP16KD_BYTE + byte_bits].eq(
                            data[index * byte_bits:(index + 1) * byte_bits]),
                        enables[half].eq(byte_enables[index])]
                    pieces.append(word_out[half * _DP16KD_BYTE:
                                           half * _DP16KD_BYTE + byte_bits])
            for bit in range(2 * _DP16KD_BYTE):
                ports[f"i_DIA{bit}"] = word_in[bit]
                ports[f"i_DIB{bit}"] = Const(0, 1)
                ports[f"o_DOB{bit}"] = word_out[bit]
            for bit in range(14):
                ports[f"i_ADA{bit}"] = enables[bit] if bit < 2 else write_addr[bit]
                ports[f"i_ADB{bit}"] = read_addr[bit]
            for pin in ("CSA0", "CSA1", "CSA2", "CSB0", "CSB1", "CSB2", "RSTA", "RSTB", "WEB"):
                ports[f"i_{pin}"] = Const(0, 1)
            m.submodules[f"block{block}"] = Instance(
                "DP16KD",
                p_DATA_WIDTH_A=18, p_DATA_WIDTH_B=18, p_REGMODE_A="NOREG",
                p_REGMODE_B="OUTREG", p_RESETMODE="SYNC", p_WRITEMODE_A="NORMAL",
                p_WRITEMODE_B="NORMAL", p_CSDECODE_A="0b000", p_CSDECODE_B="0b000",
                p_GSR="DISABLED",
                i_CLKA=ClockSignal(), i_CEA=Const(1, 1), i_OCEA=Const(1, 1), i_WEA=any_enable,
                i_CLKB=ClockSignal(), i_CEB=self.read_en, i_OCEB=self.output_en,
                **ports)
        m.d.comb += self.read_data.eq(Cat(*pieces)[:self._width])
        return m
