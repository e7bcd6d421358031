"""The activation units, and the one a configuration asks for."""

from amaranth.hdl import unsigned

from .activation import ActivationUnit, FabricProductActivationUnit, RegisteredActivationUnit
from .serial_activation import SerialActivationUnit

__all__ = ["activation_unit_class", "activation_unit", "activation_latency"]


def activation_unit_class(cfg):
    """The class of the activation unit ``cfg`` asks for: :class:`SerialActivationUnit` (a
    lane at a time, for devices without multipliers to spare) when ``cfg.activation_steps``
    is set, else the all-lanes unit whose multipliers suit ``cfg.multiply_latency``:
    :class:`ActivationUnit` (1), :class:`RegisteredActivationUnit` (2) or
    :class:`FabricProductActivationUnit` (3). All have the members of
    :class:`~tpuer.hw.activation.ActivationSignature`."""
    if cfg.activation_steps:
        return SerialActivationUnit
    return {1: ActivationUnit, 2: RegisteredActivationUnit,
            3: FabricProductActivationUnit}[cfg.multiply_latency]


def activation_unit(cfg, *, tag_shape=unsigned(16)):
    """The activation unit ``cfg`` asks for (:func:`activation_unit_class`)."""
    return activation_unit_class(cfg)(cfg, tag_shape=tag_shape)


def activation_latency(cfg):
    """Cycles from a row entering the activation unit of ``cfg`` to its result: 8 (11 with
    ``multiply_latency`` 2, 12 with 3), or ``cols * (activation_steps + 44) + 1`` for the
    lane-serial unit."""
    return activation_unit_class(cfg).latency_for(cfg)
