"""Testbenches of the whole datapath against :class:`tpuer.sim.datapath_model.DatapathModel`:
host writes, weight tiles, matrix products into the accumulators, activation back into
the Unified Buffer, and host reads of both memories, with the host's traffic competing for
the memory ports."""

import random

from ..hw.datapath import Datapath
from ..sim.datapath_model import DatapathModel
from .activation_tb import idle_param_writes, load_params, random_params
from .harness import StreamSink, StreamSource, TestbenchError, reference_instance, run_cycles
from .packing import Codec

__all__ = ["BENCHES"]


class _MatmulSource(StreamSource):
    """MATMUL commands, with ``matmul_pending`` high whenever one is offered, and often
    for a cycle or more before a command is offered (as while a sequencer's MATMUL waits
    on a hazard)."""

    def drive(self, io):
        if self.current is None and self.queue and self.rng.random() < 0.4:
            io.set("matmul__valid", 0)
            io.set("matmul_pending", 1)
            return
        super().drive(io)
        io.set("matmul_pending", int(self.current is not None))


class _Datapath:
    def __init__(self, io, cfg, rng):
        self.io, self.cfg, self.rng = io, cfg, rng
        self.dut = reference_instance(Datapath(cfg))
        self.model = DatapathModel(cfg)
        # Every input idles until its phase: an undriven input is X in Icarus.
        for name in ("weights", "matmul", "activate", "host_write", "host_read"):
            io.set(f"{name}__valid", 0)
        io.set("host_data__ready", 0)
        io.set("matmul_pending", 0)
        io.set("params", 0)
        idle_param_writes(io, cfg)

    def source(self, name, codec, items, idle):
        kind = _MatmulSource if name == "matmul" else StreamSource
        return kind(name, codec, items, idle=idle,
                    rng=random.Random(int(self.rng.integers(1 << 31))))

    def sink(self, name, layout, stall):
        return StreamSink(name, Codec(layout), stall=stall,
                          rng=random.Random(int(self.rng.integers(1 << 31))))

    async def run(self, agents, until, budget):
        """Run the agents until ``until()`` and the datapath is idle."""
        idle = {"ok": False}

        def watch(io):
            idle["ok"] = until() and not io.get("busy")

        await run_cycles(self.io, agents, until=lambda: idle["ok"], max_cycles=budget,
                         on_cycle=watch)

    def host_reads(self, reads):
        """A source of host reads ``(acc, addr)`` and a sink for their answers."""
        return [self.source("host_read", Codec(self.dut.host_read_layout),
                            [{"acc": acc, "addr": addr} for acc, addr in reads], self.idle),
                self.sink("host_data", self.dut.host_data.payload.shape(), self.stall)]

    def host_row(self, acc, addr):
        """The answer the model expects to a host read: UB lanes, or the accumulator words
        with zeros in the lanes past ``cols``."""
        if not acc:
            return list(self.model.host_read(addr))
        words = list(self.model.host_acc_read(addr))
        return words + [0] * (self.cfg.ub_lanes - len(words))

    def check(self, label, got, want):
        if [int(v) for v in got] != [int(v) for v in want]:
            raise TestbenchError(f"[{self.io.simulator} datapath {self.cfg.name}] {label}: "
                                 f"got {[int(v) for v in got]}, expected "
                                 f"{[int(v) for v in want]}")


