"""The TPU behind a UART: the board's top-level logic, two pins."""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .serial_link import SerialLink, serial_link
from .stream_buffer import StreamBuffer
from .tpu import TPU
from .uart import UARTReceiver, UARTTransmitter, check_divisor

__all__ = ["SerialTPU"]


class SerialTPU(wiring.Component):
    """:class:`~tpuer.hw.tpu.TPU` behind :class:`~tpuer.hw.serial_link.SerialLink` and a
    UART of ``divisor`` clock cycles per bit: ``rx`` and ``tx`` are the board's serial
    pins. The very same logic goes into a bitstream and into the simulated board. The
    register stages between the UART, the link and the TPU are fewer and smaller without
    ``cfg.control_registers`` (a small FPGA at a slow clock)."""

    def __init__(self, cfg, *, divisor):
        self._cfg = cfg
        self._divisor = check_divisor(divisor)
        super().__init__({"rx": In(1, init=1), "tx": Out(1, init=1)})

    @property
    def divisor(self):
        return self._divisor

    def elaborate(self, platform):
        m = Module()
        fast = bool(self._cfg.control_registers)
        m.submodules.receiver = receiver = UARTReceiver(self._divisor)
        m.submodules.transmitter = transmitter = UARTTransmitter(self._divisor)
        m.submodules.link = link = serial_link(
            self._cfg, byte_timeout=SerialLink.byte_timeout_for(self._divisor))
        m.submodules.tpu = tpu = TPU(self._cfg)
        if fast:
            # The received bytes go into the link from a register, so that the receiver's
            # bit timing does not reach the link's frame state and CRC in the same cycle.
            m.d.sync += [link.rx_bytes.valid.eq(receiver.bytes.valid),
                         link.rx_bytes.payload.eq(receiver.bytes.payload)]
        else:
            wiring.connect(m, receiver.bytes, link.rx_bytes)
        wiring.connect(m, link.tx_bytes, transmitter.bytes)
        # A register stage for the replies, its ready from a register too, so that the
        # link's state does not reach through the host interface into the DMA engine
        # (without ``fast``, without a skid register: a reply word every other cycle is
        # still far faster than the UART); and, with ``fast``, one for the commands, so
        # that the link's queue memory and the host interface's decoding do not make one
        # long path.
        m.submodules.rsp_buffer = rsp_buffer = StreamBuffer(
            32, mode="skid" if fast else "half_rate")
        wiring.connect(m, tpu.rsp, rsp_buffer.i)
        wiring.connect(m, rsp_buffer.o, link.rsp)
        if fast:
            m.submodules.cmd_buffer = cmd_buffer = StreamBuffer(32)
            wiring.connect(m, link.cmd, cmd_buffer.i)
            wiring.connect(m, cmd_buffer.o, tpu.cmd)
        else:
            wiring.connect(m, link.cmd, tpu.cmd)
        m.d.comb += [receiver.rx.eq(self.rx), self.tx.eq(transmitter.tx),
                     transmitter.break_stop.eq(0)]
        return m
