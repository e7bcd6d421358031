"""A CRC over bytes, a bit per cycle, for the serial link of a small FPGA."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import crc, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["BitSerialCRC"]


class BitSerialCRC(wiring.Component):
    """The CRC of :class:`amaranth.lib.crc.Processor` over bytes, with its members
    (``start``, ``data``, ``valid``, ``crc``, ``match_detected``), computed a bit per
    cycle in a shift register: a byte taken in cycle ``t`` is in ``crc`` from cycle
    ``t + 9``, and ``ready`` is low for the eight cycles before (a byte offered meanwhile
    is not taken).
    ``start`` restarts the CRC at once, dropping a byte still being shifted in (and takes
    a byte offered in its cycle).

    Why not ``crc.Processor``: on the iCE40 the link's CRC-32 takes 167 LUTs in its
    byte-wide form and 104 in its own bit-serial form (``data_width=1``, whose output and
    residue logic is general), against 75 here: the iCEBreaker's 15% of free cells needed
    those. Only CRCs without reflection are taken (the link's CRC-32/MPEG-2 is one), so
    that the register is the CRC, its bits in order.

    Parameters
    ----------
    parameters : crc.Parameters
        The CRC, with ``data_width`` 8.

    Latency: 9 cycles from a byte to its CRC, a byte every 9 cycles; the link's bytes come
    from a UART, ten bit times of four cycles or more apart.
    """

    def __init__(self, parameters):
        if not isinstance(parameters, crc.Parameters):
            raise TypeError(f"parameters must be a crc.Parameters, not {parameters!r}")
        algorithm = parameters.algorithm
        if parameters.data_width != 8 or algorithm.reflect_input or algorithm.reflect_output:
            raise ValueError("a BitSerialCRC takes bytes (data_width 8) of a CRC without "
                             "reflection")
        self._parameters = parameters
        super().__init__({
            "start": In(1), "data": In(8), "valid": In(1), "ready": Out(1),
            "crc": Out(algorithm.crc_width), "match_detected": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        algorithm = self._parameters.algorithm
        width = algorithm.crc_width
        register = Signal(width, init=algorithm.initial_crc)
        byte = Signal(8)                    # the bits still to go, most significant first
        left = Signal(range(9))             # how many
        shifting = left != 0
        m.d.comb += self.ready.eq(~shifting)
        with m.If(self.valid & (self.ready | self.start)):
            m.d.sync += [byte.eq(self.data), left.eq(8)]
        with m.Elif(self.start):
            m.d.sync += left.eq(0)
        with m.Elif(shifting):
            m.d.sync += [byte.eq(byte << 1), left.eq(left - 1)]
        feedback = register[-1] ^ byte[-1]
        with m.If(self.start):
            m.d.sync += register.eq(algorithm.initial_crc)
        with m.Elif(shifting):
            m.d.sync += register.eq((register << 1)[:width] ^
                                    Mux(feedback, algorithm.polynomial, 0))
        m.d.comb += [self.crc.eq(register ^ algorithm.xor_output),
                     self.match_detected.eq(register == self._parameters.residue())]
        return m
