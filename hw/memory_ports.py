"""A memory read port that refuses addresses past the end of the memory."""

from amaranth.hdl import Mux, Signal, Value

__all__ = ["bounded_read"]


def bounded_read(m, port_addr, port_en, port_data, *, addr, en, depth, latency=1):
    """Drive a memory's read port (``port_addr``, ``port_en``, ``port_data``: those of an
    ``amaranth.lib.memory`` read port or of a :class:`~tpuer.hw.block_ram.BlockRAM`) from
    ``addr`` and ``en``, reading only addresses below ``depth``.

    Returns ``(data, bad)``: ``data`` is the port's data, or zero after an out-of-range
    request (held, like the port's own data, until the next request); ``bad`` is high
    combinationally while an out-of-range request is presented.

    Latency: ``latency`` cycles from a request to its data. With 2, the port's data goes
    straight into a register (a request's data the register's enable, an out-of-range
    request its synchronous reset), so that no logic follows the memory's clock-to-out.
    """
    if latency not in (1, 2):
        raise ValueError(f"a read port's latency is 1 or 2 cycles, not {latency!r}")
    ok = addr < depth
    last_was_bad = Signal()
    with m.If(en):
        m.d.sync += last_was_bad.eq(~ok)
    m.d.comb += [port_addr.eq(addr), port_en.eq(en & ok)]
    if latency == 1:
        return Mux(last_was_bad, 0, Value.cast(port_data)), en & ~ok
    answered = Signal()                 # a request was made in the cycle before
    held = Signal(len(Value.cast(port_data)), reset_less=True)
    m.d.sync += answered.eq(en)
    with m.If(answered):
        m.d.sync += held.eq(port_data)
        with m.If(last_was_bad):
            m.d.sync += held.eq(0)
    return held, en & ~ok
