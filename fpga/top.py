"""A board's top level: the PLL, the TPU behind its UART on the board's serial pins, and a
heartbeat LED."""

from amaranth.build import ResourceError
from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.lib import io

from ..hw.serial_tpu import serial_tpu
from .pll import add_pll_domain, ecp5_pll, ice40_pll

__all__ = ["BoardTop", "board_pll", "add_board_clock"]


def board_pll(board, platform):
    """The PLL setting that makes ``board.clock_mhz`` from the oscillator of ``platform``;
    :class:`~tpuer.fpga.pll.PLLError` when none does."""
    oscillator = platform.lookup(platform.default_clk).clock.frequency / 1e6
    return (ice40_pll if board.family == "ice40" else ecp5_pll)(oscillator, board.clock_mhz)


def add_board_clock(m, board, platform):
    """Make the ``sync`` domain of ``m`` at ``board.clock_mhz`` from the board's oscillator
    through the PLL (in reset until it locks; on a clock network with
    ``board.global_reset``); returns the PLL setting."""
    setting = board_pll(board, platform)
    pin = platform.request(platform.default_clk, dir="-")
    if board.family == "ice40":
        add_pll_domain(m, setting, pin.io)
    else:
        m.submodules.clock_in = clock_in = io.Buffer("i", pin)
        add_pll_domain(m, setting, clock_in.i, global_reset=board.global_reset)
    # No constraint on the PLL's output: nextpnr derives it from the oscillator's (the
    # board file constrains that pin) and the PLL's dividers.
    return setting


class BoardTop(Elaboratable):
    """The bitstream's design for ``board`` with TPU configuration ``cfg``: the board's
    oscillator through the PLL to ``board.clock_mhz``, :class:`~tpuer.hw.serial_tpu.SerialTPU`
    on UART 0 at ``board.baud``, and LED 0 blinking about once a second (the clock runs)."""

    def __init__(self, board, cfg):
        self.board = board
        self.cfg = cfg

    def elaborate(self, platform):
        m = Module()
        board = self.board
        setting = add_board_clock(m, board, platform)

        uart = platform.request("uart", 0, dir={io_.name: "-" for io_ in
                                                platform.lookup("uart", 0).ios})
        m.submodules.uart_rx = rx = io.Buffer("i", uart.rx)
        m.submodules.uart_tx = tx = io.Buffer("o", uart.tx)
        m.submodules.tpu = tpu = serial_tpu(self.cfg, divisor=board.divisor)
        m.d.comb += [tpu.rx.eq(rx.i), tx.o.eq(tpu.tx)]

        try:
            led = platform.request("led", 0, dir="-")
        except ResourceError:
            led = None
        if led is not None:
            m.submodules.led = led_buffer = io.Buffer("o", led)
            counter = Signal(range(int(setting.output_mhz * 1e6)))
            m.d.sync += counter.eq(counter + 1)
            m.d.comb += led_buffer.o.eq(counter[-1])
        return m
