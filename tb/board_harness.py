"""The simulated board's surroundings: a host-side UART (the same RTL as the board's) with
byte queues, wired to the board's serial pins, so that a testbench moves whole bytes and
never watches the line bit by bit."""

from amaranth.hdl import Module
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..hw.serial_tpu import serial_tpu
from ..hw.uart import UARTReceiver, UARTTransmitter

__all__ = ["BoardHarness", "HOST_BYTE_LAYOUT"]

#: A byte the host sends, and whether to send it with a broken stop bit (a framing error).
HOST_BYTE_LAYOUT = data.StructLayout({"data": 8, "break_stop": 1})


class BoardHarness(wiring.Component):
    """:class:`~tpuer.hw.serial_tpu.SerialTPU` with the host's UART beside it.

    ``host_tx`` queues bytes for the board (64 deep); ``host_rx`` holds the bytes the board
    sent (64 deep; a byte that finds the queue full is counted in ``host_rx_lost``, which a
    testbench must keep at 0). ``line_break`` holds the board's ``rx`` line low (a host
    that disappears mid-byte).
    """

    def __init__(self, cfg, *, divisor):
        self._cfg = cfg
        self._divisor = divisor
        super().__init__({
            "host_tx": In(stream.Signature(HOST_BYTE_LAYOUT)),
            "host_rx": Out(stream.Signature(8)),
            "host_rx_lost": Out(16),
            "line_break": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.board = board = serial_tpu(self._cfg, divisor=self._divisor)
        m.submodules.host_uart_tx = tx = UARTTransmitter(self._divisor)
        m.submodules.host_uart_rx = rx = UARTReceiver(self._divisor)
        m.submodules.to_board = to_board = fifo.SyncFIFO(width=HOST_BYTE_LAYOUT.size, depth=64)
        m.submodules.from_board = from_board = fifo.SyncFIFO(width=8, depth=64)
        queued = data.View(HOST_BYTE_LAYOUT, to_board.r_data)
        m.d.comb += [
            to_board.w_data.eq(self.host_tx.payload),
            to_board.w_en.eq(self.host_tx.valid),
            self.host_tx.ready.eq(to_board.w_rdy),
            tx.bytes.payload.eq(queued.data),
            tx.break_stop.eq(queued.break_stop),
            tx.bytes.valid.eq(to_board.r_rdy),
            to_board.r_en.eq(tx.bytes.ready),
            board.rx.eq(tx.tx & ~self.line_break),
            rx.rx.eq(board.tx),
            from_board.w_data.eq(rx.bytes.payload.data),
            from_board.w_en.eq(rx.bytes.valid),
            self.host_rx.payload.eq(from_board.r_data),
            self.host_rx.valid.eq(from_board.r_rdy),
            from_board.r_en.eq(self.host_rx.ready),
        ]
        with m.If(rx.bytes.valid & ~from_board.w_rdy):
            m.d.sync += self.host_rx_lost.eq(self.host_rx_lost + 1)
        return m
