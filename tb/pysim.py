"""Run a portable testbench under ``amaranth.sim``."""

import os
from pathlib import Path

from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator

from ..hw.export import port_map
from .harness import PysimIO

__all__ = ["run_pysim"]


def run_pysim(component, bench, *args, waves=None):
    """Simulate ``component`` with ``await bench(io, *args)`` as its testbench.

    ``waves`` names a VCD file to write; by default one is written to
    ``build/waves/<name>.vcd`` when ``TPUER_WAVES`` is set. Returns the cycle count.
    """
    top = Module()
    top.domains.sync = ClockDomain()    # so that even a purely combinational block has a clock
    top.submodules.dut = component
    sim = Simulator(top)
    sim.add_clock(1e-8)
    result = {}

    async def testbench(ctx):
        io = PysimIO(ctx, port_map(component))
        await io.reset()
        await bench(io, *args)
        result["cycles"] = io.cycle

    sim.add_testbench(testbench)
    if waves is None and os.environ.get("TPUER_WAVES", "").lower() in ("1", "yes", "true", "on"):
        waves = Path(os.environ.get("TPUER_BUILD_DIR", "build")) / "waves" / \
            f"pysim-{type(component).__name__}-{getattr(bench, '__name__', 'bench')}.vcd"
    if waves:
        Path(waves).parent.mkdir(parents=True, exist_ok=True)
        with sim.write_vcd(str(waves)):
            sim.run()
    else:
        sim.run()
    return result.get("cycles", 0)
