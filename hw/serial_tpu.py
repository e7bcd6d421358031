"""The TPU behind a UART: the board's top-level logic, two pins."""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .serial_link import SerialLink, serial_link
from .stream_buffer import HalfRateStreamBuffer, StreamBuffer
from .tpu import TPU
from .uart import UARTReceiver, UARTTransmitter, check_divisor

__all__ = ["SerialTPU", "RegisteredSerialTPU", "serial_tpu"]


class SerialTPU(wiring.Component):
    """:class:`~tpuer.hw.tpu.TPU` behind :class:`~tpuer.hw.serial_link.SerialLink` and a
    UART of ``divisor`` clock cycles per bit: ``rx`` and ``tx`` are the board's serial
    pins. The very same logic goes into a bitstream and into the simulated board.

    This form, for a small FPGA at a slow clock (``cfg.control_registers`` 0), has one
    register stage, for the replies, at half rate (:class:`HalfRateStreamBuffer`): its
    ready from a register too, so that the link's state does not reach through the host
    interface into the DMA engine, and a reply word every other cycle is still far faster
    than the UART. :func:`serial_tpu` picks the form.
    """

    def __init__(self, cfg, *, divisor):
        self._cfg = cfg
        self._divisor = check_divisor(divisor)
        super().__init__({"rx": In(1, init=1), "tx": Out(1, init=1)})

    @property
    def divisor(self):
        return self._divisor

    def elaborate(self, platform):
        m = Module()
        m.submodules.receiver = receiver = UARTReceiver(self._divisor)
        m.submodules.transmitter = transmitter = UARTTransmitter(self._divisor)
        m.submodules.link = link = serial_link(
            self._cfg, byte_timeout=SerialLink.byte_timeout_for(self._divisor))
        m.submodules.tpu = tpu = TPU(self._cfg)
        self._received_bytes(m, receiver, link)
        wiring.connect(m, link.tx_bytes, transmitter.bytes)
        m.submodules.rsp_buffer = rsp_buffer = self._reply_buffer_class(32)
        wiring.connect(m, tpu.rsp, rsp_buffer.i)
        wiring.connect(m, rsp_buffer.o, link.rsp)
        self._commands(m, link, tpu)
        m.d.comb += [receiver.rx.eq(self.rx), self.tx.eq(transmitter.tx),
                     transmitter.break_stop.eq(0)]
        return m

    _reply_buffer_class = HalfRateStreamBuffer

    def _received_bytes(self, m, receiver, link):
        """The received bytes into the link."""
        wiring.connect(m, receiver.bytes, link.rx_bytes)

    def _commands(self, m, link, tpu):
        """The link's command words into the TPU."""
        wiring.connect(m, link.cmd, tpu.cmd)


class RegisteredSerialTPU(SerialTPU):
    """A :class:`SerialTPU` for fast clocks (``cfg.control_registers`` 1): the received
    bytes go into the link from a register, so that the receiver's bit timing does not
    reach the link's frame state and CRC in the same cycle; the replies pass a
    :class:`StreamBuffer` with a skid register (a word per cycle); and the commands one
    too, so that the link's queue memory and the host interface's decoding do not make one
    long path."""

    _reply_buffer_class = StreamBuffer

    def _received_bytes(self, m, receiver, link):
        m.d.sync += [link.rx_bytes.valid.eq(receiver.bytes.valid),
                     link.rx_bytes.payload.eq(receiver.bytes.payload)]

    def _commands(self, m, link, tpu):
        m.submodules.cmd_buffer = cmd_buffer = StreamBuffer(32)
        wiring.connect(m, link.cmd, cmd_buffer.i)
        wiring.connect(m, cmd_buffer.o, tpu.cmd)


def serial_tpu(cfg, *, divisor):
    """The board's top-level logic ``cfg`` asks for: :class:`RegisteredSerialTPU` with
    ``cfg.control_registers``, else :class:`SerialTPU`."""
    return (RegisteredSerialTPU if cfg.control_registers else SerialTPU)(cfg, divisor=divisor)
