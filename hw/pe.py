"""Weight-stationary processing element with a double-buffered weight."""

from amaranth.hdl import Cat, Module, Shape, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .registered_multiplier import RegisteredMultiplier

__all__ = ["ProcessingElement", "RegisteredProcessingElement",
           "FabricProductProcessingElement", "SharedMultiplierCell", "processing_element"]


class ProcessingElement(wiring.Component):
    """One multiply-accumulate cell of the systolic array, with a multiplier of its own.

    Every cycle the cell multiplies ``act_in`` by its weight into a product register and
    adds the product of the cycle before to ``psum_in``; it passes the sum down
    (``psum_out``) and the activation right (``act_out``), each through one register. The
    product register keeps the multiplier out of the adder's path (a DSP block's own
    register where there is one), at one more cycle of latency for the whole array.

    The weight is double-buffered: ``weight_in`` is written into the *shadow* weight when
    ``weight_load`` is high, while the *active* weight keeps computing. ``switch_in`` travels
    right with the activations; it means "after this cycle, use the shadow weight": the cell
    copies shadow into active at the end of the cycle in which it sees the flag, so the
    product of that cycle still uses the old weight. Loading and switching in the same cycle
    is allowed (the switch takes the old shadow, the load writes the new one).

    The forms (:func:`processing_element` picks one): this one (``multiply_latency`` 1),
    :class:`RegisteredProcessingElement` (2), :class:`FabricProductProcessingElement` (3)
    and :class:`SharedMultiplierCell` (two cells to a DSP block, on the iCE40).

    Parameters
    ----------
    operand_shape : Shape
        Shape of activations and weights (``signed(8)``).
    acc_shape : Shape
        Shape of partial sums (``signed(32)``). Sums wrap on overflow; the array sizes it
        so that they cannot overflow.

    Latency: 1 cycle from ``act_in``/``switch_in`` to ``act_out``/``switch_out`` and from
    ``psum_in`` to ``psum_out``; ``1 + multiply_latency`` cycles from ``act_in`` to
    ``psum_out`` (:attr:`multiply_latency`).
    """

    #: Cycles from ``act_in`` to its product.
    multiply_latency = 1

    def __init__(self, *, operand_shape, acc_shape):
        self._operand_shape = Shape.cast(operand_shape)
        self._acc_shape = Shape.cast(acc_shape)
        super().__init__({
            **self._multiplier_members(),
            "act_in": In(self._operand_shape),
            "switch_in": In(1),
            "psum_in": In(self._acc_shape),
            "weight_in": In(self._operand_shape),
            "weight_load": In(1),
            "act_out": Out(self._operand_shape),
            "switch_out": Out(1),
            "psum_out": Out(self._acc_shape),
        })

    def _multiplier_members(self):
        """Members for a multiplier outside the cell: none here."""
        return {}

    def elaborate(self, platform):
        m = Module()
        active = Signal(self._operand_shape)
        shadow = Signal(self._operand_shape)
        product = self._product(m, active, shadow)
        m.d.sync += [
            self.act_out.eq(self.act_in),
            self.switch_out.eq(self.switch_in),
        ]
        self._sum(m, product)
        self._switch(m, active, shadow)
        with m.If(self.weight_load):
            m.d.sync += shadow.eq(self.weight_in)
        return m

    def _product(self, m, active, shadow):
        """``act_in * active``, ``multiply_latency`` cycles later."""
        product = Signal(signed(2 * self._operand_shape.width))
        m.d.sync += product.eq(self.act_in * active)
        return product

    def _sum(self, m, product):
        m.d.sync += self.psum_out.eq(self.psum_in + product)

    def _switch(self, m, active, shadow):
        with m.If(self.switch_in):
            m.d.sync += active.eq(shadow)


