"""A memory read port that refuses addresses past the end of the memory."""

from amaranth.hdl import Mux, Signal

__all__ = ["bounded_read"]


def bounded_read(m, port, *, addr, en, depth):
    """Drive ``port`` (an ``amaranth.lib.memory`` read port) from ``addr`` and ``en``, reading
    only addresses below ``depth``.

    Returns ``(data, bad)``: ``data`` is the port's data, or zero after an out-of-range
    request (held, like the port's own data, until the next request); ``bad`` is high
    combinationally while an out-of-range request is presented. 1 cycle read latency.
    """
    ok = addr < depth
    last_was_bad = Signal()
    with m.If(en):
        m.d.sync += last_was_bad.eq(~ok)
    m.d.comb += [port.addr.eq(addr), port.en.eq(en & ok)]
    return Mux(last_was_bad, 0, port.data.as_value()), en & ~ok
