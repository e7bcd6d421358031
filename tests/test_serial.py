"""The serial host link: the UART, the frame format, the host's driver against a board that
loses and garbles frames, and the TPU behind its UART on amaranth.sim, Verilator and
Icarus."""

import random
from dataclasses import replace

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.sim import Simulator

import tpuer
from tpuer.hw.uart import UARTReceiver, UARTTransmitter
from tpuer.link import (MAX_REPLY_WORDS, MAX_REQUEST_WORDS, FrameParser, Kind, LinkError,
                        SerialLink, encode_reply, encode_request, frame_crc)
from tpuer.sim import cocotb_backend as backend
from tpuer.tb.board_harness import BoardHarness
from tpuer.tb.board_tb import BENCHES, SIM_DIVISOR
from tpuer.tb.pysim import run_pysim

from conftest import ice40_models, require_simulator, seed

BOARD_CONFIG = tpuer.Config(rows=2, cols=2, ub_depth=8, acc_depth=8, weight_tiles=4,
                            program_depth=128)


@pytest.mark.parametrize("divisor", [4, 7])
def test_uart_carries_every_byte_and_flags_a_missing_stop_bit(divisor):
    m = Module()
    m.submodules.tx = tx = UARTTransmitter(divisor)
    m.submodules.rx = rx = UARTReceiver(divisor)
    m.d.comb += rx.rx.eq(tx.tx)
    rng = random.Random(divisor)
    sent = [(rng.randrange(256), rng.random() < 0.2) for _ in range(40)]
    got = []

    async def bench(ctx):
        for value, broken in sent:
            ctx.set(tx.bytes.payload, value)
            ctx.set(tx.break_stop, broken)
            ctx.set(tx.bytes.valid, 1)
            while not ctx.get(tx.bytes.ready):
                await ctx.tick()
            await ctx.tick()
            ctx.set(tx.bytes.valid, 0)
            if broken:          # let the line rest, as a host would after a break
                for _ in range(2 * divisor):
                    await ctx.tick()
        for _ in range(12 * divisor):
            await ctx.tick()

    async def monitor(ctx):
        async for _, _, valid, value, error in ctx.tick().sample(
                rx.bytes.valid, rx.bytes.payload.data, rx.bytes.payload.framing_error):
            if valid:
                got.append((value, bool(error)))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_process(monitor)
    sim.run()
    assert got == sent


def test_uart_refuses_a_divisor_below_four():
    from tpuer.hw.uart import check_divisor
    with pytest.raises(ValueError, match="at least 4 clock cycles per bit, not 3"):
        check_divisor(3)


def test_frames_round_trip_and_a_flipped_bit_fails_the_crc():
    assert frame_crc(b"123456789") == 0x0376E6E7     # CRC-32/MPEG-2 check value
    words = [0, 0xFFFFFFFF, 0x12345678]
    frame = encode_request(5, words, new_session=True)
    parser = FrameParser(MAX_REQUEST_WORDS)
    [parsed] = parser.feed(b"\x00\x13garbage" + frame)
    assert (parsed.first, parsed.seq, parsed.words, parsed.ok) == (1, 5, words, True)
    for position in range(1, len(frame)):
        broken = bytearray(frame)
        broken[position] ^= 0x10
        frames = FrameParser(MAX_REQUEST_WORDS).feed(bytes(broken))
        assert not any(f.ok for f in frames), position
    with pytest.raises(ValueError, match="at most 256 words"):
        encode_request(0, [0] * (MAX_REQUEST_WORDS + 1))


