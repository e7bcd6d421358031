"""Delay lines: a value and its copies one, two, ... cycles later."""

from amaranth.hdl import Signal, Value, ValueCastable

from .arith import any_of

__all__ = ["delayed", "delayed_with_payload", "pipeline_busy"]


def delayed(m, value, cycles, *, name, enable=None, reset_less=False):
    """``value`` and its copies 1 ... ``cycles`` cycles later: a list of ``cycles + 1``
    values, ``[value, value a cycle ago, ...]``, each copy a register of the one before,
    named ``{name}_d1``, ``{name}_d2``...

    With ``enable``, the registers take their inputs only in cycles where it is high, so
    the line stalls as a whole. A valid flag keeps its reset (a line starts empty); a
    payload that counts only beside such a flag is ``reset_less``, which spares the
    reset's fan-out.

    Latency: copy ``k`` is ``value`` of ``k`` cycles (enabled cycles) before.
    """
    shape = value.shape() if isinstance(value, ValueCastable) else Value.cast(value).shape()
    line = [value]
    for k in range(1, cycles + 1):
        register = Signal(shape, name=f"{name}_d{k}", reset_less=reset_less)
        if enable is None:
            m.d.sync += register.eq(line[-1])
        else:
            with m.If(enable):
                m.d.sync += register.eq(line[-1])
        line.append(register)
    return line


def delayed_with_payload(m, valid, payload, cycles, *, name):
    """A valid flag and its payload delayed together: ``[(valid, payload), (valid a cycle
    ago, payload a cycle ago), ...]``, ``cycles + 1`` pairs (see :func:`delayed`; the
    payload's registers are ``reset_less`` and named ``{name}_payload_d1``...)."""
    return list(zip(delayed(m, valid, cycles, name=name),
                    delayed(m, payload, cycles, name=f"{name}_payload", reset_less=True)))


def pipeline_busy(m, busy, entering, stages, *, ahead):
    """Drives ``busy``: some flag of ``stages`` (a delay line of ``entering``, as
    :func:`delayed` makes, its first copy first) is set. With ``ahead`` it is a register
    set a cycle ahead, of the same value (a flag entering, or one moving on to a later
    stage), so that a reader's logic starts from a register (for fast clocks); else the OR
    of the stages."""
    if ahead:
        m.d.sync += busy.eq(any_of([entering, *stages[:-1]]))
    else:
        m.d.comb += busy.eq(any_of(stages))
