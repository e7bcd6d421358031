"""A memory read port that refuses addresses past the end of the memory."""

from amaranth.hdl import Mux, Signal, Value

__all__ = ["bounded_read"]


def bounded_read(m, port_addr, port_en, port_data, *, addr, en, depth):
    """Drive a memory's read port (``port_addr``, ``port_en``, ``port_data``: those of an
    ``amaranth.lib.memory`` read port or of a :class:`~tpuer.hw.block_ram.BlockRAM`) from
    ``addr`` and ``en``, reading only addresses below ``depth``.

    Returns ``(data, bad)``: ``data`` is the port's data, or zero after an out-of-range
    request (held, like the port's own data, until the next request); ``bad`` is high
    combinationally while an out-of-range request is presented. 1 cycle read latency.
    """
    ok = addr < depth
    last_was_bad = Signal()
    with m.If(en):
        m.d.sync += last_was_bad.eq(~ok)
    m.d.comb += [port_addr.eq(addr), port_en.eq(en & ok)]
    return Mux(last_was_bad, 0, Value.cast(port_data)), en & ~ok