class LossyBoard:
    """A board by the link's rules (:mod:`tpuer.link`), behind a line that drops, garbles
    and duplicates bytes; a stand-in for a serial port."""

    def __init__(self, rng, *, flip=0.0, drop=0.0, duplicate=0.0, silent=False):
        self.rng = rng
        self.flip, self.drop, self.duplicate, self.silent = flip, drop, duplicate, silent
        self.parser = FrameParser(MAX_REQUEST_WORDS)
        self.executed = []
        self.pending = []               # TPU reply words waiting
        self.last = None                # (seq, reply bytes)
        self.outgoing = bytearray()
        self.queue_room = 10**9

    def _line(self, data):
        out = bytearray()
        for byte in data:
            if self.rng.random() < self.drop:
                continue
            if self.rng.random() < self.flip:
                byte ^= 1 << self.rng.randrange(8)
            out.append(byte)
            if self.rng.random() < self.duplicate:
                out.append(byte)
        return bytes(out)

    def write(self, data):
        if self.silent:
            return
        for frame in self.parser.feed(self._line(data)):
            if not frame.ok:
                reply = encode_reply(Kind.NAK, frame.seq)
            elif self.last and frame.seq == self.last[0] and not frame.first & 1:
                reply = self.last[1]
            else:
                kind = Kind.ACK if len(frame.words) <= self.queue_room else Kind.BUSY
                if kind == Kind.ACK:
                    self.executed.extend(frame.words)
                    self.pending.extend(w ^ 0xFFFF for w in frame.words)   # an "answer"
                words, self.pending = self.pending[:MAX_REPLY_WORDS], self.pending[MAX_REPLY_WORDS:]
                reply = encode_reply(kind, frame.seq, words,
                                     took=kind == Kind.ACK and bool(frame.words))
                self.last = (frame.seq, reply)
            self.outgoing += self._line(reply)

    def read(self, size):
        data, self.outgoing = bytes(self.outgoing[:size]), self.outgoing[size:]
        return data

    @property
    def in_waiting(self):
        return len(self.outgoing)


@pytest.mark.parametrize("faults", [{}, {"flip": 0.001}, {"drop": 0.001},
                                    {"duplicate": 0.001},
                                    {"flip": 0.0005, "drop": 0.0005, "duplicate": 0.0005}])
def test_driver_delivers_every_word_exactly_once_over_a_bad_line(faults):
    board = LossyBoard(random.Random(str(faults)), **faults)
    link = SerialLink(board, name="test board", timeout=0.01, attempts=50)
    words = list(range(3000))
    link.send(words)
    while len(link.replies) < len(words):
        link.poll()
    assert board.executed == words
    assert link.replies == [w ^ 0xFFFF for w in words]
    if faults:
        assert link.retries > 0


def test_driver_drops_a_reply_cut_short_by_the_line():
    """A reply whose count was garbled to a large one, then never finished: the driver
    must not let it swallow the replies to its retransmissions."""
    board = LossyBoard(random.Random(1))
    real_write = board.write
    cut = {"done": False}

    def write(data):
        real_write(data)
        if not cut["done"]:            # the first reply: a header claiming 60 words, cut
            cut["done"] = True
            board.outgoing = bytearray(encode_reply(Kind.ACK, 0, [0] * 60)[:12])

    board.write = write
    link = SerialLink(board, name="test board", timeout=0.01, attempts=3)
    link.send([1, 2, 3])
    assert board.executed == [1, 2, 3] and link.retries >= 1


def test_a_stale_nak_lets_no_word_go_twice():
    """Bytes inside a garbled request can look like a frame of its seq, so a second NAK of
    that seq may come after the host has sent the request again; the request the board
    took meanwhile must count once, whatever the host sends next."""
    board = LossyBoard(random.Random(0))
    real_write = board.write
    copies = []

    def write(data):
        frames = FrameParser(MAX_REQUEST_WORDS).feed(data)
        if frames[0].words and len(copies) < 2:
            copies.append(frames[0])
            board.outgoing += encode_reply(Kind.NAK, frames[0].seq)   # garbled; then stale
            if len(copies) == 1:
                return
        real_write(data)

    board.write = write
    link = SerialLink(board, name="test board", timeout=0.01, attempts=5)
    words = list(range(100))
    link.send(words)
    assert len(copies) == 2                  # the stale NAK came
    assert board.executed == words


def test_driver_names_the_port_when_the_board_is_silent():
    link = SerialLink(LossyBoard(random.Random(0), silent=True), name="/dev/ttyUSB7",
                      timeout=0.01, attempts=3)
    with pytest.raises(LinkError, match="no good reply from /dev/ttyUSB7 after 3 attempts"):
        link.send([1, 2, 3])


