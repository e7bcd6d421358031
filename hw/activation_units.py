"""The activation units, and the one a configuration asks for."""

from amaranth.hdl import unsigned

from .activation import ActivationUnit
from .serial_activation import SerialActivationUnit

__all__ = ["activation_unit_class", "activation_unit", "activation_latency"]


def activation_unit_class(cfg):
    """The class of the activation unit ``cfg`` asks for: :class:`ActivationUnit` (every
    lane at once), or :class:`SerialActivationUnit` (a lane at a time, for devices without
    multipliers to spare) when ``cfg.activation_steps`` is set. Both have the members of
    :class:`~tpuer.hw.activation.ActivationSignature`."""
    return SerialActivationUnit if cfg.activation_steps else ActivationUnit


def activation_unit(cfg, *, tag_shape=unsigned(16)):
    """The activation unit ``cfg`` asks for (:func:`activation_unit_class`)."""
    return activation_unit_class(cfg)(cfg, tag_shape=tag_shape)


def activation_latency(cfg):
    """Cycles from a row entering the activation unit of ``cfg`` to its result: 7 (9 with
    ``multiply_latency`` 2, 10 with 3), or ``cols * (activation_steps + 37) + 1`` for the
    lane-serial unit."""
    return activation_unit_class(cfg).latency_for(cfg)
