"""Activation and requantisation: int32 accumulator rows to int8 rows."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .arith import saturate
from .delay_line import delayed
from .registered_multiplier import RegisteredMultiplier

__all__ = ["ActivationUnit", "RegisteredActivationUnit", "FabricProductActivationUnit",
           "ActivationSignature", "PARAM_WRITE_LAYOUT"]

#: A write of a bias or a multiplier into the lane-serial unit's parameter memory (CONFIG
#: BIAS / MULTIPLIER): ``lane`` or, with ``all_lanes``, every lane; ``en`` for one cycle.
PARAM_WRITE_LAYOUT = data.StructLayout({
    "en": 1, "multiplier": 1, "all_lanes": 1, "lane": 16, "value": 32})


class ActivationSignature(wiring.Signature):
    """What every activation unit has (:class:`ActivationUnit`,
    :class:`~tpuer.hw.serial_activation.SerialActivationUnit`; the one a configuration asks
    for is :func:`~tpuer.hw.activation_units.activation_unit`).

    Members
    -------
    params : In(StructLayout)
        ``bias``, ``multiplier`` and ``shift`` per lane; ``zero_point`` and ``relu``
        (:meth:`ActivationUnit.params_layout_for`).
    param_write : In(PARAM_WRITE_LAYOUT)
        Writes of the parameters a unit keeps in a memory of its own (its class's
        ``KEPT_PARAMETERS``; unused by a unit that keeps none).
    i : In(stream.Signature(StructLayout({"data", "tag"})))
        Accumulator rows; ``tag`` is passed through unchanged.
    o : Out(stream.Signature(StructLayout({"data", "tag"})))
        Requantised operand rows, in order.
    busy : Out(1)
        A row is inside the unit.
    busy_next : Out(1)
        What ``busy`` will be in the next cycle.
    """

    def __init__(self, cfg, tag_shape):
        super().__init__({
            "params": In(ActivationUnit.params_layout_for(cfg)),
            "param_write": In(PARAM_WRITE_LAYOUT),
            "i": In(stream.Signature(data.StructLayout({
                "data": data.ArrayLayout(cfg.acc_shape, cfg.cols), "tag": tag_shape}))),
            "o": Out(stream.Signature(data.StructLayout({
                "data": data.ArrayLayout(cfg.operand_shape, cfg.cols), "tag": tag_shape}))),
            "busy": Out(1),
            "busy_next": Out(1),
        })


def biased(cfg, acc, bias):
    """Stage 1: ``saturate_acc(acc + bias)``."""
    value, _ = saturate(acc + bias, cfg.acc_shape)
    return value


def high_half(m, cfg, prod, suffix=""):
    """Stage 3: ``(prod + nudge) / 2**31`` truncated toward zero and saturated to 32 bits,
    where ``prod = x * M`` (the saturating rounding doubling high multiply).

    gemmlowp's nudge is ``2**30``, or ``1 - 2**30`` for a negative product. A negative
    product is at most -1, so its nudged sum is negative, and truncating a negative
    quotient toward zero is flooring it after adding ``2**31 - 1``: ``1 - 2**30 + 2**31 - 1
    = 2**30``. Either way the result is ``floor((prod + 2**30) / 2**31)``: one constant
    nudge and an arithmetic shift, no sign test and no correction."""
    nudged = Signal(signed(prod.shape().width + 1), name=f"nudged{suffix}")
    m.d.comb += nudged.eq(prod + nudge(cfg))
    return high_of_nudged(cfg, nudged)


def nudge(cfg):
    """The constant of :func:`high_half`: ``2**30`` for a Q0.31 multiplier."""
    return 1 << (cfg.multiplier_width - 2)


def high_of_nudged(cfg, nudged):
    """The end of :func:`high_half`: the nudged product shifted right by 31 and saturated
    to 32 bits."""
    high, _ = saturate(nudged >> (cfg.multiplier_width - 1), signed(32))
    return high


def partial_operands(x, multiplier):
    """Stage 2a: the operands of the four 16 x 16-bit products of the signed 32-bit
    ``x * multiplier`` (high halves signed, low halves unsigned), each of which fits one
    DSP multiplier."""
    x = x.as_signed()
    if x.shape().width < 32:
        x = Cat(x, x[-1].replicate(32 - x.shape().width))
    x_low, x_high = x[:16], x[16:32].as_signed()
    multiplier = Value.cast(multiplier)
    m_low, m_high = multiplier[:16], multiplier[16:32].as_signed()
    return [(x_high, m_high), (x_high, m_low), (x_low, m_high), (x_low, m_low)]


def product_sum(products):
    """Stage 2b: ``x * multiplier`` from the products of :func:`partial_operands`."""
    high_high, high_low, low_high, low_low = products
    return (high_high << 32) + ((high_low + low_high) << 16) + low_low


def split_product_sum(cfg, products):
    """:func:`product_sum` plus :func:`nudge` in two adds, for a stage each: the middle
    word (the two cross products and the nudge, shifted right by 16) and the outer words
    (``high_high`` above the unsigned ``low_low``, which do not overlap: a concatenation,
    no adder); then ``outer + (middle << 16)``, the nudged product."""
    high_high, high_low, low_high, low_low = products
    assert nudge(cfg) % (1 << 16) == 0
    middle = high_low + low_high + (nudge(cfg) >> 16)
    outer = Cat(low_low.as_unsigned()[:32], high_high).as_signed()
    return middle, outer


def joined_product_sum(middle, outer):
    """The second add of :func:`split_product_sum`."""
    return outer + (middle << 16)


def rounding_masks(cfg, shift):
    """For a right shift by ``shift`` (0 to 31) of a 32-bit value: the mask of bit
    ``shift - 1``, the last bit shifted out (0 for no shift); the mask of the bits below
    it; and the mask of the bits from ``operand_width + shift`` up, the ones that must
    all equal the sign for the shifted value to fit ``operand_width + 1`` signed bits.
    They depend on the parameter only, so the unit keeps them in registers and no decoder
    sits on the data's path."""
    one = Const(1, unsigned(34 + cfg.operand_width))
    half_bit = ((one << shift) >> 1)[:32]
    low_mask = (((one << shift) - 1) >> 1)[:32]
    upper_mask = (~((one << (shift + cfg.operand_width)) - 1))[:32]
    return half_bit, low_mask, upper_mask


