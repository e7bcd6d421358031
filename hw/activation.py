"""Activation and requantisation: int32 accumulator rows to int8 rows."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..isa import MAX_LEFT_SHIFT, Rounding
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
        ``bias``, ``multiplier``, ``shift`` and ``left_shift`` per lane; ``zero_point``,
        ``relu``, ``rounding``, ``clamp_min`` and ``clamp_max``
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


def high_half(m, cfg, prod, nudged_on, suffix=""):
    """Stage 3: ``(prod + nudge) / 2**31`` truncated toward zero and saturated to 32 bits,
    where ``prod = x * M`` (the saturating rounding doubling high multiply), with the nudge
    only if ``nudged_on`` (:func:`takes_nudge`), else ``floor(prod / 2**31)``.

    gemmlowp's nudge is ``2**30``, or ``1 - 2**30`` for a negative product. A negative
    product is at most -1, so its nudged sum is negative, and truncating a negative
    quotient toward zero is flooring it after adding ``2**31 - 1``: ``1 - 2**30 + 2**31 - 1
    = 2**30``. Either way the result is ``floor((prod + 2**30) / 2**31)``: one nudge and an
    arithmetic shift, no sign test and no correction."""
    nudged = Signal(signed(prod.shape().width + 1), name=f"nudged{suffix}")
    m.d.comb += nudged.eq(prod + nudge(cfg, nudged_on))
    return high_of_nudged(cfg, nudged)


def nudge(cfg, nudged_on=1):
    """The nudge of :func:`high_half`: ``2**30`` for a Q0.31 multiplier if ``nudged_on``,
    else 0."""
    return Cat(Const(0, cfg.multiplier_width - 2), nudged_on)


def takes_nudge(rounding, shift):
    """Whether the product takes the rounding nudge: always with double rounding; with
    single rounding only when no right shift follows (the shift rounds then)."""
    return (rounding == Rounding.DOUBLE) | (shift == 0)


def shifted_left(x, left_shift):
    """Stage 1b: the biased word, sign-extended to 32 bits, shifted left by ``left_shift``
    places within 32 bits (the bits above wrap away)."""
    x = x.as_signed()
    if x.shape().width < 32:
        x = Cat(x, x[-1].replicate(32 - x.shape().width))
    return (x << left_shift)[:32].as_signed()


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


def split_product_sum(cfg, products, nudged_on):
    """:func:`product_sum` plus :func:`nudge` in two adds, for a stage each: the middle
    word (the two cross products and the nudge, shifted right by 16) and the outer words
    (``high_high`` above the unsigned ``low_low``, which do not overlap: a concatenation,
    no adder); then ``outer + (middle << 16)``, the nudged product."""
    high_high, high_low, low_high, low_low = products
    middle = high_low + low_high + (nudge(cfg, nudged_on) >> 16)
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


def shifted_right(value, shift, half_bit, low_mask, upper_mask, single):
    """Stage 4a: ``value >> shift``; whether rounding adds one: half away from zero (the
    last bit shifted out is set and, for a negative value, some bit below it too: the
    remainder is above half), or with ``single`` rounding half up (the last bit shifted
    out is set); and whether the shifted value lies beyond ``operand_width + 1`` signed
    bits, with the masks of :func:`rounding_masks`."""
    bits = value.as_unsigned()
    round_up = (bits & half_bit).any() & (~value[-1] | (bits & low_mask).any() | single)
    beyond = ((bits ^ value[-1].replicate(len(bits))) & upper_mask).any()
    return value >> shift, round_up, beyond


def saturated_output(cfg, truncated, round_up, beyond, zero_point):
    """Stage 4b: the rounded value (``truncated + round_up``) plus the zero point,
    saturated to the operand range.

    Only the low ``operand_width + 1`` bits of ``truncated`` are added: a value
    ``beyond`` them (below ``-2**operand_width`` or from ``2**operand_width`` up) is so far
    out of the operand range that no zero point brings it back, and the result is the
    limit on its side. The same result as adding all 32 bits, on a short path."""
    low = truncated[:cfg.operand_width + 1].as_signed()
    value, _ = saturate(low + round_up + zero_point, cfg.operand_shape)
    limit = Mux(truncated[-1], cfg.operand_min, cfg.operand_max)
    return Mux(beyond, limit, value)


def clamped(value, low, high):
    """Stage 4c: ``value`` clamped to ``[low, high]``: below ``low`` it takes ``low``, else
    above ``high`` it takes ``high`` (which decides should the bounds cross)."""
    return Mux(value < low, low, Mux(value > high, high, value))


def lower_bound(params):
    """The lower clamp bound: the zero point with ReLU, else ``clamp_min``."""
    return Mux(params.relu, params.zero_point, params.clamp_min)


class ActivationUnit(wiring.Component):
    """Requantises one row of ``cfg.cols`` accumulator words per cycle, gemmlowp / TFLite
    style, lane by lane::

        x    = saturate_acc(acc + bias) << left_shift               # wrapping in 32 bits
        y    = x * multiplier / 2**(31 + shift), rounded by ``rounding``:
               DOUBLE: rounding_divide_by_pot(srdhm(x, multiplier), shift)
               SINGLE: floor((x * multiplier + 2**(30 + shift)) / 2**(31 + shift))
        out  = clamp(saturate(y + zero_point), zero_point if relu else clamp_min, clamp_max)

    ``multiplier`` is a signed Q0.31 number, ``shift`` a right shift of 0 to 31 and
    ``left_shift`` a left shift of 0 to :data:`~tpuer.isa.MAX_LEFT_SHIFT` (CONFIG's SHIFT,
    negative for a left shift). ReLU, RELU6 and RELU_N1_TO_1 are clamps in the quantised
    domain. The golden model is :func:`tpuer.sim.activation_model.requantize`, bit for
    bit.

    The parameters (``params``) apply to every row in flight: change them only while
    ``busy`` is low. The unit keeps a copy of them in registers of its own (a cycle
    later: a row that enters in the cycle of a change still sees the new values), so that
    the registers that hold them, wherever they are, need not reach every lane's logic in
    the cycle that uses them.

    Members: those of :class:`ActivationSignature` (``busy`` from a register;
    ``param_write`` unused).

    Stages: the row straight from the accumulator memory into registers; bias; the left
    shift; four 16 x 16-bit partial products (a DSP multiplier each); their sum; the high
    half; the right shift with the rounding decision (from masks kept in registers, see
    :func:`rounding_masks`); rounding, zero point and clamp. The forms for fast clocks,
    :class:`RegisteredActivationUnit` and :class:`FabricProductActivationUnit`, have three
    and four stages more (:func:`~tpuer.hw.activation_units.activation_unit_class`
    picks the form from ``cfg.multiply_latency``).

    Latency: :attr:`latency` cycles (:meth:`latency_for`: 8) from ``i`` to ``o`` with no
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
            "left_shift": data.ArrayLayout(unsigned(MAX_LEFT_SHIFT.bit_length()), cfg.cols),
            "zero_point": cfg.operand_shape,
            "relu": 1,
            "rounding": Rounding,
            "clamp_min": cfg.operand_shape,
            "clamp_max": cfg.operand_shape,
        })

    #: Cycles from a row entering the unit to its result.
    LATENCY = 8

    @classmethod
    def latency_for(cls, cfg):
        """Cycles from a row entering the unit to its result: 8 here
        (:class:`RegisteredActivationUnit` 11, :class:`FabricProductActivationUnit` 12)."""
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
        # The biased word and the left-shifted one have a register each; the product
        # stages follow them.
        x = Signal(data.ArrayLayout(cfg.acc_shape, cfg.cols))
        operand = Signal(data.ArrayLayout(signed(32), cfg.cols))
        product_stages = self._multipliers(m, operand, p, advance)
        high = Signal(data.ArrayLayout(signed(32), cfg.cols))
        truncated = Signal(data.ArrayLayout(signed(32), cfg.cols))
        round_up = Signal(cfg.cols)
        # What the parameters decide, kept in registers (the parameters hold still while a
        # row is inside, and a row reaches the stages that use these four or more cycles
        # after it enters, long after they have followed a change): each lane's rounding
        # masks (see rounding_masks) and nudge, the clamp's bounds.
        masks = [[Signal(32, name=f"{kind}_{lane}") for kind in ("half_bit", "low_mask",
                                                                  "upper_mask")]
                 for lane in range(cfg.cols)]
        nudged_on = Signal(cfg.cols)
        single = Signal()
        low, high_bound = Signal(cfg.operand_shape), Signal(cfg.operand_shape)
        beyond = Signal(cfg.cols)
        m.d.sync += [single.eq(p.rounding == Rounding.SINGLE), low.eq(lower_bound(p)),
                     high_bound.eq(p.clamp_max)]
        for lane in range(cfg.cols):
            m.d.sync += [register.eq(mask) for register, mask in
                         zip(masks[lane], rounding_masks(cfg, p.shift[lane]))]
            m.d.sync += nudged_on[lane].eq(takes_nudge(p.rounding, p.shift[lane]))

        with m.If(advance):
            m.d.sync += [self.o.valid.eq(valid[-1]), self.o.payload.tag.eq(tags[-1])]
            for lane in range(cfg.cols):
                lane_shifted, lane_round_up, lane_beyond = shifted_right(
                    high[lane], p.shift[lane], *masks[lane], single)
                lane_product_stages = product_stages(lane, high[lane], nudged_on[lane])
                output = saturated_output(cfg, truncated[lane], round_up[lane],
                                          beyond[lane], p.zero_point)
                m.d.sync += [
                    row[lane].eq(self.i.payload.data[lane]),
                    x[lane].eq(biased(cfg, row[lane], p.bias[lane])),
                    operand[lane].eq(shifted_left(x[lane], p.left_shift[lane])),
                    *lane_product_stages,
                    truncated[lane].eq(lane_shifted),
                    round_up[lane].eq(lane_round_up),
                    beyond[lane].eq(lane_beyond),
                    self.o.payload.data[lane].eq(
                        clamped(self._clamp_stage(m, lane, output), low, high_bound)),
                ]

        # ``busy`` is a register, set a cycle ahead: a row enters, or one is inside and
        # moves on, or the output holds one that is not taken.
        m.d.comb += self.busy_next.eq((self.i.valid & self.i.ready) | Cat(*valid).any() |
                                      (self.o.valid & ~self.o.ready))
        m.d.sync += self.busy.eq(self.busy_next)
        return m

    def _clamp_stage(self, m, lane, output):
        """The saturated output of a lane as the clamp takes it: here straight from the
        rounding, in the same stage."""
        return output

    def _multipliers(self, m, x, p, advance):
        """Each lane's four partial products, multiplied from the operand ``x`` straight
        into their registers, then their sum and its high half. Returns ``stages(lane,
        high, nudged_on)``, the statements of those stages for a lane, ``high`` the
        register of the last, ``nudged_on`` whether the product takes the nudge."""
        cfg = self._cfg
        products = [[Signal(signed(34), name=f"s2_product{k}_{lane}") for k in range(4)]
                    for lane in range(cfg.cols)]
        prod = Signal(data.ArrayLayout(signed(64), cfg.cols))

        def stages(lane, high, nudged_on):
            return [
                *(product.eq(a * b) for product, (a, b) in
                  zip(products[lane], partial_operands(x[lane], p.multiplier[lane]))),
                prod[lane].eq(product_sum(products[lane])),
                high.eq(high_half(m, cfg, prod[lane], nudged_on, f"_{lane}")),
            ]
        return stages


class RegisteredActivationUnit(ActivationUnit):
    """An :class:`ActivationUnit` for fast clocks (``cfg.multiply_latency`` 2): the
    operand and each lane's multiplier go into the operand registers of the lane's four
    multipliers (:class:`~tpuer.hw.registered_multiplier.RegisteredMultiplier`, on the
    ECP5 a MULT18X18D's own), whose product registers are the next stage; the sum is two
    adds (:func:`split_product_sum`), each a stage; and the clamp takes the saturated
    output from a register of its own.

    Latency: 11 cycles.
    """

    LATENCY = 11

    def _clamp_stage(self, m, lane, output):
        saturated = Signal(self._cfg.operand_shape, name=f"saturated_{lane}")
        m.d.sync += saturated.eq(output)           # inside the unit's m.If(advance)
        return saturated

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

        def stages(lane, high, nudged_on):
            lane_middle, lane_outer = split_product_sum(cfg, products[lane], nudged_on)
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

    Latency: 12 cycles.
    """

    LATENCY = 12

    def _product(self, m, multiplier, k, lane, advance):
        product = Signal.like(multiplier.p, name=f"product{k}_{lane}")
        with m.If(advance):
            m.d.sync += product.eq(multiplier.p)
        return product
