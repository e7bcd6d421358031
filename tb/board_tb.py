"""Testbenches of the TPU behind its serial link (:class:`~tpuer.tb.board_harness.BoardHarness`):
whole frames over the UART, checked against the link's rules (:mod:`tpuer.link`) and the
TPU's golden model: retransmissions are answered the same and executed once, corrupted,
cut-short and garbled frames get a NAK and change nothing, a full command queue says BUSY.
"""


import numpy as np

from .. import isa
from ..isa import CoreState
from ..link import (BYTE_TIMEOUT_BITS, MAX_REPLY_WORDS, MAX_REQUEST_WORDS, SYNC, FrameParser,
                    Kind, encode_request)
from ..protocol import decode_replies, encode
from ..sim.isa_model import CoreModel
from .board_harness import HOST_BYTE_LAYOUT
from .harness import StreamSink, StreamSource, TestbenchError, run_cycles
from .packing import Codec

__all__ = ["BENCHES", "SIM_DIVISOR"]

#: Clock cycles per bit of the simulated boards' UARTs (the bitstreams use the board
#: clock over the baud rate; the logic is the same).
SIM_DIVISOR = 4


class Host:
    """The host's end in a testbench: sends raw bytes (optionally one with a broken stop
    bit), collects reply frames."""

    def __init__(self, io, cfg):
        self.io = io
        self.cfg = cfg
        self.source = StreamSource("host_tx", Codec(HOST_BYTE_LAYOUT))
        self.sink = StreamSink("host_rx", Codec(8))
        self.parser = FrameParser(MAX_REPLY_WORDS, replies=True)
        self.frames = []
        self.raw = []

    def send(self, data, *, break_at=()):
        for index, byte in enumerate(data):
            self.source.queue.append({"data": byte, "break_stop": int(index in break_at)})

    async def reply(self, max_cycles=None):
        """Wait for the next reply frame; returns it with its raw bytes."""
        seen = len(self.frames)
        bytes_cycles = 12 * SIM_DIVISOR
        budget = max_cycles or bytes_cycles * (len(self.source.queue) + 400) + \
            2 * BYTE_TIMEOUT_BITS * SIM_DIVISOR + 20000

        def watch(io):
            if self.sink.items:
                chunk = bytes(self.sink.items)
                self.raw.extend(self.sink.items)
                self.sink.items.clear()
                self.frames.extend(self.parser.feed(chunk))

        await run_cycles(self.io, [self.source, self.sink],
                         until=lambda: len(self.frames) > seen, max_cycles=budget,
                         on_cycle=watch)
        frame = self.frames[seen]
        if self.io.get("host_rx_lost"):
            raise TestbenchError("the host's receive queue overflowed: the bench lost bytes")
        return frame

    async def exchange(self, seq, words, *, new_session=False, expect=Kind.ACK,
                       reply_halvings=0):
        self.send(encode_request(seq, words, new_session=new_session,
                                 reply_halvings=reply_halvings))
        frame = await self.reply()
        where = f"[{self.io.simulator} board {self.cfg.name}] request {seq}"
        if not frame.ok:
            raise TestbenchError(f"{where}: the reply's CRC failed")
        if (frame.first, frame.seq) != (expect, seq):
            raise TestbenchError(f"{where}: reply kind {frame.first} seq {frame.seq}, "
                                 f"expected kind {expect} seq {seq}")
        return frame


    async def until_stopped(self, seq, replies, max_polls=400):
        """Send STATUS (requests from ``seq`` on) until the core has stopped; returns the
        last status and the rows in ``replies`` plus what came meanwhile."""
        for _ in range(max_polls):
            frame = await self.exchange(seq, encode.status())
            seq = (seq + 1) & 0xFF
            replies += frame.words
            statuses, _ = _statuses(replies)
            if statuses and statuses[-1]["state"] is not CoreState.RUNNING:
                decoded, _ = decode_replies(replies)
                return statuses[-1], [value for kind, value in decoded if kind == "row"]
        raise TestbenchError(f"[{self.io.simulator} board {self.cfg.name}] the core still "
                             f"runs after {max_polls} polls")


def _statuses(words):
    replies, rest = decode_replies(words)
    return [value for kind, value in replies if kind == "status"], rest