@pytest.mark.parametrize("registered", [False, True], ids=["comb", "registered"])
@pytest.mark.parametrize("gaps", [False, True], ids=["steady", "with gaps"])
def test_link_fills_a_reply_to_the_limit_and_loses_no_word(gaps, registered):
    """The board's link alone, against a TPU that always has reply words (or has them now
    and then), its bytes taken as soon as they are offered: each reply carries at most
    MAX_REPLY_WORDS words, a full one exactly that many, a retransmission the same words,
    and every word arrives once, in order. (Registered, the link's bytes and CRC come
    from registers that must hold each byte before it is offered; in the small form the
    CRC takes a byte in nine cycles.)"""
    from tpuer.hw.serial_link import RegisteredSerialLink, SerialLink
    link = (RegisteredSerialLink if registered else SerialLink)(byte_timeout=1000)
    rng = random.Random(seed())
    replies = []

    async def tpu(ctx):
        word = 0
        while True:
            offered = not gaps or rng.random() < 0.7
            ctx.set(link.rsp.valid, offered)
            ctx.set(link.rsp.payload, word)
            *_, taken = await ctx.tick().sample(link.rsp.ready)
            if offered and taken:
                word += 1

    frames = []

    async def line(ctx):
        ctx.set(link.tx_bytes.ready, 1)
        parser = FrameParser(MAX_REPLY_WORDS)
        while True:
            _, _, valid, byte = await ctx.tick().sample(link.tx_bytes.valid,
                                                        link.tx_bytes.payload)
            if valid:
                frames.extend(parser.feed(bytes([byte])))

    async def host(ctx):
        async def exchange(seq, new_session=False):
            frames.clear()
            for byte in encode_request(seq, [], new_session=new_session):
                ctx.set(link.rx_bytes.payload.data, byte)
                ctx.set(link.rx_bytes.valid, 1)
                await ctx.tick()
                ctx.set(link.rx_bytes.valid, 0)
                await ctx.tick().repeat(9)      # a byte every ten cycles, as a fast UART's
            for _ in range(40 * (MAX_REPLY_WORDS + 10)):    # a byte in 9 cycles at most
                if frames:
                    assert len(frames) == 1 and frames[0].ok and frames[0].seq == seq
                    return frames[0].words
                await ctx.tick()
            raise AssertionError(f"no reply to request {seq}")

        # Four exchanges, and more while no word has come yet: with gaps a reply holds
        # only the words that reached the link by then, which may be none, four times over.
        for seq in range(32):
            if seq >= 4 and any(replies):
                break
            words = await exchange(seq, new_session=seq == 0)
            assert await exchange(seq) == words, "a retransmission got other words"
            replies.append(words)

    sim = Simulator(link)
    sim.add_clock(1e-6)
    sim.add_testbench(tpu, background=True)
    sim.add_testbench(line, background=True)
    sim.add_testbench(host)
    sim.run()
    assert len(replies) >= 4, "the host did not get its four replies"
    assert all(len(words) <= MAX_REPLY_WORDS for words in replies)
    if not gaps:
        assert [len(words) for words in replies] == [MAX_REPLY_WORDS] * 4
    flat = [w for words in replies for w in words]
    assert flat == list(range(len(flat))) and flat, "reply words lost, repeated or reordered"


def test_board_link_rules_on_pysim():
    run_pysim(BoardHarness(BOARD_CONFIG, divisor=SIM_DIVISOR), BENCHES["link_rules"],
              BOARD_CONFIG, np.random.default_rng(seed()))


@pytest.mark.parametrize("simulator, benches", [
    ("verilator", None), ("icarus", "program")])
def test_board_behind_its_uart_on_simulator(simulator, benches):
    """The TPU behind its UART, bit by bit on the line: the link's rules, a whole program,
    and (on Verilator) a full command queue."""
    require_simulator(simulator)
    built = backend.build("board", BOARD_CONFIG, simulator,
                          component=BoardHarness(BOARD_CONFIG, divisor=SIM_DIVISOR))
    if benches is None:
        assert backend.run(built, seed=seed()) == len(BENCHES)
    else:
        assert backend.run(built, seed=seed(), testcase=f"board_{benches}") == 1


SERIAL_CONFIG = tpuer.Config(rows=4, cols=4, ub_depth=64, acc_depth=32, weight_tiles=160,
                             program_depth=256)


def _digits_model():
    from tpuer.digits import load_digits, train_mlp
    digits = load_digits()
    return tpuer.quantize(train_mlp(digits, hidden=(32,)), digits.x_train), digits


@pytest.mark.parametrize("faults", [None, {"flip": 3e-4, "drop": 2e-4, "duplicate": 2e-4,
                                           "break_stop": 2e-4, "pause": 2e-4, "seed": 5}],
                         ids=["clean line", "faulty line"])
