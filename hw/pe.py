"""Weight-stationary processing element with a double-buffered weight."""

from amaranth.hdl import Cat, Module, Shape, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .registered_multiplier import RegisteredMultiplier

__all__ = ["ProcessingElement"]


class ProcessingElement(wiring.Component):
    """One multiply-accumulate cell of the systolic array.

    Every cycle the cell multiplies ``act_in`` by its weight into a product register and
    adds the product of the cycle before to ``psum_in``; it passes the sum down
    (``psum_out``) and the activation right (``act_out``), each through one register. The
    product register keeps the multiplier out of the adder's path (a DSP block's own
    register where there is one), at one more cycle of latency for the whole array. With
    ``multiply_latency`` 2 the operands are registered too
    (:class:`~tpuer.hw.registered_multiplier.RegisteredMultiplier`), and the product of
    ``act_in`` is added two cycles later; with 3 the product is registered once more, in
    the fabric (the DSP block may sit far from the adder), and added three cycles later.

    The weight is double-buffered: ``weight_in`` is written into the *shadow* weight when
    ``weight_load`` is high, while the *active* weight keeps computing. ``switch_in`` travels
    right with the activations; it means "after this cycle, use the shadow weight": the cell
    copies shadow into active at the end of the cycle in which it sees the flag, so the
    product of that cycle still uses the old weight. Loading and switching in the same cycle
    is allowed (the switch takes the old shadow, the load writes the new one).

    Parameters
    ----------
    operand_shape : Shape
        Shape of activations and weights (``signed(8)``).
    acc_shape : Shape
        Shape of partial sums (``signed(32)``). Sums wrap on overflow; the array sizes it
        so that they cannot overflow.
    shared_multiplier : bool
        The product comes from outside (``product``: ``factor_act * factor_weight`` of the
        cycle before, registered there), so that two cells can share one DSP block
        (:class:`~tpuer.hw.dual_multiplier.DualMultiplier`).
    sum_outside : bool
        With ``shared_multiplier``, for a cell of the top two rows: the multiplier adds the
        product to ``psum_in`` itself (``addend``; ``product`` is then that sum, modulo
        ``2**16``, a cycle after the product), and ``psum_out`` is that sum: the cell has no
        adder and no partial-sum register. Two 8-bit products sum to at most ``2**15``, so
        the one sum that wraps, to ``-2**15``, is the one that no sum reaches.
    active_outside : bool
        With ``shared_multiplier``: the multiplier holds the active weight itself (the
        DSP's B register, loaded while ``switch_in`` is high), so ``factor_weight`` is the
        shadow weight and the cell keeps no active weight of its own.
    multiply_latency : int
        Cycles from ``act_in`` to its product: 1, 2 or 3 (not with ``shared_multiplier``).

    Latency: 1 cycle from ``act_in``/``switch_in`` to ``act_out``/``switch_out`` and from
    ``psum_in`` to ``psum_out``; ``1 + multiply_latency`` cycles from ``act_in`` to
    ``psum_out``.
    """

    def __init__(self, *, operand_shape, acc_shape, shared_multiplier=False,
                 active_outside=False, sum_outside=False, multiply_latency=1):
        for name, flag in (("active_outside", active_outside), ("sum_outside", sum_outside)):
            if flag and not shared_multiplier:
                raise ValueError(f"{name} needs shared_multiplier")
        if multiply_latency not in (1, 2, 3):
            raise ValueError(f"multiply_latency must be 1, 2 or 3, not {multiply_latency!r}")
        if shared_multiplier and multiply_latency != 1:
            raise ValueError("a shared multiplier gives its product a cycle after the "
                             "operands: multiply_latency must be 1")
        self._multiply_latency = multiply_latency
        self._sum_outside = sum_outside
        self._active_outside = active_outside
        self._operand_shape = Shape.cast(operand_shape)
        self._acc_shape = Shape.cast(acc_shape)
        self._shared_multiplier = shared_multiplier
        product = {}
        if sum_outside and self._acc_shape.width > 17:
            raise ValueError(f"sum_outside holds sums of at most 17 bits, not {self._acc_shape}")
        if shared_multiplier:
            product = {"factor_act": Out(self._operand_shape),
                       "factor_weight": Out(self._operand_shape),
                       "product": In(signed(2 * self._operand_shape.width))}
            if sum_outside:
                product.update({"addend": Out(signed(16)), "product": In(signed(16))})
        super().__init__({
            **product,
            "act_in": In(self._operand_shape),
            "switch_in": In(1),
            "psum_in": In(self._acc_shape),
            "weight_in": In(self._operand_shape),
            "weight_load": In(1),
            "act_out": Out(self._operand_shape),
            "switch_out": Out(1),
            "psum_out": Out(self._acc_shape),
        })

    def elaborate(self, platform):
        m = Module()
        active = Signal(self._operand_shape)
        shadow = Signal(self._operand_shape)

        if self._shared_multiplier:
            m.d.comb += [self.factor_act.eq(self.act_in),
                         self.factor_weight.eq(shadow if self._active_outside else active)]
            product = self.product
        elif self._multiply_latency >= 2:
            m.submodules.multiplier = multiplier = RegisteredMultiplier(self._operand_shape)
            m.d.comb += [multiplier.a.eq(self.act_in), multiplier.b.eq(active)]
            product = multiplier.p
            if self._multiply_latency == 3:
                product = Signal.like(multiplier.p, name="product")
                m.d.sync += product.eq(multiplier.p)
        else:
            product = Signal(signed(2 * self._operand_shape.width))
            m.d.sync += product.eq(self.act_in * active)
        m.d.sync += [
            self.act_out.eq(self.act_in),
            self.switch_out.eq(self.switch_in),
        ]
        if self._sum_outside:
            m.d.comb += self.addend.eq(self.psum_in)
            if len(self.psum_out) <= 16:
                m.d.comb += self.psum_out.eq(product)
            else:                       # 17 bits: 0x8000 stands for +2**15
                m.d.comb += self.psum_out.eq(Cat(product, product[15] & product[:15].any()))
        else:
            m.d.sync += self.psum_out.eq(self.psum_in + product)
        if not self._active_outside:
            with m.If(self.switch_in):
                m.d.sync += active.eq(shadow)
        with m.If(self.weight_load):
            m.d.sync += shadow.eq(self.weight_in)
        return m
