"""The activation parameters that CONFIG writes: biases, multipliers, shifts, zero point,
ReLU."""

from amaranth.hdl import Cat, Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..isa import ALL_LANES, CONFIG_DEFAULTS, FIELD_BITS, ConfigParam
from .activation import PARAM_WRITE_LAYOUT, ActivationUnit

__all__ = ["ParameterRegisters", "RegisteredParameterRegisters"]

#: The parameters kept a value per lane, and the member of ``params`` that holds each.
_PER_LANE = {ConfigParam.BIAS: "bias", ConfigParam.MULTIPLIER: "multiplier",
             ConfigParam.SHIFT: "shift"}


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
        After reset: the ISA's defaults (a multiplier of ~1.0, everything else 0).
    param_write : Out(PARAM_WRITE_LAYOUT)
    """

    def __init__(self, cfg, *, handed_on=()):
        self._cfg = cfg
        self._handed_on = tuple(handed_on)
        super().__init__({
            "write": In(1), "param": In(4), "lane": In(FIELD_BITS), "value": In(signed(32)),
            "params": Out(ActivationUnit.params_layout_for(cfg),
                          init={"multiplier": [CONFIG_DEFAULTS[ConfigParam.MULTIPLIER]] *
                                cfg.cols}),
            "param_write": Out(PARAM_WRITE_LAYOUT),
        })

    def _targets(self):
        """The parameter bits to write, ``{param: bits}``: a bit per lane for the per-lane
        ones."""
        targets = {p: Signal(self._cfg.cols, name=f"config_{p.name.lower()}_lanes")
                   for p in _PER_LANE if p not in self._handed_on}
        targets[ConfigParam.ZERO_POINT] = Signal(name="config_zero_point")
        targets[ConfigParam.RELU] = Signal(name="config_relu")
        return targets

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
                for p in (*_PER_LANE, ConfigParam.ZERO_POINT, ConfigParam.RELU):
                    with m.Case(int(p)):
                        if p in self._handed_on:
                            m.d.comb += self.param_write.en.eq(1)
                        elif p in _PER_LANE:
                            m.d[domain] += targets[p].eq(Cat(
                                every_lane | (self.lane == index) for index in range(cols)))
                        else:
                            m.d[domain] += targets[p].eq(1)

    def _store(self, m, targets, value):
        """Each parameter whose bit in ``targets`` is set takes ``value``."""
        params = self.params
        for p, bits in targets.items():
            if p in _PER_LANE:
                for index in range(self._cfg.cols):
                    with m.If(bits[index]):
                        m.d.sync += params[_PER_LANE[p]][index].eq(value)
        with m.If(targets[ConfigParam.ZERO_POINT]):
            m.d.sync += params.zero_point.eq(value)
        with m.If(targets[ConfigParam.RELU]):
            m.d.sync += params.relu.eq(value[0])

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