def test_device_drives_the_simulated_board_through_a_terminal(faults):
    """The board's RTL on Verilator behind a pseudo-terminal, driven by the serial back
    end exactly as a real board: matrix products and the digits MLP must be exact, on a
    clean line and on one that flips, drops and doubles bytes, breaks stop bits and
    pauses; the retransmissions are counted. A clean line waits long for each reply, so
    that a busy machine's slow simulation never passes for a lost frame; the faulty one
    waits briefly, so that dropped frames are retried soon."""
    require_simulator("verilator")
    from tpuer.sim.board_sim import SimulatedBoard
    rng = np.random.default_rng(seed())
    model, digits = _digits_model()
    x = model.quantize_input(digits.x_test[:12])
    retries = 0
    with SimulatedBoard(SERIAL_CONFIG, faults=faults) as board:
        device = tpuer.Device(SERIAL_CONFIG, backend="serial", port=board.port,
                              timeout=2.0 if faults else 60.0)
        for m, k, n in [(3, 5, 6), (18, 9, 7)]:
            a = rng.integers(-128, 128, (m, k)).astype(np.int8)
            b = rng.integers(-128, 128, (k, n)).astype(np.int8)
            assert np.array_equal(device.matmul(a, b), a.astype(np.int64) @ b)
            retries += device.stats["link_retries"]
        assert np.array_equal(device.run(model, x), model.reference(x))
        retries += device.stats["link_retries"]
    if faults:
        assert sum(board.faults_injected.values()) > 0
        assert retries > 0
    else:
        assert retries == 0 and board.faults_injected == {}


def test_serial_backend_refuses_a_missing_port():
    with pytest.raises(ValueError, match="needs port="):
        tpuer.Device(SERIAL_CONFIG, backend="serial")
    with pytest.raises(LinkError, match="cannot open /dev/no-such-board"):
        tpuer.Device(SERIAL_CONFIG, backend="serial", port="/dev/no-such-board")
    with pytest.raises(ValueError, match="takes no options"):
        tpuer.Device(SERIAL_CONFIG, backend="golden", port="/dev/ttyUSB0")


def test_board_as_the_icebreaker_builds_it_on_icarus(tmp_path):
    """The iCEBreaker's logic as its bitstream has it (its board's small forms: the link's
    bit-serial CRC, a half-rate register stage for the replies and none for the commands
    between link and TPU, the lane-serial activation unit; products in SB_MAC16 blocks,
    the program in SPRAM, block RAMs instantiated directly), behind its UART on Icarus with
    Yosys's models of the primitives: a whole program over the line, against the golden
    model."""
    from amaranth_boards.icebreaker import ICEBreakerPlatform
    require_simulator("icarus")
    cfg = replace(BOARD_CONFIG, activation_steps=32, host_read_queue=1, control_registers=0)
    built = backend.build("board", cfg, "icarus", platform=ICEBreakerPlatform(),
                          component=BoardHarness(cfg, divisor=SIM_DIVISOR),
                          variant="ice40",
                          extra_sources=[ice40_models(tmp_path, "SB_MAC16", "SB_SPRAM256KA",
                                                       "SB_RAM40_4K", "SB_LUT4", "SB_CARRY")])
    assert backend.run(built, seed=seed(), testcase="board_program") == 1


#: The example fault rates of the docs (per byte, each direction).
EXAMPLE_FAULTS = {"flip": 3e-4, "drop": 2e-4, "duplicate": 2e-4, "break_stop": 2e-4,
                 "pause": 2e-4}


@pytest.mark.parametrize("scale, products", [(1, 100), (10, 20)], ids=["example", "10x"])
def test_link_holds_on_the_model_board_at_ten_times_the_example_fault_rates(scale, products):
    """The whole path (Device, driver, link, board link rules, host command set, core) on
    a board modelled in simulated time: every 64x32x16 product exact, none ending in
    LinkError, at the example's fault rates and at ten times them. The same seed gives
    the same run: the line's time is the model's, not the wall clock's."""
    from tpuer.sim.model_board import ModelBoard
    rng = np.random.default_rng(seed())
    faults = {name: rate * scale for name, rate in EXAMPLE_FAULTS.items()}
    board = ModelBoard(SERIAL_CONFIG, faults={**faults, "seed": seed()})
    device = tpuer.Device(SERIAL_CONFIG, backend="serial", port=board)
    retries = 0
    for _ in range(products):
        a = rng.integers(-128, 128, (64, 32)).astype(np.int8)
        b = rng.integers(-128, 128, (32, 16)).astype(np.int8)
        assert np.array_equal(device.matmul(a, b), a.astype(np.int64) @ b)
        retries += device.stats["link_retries"]
    injected = sum(board.faults_injected.values())
    print(f"{products} products at {scale}x the example's fault rates: {injected} faults, "
          f"{retries} retries, {board.now:.1f} s of line time at 115200 baud, no LinkError")
    assert injected > 0 and retries > 0
    # the same seed, the same run
    again = ModelBoard(SERIAL_CONFIG, faults={**faults, "seed": seed()})
    first = ModelBoard(SERIAL_CONFIG, faults={**faults, "seed": seed()})
    for one in (again, first):
        twin = tpuer.Device(SERIAL_CONFIG, backend="serial", port=one)
        twin.matmul(np.ones((64, 32), np.int8), np.ones((32, 16), np.int8))
    assert (again.now, again.faults_injected) == (first.now, first.faults_injected)


