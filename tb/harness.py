"""One testbench, two kinds of simulator.

A testbench in ``tpuer.tb`` is an ``async`` function of an *IO adapter* that drives and
samples the design's ports by their Verilog names (``rows__valid``, ``rows__payload``...).
:class:`PysimIO` runs it under ``amaranth.sim``; :class:`CocotbIO` runs it under cocotb
on Verilator or Icarus. Every cycle follows the same three steps::

    drive inputs  ->  settle and sample outputs  ->  clock edge

so a single Python loop per testbench moves whole transactions, and the per-cycle cost is
two simulator triggers, however many streams the design has.
"""

import os
import random
from collections import deque

__all__ = ["PysimIO", "CocotbIO", "StreamSource", "StreamSink", "run_cycles", "TestbenchError",
           "reference_instance"]


class TestbenchError(AssertionError):
    """A check against the golden model failed, or the design did not finish in time."""


class PysimIO:
    """Drives an Amaranth component in ``amaranth.sim``; names are signature paths joined
    with ``__``, exactly as they appear in the generated Verilog."""

    simulator = "pysim"

    def __init__(self, ctx, ports):
        self._ctx = ctx
        self._ports = ports
        self.cycle = 0

    def set(self, name, value):
        self._ctx.set(self._ports[name], value)

    def get(self, name):
        signal = self._ports[name]
        return self._ctx.get(signal) & ((1 << len(signal)) - 1)

    async def settle(self):
        pass  # testbench reads in amaranth.sim are always settled

    async def tick(self):
        await self._ctx.tick()
        self.cycle += 1

    async def reset(self):
        pass  # the simulation starts in reset state


class CocotbIO:
    """Drives a cocotb DUT handle; call :meth:`start` once per test."""

    def __init__(self, dut, simulator):
        self._dut = dut
        self._handles = {}
        self.simulator = simulator
        self.cycle = 0

    @classmethod
    async def start(cls, dut, period_ns=10):
        from cocotb.clock import Clock
        io = cls(dut, os.environ.get("TPUER_SIMULATOR", "unknown"))
        Clock(dut.clk, period_ns, unit="ns").start()
        await io.reset()
        return io

    def _handle(self, name):
        handle = self._handles.get(name)
        if handle is None:
            handle = self._handles[name] = getattr(self._dut, name)
        return handle

    def set(self, name, value):
        self._handle(name).value = value

    def get(self, name):
        value = self._handle(name).value
        try:
            return int(value)
        except ValueError:
            raise TestbenchError(f"{name} is {value} (not 0/1) in cycle {self.cycle}") from None

    async def settle(self):
        from cocotb.triggers import ReadOnly
        await ReadOnly()

    async def tick(self):
        from cocotb.triggers import RisingEdge
        await RisingEdge(self._dut.clk)
        self.cycle += 1

    async def reset(self):
        from cocotb.triggers import RisingEdge
        self._dut.rst.value = 1
        for _ in range(2):
            await RisingEdge(self._dut.clk)
        self._dut.rst.value = 0


class StreamSource:
    """Offers queued items on a valid/ready stream, idling at random between them, from
    cycle ``start`` on.

    Once ``valid`` is raised it stays raised, with the same payload, until the item is
    taken; ``valid`` never waits for ``ready``.
    """

    def __init__(self, prefix, codec, items=(), *, idle=0.0, rng=None, has_ready=True,
                 start=0):
        self.prefix = prefix
        self.start = start
        self.codec = codec
        self.queue = deque(items)
        self.idle = idle
        self.rng = rng or random.Random(0)
        self.has_ready = has_ready
        self.current = None
        self.sent = 0
        self.sent_cycles = []
        self.waiting_cycles = 0   # valid high, ready low

    @property
    def done(self):
        return self.current is None and not self.queue

    def drive(self, io):
        if self.current is None and self.queue and io.cycle >= self.start and \
                self.rng.random() >= self.idle:
            self.current = self.queue.popleft()
            io.set(f"{self.prefix}__payload", self.codec.encode(self.current))
        io.set(f"{self.prefix}__valid", int(self.current is not None))

    def sample(self, io):
        if self.current is None:
            return
        if not self.has_ready or io.get(f"{self.prefix}__ready"):
            self.current = None
            self.sent += 1
            self.sent_cycles.append(io.cycle)
        else:
            self.waiting_cycles += 1


class StreamSink:
    """Takes items from a valid/ready stream, holding ``ready`` low at random (with
    probability ``stall``) to apply back-pressure; records items and their cycles."""

    def __init__(self, prefix, codec, *, stall=0.0, rng=None, has_ready=True):
        self.prefix = prefix
        self.codec = codec
        self.stall = stall
        self.rng = rng or random.Random(0)
        self.has_ready = has_ready
        self.items = []
        self.cycles = []
        self._ready = 1

    def drive(self, io):
        if self.has_ready:
            self._ready = int(self.rng.random() >= self.stall)
            io.set(f"{self.prefix}__ready", self._ready)

    def sample(self, io):
        if io.get(f"{self.prefix}__valid") and self._ready:
            self.items.append(self.codec.decode(io.get(f"{self.prefix}__payload")))
            self.cycles.append(io.cycle)


async def run_cycles(io, agents, *, until, max_cycles, on_cycle=None):
    """Run the drive / settle-sample / edge loop until ``until()`` holds after a sample.

    ``on_cycle(io)``, if given, is called after the agents sampled. Raises
    :class:`TestbenchError` when ``max_cycles`` pass first: a design that hangs fails the
    test with a message instead of hanging it.
    """
    for _ in range(max_cycles):
        for agent in agents:
            agent.drive(io)
        await io.settle()
        for agent in agents:
            agent.sample(io)
        if on_cycle is not None:
            on_cycle(io)
        await io.tick()
        if until():
            return io.cycle
    raise TestbenchError(f"not finished after {max_cycles} cycles")


def reference_instance(component):
    """Mark ``component`` as made only to read its layouts and latency (it is never
    simulated itself), so Amaranth does not warn that it went unused."""
    component._MustUse__silence = True
    return component