def shifted_right(value, shift, half_bit, low_mask, upper_mask):
    """Stage 4a: ``value >> shift``; whether rounding half away from zero adds one (the
    last bit shifted out is set and, for a negative value, some bit below it too: the
    remainder is above half); and whether the shifted value lies beyond
    ``operand_width + 1`` signed bits, with the masks of :func:`rounding_masks`."""
    bits = value.as_unsigned()
    round_up = (bits & half_bit).any() & (~value[-1] | (bits & low_mask).any())
    beyond = ((bits ^ value[-1].replicate(len(bits))) & upper_mask).any()
    return value >> shift, round_up, beyond


def clamped_output(cfg, truncated, round_up, beyond, zero_point, relu):
    """Stage 4b: the rounded value (``truncated + round_up``) plus the zero point, clamped
    to the operand range (from the zero point up with ReLU).

    Only the low ``operand_width + 1`` bits of ``truncated`` are added: a value
    ``beyond`` them (below ``-2**operand_width`` or from ``2**operand_width`` up) is so far
    out of the operand range that no zero point brings it back, and the result is the
    limit on its side. ReLU needs only the sign of ``truncated``, not the sum: a negative
    value rounds to at most 0, whose result is the zero point either way. The same result
    as adding all 32 bits, on a short path."""
    low = truncated[:cfg.operand_width + 1].as_signed()
    value, _ = saturate(low + round_up + zero_point, cfg.operand_shape)
    negative = truncated[-1]
    limit = Mux(negative, cfg.operand_min, cfg.operand_max)
    return Mux(relu & negative, zero_point, Mux(beyond, limit, value))


