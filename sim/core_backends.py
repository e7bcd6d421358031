"""Back ends that run driver steps on the core: the golden model, amaranth.sim, Verilator
with its host in C++ (:mod:`tpuer.sim.verilator_driver`), and the cocotb simulators. Each
returns, per step, the rows sent to the host, the status and the counters."""

import pickle
import tempfile
from pathlib import Path

from ..protocol import run_bytes
from .isa_model import CoreModel

__all__ = ["BACKENDS", "TRACING_BACKENDS", "make_backend", "TracedBackend", "TraceMismatch"]

BACKENDS = ("golden", "pysim", "verilator", "icarus", "serial")
#: The back ends that record a cycle trace (``Device(trace=True)``): all but the golden one
#: through :class:`TracedBackend`.
TRACING_BACKENDS = ("golden", "pysim", "verilator", "icarus", "serial")


class GoldenBackend:
    """The ISA-level model, timed by the cycle model: the same results and counters as
    the RTL back ends. Like them, it starts every call from a core just out of reset and
    runs the call's steps one after another, yielding (step, run) as each ends; with
    ``trace`` (a :class:`~tpuer.sim.trace.Trace`) it records every cycle of every run."""

    name = "golden"

    def __init__(self, cfg):
        self.cfg = cfg

    def run(self, steps, *, max_cycles, trace=None):
        from ..tb.core_tb import CoreRun
        from .trace import Recorder
        model = CoreModel(self.cfg)
        used, loaded = 0, None
        for step in steps:
            if step.weights is not loaded:       # (a layer's blocks share one array)
                model.load_weights(0, step.weights)
                loaded = step.weights
            model.load_program(step.program)
            recorder = Recorder() if trace is not None else None
            result = model.run(0, host_in=step.host_in, max_cycles=max_cycles - used,
                               recorder=recorder)
            if trace is not None:
                _add_run(trace, self.cfg, step, recorder.finish(), model, result,
                         len(result.host_out))
            used += result.cycles
            yield step, CoreRun(state=result.state, error=result.error,
                                error_pc=result.error_pc, host_out=result.host_out,
                                cycles=result.cycles, mxu_busy_cycles=result.mxu_busy_cycles,
                                weight_stall_cycles=result.weight_stall_cycles,
                                instructions=result.instructions)


def _add_run(trace, cfg, step, recorder, model, result, rows_out):
    """Add the run of ``step`` on ``model`` (its :class:`~tpuer.sim.trace.Recorder` and
    ``result``, ``rows_out`` rows sent) to ``trace``."""
    trace.add_run(recorder, model.program[:result.instructions], useful_macs=step.useful_macs,
                  host_bytes=run_bytes(cfg, len(step.program), len(step.weights),
                                       len(step.host_in), rows_out))


class TraceMismatch(RuntimeError):
    """The RTL did, in some cycle, what the cycle model's trace says it did not."""


class TracedBackend:
    """An RTL back end (``rtl``) whose runs are traced: each is run on the cycle model too,
    which records the trace, and what the RTL did in every cycle, as far as its ports show
    it (vectors into the matrix unit, weight stalls, instructions retired, host rows in
    and out: :func:`~tpuer.tb.core_tb.rtl_activity`), must be what the trace says, cycle
    for cycle, else :class:`TraceMismatch`. A TPU on a board shows only its counters,
    which must be the trace's; its serial link's frames and retries of each program go on
    the trace's link track."""

    def __init__(self, rtl, cfg):
        self.rtl = rtl
        self.cfg = cfg

    def run(self, steps, *, max_cycles, trace):
        from .trace import Recorder, first_difference
        model = CoreModel(self.cfg)
        pending = []

        def kept(steps):
            for step in steps:
                pending.append(step)
                yield step

        link = getattr(self.rtl, "link", None)
        sent = (link.requests, link.retries) if link is not None else None
        for step, run in self.rtl.run(kept(steps), max_cycles=max_cycles, activity=True):
            pending.pop(0)          # (the same step, or its copy from another process)
            model.load_weights(0, step.weights)
            model.load_program(step.program)
            recorder = Recorder()
            result = model.run(0, host_in=step.host_in, max_cycles=1 << 62, recorder=recorder)
            recorder.finish()
            if link is not None:
                trace.add_link_event("frames", frames=link.requests - sent[0],
                                     retries=link.retries - sent[1])
                sent = (link.requests, link.retries)
            for name in ("cycles", "mxu_busy_cycles", "weight_stall_cycles", "instructions"):
                if getattr(run, name) != getattr(result, name):
                    raise TraceMismatch(f"program {len(trace.runs)}: the {self.rtl.name} "
                                        f"TPU's {name} is {getattr(run, name):,}, the cycle "
                                        f"model's trace has {getattr(result, name):,}")
            difference = first_difference(run.activity or {}, recorder)
            if difference is not None:
                raise TraceMismatch(
                    f"program {len(trace.runs)}: the {self.rtl.name} RTL's {difference[0]} "
                    f"differs from the cycle model's trace first in cycle {difference[1]}")
            _add_run(trace, self.cfg, step, recorder, model, result, len(run.host_out))
            yield step, run