async def bench_link_rules(io, cfg, rng):
    """Each rule of the link, one after another on one board."""
    for name in ("host_tx__valid", "line_break"):
        io.set(name, 0)
    io.set("host_rx__ready", 1)
    host = Host(io, cfg)
    where = f"[{io.simulator} board {cfg.name}]"
    status = encode.status()

    # Replies carry the words that wait when the request is taken: poll for the rest.
    first = await host.exchange(7, status, new_session=True)
    again = await host.exchange(7, [])                # a retransmission: the same reply
    if again.words != first.words or (first.took, again.took) != (True, True):
        raise TestbenchError(f"{where}: a retransmission got a different reply, or says "
                             f"its words did not go in ({first.took}, {again.took})")
    words = list(first.words)
    for seq in range(8, 12):
        words += (await host.exchange(seq, [])).words
    statuses, rest = _statuses(words)
    if len(statuses) != 1 or rest or statuses[0]["state"] is not CoreState.IDLE:
        raise TestbenchError(f"{where}: a STATUS request sent twice (the second a "
                             f"retransmission) gave {words}: it must run exactly once")

    # Corrupted: one bit flipped in the payload, then in the CRC, then in the header.
    for position in (6, -1, 3):
        frame = bytearray(encode_request(12, status))
        frame[position] ^= 1 << int(rng.integers(0, 8))
        host.send(frame)
        reply = await host.reply()
        if not reply.ok or reply.first != Kind.NAK or reply.words:
            raise TestbenchError(f"{where}: a corrupted request (byte {position}) got "
                                 f"kind {reply.first}")
    checked = [await host.exchange(seq, []) for seq in (12, 13, 14)]
    if any(frame.words for frame in checked):
        raise TestbenchError(f"{where}: a corrupted STATUS request ran: {checked.words}")

    # Garbage before a frame, and a false SYNC with an impossible count: no reply when its
    # seq cannot be the host's, a NAK of that seq when it can.
    garbage = [int(b) for b in rng.integers(0, 256, 20) if b != SYNC]
    too_many = (MAX_REQUEST_WORDS + 1).to_bytes(2, "little")
    host.send(bytes(garbage) + bytes([SYNC, 0, 100]) + too_many +
              bytes([SYNC, 0x80, 15]) + too_many + bytes([SYNC, 0, 15]) + too_many)
    reply = await host.reply()
    if (reply.first, reply.seq) != (Kind.NAK, 15):
        raise TestbenchError(f"{where}: false frame starts got {host.frames[-3:]}")
    await host.exchange(15, [])      # an ACK: a second NAK would come first

    # A framing error inside a frame.
    host.send(encode_request(16, status), break_at={7})
    reply = await host.reply()
    if reply.first != Kind.NAK:
        raise TestbenchError(f"{where}: a frame with a framing error got kind {reply.first}")

    # A host that disappears mid-frame: cut short, then the line held low for a while.
    host.send(encode_request(16, status)[:6])
    reply = await host.reply()
    if reply.first != Kind.NAK:
        raise TestbenchError(f"{where}: a cut-short frame got kind {reply.first}")
    host.send(encode_request(16, status)[:4])
    await run_cycles(io, [host.source, host.sink], until=lambda: host.source.done,
                     max_cycles=100 * SIM_DIVISOR * 12)
    io.set("line_break", 1)
    for _ in range(30 * SIM_DIVISOR):
        await io.tick()
    io.set("line_break", 0)
    for _ in range(2 * BYTE_TIMEOUT_BITS * SIM_DIVISOR):
        await io.tick()
    host.sink.items.clear()        # the NAKs of the broken bytes
    host.parser.buffer.clear()
    words = (await host.exchange(16, status)).words
    for seq in range(17, 20):
        words += (await host.exchange(seq, [])).words
    statuses, _ = _statuses(words)
    if len(statuses) != 1:
        raise TestbenchError(f"{where}: after a line break, STATUS gave {words}")

    # A request that asks for short replies gets them: one word at most, then the rest.
    asked = await host.exchange(20, status * 3, reply_halvings=7)
    words = list(asked.words)
    for seq in range(21, 60):
        more = await host.exchange(seq, [], reply_halvings=7)
        if len(more.words) > 1 or not asked.took or more.took:
            raise TestbenchError(f"{where}: a reply of at most one word had "
                                 f"{len(more.words)}; took {asked.took}, {more.took}")
        words += more.words
    statuses, rest = _statuses(words)
    if len(statuses) != 3 or rest:
        raise TestbenchError(f"{where}: three STATUS in one-word replies gave {words}")


