"""One block of the TPU alone on a board, between registers, for the Fmax it reaches."""

from amaranth.build import ResourceError
from amaranth.hdl import Cat, Elaboratable, Module, Signal, Value
from amaranth.lib import io
from amaranth.lib.wiring import Flow

from ..hw.export import build_block
from .top import add_board_clock

__all__ = ["BlockBench", "BlockBenchTop", "FOLD_FAN_IN"]

#: Bits XORed into each register of the output fold.
FOLD_FAN_IN = 4


class BlockBench(Elaboratable):
    """Block ``block`` (a name of :func:`tpuer.hw.export.blocks`) of configuration ``cfg``
    between registers, in the ``sync`` domain.

    Every input bit of the block comes from a flip-flop of :attr:`stimulus`, a shift
    register that a 32-bit LFSR feeds a new pseudo-random bit each cycle; every output bit
    goes into a flip-flop of :attr:`observed`, and those are folded by a tree of
    registered XORs of :data:`FOLD_FAN_IN` bits into :attr:`parity`, so that no logic of
    the block can be optimised away and every path of the block starts and ends at a
    register. ``parity`` is the XOR of all the block's output bits :attr:`latency` cycles
    before; the fold adds no path longer than one LUT.
    """

    def __init__(self, cfg, block):
        self.cfg = cfg
        self.block = build_block(block, cfg)
        self.inputs, self.outputs = [], []
        for _path, member, value in self.block.signature.flatten(self.block):
            value = Value.cast(value)
            if not isinstance(value, Signal):
                continue            # a constant member, such as an always-ready stream's
            (self.inputs if member.flow == Flow.In else self.outputs).append(value)
        self.stimulus = Signal(max(1, sum(len(value) for value in self.inputs)))
        self.observed = Signal(max(1, sum(len(value) for value in self.outputs)))
        self.parity = Signal()
        self.latency = 1        # into ``observed``; then a cycle a level of the fold
        width = len(self.observed)
        while width > 1:
            width = -(-width // FOLD_FAN_IN)
            self.latency += 1

    def elaborate(self, platform):
        m = Module()
        m.submodules.block = self.block
        lfsr = Signal(32, init=1)
        # x^32 + x^22 + x^2 + x + 1, a maximal-length Fibonacci LFSR.
        m.d.sync += lfsr.eq(Cat(lfsr[31] ^ lfsr[21] ^ lfsr[1] ^ lfsr[0], lfsr[:31]))
        m.d.sync += self.stimulus.eq(Cat(lfsr[31], self.stimulus[:-1]))
        offset = 0
        for value in self.inputs:
            m.d.comb += value.eq(self.stimulus[offset:offset + len(value)])
            offset += len(value)

        m.d.sync += self.observed.eq(Cat(*self.outputs))
        level, depth = self.observed, 0
        while len(level) > 1:
            depth += 1
            groups = [level[k:k + FOLD_FAN_IN] for k in range(0, len(level), FOLD_FAN_IN)]
            folded = Signal(len(groups), name=f"fold{depth}")
            m.d.sync += folded.eq(Cat(*(group.xor() for group in groups)))
            level = folded
        m.d.comb += self.parity.eq(level)
        return m


class BlockBenchTop(Elaboratable):
    """:class:`BlockBench` of ``block`` and ``cfg`` on ``board``, clocked through the
    board's PLL at ``board.clock_mhz``, its parity on LED 0 (on the UART's transmit pin of
    a board without LEDs). The bitstream computes nothing useful: it is built for the
    report of the block's resources and Fmax."""

    def __init__(self, board, cfg, block):
        self.board = board
        self.cfg = cfg
        self.block = block

    def elaborate(self, platform):
        m = Module()
        add_board_clock(m, self.board, platform)
        m.submodules.bench = bench = BlockBench(self.cfg, self.block)
        try:
            pin = platform.request("led", 0, dir="-")
        except ResourceError:
            pin = platform.request("uart", 0, dir={io_.name: "-" for io_ in
                                                   platform.lookup("uart", 0).ios}).tx
        m.submodules.observer = observer = io.Buffer("o", pin)
        m.d.comb += observer.o.eq(bench.parity)
        return m
