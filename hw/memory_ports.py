"""A memory read port that refuses addresses past the end of the memory."""

from amaranth.hdl import Mux, Signal, Value

__all__ = ["bounded_read"]


def bounded_read(m, port_addr, port_en, port_data, *, addr, en, depth, latency=1,
                 port_output_en=None):
    """Drive a memory's read port (``port_addr``, ``port_en``, ``port_data``: those of an
    ``amaranth.lib.memory`` read port or of a :class:`~tpuer.hw.block_ram.BlockRAM`) from
    ``addr`` and ``en``, reading only addresses below ``depth``.

    Returns ``(data, bad)``: ``data`` is the port's data, or zero after an out-of-range
    request (held, like the port's own data, until the next request); ``bad`` is high
    combinationally while an out-of-range request is presented.

    Latency: ``latency`` cycles from a request to its data. With 2, the port's data goes
    straight into a register (a request's data the register's enable, an out-of-range
    request its synchronous reset), so that no logic follows the memory's clock-to-out.
    With ``port_output_en`` (a :class:`~tpuer.hw.block_ram.BlockRAM` with
    ``registered_output``; latency 2 only) that register is the memory's own: it is enabled
    the cycle after each request, and the data after an out-of-range request is zeroed as
    it leaves it.
    """
    if latency not in (1, 2):
        raise ValueError(f"a read port's latency is 1 or 2 cycles, not {latency!r}")
    if port_output_en is not None and latency != 2:
        raise ValueError("a port with its own output register reads in 2 cycles")
    ok = addr < depth
    last_was_bad = Signal()
    with m.If(en):
        m.d.sync += last_was_bad.eq(~ok)
    m.d.comb += [port_addr.eq(addr), port_en.eq(en & ok)]
    if latency == 1:
        return Mux(last_was_bad, 0, Value.cast(port_data)), en & ~ok
    answered = Signal()                 # a request was made in the cycle before
    m.d.sync += answered.eq(en)
    if port_output_en is not None:
        # Not the block's own reset: on a DP16KD it may clear the read under way too.
        refused = Signal()              # the data on the port is an out-of-range request's
        m.d.comb += port_output_en.eq(answered)
        with m.If(answered):
            m.d.sync += refused.eq(last_was_bad)
        return Mux(refused, 0, Value.cast(port_data)), en & ~ok
    held = Signal(len(Value.cast(port_data)), reset_less=True)
    with m.If(answered):
        m.d.sync += held.eq(port_data)
        with m.If(last_was_bad):
            m.d.sync += held.eq(0)
    return held, en & ~ok