class ActivationUnit(wiring.Component):
    """Requantises one row of ``cfg.cols`` accumulator words per cycle, gemmlowp / TFLite
    style, lane by lane::

        x    = saturate_acc(acc + bias)
        high = saturating_rounding_doubling_high_mul(x, multiplier)   # x * M / 2**31
        y    = rounding_divide_by_power_of_two(high, shift)            # round half away
        out  = clamp(y + zero_point, zero_point if relu else operand_min, operand_max)

    ``multiplier`` is a signed Q0.31 number and ``shift`` a right shift of 0 to 31, so the
    effective scale ``multiplier / 2**(31 + shift)`` is below 1. ReLU in the quantised
    domain is a lower clamp at the zero point. The golden model is
    :func:`tpuer.sim.activation_model.requantize`, bit for bit.

    The parameters (``params``) apply to every row in flight: change them only while
    ``busy`` is low. The unit keeps a copy of them in registers of its own (a cycle
    later: a row that enters in the cycle of a change still sees the new values), so that
    the registers that hold them, wherever they are, need not reach every lane's logic in
    the cycle that uses them.

    Members: those of :class:`ActivationSignature` (``busy`` from a register;
    ``param_write`` unused).

    Stages: the row straight from the accumulator memory into registers; bias; four
    16 x 16-bit partial products (a DSP multiplier each); their sum; the high half; the
    right shift with the rounding decision (from masks kept in registers, see
    :func:`rounding_masks`); rounding, zero point and clamp. The forms for fast clocks,
    :class:`RegisteredActivationUnit` and :class:`FabricProductActivationUnit`, have two
    and three stages more (:func:`~tpuer.hw.activation_units.activation_unit_class`
    picks the form from ``cfg.multiply_latency``).

    Latency: :attr:`latency` cycles (:meth:`latency_for`: 7) from ``i`` to ``o`` with no
    back-pressure; the whole pipeline holds while ``o.valid & ~o.ready``. It takes a row
    every cycle.
    """

    #: The parameters this unit keeps in a memory of its own, written on ``param_write``
    #: (none: every parameter comes from ``params``).
    KEPT_PARAMETERS = ()

    @staticmethod
    def params_layout_for(cfg):
        """Layout of ``params`` for configuration ``cfg``."""
        return data.StructLayout({
            "bias": data.ArrayLayout(cfg.bias_shape, cfg.cols),
            "multiplier": data.ArrayLayout(cfg.multiplier_shape, cfg.cols),
            "shift": data.ArrayLayout(cfg.shift_shape, cfg.cols),
            "zero_point": cfg.operand_shape,
            "relu": 1,
        })

    #: Cycles from a row entering the unit to its result.
    LATENCY = 7

    @classmethod
    def latency_for(cls, cfg):
        """Cycles from a row entering the unit to its result: 7 here
        (:class:`RegisteredActivationUnit` 9, :class:`FabricProductActivationUnit` 10)."""
        return cls.LATENCY

    def __init__(self, cfg, *, tag_shape=unsigned(16)):
        self._cfg = cfg
        self._tag_shape = tag_shape
        self.latency = self.latency_for(cfg)
        self.params_layout = self.params_layout_for(cfg)
        super().__init__(ActivationSignature(cfg, tag_shape))
        self.in_layout = self.i.payload.shape()
        self.out_layout = self.o.payload.shape()

    def admits(self, in_flight):
        """Whether a row may start on its way to the unit (read from the accumulators)
        while others are (``in_flight``): always, as the unit takes a row every cycle."""
        return 1

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        p = Signal(self.params_layout, name="params_copy")
        m.d.sync += p.eq(self.params)
        advance = ~self.o.valid | self.o.ready
        m.d.comb += self.i.ready.eq(advance)

        stages = self.latency - 1          # registers before the output register
        # A row's valid flag and tag beside it, stage by stage.
        valid = delayed(m, self.i.valid, stages, name="valid", enable=advance)[1:]
        tags = delayed(m, self.i.payload.tag, stages, name="tag", enable=advance,
                       reset_less=True)[1:]
        row = Signal(data.ArrayLayout(cfg.acc_shape, cfg.cols))
        # The biased word has a register of its own; the product stages follow it.
        x = Signal(data.ArrayLayout(cfg.acc_shape, cfg.cols))
        product_stages = self._multipliers(m, x, p, advance)
        high = Signal(data.ArrayLayout(signed(32), cfg.cols))
        truncated = Signal(data.ArrayLayout(signed(32), cfg.cols))
        round_up = Signal(cfg.cols)
        # The rounding masks of each lane's shift, kept in registers (the parameters hold
        # still while a row is inside, and a row reaches the shift stage five or more
        # cycles after it enters, long after these have followed a change).
        masks = [[Signal(32, name=f"{kind}_{lane}") for kind in ("half_bit", "low_mask",
                                                                  "upper_mask")]
                 for lane in range(cfg.cols)]
        beyond = Signal(cfg.cols)
        for lane in range(cfg.cols):
            m.d.sync += [register.eq(mask) for register, mask in
                         zip(masks[lane], rounding_masks(cfg, p.shift[lane]))]

        with m.If(advance):
            m.d.sync += [self.o.valid.eq(valid[-1]), self.o.payload.tag.eq(tags[-1])]
            for lane in range(cfg.cols):
                lane_shifted, lane_round_up, lane_beyond = shifted_right(
                    high[lane], p.shift[lane], *masks[lane])
                lane_product_stages = product_stages(lane, high[lane])
                m.d.sync += [
                    row[lane].eq(self.i.payload.data[lane]),
                    x[lane].eq(biased(cfg, row[lane], p.bias[lane])),
                    *lane_product_stages,
                    truncated[lane].eq(lane_shifted),
                    round_up[lane].eq(lane_round_up),
                    beyond[lane].eq(lane_beyond),
                    self.o.payload.data[lane].eq(
                        clamped_output(cfg, truncated[lane], round_up[lane], beyond[lane],
                                       p.zero_point, p.relu)),
                ]

        # ``busy`` is a register, set a cycle ahead: a row enters, or one is inside and
        # moves on, or the output holds one that is not taken.
        m.d.comb += self.busy_next.eq((self.i.valid & self.i.ready) | Cat(*valid).any() |
                                      (self.o.valid & ~self.o.ready))
        m.d.sync += self.busy.eq(self.busy_next)
        return m

    def _multipliers(self, m, x, p, advance):
        """Each lane's four partial products, multiplied from the biased word ``x``
        straight into their registers, then their sum and its high half. Returns
        ``stages(lane, high)``, the statements of those stages for a lane, ``high`` the
        register of the last."""
        cfg = self._cfg
        products = [[Signal(signed(34), name=f"s2_product{k}_{lane}") for k in range(4)]
                    for lane in range(cfg.cols)]
        prod = Signal(data.ArrayLayout(signed(64), cfg.cols))

        def stages(lane, high):
            return [
                *(product.eq(a * b) for product, (a, b) in
                  zip(products[lane], partial_operands(x[lane], p.multiplier[lane]))),
                prod[lane].eq(product_sum(products[lane])),
                high.eq(high_half(m, cfg, prod[lane], f"_{lane}")),
            ]
        return stages