async def bench_program(io, cfg, rng):
    """A whole program over the link: weights, program, start, rows, polling for the
    status; the rows and the status must be the golden model's."""
    for name in ("host_tx__valid", "line_break"):
        io.set(name, 0)
    io.set("host_rx__ready", 1)
    host = Host(io, cfg)
    model = CoreModel(cfg)
    lo, hi = cfg.operand_min, cfg.operand_max + 1
    weights = rng.integers(lo, hi, (2, cfg.rows, cfg.cols))
    n = min(cfg.ub_depth, cfg.acc_depth, 3)
    rows = list(rng.integers(lo, hi, (n, cfg.ub_lanes)))
    program = [isa.read_weights(0, 2), isa.read_host(0, n), isa.matmul(0, 0, n),
               isa.write_host(0, n, from_acc=True), isa.halt()]
    model.load_weights(0, weights)
    model.load_program(program)
    want = model.run(0, host_in=rows)
    words = (encode.write_weights(cfg, 0, list(weights.reshape(-1, cfg.cols))) +
             encode.write_program(0, program) + encode.start(0) + encode.data(cfg, rows))
    seq, replies = 0, []
    for start in range(0, len(words), MAX_REQUEST_WORDS):
        frame = await host.exchange(seq, words[start:start + MAX_REQUEST_WORDS],
                                    new_session=seq == 0)
        replies += frame.words
        seq += 1
    status, got_rows = await host.until_stopped(seq, replies)
    where = f"[{io.simulator} board {cfg.name}] program over the link"
    if status["state"] is not CoreState.HALTED or len(got_rows) != len(want.host_out):
        raise TestbenchError(f"{where}: {status}, {len(got_rows)} rows")
    for got, expected in zip(got_rows, want.host_out):
        if not np.array_equal(got[:len(expected)], expected):
            raise TestbenchError(f"{where}: row {got.tolist()}, expected {expected.tolist()}")


async def bench_busy(io, cfg, rng):
    """A command queue that fills up: the program first sends rows to the host, which the
    link holds back until a reply takes them, so the DATA rows behind it wait in the
    queue; a request that does not fit is refused (BUSY) and sent again later, and every
    row reaches the program exactly once."""
    for name in ("host_tx__valid", "line_break"):
        io.set(name, 0)
    io.set("host_rx__ready", 1)
    host = Host(io, cfg)
    where = f"[{io.simulator} board {cfg.name}] full command queue"
    depth = cfg.ub_depth
    words_per_row = -(-cfg.ub_lanes // 4)
    batches = max(2, min(cfg.program_depth - 3, (3 * MAX_REQUEST_WORDS) // (depth * words_per_row)))
    program = [isa.write_host(0, depth)] + [isa.read_host(0, depth)] * batches + \
              [isa.write_host(0, depth), isa.halt()]
    lo, hi = cfg.operand_min, cfg.operand_max + 1
    rows = list(rng.integers(lo, hi, (depth * batches, cfg.ub_lanes)))
    words = encode.write_program(0, program) + encode.start(0) + encode.data(cfg, rows)
    seq, replies, busy, position = 0, [], 0, 0
    while position < len(words):
        chunk = words[position:position + MAX_REQUEST_WORDS]
        host.send(encode_request(seq, chunk, new_session=seq == 0))
        frame = await host.reply()
        if not frame.ok or frame.seq != seq or frame.first == Kind.NAK:
            raise TestbenchError(f"{where}: reply {frame}")
        replies += frame.words
        seq = (seq + 1) & 0xFF
        if frame.first == Kind.BUSY:
            busy += 1
            if busy > 200:
                raise TestbenchError(f"{where}: BUSY for ever")
            continue
        position += len(chunk)
    status, got = await host.until_stopped(seq, replies)
    if busy == 0:
        raise TestbenchError(f"{where}: the queue never filled ({len(words)} words)")
    if status["state"] is not CoreState.HALTED or len(got) != 2 * depth:
        raise TestbenchError(f"{where}: {status}, {len(got)} rows back")
    for got_row, sent in zip(got[depth:], rows[-depth:]):
        if not np.array_equal(got_row, sent):
            raise TestbenchError(f"{where}: the last rows came back as {got_row.tolist()}, "
                                 f"sent {sent.tolist()}: a row was lost or doubled")


BENCHES = {"link_rules": bench_link_rules, "program": bench_program, "busy": bench_busy}