class PysimBackend:
    """The RTL in amaranth.sim: one simulation per call, all steps in it, a step made only
    when the bench asks for it."""

    name = "pysim"

    def __init__(self, cfg):
        self.cfg = cfg

    def run(self, steps, *, max_cycles, activity=False):
        from ..hw.core import Core
        from ..tb.core_tb import run_steps
        from ..tb.pysim import run_pysim
        runs = []

        async def bench(io, cfg):
            await run_steps(io, cfg, steps, max_cycles=max_cycles,
                            emit=lambda step, run: runs.append((step, run)))

        run_pysim(Core(self.cfg), bench, self.cfg)
        yield from runs


class CocotbBackend:
    """The RTL on Verilator or Icarus through cocotb; the build is made once per
    configuration and reused."""

    def __init__(self, cfg, simulator):
        from . import cocotb_backend
        self.cfg = cfg
        self.name = simulator
        self._backend = cocotb_backend
        self._built = None

    def run(self, steps, *, max_cycles, activity=False):
        if self._built is None:
            self._built = self._backend.build("core", self.cfg, self.name)
        with tempfile.TemporaryDirectory() as tmp:
            job_in, job_out = Path(tmp) / "steps.pickle", Path(tmp) / "runs.pickle"
            # The steps go to the simulator's process through a file, one pickle each,
            # so that no list of them is ever held.
            with open(job_in, "wb") as file:
                for step in steps:
                    pickle.dump(step, file)
            self._backend.run(self._built, test_module="tpuer.tb.jobs", testcase="core_steps",
                              extra_env={"TPUER_JOB_IN": str(job_in),
                                         "TPUER_JOB_OUT": str(job_out),
                                         "TPUER_MAX_CYCLES": str(max_cycles)})
            with open(job_in, "rb") as steps_file, open(job_out, "rb") as runs_file:
                while True:
                    try:
                        run = pickle.load(runs_file)
                    except EOFError:
                        return
                    if isinstance(run, str):          # the bench stopped the core
                        from ..device import CycleBudgetError
                        raise CycleBudgetError(run)
                    yield pickle.load(steps_file), run


def make_backend(name, cfg, **options):
    if options and name != "serial":
        raise ValueError(f"the {name} back end takes no options, not {', '.join(options)}")
    if name == "serial":
        from .serial_backend import SerialBackend
        return SerialBackend(cfg, **options)
    if name == "golden":
        return GoldenBackend(cfg)
    if name == "pysim":
        return PysimBackend(cfg)
    if name == "verilator" and cfg.acc_width == 32:
        # Verilator with its host in C++ (no Python per cycle); other accumulator widths,
        # and Icarus, through the cocotb bench.
        from .verilator_driver import VerilatorCoreBackend
        return VerilatorCoreBackend(cfg)
    if name in ("verilator", "icarus"):
        return CocotbBackend(cfg, name)
    raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
