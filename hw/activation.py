"""Activation and requantisation: int32 accumulator rows to int8 rows."""

from amaranth.hdl import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .arith import saturate

__all__ = ["ActivationUnit", "activation_unit", "activation_latency"]


def activation_unit(cfg, *, tag_shape=unsigned(16)):
    """The activation unit ``cfg`` asks for: :class:`ActivationUnit` (every lane at once),
    or :class:`~tpuer.hw.serial_activation.SerialActivationUnit` when
    ``cfg.activation_steps`` is set."""
    if cfg.activation_steps:
        from .serial_activation import SerialActivationUnit
        return SerialActivationUnit(cfg, tag_shape=tag_shape)
    return ActivationUnit(cfg, tag_shape=tag_shape)


def activation_latency(cfg):
    """Cycles from a row entering the activation unit of ``cfg`` to its result: 4, or
    ``cols * (activation_steps + 1) + 3`` for the lane-serial unit."""
    if cfg.activation_steps:
        return cfg.cols * (cfg.activation_steps + 1) + 3
    return ActivationUnit.latency


def biased(cfg, acc, bias):
    """Stage 1: ``saturate_acc(acc + bias)``."""
    value, _ = saturate(acc + bias, cfg.acc_shape)
    return value


def high_half(m, cfg, prod, suffix=""):
    """Stage 3: ``(prod + nudge) / 2**31`` truncated toward zero and saturated to 32 bits,
    where ``prod = x * M`` (the saturating rounding doubling high multiply)."""
    q31 = cfg.multiplier_width - 1
    nudge = Mux(prod >= 0, Const(1 << (q31 - 1), signed(32)),
                Const(1 - (1 << (q31 - 1)), signed(32)))
    nudged = Signal(signed(prod.shape().width + 1), name=f"nudged{suffix}")
    m.d.comb += nudged.eq(prod + nudge)
    floor = nudged >> q31
    inexact = nudged[:q31].any()
    toward_zero = Mux((nudged < 0) & inexact, floor + 1, floor)
    high, _ = saturate(toward_zero, signed(32))
    return high


def rounded_output(m, cfg, value, shift, zero_point, relu, suffix=""):
    """Stage 4: rounding right shift of ``value`` by ``shift`` (half away from zero), plus
    the zero point, clamped to the operand range (from the zero point up with ReLU)."""
    mask = Signal(unsigned(32), name=f"mask{suffix}")
    m.d.comb += mask.eq((Const(1, unsigned(33)) << shift) - 1)
    remainder = value.as_unsigned() & mask
    threshold = (mask >> 1) + (value < 0)
    rounded = (value >> shift) + (remainder > threshold)
    shifted = Signal(signed(33), name=f"rounded{suffix}")
    m.d.comb += shifted.eq(rounded + zero_point)
    low = Mux(relu, zero_point, cfg.operand_min)
    return Mux(shifted > cfg.operand_max, cfg.operand_max, Mux(shifted < low, low, shifted))


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
    ``busy`` is low.

    Members
    -------
    params : In(StructLayout)
        ``bias``, ``multiplier`` and ``shift`` per lane; ``zero_point`` and ``relu``.
    i : In(stream.Signature(StructLayout({"data", "tag"})))
        Accumulator rows; ``tag`` is passed through unchanged.
    o : Out(stream.Signature(StructLayout({"data", "tag"})))
        Requantised operand rows, in order.
    busy : Out(1)
        A row is inside the pipeline.

    Latency: :attr:`latency` (4) cycles from ``i`` to ``o`` with no back-pressure; the
    whole pipeline holds while ``o.valid & ~o.ready``.
    """

    latency = 4

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

    def __init__(self, cfg, *, tag_shape=unsigned(16)):
        self._cfg = cfg
        self._tag_shape = tag_shape
        cols = cfg.cols
        self.params_layout = self.params_layout_for(cfg)
        self.in_layout = data.StructLayout({
            "data": data.ArrayLayout(cfg.acc_shape, cols), "tag": tag_shape})
        self.out_layout = data.StructLayout({
            "data": data.ArrayLayout(cfg.operand_shape, cols), "tag": tag_shape})
        super().__init__({
            "params": In(self.params_layout),
            "i": In(stream.Signature(self.in_layout)),
            "o": Out(stream.Signature(self.out_layout)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        p = self.params
        advance = ~self.o.valid | self.o.ready
        m.d.comb += self.i.ready.eq(advance)

        prod_shape = signed(cfg.acc_width + cfg.multiplier_width)
        s1_valid, s2_valid, s3_valid = Signal(), Signal(), Signal()
        s1_tag, s2_tag, s3_tag = (Signal(self._tag_shape, name=f"s{k}_tag") for k in (1, 2, 3))
        s1_x = Signal(data.ArrayLayout(cfg.acc_shape, cfg.cols))
        s2_prod = Signal(data.ArrayLayout(prod_shape, cfg.cols))
        s3_high = Signal(data.ArrayLayout(signed(32), cfg.cols))

        with m.If(advance):
            m.d.sync += [
                s1_valid.eq(self.i.valid), s1_tag.eq(self.i.payload.tag),
                s2_valid.eq(s1_valid), s2_tag.eq(s1_tag),
                s3_valid.eq(s2_valid), s3_tag.eq(s2_tag),
                self.o.valid.eq(s3_valid), self.o.payload.tag.eq(s3_tag),
            ]
            for lane in range(cfg.cols):
                m.d.sync += [
                    s1_x[lane].eq(biased(cfg, self.i.payload.data[lane], p.bias[lane])),
                    s2_prod[lane].eq(s1_x[lane] * p.multiplier[lane]),
                    s3_high[lane].eq(high_half(m, cfg, s2_prod[lane], f"_{lane}")),
                    self.o.payload.data[lane].eq(
                        rounded_output(m, cfg, s3_high[lane], p.shift[lane], p.zero_point,
                                       p.relu, f"_{lane}")),
                ]

        m.d.comb += self.busy.eq(s1_valid | s2_valid | s3_valid | self.o.valid)
        return m
