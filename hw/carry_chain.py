"""An adder that passes one of its operands through instead when told, at the cost of the
adder alone."""

from amaranth.hdl import Const, Instance, Mux, Signal, Value

from .targets import is_ice40

__all__ = ["add_or_pass"]


def _lut_init(function):
    """The LUT_INIT of an SB_LUT4 computing ``function(i0, i1, i2, i3)``."""
    return sum(function(k & 1, k >> 1 & 1, k >> 2 & 1, k >> 3 & 1) << k for k in range(16))


#: ``add ? a ^ b ^ carry : b`` with I0 = add, I1 = a, I2 = b, I3 = carry.
_ADD_OR_PASS_LUT = _lut_init(lambda add, a, b, carry: (a ^ b ^ carry) if add else b)


def add_or_pass(m, platform, a, b, add, *, name):
    """Returns a signal that is ``a + b`` (modulo ``2**width``) while ``add`` is high and
    ``b`` while it is low; ``a`` and ``b`` have one width. Combinational.

    On an iCE40 every bit is one logic cell: its LUT computes ``add ? a ^ b ^ carry : b``
    beside the SB_CARRY that makes the carry of ``a + b`` (the LUT has a spare input, which
    Yosys does not use for the choice; it spends a LUT per bit on it). Elsewhere it is a
    multiplexer after an adder, which the tools fold as they see fit.
    """
    a, b = Value.cast(a), Value.cast(b)
    if len(a) != len(b):
        raise ValueError(f"add_or_pass takes operands of one width, not {len(a)} and {len(b)}")
    width = len(a)
    result = Signal(width, name=name)
    if not is_ice40(platform):
        m.d.comb += result.eq(Mux(add, a + b, b))
        return result
    carries = Signal(width + 1, name=f"{name}_carry")
    m.d.comb += carries[0].eq(0)
    for k in range(width):
        m.submodules[f"{name}_lut{k}"] = Instance(
            "SB_LUT4", p_LUT_INIT=Const(_ADD_OR_PASS_LUT, 16),
            i_I0=add, i_I1=a[k], i_I2=b[k], i_I3=carries[k], o_O=result[k])
        if k + 1 < width:
            m.submodules[f"{name}_carry{k}"] = Instance(
                "SB_CARRY", i_I0=a[k], i_I1=b[k], i_CI=carries[k], o_CO=carries[k + 1])
    return result
