"""``tpuer.Device``: the public API of a TPU, whatever runs it."""

import numpy as np

from .config import Config
from .driver import MAX_EXACT_K, assemble_matmul, plan_matmul
from .isa import CoreState

__all__ = ["Device", "TPUError"]


class TPUError(RuntimeError):
    """The core stopped with an error (the message has the code and the instruction)."""


def _check_int8_matrix(name, value):
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a NumPy array of dtype int8, not {type(value).__name__}")
    if value.dtype != np.int8:
        raise TypeError(f"{name} must have dtype int8, not {value.dtype}")
    if value.ndim != 2:
        raise ValueError(f"{name} must be 2-D, not of shape {value.shape}")
    if 0 in value.shape:
        raise ValueError(f"{name} must not be empty, its shape is {value.shape}")


class Device:
    """A TPU with configuration ``config``, run by ``backend``:

    * ``"golden"``: the ISA-level NumPy model, timed by its cycle model (fast; the same
      results and the same counters as the RTL);
    * ``"pysim"``: the RTL in amaranth.sim;
    * ``"verilator"``, ``"icarus"``: the RTL's Verilog, through cocotb.

    After each call, :attr:`stats` holds ``cycles``, ``mxu_busy_cycles``,
    ``weight_stall_cycles``, ``macs`` (useful multiply-accumulates), ``instructions`` and
    ``programs`` of that call.
    """

    def __init__(self, config=None, backend="golden"):
        from .sim.core_backends import BACKENDS, make_backend
        config = Config() if config is None else config
        if not isinstance(config, Config):
            raise TypeError(f"config must be a tpuer.Config, not {type(config).__name__}")
        if config.operand_width != 8:
            raise ValueError(f"Device speaks int8: the configuration's operand_width must be 8, "
                             f"not {config.operand_width}")
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        self.config = config
        self.backend = backend
        self._backend = make_backend(backend, config)
        self.stats = {}

    def matmul(self, a, b):
        """The exact int32 product of int8 ``a`` (M, K) and int8 ``b`` (K, N)."""
        _check_int8_matrix("a", a)
        _check_int8_matrix("b", b)
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"a has {a.shape[1]} columns but b has {b.shape[0]} rows")
        if a.shape[1] > MAX_EXACT_K:
            raise ValueError(f"K = {a.shape[1]} could overflow int32; at most {MAX_EXACT_K}")
        steps = plan_matmul(self.config, a.astype(np.int64), b.astype(np.int64))
        runs = self._backend.run(steps)
        for index, run in enumerate(runs):
            if run.state is not CoreState.HALTED:
                raise TPUError(f"program {index} of the matmul stopped in {run.state.name} "
                               f"with {run.error.name} at instruction {run.error_pc}")
        result = assemble_matmul(self.config, a.shape[0], b.shape[1], steps,
                                 [run.host_out for run in runs])

        def total(name):
            values = [getattr(run, name) for run in runs]
            return None if any(v is None for v in values) else int(sum(values))

        self.stats = {
            "cycles": total("cycles"),
            "mxu_busy_cycles": total("mxu_busy_cycles"),
            "weight_stall_cycles": total("weight_stall_cycles"),
            "macs": int(a.shape[0] * a.shape[1] * b.shape[1]),
            "instructions": total("instructions"),
            "programs": len(runs),
        }
        return result