class RegisteredActivationUnit(ActivationUnit):
    """An :class:`ActivationUnit` for fast clocks (``cfg.multiply_latency`` 2): the biased
    word and each lane's multiplier go into the operand registers of the lane's four
    multipliers (:class:`~tpuer.hw.registered_multiplier.RegisteredMultiplier`, on the
    ECP5 a MULT18X18D's own), whose product registers are the next stage, and the sum is
    two adds (:func:`split_product_sum`), each a stage.

    Latency: 9 cycles.
    """

    LATENCY = 9

    def _multipliers(self, m, x, p, advance):
        cfg = self._cfg
        products = []
        for lane in range(cfg.cols):
            products.append([])
            for k, (a, b) in enumerate(partial_operands(x[lane], p.multiplier[lane])):
                multiplier = RegisteredMultiplier(a.shape(), b.shape(), enable=True)
                m.submodules[f"multiplier{k}_{lane}"] = multiplier
                m.d.comb += [multiplier.a.eq(a), multiplier.b.eq(b),
                             multiplier.en.eq(advance)]
                products[lane].append(self._product(m, multiplier, k, lane, advance))
        middle = Signal(data.ArrayLayout(signed(35), cfg.cols))
        outer = Signal(data.ArrayLayout(signed(64), cfg.cols))
        nudged = Signal(data.ArrayLayout(signed(65), cfg.cols))

        def stages(lane, high):
            lane_middle, lane_outer = split_product_sum(cfg, products[lane])
            return [
                middle[lane].eq(lane_middle),
                outer[lane].eq(lane_outer),
                nudged[lane].eq(joined_product_sum(middle[lane], outer[lane])),
                high.eq(high_of_nudged(cfg, nudged[lane])),
            ]
        return stages

    def _product(self, m, multiplier, k, lane, advance):
        """A partial product, from the multiplier's product register."""
        return multiplier.p


class FabricProductActivationUnit(RegisteredActivationUnit):
    """A :class:`RegisteredActivationUnit` whose partial products go into registers of
    the fabric before the adds (``cfg.multiply_latency`` 3: the DSP blocks sit in columns
    of their own, far from the logic).

    Latency: 10 cycles.
    """

    LATENCY = 10

    def _product(self, m, multiplier, k, lane, advance):
        product = Signal.like(multiplier.p, name=f"product{k}_{lane}")
        with m.If(advance):
            m.d.sync += product.eq(multiplier.p)
        return product
