"""Activation and requantisation one lane at a time, for devices without multipliers to
spare: the arithmetic of :class:`~tpuer.hw.activation.ActivationUnit` on a fraction of
its logic."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring

from .activation import (ActivationSignature, ActivationUnit, biased, clamped, lower_bound,
                         nudge, saturated_output, takes_nudge)
from ..isa import MAX_LEFT_SHIFT, ConfigParam, Rounding
from .block_ram import BlockRAM
from .arith import saturate

__all__ = ["SerialActivationUnit", "SERIAL_SHIFT_CYCLES", "SERIAL_LANE_CYCLES"]

#: Cycles the rounding right shift takes per lane: one bit per cycle, always this many, so
#: that the latency does not depend on the shift.
SERIAL_SHIFT_CYCLES = 31

#: Cycles per lane besides the product's digit steps.
SERIAL_LANE_CYCLES = 6 + MAX_LEFT_SHIFT + SERIAL_SHIFT_CYCLES


class SerialActivationUnit(wiring.Component):
    """Requantises a row of ``cfg.cols`` accumulator words lane by lane, bit for bit as
    :class:`~tpuer.hw.activation.ActivationUnit` (and the golden model
    :func:`tpuer.sim.activation_model.requantize`) does, with a handful of adders and no
    multiplier or barrel shifter (``steps = cfg.activation_steps``).

    The biases and multipliers live in the unit, written on ``param_write`` into a small
    block RAM: per lane, or for all lanes at once into a word of its own that a lane uses
    until it is given a value of its own (so that writing every lane takes one cycle too).
    Shifts, zero point, ReLU, rounding and clamp bounds come from ``params`` (its biases
    and multipliers are not used).

    Per lane, ``steps +`` :data:`SERIAL_LANE_CYCLES` (``steps + 44``) cycles:

    * 1: read the lane's bias;
    * 1: ``x = saturate(acc + bias)``; read the lane's multiplier;
    * :data:`~tpuer.isa.MAX_LEFT_SHIFT`: the left shift, a place per cycle while
      ``left_shift`` lasts;
    * 1: the product's running sum starts at the rounding nudge, ``2**30`` (whatever the
      product's sign: see :func:`~tpuer.hw.activation.high_half`), or 0 where single
      rounding leaves the rounding to the right shift;
    * ``steps``: ``x * M`` adds ``32 / steps`` bits of the multiplier per cycle, least
      significant first (the last digit signed), the finished low bits shifted out;
    * 1: the high half: ``(x * M + 2**30) >> 31``, saturated;
    * :data:`SERIAL_SHIFT_CYCLES`: the right shift, a bit per cycle while ``shift`` lasts,
      keeping the last bit shifted out and whether any before it was set (which is all that
      rounding half away from zero, or half up, needs);
    * 1: whether the shifted value lies beyond ``operand_width + 1`` signed bits;
    * 1: rounding, the zero point and the clamps, as the all-lanes unit's
      (:func:`~tpuer.hw.activation.saturated_output`, :func:`~tpuer.hw.activation.clamped`);
      the byte goes into the output row, which shifts down a lane.

    Members: those of :class:`~tpuer.hw.activation.ActivationSignature`; ``param_write``
    is taken only while ``busy`` is low.
    After reset every bias is 0 and every multiplier ``2**31 - 1`` (the unit writes them
    into its RAM in its first two cycles without a ``param_write``, and takes no row before).
    A row is taken when the unit is empty and its output free (or being taken).

    Latency: :attr:`latency` = ``cols * (steps + 44) + 1`` cycles from ``i`` to ``o``; the
    unit takes the next row in the cycle its output is taken.
    """

    #: The parameters the unit keeps in its own memory, written on ``param_write``.
    KEPT_PARAMETERS = (ConfigParam.BIAS, ConfigParam.MULTIPLIER)

    def __init__(self, cfg, *, tag_shape=unsigned(16)):
        if not cfg.activation_steps:
            raise ValueError("a SerialActivationUnit needs cfg.activation_steps of 1 to 32")
        self._cfg = cfg
        self._tag_shape = tag_shape
        self.params_layout = ActivationUnit.params_layout_for(cfg)
        super().__init__(ActivationSignature(cfg, tag_shape))
        self.in_layout = self.i.payload.shape()
        self.out_layout = self.o.payload.shape()
        self.latency = self.latency_for(cfg)

    @staticmethod
    def latency_for(cfg):
        """Cycles from a row entering the unit to its result: ``cols * (activation_steps
        + 44) + 1``."""
        return cfg.cols * (cfg.activation_steps + SERIAL_LANE_CYCLES) + 1

    def admits(self, in_flight):
        """Whether a row may start on its way to the unit (read from the accumulators)
        while others are (``in_flight``): only when none is and the unit is empty, as it
        takes a row only then."""
        return ~in_flight & self.i.ready

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        p = self.params
        steps = cfg.activation_steps
        digit_bits = cfg.multiplier_width // steps
        cols = cfg.cols
        # The phases of a lane.
        READ_BIAS, BIAS, LEFT = 0, 1, 2
        NUDGE = LEFT + MAX_LEFT_SHIFT
        HIGH = NUDGE + steps + 1
        SHIFT = HIGH + 1
        ROUND = SHIFT + SERIAL_SHIFT_CYCLES
        OUTPUT = ROUND + 1

        running = Signal()
        row = Signal(self.in_layout.members["data"], reset_less=True)    # data, no reset
        lane = Signal(range(max(cols, 2)))
        phase = Signal(range(OUTPUT + 1))
        # The working registers hold data only: no reset (fewer gates before them).
        x = Signal(signed(32), reset_less=True)        # the biased word, shifted left
        high_part = Signal(signed(cfg.multiplier_width + 1),
                           reset_less=True)                         # running sum >> bits done
        # Of the sum's finished low bits only bit 31 counts: it is in the digit finished last.
        low_digit = Signal(digit_bits, reset_less=True)     # written by every digit step
        value = Signal(signed(32), reset_less=True)     # the high half, shifted right
        shifts_left = Signal(cfg.shift_shape)     # places of the left, then the right shift
        last_out = Signal()           # the bit last shifted out of ``value``
        sticky = Signal()             # some bit shifted out before it was set
        beyond = Signal()             # the shifted value is beyond the clamp's reach

        output_free = ~self.o.valid | self.o.ready
        m.d.comb += self.busy.eq(running | self.o.valid)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        load_row = self.i.valid & self.i.ready
        # (A row's last lane ends ``running`` and sets ``o.valid`` in the same cycle.)
        m.d.comb += self.busy_next.eq(load_row | running | (self.o.valid & ~self.o.ready))
        # The row's tag goes straight to the output, which is free whenever a row is taken
        # (and not valid while it is worked on).
        with m.If(load_row):
            m.d.sync += [running.eq(1), self.o.payload.tag.eq(self.i.payload.tag),
                         lane.eq(0), phase.eq(READ_BIAS)]

        # The row: loaded, then shifted down a lane after each lane, so that the lane being
        # worked on is always word 0 (no multiplexer picks it); one enable for both.
        with m.If(load_row | (running & (phase == OUTPUT))):
            m.d.sync += row.as_value().eq(Mux(load_row, self.i.payload.data.as_value(),
                                              row.as_value() >> cfg.acc_width))

        lane_params = self._lane_parameters(m, lane, running, free=~running & output_free,
                                            reading_bias=phase == READ_BIAS,
                                            reading_multiplier=phase == BIAS)
        bias = multiplier = lane_params.read_data.as_signed()

        # The multiplier's next digit into a register, so that picking it (the lane's word,
        # then the digit) is not on the adder's path: in phase NUDGE + k, digit k.
        digit_register = Signal(digit_bits)
        final_digit = Signal()          # the digit in digit_register is the last, signed one
        m.d.sync += final_digit.eq(phase == NUDGE + steps - 1)
        next_index = (phase - NUDGE)[:max(1, (steps - 1).bit_length())]
        m.d.sync += digit_register.eq(multiplier.word_select(next_index, digit_bits)
                                      if steps > 1 else multiplier)

        with m.If(running):
            m.d.sync += phase.eq(phase + 1)
            with m.If(phase == BIAS):
                m.d.sync += [x.eq(biased(cfg, row[0], bias)),
                             shifts_left.eq(p.left_shift[lane])]

            with m.Elif((phase >= LEFT) & (phase < NUDGE)):
                with m.If(shifts_left != 0):
                    m.d.sync += [x.eq(x << 1), shifts_left.eq(shifts_left - 1)]

            with m.Elif(phase == NUDGE):
                # The nudge 2**30 whatever the product's sign (see high_half), if any.
                m.d.sync += high_part.eq(nudge(cfg, takes_nudge(p.rounding, p.shift[lane])))

            with m.Elif((phase > NUDGE) & (phase < HIGH)):
                # Digit ``phase - NUDGE - 1`` of the multiplier, picked in the cycle before;
                # the last one carries its sign.
                partial = self._digit_product(m, high_part, x, digit_register, final_digit)
                m.d.sync += [low_digit.eq(partial[:digit_bits]),
                             high_part.eq(partial >> digit_bits)]

            with m.Elif(phase == HIGH):
                # x * M + 2**30 is Cat(low bits, high_part): floored by dropping 31 bits
                high, _ = saturate(Cat(low_digit[-1], high_part).as_signed(), signed(32))
                m.d.sync += [value.eq(high), shifts_left.eq(p.shift[lane]), last_out.eq(0),
                             sticky.eq(0)]

            with m.Elif((phase > HIGH) & (phase < ROUND)):
                with m.If(shifts_left != 0):
                    m.d.sync += [value.eq(value >> 1), last_out.eq(value[0]),
                                 sticky.eq(sticky | last_out), shifts_left.eq(shifts_left - 1)]

            with m.Elif(phase == ROUND):
                # Whether the shifted value lies beyond operand_width + 1 signed bits, where
                # no zero point brings it back into the operand range.
                upper = value[cfg.operand_width:]
                m.d.sync += beyond.eq(upper != value[-1].replicate(len(upper)))

            with m.Elif(phase == OUTPUT):
                # value >> shift rounds up when the bit below it is set and, for a negative
                # value, some bit below that too: exactly gemmlowp's remainder > threshold;
                # with single rounding whenever that bit is set (half up).
                round_up = last_out & (~value[-1] | sticky |
                                       (p.rounding == Rounding.SINGLE))
                out = clamped(saturated_output(cfg, value, round_up, beyond, p.zero_point),
                              lower_bound(p), p.clamp_max)
                m.d.sync += [self.o.payload.data.as_value().eq(
                                 Cat(self.o.payload.data.as_value()[cfg.operand_width:],
                                     out[:cfg.operand_width])),
                             phase.eq(READ_BIAS), lane.eq(lane + 1)]
                with m.If(lane == cols - 1):          # the row's last lane
                    m.d.sync += [self.o.valid.eq(1), running.eq(0)]
        return m

    def _lane_parameters(self, m, lane, running, *, free, reading_bias, reading_multiplier):
        """The biases and multipliers: in a block RAM, a word per lane and kind and one for
        all lanes (slot ``ALL``), which a lane uses until it has a word of its own; read
        for ``lane`` (while ``running``) the bias in the cycle of ``reading_bias``, the
        multiplier in that of ``reading_multiplier``, which the RAM's output holds from
        then on. After reset the unit writes the reset values into the two ALL slots
        itself, in cycles without a write from outside (the first two, as nothing writes
        that early through the sequencer), and takes no row before: ``i.ready`` is ``free``
        once they are in.

        Returns the RAM, whose ``read_data`` is the word read."""
        cfg = self._cfg
        cols = cfg.cols
        lane_bits = len(lane)
        ALL = 1 << lane_bits
        m.submodules.lane_params = lane_params = BlockRAM(width=32, depth=4 << lane_bits)
        w = self.param_write
        bias_own = Signal(cols)               # lane k has a bias of its own in the RAM
        multiplier_own = Signal(cols)
        bias_reset = Signal(init=1)           # the ALL slot's bias (0) is still to be written
        multiplier_reset = Signal(init=1)     # ... its multiplier (2**31 - 1)
        m.d.comb += self.i.ready.eq(free & ~bias_reset & ~multiplier_reset)
        with m.If(~w.en & (bias_reset | multiplier_reset)):
            m.d.comb += [lane_params.write_addr.eq(Cat(Const(ALL, lane_bits + 1), ~bias_reset)),
                         lane_params.write_data.eq(Mux(bias_reset, 0, (1 << 31) - 1)),
                         lane_params.write_en.eq(1)]
            with m.If(bias_reset):
                m.d.sync += bias_reset.eq(0)
            with m.Else():
                m.d.sync += multiplier_reset.eq(0)
        with m.Else():
            m.d.comb += [lane_params.write_addr.eq(
                             Cat(Mux(w.all_lanes, ALL, w.lane[:lane_bits]), w.multiplier)),
                         lane_params.write_data.eq(w.value),
                         lane_params.write_en.eq(w.en & (w.all_lanes | (w.lane < cols)))]
        with m.If(w.en):
            with m.If(w.all_lanes):
                with m.If(w.multiplier):
                    m.d.sync += [multiplier_own.eq(0), multiplier_reset.eq(0)]
                with m.Else():
                    m.d.sync += [bias_own.eq(0), bias_reset.eq(0)]
            with m.Elif(w.lane < cols):
                with m.If(w.multiplier):
                    m.d.sync += multiplier_own.bit_select(w.lane[:lane_bits], 1).eq(1)
                with m.Else():
                    m.d.sync += bias_own.bit_select(w.lane[:lane_bits], 1).eq(1)
        own = Mux(reading_multiplier, multiplier_own.bit_select(lane, 1),
                  bias_own.bit_select(lane, 1))
        m.d.comb += [lane_params.read_addr.eq(Cat(Mux(own, lane[:lane_bits], ALL),
                                                  reading_multiplier)),
                     lane_params.read_en.eq(running & (reading_bias | reading_multiplier))]
        return lane_params

    def _digit_product(self, m, high_part, x, digit_register, final_digit):
        """``high_part + x * digit``, the digit (``digit_register``, signed when
        ``final_digit``) a fraction of the multiplier: with one-bit digits a single carry
        chain and no multiplier."""
        cfg = self._cfg
        digit_bits = len(digit_register)
        partial = Signal(signed(cfg.multiplier_width + digit_bits + 2))
        if digit_bits == 1:
            # x * digit without a multiplier: x, -x (= ~x + 1) for the sign bit, or 0
            bit = digit_register[0]
            addend = Mux(bit, Mux(final_digit, ~x, x), 0)
            # high_part + addend + carry as one carry chain: with the carry as the low bit
            # of both operands, the sum's low bit is 0 and carries it in.
            carry = final_digit & bit
            wide = Signal(signed(cfg.multiplier_width + 4))
            m.d.comb += [wide.eq(Cat(carry, high_part).as_signed() +
                                 Cat(carry, addend.as_signed()).as_signed()),
                         partial.eq(wide >> 1)]
        else:
            digit = Cat(digit_register, Mux(final_digit, digit_register[-1], 0)).as_signed()
            m.d.comb += partial.eq(high_part + x * digit)
        return partial