async def bench_layer(io, cfg, rng, *, idle=0.2, stall=0.3, tiles=3):
    """One layer's worth of work: load inputs, multiply by several tiles (accumulating over
    some of them), activate, read everything back, with host traffic interleaved."""
    dp = _Datapath(io, cfg, rng)
    dp.idle, dp.stall = idle, stall
    dut, model = dp.dut, dp.model
    lo, hi = cfg.operand_min, cfg.operand_max + 1
    inputs = min(cfg.ub_depth // 2, 12)

    # Phase 1: the host fills the input rows, and the rows that activation will write
    # (so that the lanes it must leave alone hold something).
    acc_rows = min(cfg.acc_depth, 10)
    filled = min(cfg.ub_depth, inputs + acc_rows + 4)
    writes = [{"addr": a, "data": rng.integers(lo, hi, cfg.ub_lanes),
               "mask": (1 << cfg.ub_lanes) - 1} for a in range(filled)]
    for w in writes:
        model.host_write(w["addr"], w["data"])
    host_write_codec = Codec(dut.host_write_layout)
    source = dp.source("host_write", host_write_codec, writes, idle)
    await dp.run([source], lambda: source.done, 50 + 10 * len(writes))

    # Phase 2: tiles and matrix products; the host reads input rows meanwhile.
    weight_rows, commands = [], []
    written = set()
    for t in range(tiles):
        tile = rng.integers(lo, hi, (cfg.rows, cfg.cols))
        weight_rows.extend(tile)
        for k in range(int(rng.integers(1, cfg.rows + 3))):
            acc_addr = int(rng.integers(0, acc_rows))
            accumulate = int(acc_addr in written and rng.random() < 0.6)
            written.add(acc_addr)
            commands.append({"ub_addr": int(rng.integers(0, inputs)), "acc_addr": acc_addr,
                             "accumulate": accumulate, "new_tile": int(k == 0)})
    for row in weight_rows:
        model.push_weight_row(row)
    for c in commands:
        model.matmul(c["ub_addr"], c["acc_addr"], bool(c["accumulate"]), bool(c["new_tile"]))
    reads = [(0, int(rng.integers(0, inputs))) for _ in range(8)]
    expected = [dp.host_row(*read) for read in reads]
    agents = [dp.source("weights", Codec(dut.weights.payload.shape()), weight_rows, idle),
              dp.source("matmul", Codec(dut.matmul_layout), commands, idle),
              *dp.host_reads(reads)]
    await dp.run(agents, lambda: all(a.done for a in agents[:3]) and
                 len(agents[3].items) == len(reads),
                 200 + 20 * (len(commands) + len(weight_rows) + len(reads)))
    for (_, addr), got, want in zip(reads, agents[3].items, expected):
        dp.check(f"host read of UB row {addr} during matmul", got, want)

    # Phase 3: activate the written accumulator rows into fresh UB rows, while the host
    # writes other rows and reads accumulators.
    params = random_params(cfg, rng)
    await load_params(dp.io, cfg, dut, params, rng)
    targets = sorted(written)
    activates = [{"acc_addr": a, "ub_addr": inputs + k} for k, a in enumerate(targets)]
    acc_reads = [(1, int(rng.choice(targets))) for _ in range(6)]
    expected = [dp.host_row(*read) for read in acc_reads]
    extra = [{"addr": inputs + len(targets) + k, "data": rng.integers(lo, hi, cfg.ub_lanes),
              "mask": int(rng.integers(0, 1 << cfg.ub_lanes))}
             for k in range(4) if inputs + len(targets) + k < cfg.ub_depth]
    for c in activates:
        model.activate(c["acc_addr"], c["ub_addr"], params)
    for w in extra:
        model.host_write(w["addr"], w["data"],
                         [(w["mask"] >> lane) & 1 for lane in range(cfg.ub_lanes)])
    agents = [dp.source("activate", Codec(dut.activate_layout), activates, idle),
              dp.source("host_write", host_write_codec, extra, idle),
              *dp.host_reads(acc_reads)]
    await dp.run(agents, lambda: all(a.done for a in agents[:3]) and
                 len(agents[3].items) == len(acc_reads),
                 200 + (20 + dut.activate_latency) * len(activates) +
                 20 * (len(extra) + len(acc_reads)))
    for (_, addr), got, want in zip(acc_reads, agents[3].items, expected):
        dp.check(f"host read of accumulator row {addr}", got, want)

    # Phase 4: read back every row touched, from both memories, interleaved through the
    # one answer queue, at full rate.
    reads = ([(0, a) for a in range(min(cfg.ub_depth, inputs + len(targets) + len(extra)))] +
             [(1, a) for a in targets])
    reads = [reads[k] for k in rng.permutation(len(reads))]
    dp.idle = 0.0
    agents = dp.host_reads(reads)
    await dp.run(agents, lambda: len(agents[1].items) == len(reads), 200 + 10 * len(reads))
    for (acc, addr), got in zip(reads, agents[1].items):
        dp.check(f"{'accumulator' if acc else 'UB'} row {addr}", got, dp.host_row(acc, addr))


async def bench_streaming(io, cfg, rng):
    """The same with no idle cycles and no back-pressure: everything at full rate."""
    await bench_layer(io, cfg, rng, idle=0.0, stall=0.0, tiles=2 * cfg.weight_fifo_tiles)


BENCHES = {"layer": bench_layer, "streaming": bench_streaming}
