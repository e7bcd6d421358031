"""A multiplier with registered operands and a registered product (ECP5: MULT18X18D)."""

from amaranth.hdl import ClockSignal, Const, Instance, Module, Shape, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .targets import is_ecp5

__all__ = ["RegisteredMultiplier"]

#: Operand bits of the ECP5's MULT18X18D (signed).
ECP5_OPERAND_BITS = 18


class RegisteredMultiplier(wiring.Component):
    """``p`` is ``a * b`` of two cycles before (two enabled cycles with ``enable``).

    ``a`` and ``b`` (of ``a_shape`` and ``b_shape``, each signed or not) are taken into
    registers at the end of every cycle, and their product into a third. With ``enable``,
    all three take their inputs only in a cycle in which ``en`` is high, and hold
    otherwise. On an ECP5 the three are the registers of one MULT18X18D
    (``REG_INPUTA_CLK``, ``REG_INPUTB_CLK``, ``REG_OUTPUT_CLK``, enabled by ``CE0``): the
    DSP block then multiplies in a clock period of its own, and the routing to it and the
    routing from it each have a period too, however far from its users the placer puts it.
    Yosys does not move registers into that block by itself, hence the instance. Elsewhere,
    and for operands wider than the block's 18 signed bits, the registers are flip-flops,
    so that every simulator sees the same behaviour.

    The three registers have no reset (they start at 0; after a reset they hold what they
    held until the next enabled cycle), as their users' valid flags say when a product
    counts. On the ECP5 their reset pins are tied to 0: on the design's reset net they
    kept nextpnr's router2 from converging on the 85F's datapath (35 minutes), tied to 0
    it converged in 33 iterations.

    Latency: 2 cycles.
    """

    def __init__(self, a_shape, b_shape=None, *, enable=False):
        self._a_shape = Shape.cast(a_shape)
        self._b_shape = Shape.cast(a_shape if b_shape is None else b_shape)
        self._enable = enable
        product_shape = (Const(0, self._a_shape) * Const(0, self._b_shape)).shape()
        super().__init__({
            "a": In(self._a_shape),
            "b": In(self._b_shape),
            "p": Out(product_shape),
            **({"en": In(1)} if enable else {}),
        })

    def _fits_dsp(self):
        return all(shape.width + (not shape.signed) <= ECP5_OPERAND_BITS
                   for shape in (self._a_shape, self._b_shape))

    def elaborate(self, platform):
        m = Module()
        if is_ecp5(platform) and self._fits_dsp():
            product = Signal(2 * ECP5_OPERAND_BITS)
            ports = {}
            for name, operand in (("A", self.a), ("B", self.b)):
                # Sign- or zero-extended to 18 bits, and multiplied as signed numbers.
                wide = Signal(signed(ECP5_OPERAND_BITS), name=f"{name.lower()}_wide")
                m.d.comb += wide.eq(operand)
                ports.update({f"i_{name}{k}": wide[k] for k in range(ECP5_OPERAND_BITS)})
            ports.update({f"o_P{k}": product[k] for k in range(2 * ECP5_OPERAND_BITS)})
            registers = {f"p_REG_{reg}_{what}": f"{what}0"
                         for reg in ("INPUTA", "INPUTB", "OUTPUT")
                         for what in ("CLK", "CE", "RST")}
            m.submodules.dsp = Instance(
                "MULT18X18D",
                **registers,
                p_REG_PIPELINE_CLK="NONE",
                p_GSR="DISABLED",
                p_RESETMODE="SYNC",
                i_SIGNEDA=1, i_SIGNEDB=1, i_SOURCEA=0, i_SOURCEB=0,
                i_CLK0=ClockSignal(), i_CE0=self.en if self._enable else 1, i_RST0=0,
                **ports)
            m.d.comb += self.p.eq(product[:len(self.p)])
        else:
            a = Signal.like(self.a, reset_less=True)
            b = Signal.like(self.b, reset_less=True)
            p = Signal.like(self.p, reset_less=True)
            m.d.comb += self.p.eq(p)
            registers = [a.eq(self.a), b.eq(self.b), p.eq(a * b)]
            if self._enable:
                with m.If(self.en):
                    m.d.sync += registers
            else:
                m.d.sync += registers
        return m
