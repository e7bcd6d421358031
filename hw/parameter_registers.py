"""The activation parameters that CONFIG writes: biases, multipliers, shifts, zero point,
ReLU, rounding, clamp bounds."""

from amaranth.hdl import Cat, Module, Mux, Signal, Value, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..isa import ALL_LANES, FIELD_BITS, PER_LANE, ConfigParam, config_defaults
from .activation import PARAM_WRITE_LAYOUT, ActivationUnit

__all__ = ["ParameterRegisters", "RegisteredParameterRegisters"]

#: The member of ``params`` that holds each parameter but SHIFT, which is two: ``shift``
#: (its right shift) and ``left_shift`` (the places of a negative one).
_MEMBERS = {ConfigParam.BIAS: "bias", ConfigParam.MULTIPLIER: "multiplier",
            ConfigParam.ZERO_POINT: "zero_point", ConfigParam.RELU: "relu",
            ConfigParam.ROUNDING: "rounding", ConfigParam.CLAMP_MIN: "clamp_min",
            ConfigParam.CLAMP_MAX: "clamp_max"}


class ParameterRegisters(wiring.Component):
    """The activation unit's parameters, in registers that CONFIG writes.

    In the cycle a CONFIG retires (``write``), parameter ``param`` (a
    :class:`~tpuer.isa.ConfigParam`) takes ``value``, in lane ``lane`` or every lane
    (:data:`~tpuer.isa.ALL_LANES`) for the per-lane ones. The parameters in ``handed_on``
    (those a lane-serial activation unit keeps in its own memory) are not kept here: their
    writes go out on ``param_write`` while the CONFIG retires.

    Latency: ``params`` shows a write the cycle after it.

    Members
    -------
    write : In(1)
    param : In(4)
    lane : In(16)
    value : In(signed(32))
    params : Out(ActivationUnit params layout)
        After reset: the ISA's defaults (:func:`~tpuer.isa.config_defaults`). A SHIFT
        goes into ``shift`` when it is 0 or more and into ``left_shift`` (negated) when it
        is negative, the other member 0.
    param_write : Out(PARAM_WRITE_LAYOUT)
    """

    def __init__(self, cfg, *, handed_on=()):
        self._cfg = cfg
        self._handed_on = tuple(handed_on)
        defaults = config_defaults(cfg)
        init = {_MEMBERS[p]: [value] * cfg.cols if p in PER_LANE else value
                for p, value in defaults.items() if p is not ConfigParam.SHIFT}
        assert defaults[ConfigParam.SHIFT] == 0
        super().__init__({
            "write": In(1), "param": In(4), "lane": In(FIELD_BITS), "value": In(signed(32)),
            "params": Out(ActivationUnit.params_layout_for(cfg), init=init),
            "param_write": Out(PARAM_WRITE_LAYOUT),
        })

    def _targets(self):
        """The parameter bits to write, ``{param: bits}``: a bit per lane for the per-lane
        ones."""
        return {p: Signal(self._cfg.cols if p in PER_LANE else 1,
                          name=f"config_{p.name.lower()}_lanes")
                for p in ConfigParam if p not in self._handed_on}

    def _decode(self, m, targets, domain):
        """Set ``targets`` in ``domain`` while ``write`` is high, and drive ``param_write``."""
        cols = self._cfg.cols
        every_lane = self.lane == ALL_LANES
        m.d.comb += [self.param_write.multiplier.eq(self.param == ConfigParam.MULTIPLIER),
                     self.param_write.all_lanes.eq(every_lane),
                     self.param_write.lane.eq(self.lane),
                     self.param_write.value.eq(self.value)]
        with m.If(self.write):
            with m.Switch(self.param):
                for p in ConfigParam:
                    with m.Case(int(p)):
                        if p in self._handed_on:
                            m.d.comb += self.param_write.en.eq(1)
                        elif p in PER_LANE:
                            m.d[domain] += targets[p].eq(Cat(
                                every_lane | (self.lane == index) for index in range(cols)))
                        else:
                            m.d[domain] += targets[p].eq(1)

    def _store(self, m, targets, value):
        """Each parameter whose bit in ``targets`` is set takes ``value``."""
        params = self.params
        left = value[-1]                 # a negative SHIFT: a left shift
        for p, bits in targets.items():
            if p is ConfigParam.SHIFT:
                for index in range(self._cfg.cols):
                    with m.If(bits[index]):
                        m.d.sync += [params.shift[index].eq(Mux(left, 0, value)),
                                     params.left_shift[index].eq(Mux(left, -value, 0))]
            elif p in PER_LANE:
                for index in range(self._cfg.cols):
                    with m.If(bits[index]):
                        m.d.sync += params[_MEMBERS[p]][index].eq(value)
            else:
                with m.If(bits):
                    member = Value.cast(params[_MEMBERS[p]])
                    m.d.sync += member.eq(value[:len(member)])

    def elaborate(self, platform):
        m = Module()
        targets = self._targets()
        self._decode(m, targets, "comb")
        self._store(m, targets, self.value)
        return m


class RegisteredParameterRegisters(ParameterRegisters):
    """:class:`ParameterRegisters` for fast clocks: the decoded parameter bits and the value
    go into registers first and the parameters take them a cycle later, so that the late
    decision to retire a CONFIG reaches a handful of flip-flops, not the enables of every
    parameter bit. (A row that an ACTIVATE after it requantises reaches the parameters
    cycles later.)

    Latency: ``params`` shows a write two cycles after it; ``param_write`` as
    :class:`ParameterRegisters`.
    """

    def elaborate(self, platform):
        m = Module()
        targets = self._targets()
        value = Signal(signed(32), name="config_value")
        m.d.sync += [value.eq(self.value), *(bits.eq(0) for bits in targets.values())]
        self._decode(m, targets, "sync")
        self._store(m, targets, value)
        return m
