"""Verilog export of any block, with its ports named after its wiring signature."""

from amaranth.back import verilog
from amaranth.hdl import Signal

__all__ = ["port_signals", "port_map", "to_verilog", "blocks", "check_block", "build_block"]


def port_signals(component):
    """The signals of ``component``'s signature, in signature order.

    Constant members (such as the ``ready`` of an ``always_ready`` stream) are not ports and
    are left out.
    """
    return list(port_map(component).values())


def port_map(component):
    """``{verilog_name: signal}`` for the ports of ``component``: the signature path joined
    with ``__`` (``rows__payload``), as Amaranth names them in Verilog."""
    ports = {}
    for path, _member, value in component.signature.flatten(component):
        value = value.as_value() if hasattr(value, "as_value") else value
        if isinstance(value, Signal):
            ports["__".join(str(part) for part in path)] = value
    return ports


def to_verilog(component, *, name="top", platform=None):
    """Verilog text of ``component`` as a module called ``name``, elaborated for
    ``platform`` (an FPGA platform, for the vendor primitives it chooses) or for none."""
    return verilog.convert(component, name=name, ports=port_signals(component),
                           platform=platform, emit_src=False)


def blocks():
    """The blocks that can be exported or simulated on their own, by name."""
    from .accumulators import AccumulatorMemory
    from .activation_units import activation_unit
    from .core import Core
    from .tpu import TPU
    from .datapath import Datapath
    from .matrix_unit import matrix_unit
    from .systolic_array import SystolicArray
    from .unified_buffer import unified_buffer
    from .weight_fifo import WeightFIFO
    return {
        "matrix_unit": matrix_unit,
        "systolic_array": SystolicArray,
        "weight_fifo": WeightFIFO,
        "unified_buffer": unified_buffer,
        "accumulators": AccumulatorMemory,
        "activation": activation_unit,
        "datapath": Datapath,
        "core": Core,
        "tpu": TPU,
    }


def check_block(name):
    """Raise a ``ValueError`` naming the known blocks unless ``name`` is one of them."""
    if name not in blocks():
        raise ValueError(f"unknown block {name!r}; known blocks: {', '.join(blocks())}")


def build_block(name, cfg):
    """A new instance of block ``name`` for configuration ``cfg``."""
    check_block(name)
    return blocks()[name](cfg)
