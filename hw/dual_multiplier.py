"""Two signed 8 x 8 products in one iCE40 UltraPlus DSP (SB_MAC16 in its 8 x 8 mode)."""

from amaranth.hdl import Cat, ClockSignal, Instance, Module, ResetSignal, Shape, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .targets import is_ice40_ultraplus

__all__ = ["DualMultiplier", "uses_sb_mac16"]


def uses_sb_mac16(platform, operand_shape):
    """Whether the products of the systolic array go into SB_MAC16 blocks: on an iCE40
    UltraPlus (the only iCE40 with DSPs), for operands of 8 bits or fewer."""
    return is_ice40_ultraplus(platform) and Shape.cast(operand_shape).width <= 8


class DualMultiplier(wiring.Component):
    """``high = high_a * high_b`` and ``low = low_a * low_b``, signed, each product held in
    a register.

    On an iCE40 UltraPlus this is one SB_MAC16 with ``MODE_8x8``: its top half multiplies
    ``A[15:8] * B[15:8]`` and its bottom half ``A[7:0] * B[7:0]``, both signed, and the
    16-bit products are taken from the multipliers' own pipeline registers
    (``TOP_8x8_MULT_REG``, ``BOT_8x8_MULT_REG``, ``*OUTPUT_SELECT = 2``; reset clears them;
    the DSP's adders are unused). Elsewhere it is two plain multiplications, so that
    simulators without the primitive see the same behaviour. Yosys never packs two 8 x 8
    products into one SB_MAC16 by itself, hence the instance.

    With ``registered_b``, the ``b`` operands are held in a register (the SB_MAC16's own B
    register on an iCE40 UltraPlus): it takes ``high_b`` and ``low_b`` at the end of a
    cycle in which ``load_b`` is high, reset clears it, and the products use it. Two
    weight-stationary cells that switch weights in the same cycle so keep their active
    weights in the DSP instead of in logic cells.

    The halves named in ``summed`` (``"high"``, ``"low"``) add their product to an addend
    (``high_addend``, ``low_addend``: 16 bits, C and D on an iCE40 UltraPlus) in that half's
    accumulator register and give that sum, modulo ``2**16``, a cycle after the product
    would come: ``high = high_addend + high_a * high_b`` with the product of the cycle
    before. A systolic cell's partial sum so stays in the DSP instead of in logic cells.

    Operands narrower than 8 bits are sign-extended. Latency: 1 cycle from ``a`` (and from
    ``b`` without ``registered_b``) to the products; 2 to a summed half, 1 from its addend.
    """

    def __init__(self, operand_shape, *, registered_b=False, summed=()):
        self._operand_shape = Shape.cast(operand_shape)
        self._registered_b = registered_b
        if not set(summed) <= {"high", "low"}:
            raise ValueError(f"summed names halves, 'high' or 'low', not {summed!r}")
        self._summed = set(summed)
        if self._operand_shape.width > 8 or not self._operand_shape.signed:
            raise ValueError(f"a DualMultiplier takes signed operands of at most 8 bits, "
                             f"not {self._operand_shape}")
        product = signed(2 * self._operand_shape.width)
        halves = {}
        for half in ("high", "low"):
            if half in self._summed:
                halves.update({half: Out(signed(16)), f"{half}_addend": In(signed(16))})
            else:
                halves[half] = Out(product)
        super().__init__({
            "high_a": In(self._operand_shape), "high_b": In(self._operand_shape),
            "low_a": In(self._operand_shape), "low_b": In(self._operand_shape),
            **halves,
            **({"load_b": In(1)} if registered_b else {}),
        })

    def elaborate(self, platform):
        m = Module()
        registered = self._registered_b
        if not uses_sb_mac16(platform, self._operand_shape):
            high_b, low_b = self.high_b, self.low_b
            if registered:
                high_b, low_b = Signal.like(self.high_b), Signal.like(self.low_b)
                with m.If(self.load_b):
                    m.d.sync += [high_b.eq(self.high_b), low_b.eq(self.low_b)]
            for half, a, b in (("high", self.high_a, high_b), ("low", self.low_a, low_b)):
                if half in self._summed:
                    product = Signal(signed(2 * self._operand_shape.width),
                                     name=f"{half}_product")
                    m.d.sync += getattr(self, half).eq(product +
                                                       getattr(self, f"{half}_addend"))
                else:
                    product = getattr(self, half)
                m.d.sync += product.eq(a * b)
            return m

        operands = {}
        for name in ("high_a", "high_b", "low_a", "low_b"):
            operands[name] = Signal(signed(8), name=f"{name}_8")   # sign-extended
            m.d.comb += operands[name].eq(getattr(self, name))
        products = Signal(32)
        # Each half's output: its 8 x 8 product register (select 2), or its accumulator
        # register (select 1) that takes the sum of that product (lower input 1) and of C
        # or D (upper input 1), the addend.
        outputs = {}
        for half, name, addend in (("high", "TOP", "C"), ("low", "BOT", "D")):
            summed = half in self._summed
            outputs.update({f"p_{name}OUTPUT_SELECT": 1 if summed else 2,
                            f"p_{name}ADDSUB_LOWERINPUT": int(summed),
                            f"p_{name}ADDSUB_UPPERINPUT": int(summed),
                            f"i_ORST{name}": ResetSignal() if summed else 0,
                            f"i_{addend}": getattr(self, f"{half}_addend") if summed else 0})
        m.submodules.dsp = Instance(
            "SB_MAC16",
            p_MODE_8x8=1, p_A_SIGNED=1, p_B_SIGNED=1, p_B_REG=int(registered),
            p_TOP_8x8_MULT_REG=1, p_BOT_8x8_MULT_REG=1,
            **outputs,
            i_CLK=ClockSignal(), i_CE=1,
            i_A=Cat(operands["low_a"], operands["high_a"]),
            i_B=Cat(operands["low_b"], operands["high_b"]),
            i_AHOLD=0, i_BHOLD=~self.load_b if registered else 0, i_CHOLD=0, i_DHOLD=0,
            i_IRSTTOP=ResetSignal(), i_IRSTBOT=ResetSignal(),
            i_OLOADTOP=0, i_OLOADBOT=0, i_ADDSUBTOP=0, i_ADDSUBBOT=0,
            i_OHOLDTOP=0, i_OHOLDBOT=0, i_CI=0, i_ACCUMCI=0, i_SIGNEXTIN=0,
            o_O=products)
        m.d.comb += [self.high.eq(products[16:].as_signed()),
                     self.low.eq(products[:16].as_signed())]
        return m
