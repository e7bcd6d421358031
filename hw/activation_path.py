"""The activate path: an accumulator row, read, requantised by the activation unit, out to
the Unified Buffer's write port. Two forms behind one signature, picked by
:func:`activation_path`."""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .activation import PARAM_WRITE_LAYOUT, ActivationSignature, ActivationUnit
from .activation_units import activation_unit
from .arith import any_of
from .delay_line import delayed_with_payload

__all__ = ["ActivationPath", "RegisteredActivationPath", "activation_path"]


class ActivationPath(wiring.Component):
    """Takes an ``activate`` command when the activation unit admits its row (the caller
    reads accumulator row ``acc_addr`` in that cycle), hands the row arriving on
    ``acc_data`` ``cfg.memory_read_latency`` cycles later to the unit with the command's
    ``ub_addr``, and offers the unit's result on ``o`` (which cannot stall: the activated
    row always has the Unified Buffer's write port).

    This form raises ``busy`` from the cycle's own flags, for ``cfg.control_registers`` 0.

    Members
    -------
    activate : In(stream.Signature(activate layout))
        ``acc_addr``, ``ub_addr``.
    params, param_write : In
        As the activation unit's (:class:`~tpuer.hw.activation.ActivationSignature`).
    acc_data : In(ArrayLayout(acc, cols))
        The accumulators' read data.
    o : Out(stream.Signature(StructLayout({"data", "tag"}), always_ready=True))
        Requantised rows, ``tag`` their UB row.
    busy : Out(1)
        An activate is in flight (up to its UB write).

    Latency: a command taken in cycle ``t`` is on ``o`` in cycle
    ``t + cfg.memory_read_latency + L``, ``L`` the unit's
    (:func:`~tpuer.hw.activation_units.activation_latency`).
    """

    def __init__(self, cfg, *, activate_layout):
        self._cfg = cfg
        unit = ActivationSignature(cfg, cfg.ub_addr_width)
        super().__init__({
            "activate": In(stream.Signature(activate_layout)),
            "params": In(ActivationUnit.params_layout_for(cfg)),
            "param_write": In(PARAM_WRITE_LAYOUT),
            "acc_data": In(data.ArrayLayout(cfg.acc_shape, cfg.cols)),
            "o": Out(stream.Signature(unit.members["o"].signature.members["payload"].shape,
                                      always_ready=True)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        m.submodules.act = act = activation_unit(cfg, tag_shape=cfg.ub_addr_width)
        m.d.comb += [act.params.eq(self.params), act.param_write.eq(self.param_write)]
        activating = Signal()
        activating_ub_addr = Signal(cfg.ub_addr_width)
        reads = delayed_with_payload(m, activating, activating_ub_addr,
                                     cfg.memory_read_latency - 1, name="activating")
        in_flight = any_of(valid for valid, _ in reads)
        m.d.comb += self.activate.ready.eq(act.admits(in_flight))
        taken = self.activate.valid & self.activate.ready
        m.d.sync += [activating.eq(taken),
                     activating_ub_addr.eq(self.activate.payload.ub_addr)]
        m.d.comb += [
            act.i.payload.data.eq(self.acc_data),
            act.i.payload.tag.eq(reads[-1][1]),
            act.i.valid.eq(reads[-1][0]),
            act.o.ready.eq(1),
            self.o.payload.eq(act.o.payload),
            self.o.valid.eq(act.o.valid),
        ]
        self._busy(m, act, taken, reads, in_flight)
        return m

    def _busy(self, m, act, taken, reads, in_flight):
        m.d.comb += self.busy.eq(in_flight | act.busy)


class RegisteredActivationPath(ActivationPath):
    """An :class:`ActivationPath` whose ``busy`` is a register set a cycle ahead, of the
    same value (a row taken, or one moving on to the next stage, or the unit busy in the
    next cycle), so that the sequencer's hazard checks start from a register near them;
    for ``cfg.control_registers`` 1.

    Latency: as :class:`ActivationPath`'s.
    """

    def _busy(self, m, act, taken, reads, in_flight):
        m.d.sync += self.busy.eq(any_of([taken, *(valid for valid, _ in reads[:-1]),
                                         act.busy_next]))


def activation_path(cfg, **layouts):
    """The activate path ``cfg`` asks for: :class:`RegisteredActivationPath` with
    ``cfg.control_registers``, else :class:`ActivationPath`."""
    kind = RegisteredActivationPath if cfg.control_registers else ActivationPath
    return kind(cfg, **layouts)
