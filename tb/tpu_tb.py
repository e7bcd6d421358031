"""Testbenches of the whole TPU through its host command set (:mod:`tpuer.protocol`):
programs loaded, started, fed and read back over the two word streams, compared with the
ISA-level golden model; bad commands answered without losing the stream."""

import random

import numpy as np

from .. import isa
from ..isa import CoreState, ErrorCode
from ..protocol import Reply, decode_replies, encode, header
from ..sim.isa_model import CoreModel
from .core_tb import clearing_program, dump_program, random_program
from .harness import StreamSink, StreamSource, TestbenchError, run_cycles
from .packing import Codec

__all__ = ["Link", "BENCHES"]


class Link:
    """The host's end of the two streams: queue command words, collect reply words."""

    def __init__(self, io, rng, *, idle=0.0, stall=0.0):
        self.io = io
        self.source = StreamSource("cmd", Codec(32), idle=idle,
                                   rng=random.Random(int(rng.integers(1 << 31))))
        self.sink = StreamSink("rsp", Codec(32), stall=stall,
                               rng=random.Random(int(rng.integers(1 << 31))))
        self.replies = []
        self._pending = []

    def send(self, words):
        self.source.queue.extend(words)

    async def until(self, condition, max_cycles=20000):
        def watch(io):
            if self.sink.items:
                self._pending += self.sink.items
                self.sink.items.clear()
                done, self._pending = decode_replies(self._pending)
                self.replies += done
        await run_cycles(self.io, [self.source, self.sink],
                         until=lambda: condition(), max_cycles=max_cycles, on_cycle=watch)

    async def status(self):
        """Send STATUS and wait for its reply."""
        seen = sum(kind == "status" for kind, _ in self.replies)
        self.send(encode.status())
        await self.until(lambda: sum(kind == "status" for kind, _ in self.replies) > seen)
        return [value for kind, value in self.replies if kind == "status"][-1]

    async def run(self, cfg, program_start, host_rows):
        """START at ``program_start``, send the rows, poll until the core stops; returns
        (status, rows the core sent)."""
        first = len(self.replies)
        self.send(encode.start(program_start))
        if host_rows:
            self.send(encode.data(cfg, host_rows))
        while True:
            status = await self.status()
            if status["state"] is not CoreState.RUNNING:
                rows = [value for kind, value in self.replies[first:] if kind == "row"]
                return status, rows


async def _check_run(link, cfg, model, program, host_rows, label, start=0):
    """Load ``program`` (unless it is ``None``: run what is loaded), run it over the link and
    on the model, and compare."""
    if program is not None:
        link.send(encode.write_program(start, program))
        model.load_program(program, start=start)
    got, rows = await link.run(cfg, start, host_rows)
    want = model.run(start, host_in=host_rows)
    where = f"[{link.io.simulator} tpu {cfg.name}] {label}"
    if (got["state"], got["error"], got["error_pc"]) != (want.state, want.error, want.error_pc):
        raise TestbenchError(f"{where}: status {got['state'].name} {got['error'].name} at "
                             f"{got['error_pc']}, expected {want.state.name} {want.error.name} "
                             f"at {want.error_pc}")
    if len(rows) != len(want.host_out):
        raise TestbenchError(f"{where}: {len(rows)} rows, expected {len(want.host_out)}")
    for k, (row, expected) in enumerate(zip(rows, want.host_out)):
        padded = np.zeros(cfg.ub_lanes, dtype=np.int64)
        padded[:len(expected)] = expected
        if not np.array_equal(row, padded):
            raise TestbenchError(f"{where}: row {k} is {row.tolist()}, expected {padded.tolist()}")
    if want.state is CoreState.HALTED and (got["instructions"], got["mxu_busy_cycles"]) != \
            (want.instructions, want.mxu_busy_cycles):
        raise TestbenchError(f"{where}: counters {got}, expected instructions "
                             f"{want.instructions}, MXU-busy {want.mxu_busy_cycles}")


async def _setup(io, cfg, rng, **streams):
    link = Link(io, rng, **streams)
    model = CoreModel(cfg)
    weights = rng.integers(cfg.operand_min, cfg.operand_max + 1,
                           (cfg.weight_tiles, cfg.rows, cfg.cols))
    link.send(encode.write_weights(cfg, 0, list(weights.reshape(-1, cfg.cols))))
    model.load_weights(0, weights)
    dump_at = cfg.program_depth - 3
    clear, zeros = clearing_program(cfg)
    await _check_run(link, cfg, model, clear, zeros, "clearing program")
    await _check_run(link, cfg, model, dump_program(cfg), [], "first dump", start=dump_at)
    return link, model


async def bench_programs(io, cfg, rng):
    """Random valid and invalid programs over the link, each followed by a memory dump,
    with an idle host and a stalling reply stream."""
    link, model = await _setup(io, cfg, rng, idle=0.2, stall=0.3)
    dump_at = cfg.program_depth - 3
    for k in range(5):
        program, host_rows = random_program(cfg, rng, length=int(rng.integers(3, 16)),
                                            invalid=0.1 if k % 2 else 0.0)
        await _check_run(link, cfg, model, program, host_rows, f"program {k}")
        await _check_run(link, cfg, model, dump_program(cfg), [], f"dump after program {k}",
                         start=dump_at)


async def bench_bad_commands(io, cfg, rng):
    """Headers that are no command are answered with BAD_COMMAND, the stream goes on; DATA
    sent while nothing runs is dropped; an out-of-range program write changes nothing."""
    link, model = await _setup(io, cfg, rng)
    program = [isa.write_host(0, 2), isa.write_host(0, 1, from_acc=True), isa.halt()]
    link.send(encode.write_program(0, program))
    model.load_program(program)
    for opcode in (0x00, 0x07, 0x77, 0xFF):
        link.send([header(opcode, 5)])
    link.send(encode.data(cfg, [np.zeros(cfg.ub_lanes, dtype=np.int64)] * 3))  # not running
    link.send(encode.write_program(cfg.program_depth, [isa.halt()]))       # past the end
    status = await link.status()
    bad = [value for kind, value in link.replies if kind == "bad_command"]
    if bad != [0x00, 0x07, 0x77, 0xFF]:
        raise TestbenchError(f"[{io.simulator} tpu {cfg.name}] BAD_COMMAND replies {bad}")
    if status["state"] is not CoreState.HALTED:
        raise TestbenchError(f"[{io.simulator} tpu {cfg.name}] state {status['state'].name} "
                             f"after bad commands")
    await _check_run(link, cfg, model, None, [],
                     "the program loaded before the bad commands, untouched by them")


BENCHES = {"programs": bench_programs, "bad_commands": bench_bad_commands}