@pytest.mark.parametrize("scale, products", [(1, 2), (10, 1)], ids=["example", "10x"])
def test_link_holds_on_the_rtl_board_in_simulated_time(scale, products):
    """The same on the board's RTL (Verilator), smaller: 16x16x8 products, each exact,
    none ending in LinkError. The board runs in step with the host (``in_step``), so the
    host's timeouts are simulated time and the seed alone decides the run."""
    require_simulator("verilator")
    from tpuer.sim.board_sim import SimulatedBoard
    rng = np.random.default_rng(seed())
    faults = {name: rate * scale for name, rate in EXAMPLE_FAULTS.items()}
    retries = 0
    with SimulatedBoard(SERIAL_CONFIG, faults={**faults, "seed": seed()},
                        in_step=True) as board:
        device = tpuer.Device(SERIAL_CONFIG, backend="serial", port=board.port)
        for _ in range(products):
            a = rng.integers(-128, 128, (16, 16)).astype(np.int8)
            b = rng.integers(-128, 128, (16, 8)).astype(np.int8)
            assert np.array_equal(device.matmul(a, b), a.astype(np.int64) @ b)
            retries += device.stats["link_retries"]
        line_time = board.port.clock()
    injected = sum(board.faults_injected.values())
    print(f"RTL board, {products} products at {scale}x the example's fault rates: "
          f"{injected} faults, {retries} retries, {line_time:.1f} s of line time, no LinkError")
    assert injected > 0 and retries > 0


def test_bit_serial_crc_matches_the_byte_wide_one():
    """The small link's CRC, a bit per cycle, against amaranth's byte-wide
    ``crc.Processor``: random bytes offered at random (taken only while ``ready``), restarts
    (now and then in the middle of a byte), and frames closed by their own CRC: whenever it
    is ready, the same ``crc`` and ``match_detected``; ``ready`` falls for eight cycles a
    byte."""
    from amaranth.lib import crc
    from tpuer.hw.serial_crc import BitSerialCRC
    from tpuer.link import CRC
    rng = random.Random(seed())
    m = Module()
    m.submodules.serial = serial = BitSerialCRC(CRC(data_width=8))
    m.submodules.reference = reference = crc.Processor(CRC(data_width=8))
    counts = {"compared": 0, "matches": 0, "restarts_in_a_byte": 0}

    async def bench(ctx):
        frame, closing, busy_for = [], [], 0
        for cycle in range(20000):
            start = rng.random() < 0.01
            if closing:
                byte, offer = closing[0], True
            else:
                offer = rng.random() < 0.3
                byte = rng.randrange(256)
            ready = ctx.get(serial.ready)
            assert ready == (busy_for == 0), f"cycle {cycle}: ready {ready}"
            if ready and not start:
                counts["compared"] += 1
                got = (ctx.get(serial.crc), ctx.get(serial.match_detected))
                want = (ctx.get(reference.crc), ctx.get(reference.match_detected))
                assert got == want, f"cycle {cycle}: {got}, expected {want}"
                counts["matches"] += want[1]
            taken = offer and (ready or start)
            counts["restarts_in_a_byte"] += start and not ready
            for port, value in ((serial.start, start), (serial.valid, offer),
                                (serial.data, byte), (reference.start, start),
                                (reference.valid, taken), (reference.data, byte)):
                ctx.set(port, value)
            await ctx.tick()
            busy_for = 8 if taken else (0 if start else max(busy_for - 1, 0))
            if start:
                frame, closing = [], []
            if taken:
                if closing:
                    closing.pop(0)
                else:
                    frame.append(byte)
                    if rng.random() < 0.1:           # close the frame with its CRC
                        closing = list(CRC(data_width=8).compute(frame).to_bytes(4, "big"))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert min(counts.values()) > 10, counts
