"""UART receiver and transmitter, 8 data bits, no parity, 1 stop bit (8N1)."""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["UARTReceiver", "UARTTransmitter", "RX_BYTE_LAYOUT", "check_divisor"]

#: A received byte, and whether its stop bit was missing (a framing error).
RX_BYTE_LAYOUT = data.StructLayout({"data": 8, "framing_error": 1})


def check_divisor(divisor):
    if not isinstance(divisor, int) or divisor < 4:
        raise ValueError(f"a UART needs at least 4 clock cycles per bit, not {divisor!r}: "
                         f"lower the baud rate or raise the clock")
    return divisor


class UARTReceiver(wiring.Component):
    """Turns the ``rx`` line into bytes, ``divisor`` clock cycles per bit.

    The line passes two synchronising flip-flops; a falling edge starts a byte, each bit is
    sampled in its middle; a start bit that is gone by its middle is ignored (a glitch).
    ``bytes`` has no ``ready``: a byte is offered for one cycle, with ``framing_error`` set
    when its stop bit read 0.

    Latency: a byte is offered half a bit time after the middle of its stop bit starts, i.e.
    about 9.5 bit times after its start bit's falling edge (plus 2 cycles of synchronisers).
    """

    def __init__(self, divisor):
        self._divisor = check_divisor(divisor)
        super().__init__({
            "rx": In(1, init=1),
            "bytes": Out(stream.Signature(RX_BYTE_LAYOUT, always_ready=True)),
        })

    @property
    def divisor(self):
        return self._divisor

    def elaborate(self, platform):
        m = Module()
        divisor = self._divisor
        line = Signal(2, init=0b11)
        m.d.sync += line.eq(Cat(self.rx, line[0]))
        level = line[1]
        timer = Signal(range(divisor))
        bit = Signal(range(10))
        shift = Signal(8)
        with m.FSM(name="uart_rx"):
            with m.State("Idle"):
                with m.If(~level):
                    m.d.sync += timer.eq(divisor // 2 - 1)
                    m.next = "Start"
            with m.State("Start"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Elif(level):
                    m.next = "Idle"                  # a glitch, not a start bit
                with m.Else():
                    m.d.sync += [timer.eq(divisor - 1), bit.eq(0)]
                    m.next = "Bits"
            with m.State("Bits"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Else():
                    m.d.sync += timer.eq(divisor - 1)
                    with m.If(bit == 8):
                        m.d.comb += [self.bytes.valid.eq(1),
                                     self.bytes.payload.framing_error.eq(~level)]
                        with m.If(level):
                            m.next = "Idle"
                        with m.Else():
                            m.next = "Break"
                    with m.Else():
                        m.d.sync += [shift.eq(Cat(shift[1:], level)), bit.eq(bit + 1)]
            with m.State("Break"):
                # After a framing error, wait for the line to go idle before the next byte.
                with m.If(level):
                    m.next = "Idle"
        m.d.comb += self.bytes.payload.data.eq(shift)
        return m


class UARTTransmitter(wiring.Component):
    """Sends the bytes of ``bytes`` on ``tx``, ``divisor`` clock cycles per bit; ``bytes``
    is ready whenever the line is idle. ``break_stop`` (for fault injection in simulation
    only; tie it to 0) sends the byte with its stop bit at 0.

    Latency: the start bit begins the cycle after a byte is taken; a byte takes 10 bit
    times.
    """

    def __init__(self, divisor):
        self._divisor = check_divisor(divisor)
        super().__init__({
            "bytes": In(stream.Signature(8)),
            "break_stop": In(1),
            "tx": Out(1, init=1),
        })

    def elaborate(self, platform):
        m = Module()
        divisor = self._divisor
        timer = Signal(range(divisor))
        frame = Signal(10, init=0x3FF)           # stop, data (LSB first), start: shifted out
        left = Signal(range(11))
        m.d.comb += [self.bytes.ready.eq(left == 0), self.tx.eq(frame[0])]
        with m.If(self.bytes.valid & self.bytes.ready):
            m.d.sync += [frame.eq(Cat(0, self.bytes.payload, ~self.break_stop)),
                         left.eq(10), timer.eq(divisor - 1)]
        with m.Elif(left != 0):
            with m.If(timer != 0):
                m.d.sync += timer.eq(timer - 1)
            with m.Else():
                m.d.sync += [frame.eq(Cat(frame[1:], 1)), left.eq(left - 1),
                             timer.eq(divisor - 1)]
        return m
