"""Testbenches of the whole TPU through its host command set (:mod:`tpuer.protocol`):
programs loaded, started, fed and read back over the two word streams, compared with the
ISA-level golden model; bad commands answered without losing the stream."""

import random

import numpy as np

from .. import isa
from ..isa import CoreState
from ..protocol import Command, Memory, decode_replies, encode, header
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
    for opcode in (0x00, 0x09, 0x77, 0xFF):
        link.send([header(opcode, 5)])
    link.send(encode.data(cfg, [np.zeros(cfg.ub_lanes, dtype=np.int64)] * 3))  # not running
    link.send(encode.write_program(cfg.program_depth, [isa.halt()]))       # past the end
    status = await link.status()
    bad = [value for kind, value in link.replies if kind == "bad_command"]
    if bad != [0x00, 0x09, 0x77, 0xFF]:
        raise TestbenchError(f"[{io.simulator} tpu {cfg.name}] BAD_COMMAND replies {bad}")
    if status["state"] is not CoreState.HALTED:
        raise TestbenchError(f"[{io.simulator} tpu {cfg.name}] state {status['state'].name} "
                             f"after bad commands")
    await _check_run(link, cfg, model, None, [],
                     "the program loaded before the bad commands, untouched by them")


async def _read_memory(link, cfg, accumulators, row, rows):
    """READ_MEMORY over the link; returns the rows (or ``"refused"``)."""
    first = len(link.replies)
    link.send(encode.read_memory(Memory.ACCUMULATORS if accumulators else Memory.UNIFIED_BUFFER,
                                 row, rows))
    await link.until(lambda: len(link.replies) - first >= max(rows, 1) or any(
        kind == "refused" for kind, _ in link.replies[first:]) or
        (rows == 0 and len(link.source.queue) == 0 and link.source.current is None))
    got = link.replies[first:]
    if any(kind == "refused" for kind, _ in got):
        return "refused"
    return [value for kind, value in got if kind == "row"]


def _check_rows(where, got, want, cfg):
    if got == "refused" or len(got) != len(want):
        raise TestbenchError(f"{where}: got {got if got == 'refused' else len(got)} rows, "
                             f"expected {len(want)}")
    for k, (row, expected) in enumerate(zip(got, want)):
        padded = np.zeros(cfg.ub_lanes, dtype=np.int64)
        padded[:len(expected)] = expected
        if not np.array_equal(row, padded):
            raise TestbenchError(f"{where}: row {k} is {row.tolist()}, expected {padded.tolist()}")


async def bench_memory_commands(io, cfg, rng):
    """READ_MEMORY and WRITE_MEMORY against the model: random rows written and read back
    from both memories, a program that uses them, and every refusal (outside a memory, the
    accumulators written, reserved bits, a program running; a program written while it
    runs), after which the stream, the program and the memories are as the model says."""
    link, model = await _setup(io, cfg, rng, idle=0.2, stall=0.3)
    where = f"[{io.simulator} tpu {cfg.name}]"
    lo, hi = cfg.operand_min, cfg.operand_max + 1
    for k in range(3):
        n = int(rng.integers(1, cfg.ub_depth + 1))
        row = int(rng.integers(0, cfg.ub_depth - n + 1))
        values = rng.integers(lo, hi, (n, cfg.ub_lanes))
        link.send(encode.write_memory(cfg, row, list(values)))
        model.write_memory(row, values)
        n = int(rng.integers(1, cfg.ub_depth + 1))
        row = int(rng.integers(0, cfg.ub_depth - n + 1))
        _check_rows(f"{where} UB rows {row}.. read back",
                    await _read_memory(link, cfg, False, row, n),
                    model.read_memory(False, row, n), cfg)
    # a program on rows the host wrote, its accumulators read directly
    program = [isa.read_weights(0, 1), isa.matmul(0, 0, min(cfg.ub_depth, cfg.acc_depth)),
               isa.halt()]
    await _check_run(link, cfg, model, program, [], "a program on rows from WRITE_MEMORY")
    _check_rows(f"{where} accumulators read back",
                await _read_memory(link, cfg, True, 0, cfg.acc_depth),
                model.read_memory(True, 0, cfg.acc_depth), cfg)

    refusals = [(False, cfg.ub_depth - 1, 2), (True, cfg.acc_depth, 1), (False, 0, 1 << 16)]
    for accumulators, row, rows in refusals:
        assert model.memory_access_error(accumulators, row, rows) is not None
        if await _read_memory(link, cfg, accumulators, row, rows) != "refused":
            raise TestbenchError(f"{where} READ_MEMORY of rows {row} + {rows} not refused")
    bad_writes = [encode.write_memory(cfg, cfg.ub_depth - 1, [np.ones(cfg.ub_lanes, int)] * 2),
                  [header(Command.WRITE_MEMORY, 1), 1 << 16, *encode.data(cfg, [
                      np.ones(cfg.ub_lanes, int)])[1:]],                     # the accumulators
                  [header(Command.READ_MEMORY, 1), 1 << 24]]                 # reserved bits
    assert model.memory_access_error(True, 0, 1, write=True) is not None
    # ... and while a program runs (it waits for its DATA rows, which come afterwards)
    n = min(cfg.ub_depth, 3)
    host_rows = list(rng.integers(lo, hi, (n, cfg.ub_lanes)))
    # (longer than the sequencer fetches ahead, so that an overwrite would be seen)
    program = [isa.read_host(0, n), *[isa.write_host(0, n)] * 4, isa.halt()]
    link.send(encode.write_program(0, program))
    model.load_program(program)
    first = len(link.replies)
    for words in bad_writes:
        link.send(words)
    link.send(encode.start(0))
    link.send(encode.read_memory(Memory.UNIFIED_BUFFER, 0, 1))
    link.send(encode.write_memory(cfg, 0, [np.full(cfg.ub_lanes, 7)] * n))
    # The running program overwritten: refused, so it still writes its rows.
    link.send(encode.write_program(0, [isa.halt()] * len(program)))
    link.send(encode.data(cfg, host_rows))
    while (await link.status())["state"] is CoreState.RUNNING:
        pass
    refused = [value for kind, value in link.replies[first:] if kind == "refused"]
    expected = [Command.WRITE_MEMORY.value] * 2 + [Command.READ_MEMORY.value] + \
               [Command.READ_MEMORY.value, Command.WRITE_MEMORY.value,
                Command.WRITE_PROGRAM.value]
    if refused != expected:
        raise TestbenchError(f"{where} REFUSED replies for {refused}, expected {expected}")
    want = model.run(0, host_in=host_rows)
    _check_rows(f"{where} the program's rows, with refused commands around it",
                [value for kind, value in link.replies[first:] if kind == "row"],
                want.host_out, cfg)
    _check_rows(f"{where} the whole UB after the refusals",
                await _read_memory(link, cfg, False, 0, cfg.ub_depth),
                model.read_memory(False, 0, cfg.ub_depth), cfg)


BENCHES = {"programs": bench_programs, "bad_commands": bench_bad_commands,
           "memory_commands": bench_memory_commands}
