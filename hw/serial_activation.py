"""Activation and requantisation one lane at a time, for devices without multipliers to
spare: the arithmetic of :class:`~tpuer.hw.activation.ActivationUnit` on a fraction of
its logic."""

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .activation import ActivationUnit, activation_latency, biased, high_half, rounded_output

__all__ = ["SerialActivationUnit"]


class SerialActivationUnit(wiring.Component):
    """Requantises a row of ``cfg.cols`` accumulator words lane by lane, bit for bit as
    :class:`~tpuer.hw.activation.ActivationUnit` (and the golden model
    :func:`tpuer.sim.activation_model.requantize`) does, with one bias adder, one
    ``32 x (32 / steps)``-bit multiplier and one rounding shifter for all lanes
    (``steps = cfg.activation_steps``).

    Per lane: one cycle adds the bias, ``steps`` cycles multiply (the multiplier's digits
    from the least significant up, the last one signed, the product shifted right as it
    grows), and the next two cycles, overlapped with the next lane, take the high half and
    round, shift and clamp it into the output row.

    Same members as :class:`~tpuer.hw.activation.ActivationUnit`. A row is taken when the
    unit is empty and its output free (or being taken).

    Latency: :attr:`latency` = ``cols * (steps + 1) + 3`` cycles from ``i`` to ``o``; the
    unit takes the next row in the cycle its output is taken.
    """

    def __init__(self, cfg, *, tag_shape=unsigned(16)):
        if not cfg.activation_steps:
            raise ValueError("a SerialActivationUnit needs cfg.activation_steps of 1 to 32")
        self._cfg = cfg
        self._tag_shape = tag_shape
        self.params_layout = ActivationUnit.params_layout_for(cfg)
        self.in_layout = data.StructLayout({
            "data": data.ArrayLayout(cfg.acc_shape, cfg.cols), "tag": tag_shape})
        self.out_layout = data.StructLayout({
            "data": data.ArrayLayout(cfg.operand_shape, cfg.cols), "tag": tag_shape})
        super().__init__({
            "params": In(self.params_layout),
            "i": In(stream.Signature(self.in_layout)),
            "o": Out(stream.Signature(self.out_layout)),
            "busy": Out(1),
        })

    @property
    def latency(self):
        return activation_latency(self._cfg)

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        p = self.params
        steps = cfg.activation_steps
        digit_bits = cfg.multiplier_width // steps
        cols = cfg.cols

        running = Signal()
        row = Signal(self.in_layout.members["data"])
        tag = Signal(self._tag_shape)
        lane = Signal(range(cols + 1))          # the lane being biased or multiplied
        phase = Signal(range(steps + 1))        # 0: bias; 1..steps: multiplier digits
        x = Signal(cfg.acc_shape)               # the biased accumulator word
        digits = Signal(cfg.multiplier_width)   # the multiplier's digits not yet used
        high_part = Signal(signed(cfg.multiplier_width + 1))   # the product >> bits done
        low_part = Signal(cfg.multiplier_width)                # the product's low 32 bits
        product_ready = Signal()                # a lane's product is complete
        product_lane = Signal(range(cols))
        high = Signal(signed(32))               # stage 3 result of the lane before
        high_valid = Signal()
        high_lane = Signal(range(cols))

        output_free = ~self.o.valid | self.o.ready
        m.d.comb += [self.i.ready.eq(~running & output_free),
                     self.busy.eq(running | self.o.valid)]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [running.eq(1), row.eq(self.i.payload.data),
                         tag.eq(self.i.payload.tag), lane.eq(0), phase.eq(0)]

        # Bias, then the multiplication: a digit per cycle.
        multiplying = running & (lane != cols)
        m.d.sync += product_ready.eq(0)
        with m.If(multiplying):
            with m.If(phase == 0):
                m.d.sync += [x.eq(biased(cfg, row[lane], p.bias[lane])),
                             digits.eq(p.multiplier[lane]), high_part.eq(0), phase.eq(1)]
            with m.Else():
                last_digit = phase == steps
                digit = Cat(digits[:digit_bits],
                            Mux(last_digit, digits[digit_bits - 1], 0)).as_signed()
                partial = Signal(signed(cfg.multiplier_width + digit_bits + 2))
                m.d.comb += partial.eq(high_part + x * digit)
                m.d.sync += [
                    low_part.eq(Cat(low_part[digit_bits:], partial[:digit_bits])),
                    high_part.eq(partial >> digit_bits),
                    digits.eq(digits >> digit_bits),
                    phase.eq(Mux(last_digit, 0, phase + 1)),
                ]
                with m.If(last_digit):
                    m.d.sync += [lane.eq(lane + 1), product_ready.eq(1),
                                 product_lane.eq(lane)]

        # The high half of the lane just multiplied, then its output byte.
        product = Cat(low_part, high_part[:32]).as_signed()
        m.d.sync += high_valid.eq(product_ready)
        with m.If(product_ready):
            m.d.sync += [high.eq(high_half(m, cfg, product)), high_lane.eq(product_lane)]
        with m.If(high_valid):
            out = rounded_output(m, cfg, high, p.shift[high_lane], p.zero_point, p.relu)
            with m.Switch(high_lane):
                for index in range(cols):
                    with m.Case(index):
                        m.d.sync += self.o.payload.data[index].eq(out)
            with m.If(high_lane == cols - 1):      # the row's last lane
                m.d.sync += [self.o.valid.eq(1), self.o.payload.tag.eq(tag), running.eq(0)]
        return m