class RegisteredProcessingElement(ProcessingElement):
    """A :class:`ProcessingElement` whose operands are registered too
    (:class:`~tpuer.hw.registered_multiplier.RegisteredMultiplier`): the product of
    ``act_in`` is added two cycles later, so that the multiplier (a DSP block that may sit
    far from the cell's logic) has a clock period of its own."""

    multiply_latency = 2

    def _product(self, m, active, shadow):
        m.submodules.multiplier = multiplier = RegisteredMultiplier(self._operand_shape)
        m.d.comb += [multiplier.a.eq(self.act_in), multiplier.b.eq(active)]
        return multiplier.p


class FabricProductProcessingElement(RegisteredProcessingElement):
    """A :class:`RegisteredProcessingElement` whose product is registered once more, in
    the fabric (the DSP block may sit far from the adder), and added three cycles
    later."""

    multiply_latency = 3

    def _product(self, m, active, shadow):
        from_dsp = super()._product(m, active, shadow)
        product = Signal.like(from_dsp, name="product")
        m.d.sync += product.eq(from_dsp)
        return product


class SharedMultiplierCell(ProcessingElement):
    """A :class:`ProcessingElement` whose product comes from outside (``product``:
    ``factor_act * factor_weight`` of the cycle before, registered there), so that two cells
    can share one DSP block (:class:`~tpuer.hw.dual_multiplier.DualMultiplier`).

    Parameters
    ----------
    active_outside : bool
        The multiplier holds the active weight itself (the DSP's B register, loaded while
        ``switch_in`` is high), so ``factor_weight`` is the shadow weight and the cell
        keeps no active weight of its own.
    sum_outside : bool
        For a cell of the top two rows: the multiplier adds the product to ``psum_in``
        itself (``addend``; ``product`` is then that sum, modulo ``2**16``, a cycle after
        the product), and ``psum_out`` is that sum: the cell has no adder and no
        partial-sum register. Two 8-bit products sum to at most ``2**15``, so the one sum
        that wraps, to ``-2**15``, is the one that no sum reaches.
    """

    def __init__(self, *, operand_shape, acc_shape, active_outside=False,
                 sum_outside=False):
        if sum_outside and Shape.cast(acc_shape).width > 17:
            raise ValueError(f"sum_outside holds sums of at most 17 bits, not {acc_shape}")
        self._active_outside = active_outside
        self._sum_outside = sum_outside
        super().__init__(operand_shape=operand_shape, acc_shape=acc_shape)

    def _multiplier_members(self):
        members = {"factor_act": Out(self._operand_shape),
                   "factor_weight": Out(self._operand_shape),
                   "product": In(signed(2 * self._operand_shape.width))}
        if self._sum_outside:
            members.update({"addend": Out(signed(16)), "product": In(signed(16))})
        return members

    def _product(self, m, active, shadow):
        m.d.comb += [self.factor_act.eq(self.act_in),
                     self.factor_weight.eq(shadow if self._active_outside else active)]
        return self.product

    def _sum(self, m, product):
        if not self._sum_outside:
            super()._sum(m, product)
            return
        m.d.comb += self.addend.eq(self.psum_in)
        if len(self.psum_out) <= 16:
            m.d.comb += self.psum_out.eq(product)
        else:                       # 17 bits: 0x8000 stands for +2**15
            m.d.comb += self.psum_out.eq(Cat(product, product[15] & product[:15].any()))

    def _switch(self, m, active, shadow):
        if not self._active_outside:
            super()._switch(m, active, shadow)


def processing_element(*, operand_shape, acc_shape, multiply_latency):
    """The cell with a multiplier of its own for ``multiply_latency`` 1, 2 or 3."""
    kinds = {1: ProcessingElement, 2: RegisteredProcessingElement,
             3: FabricProductProcessingElement}
    if multiply_latency not in kinds:
        raise ValueError(f"multiply_latency must be 1, 2 or 3, not {multiply_latency!r}")
    return kinds[multiply_latency](operand_shape=operand_shape, acc_shape=acc_shape)
