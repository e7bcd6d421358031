"""The datapath's parts on their own, under amaranth.sim, each form against one model of
what the part promises: the matmul feed (room, order, rows that add too soon held back)
and the read ports (the datapath's reads first, the host's answered in order with the
right rows)."""

from collections import deque

import numpy as np
import pytest
from amaranth.sim import Simulator

from tpuer import Config
from tpuer.hw.accumulators import add_spacing
from tpuer.hw.datapath import command_layouts
from tpuer.hw.matmul_feed import LookaheadMatmulFeed, MatmulFeed, feed_slots
from tpuer.hw.matrix_unit import MatrixUnit
from tpuer.hw.read_ports import ReadPorts, RegisteredReadPorts, host_answer_slots
from tpuer.tb.harness import reference_instance

from conftest import seed

#: (form, configuration): each form with the read latency it is made for.
FEEDS = [(MatmulFeed, Config(rows=4, cols=3, ub_depth=16, acc_depth=8)),
         (LookaheadMatmulFeed, Config(rows=4, cols=3, ub_depth=16, acc_depth=8,
                                      memory_read_latency=2, multiply_latency=3))]
PORTS = [(ReadPorts, Config(rows=3, cols=2, ub_depth=16, acc_depth=8)),
         (ReadPorts, Config(rows=3, cols=2, ub_depth=16, acc_depth=8, host_read_queue=1)),
         (RegisteredReadPorts, Config(rows=3, cols=2, ub_depth=16, acc_depth=8,
                                      memory_read_latency=2))]


def _simulate(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def _row(rng, lanes, low=-128, high=128):
    return [int(v) for v in rng.integers(low, high, lanes)]


@pytest.mark.parametrize("form,cfg", FEEDS, ids=["small", "lookahead"])
def test_matmul_feed_against_its_rules(form, cfg):
    """Random commands (accumulator rows from a small set, so that rows adding to a row just
    entered are common) and a matrix unit that takes rows now and then: every cycle the
    feed's ``ready`` is "the rows being read and queued are fewer than feed_slots", its
    ``busy`` is "some row is being read or queued", and it offers the oldest row unless
    that row adds to the accumulator row of one that entered in the add_spacing - 1 cycles
    before; the row offered is the Unified Buffer row its command named, read
    memory_read_latency cycles after the command was taken."""
    rng = np.random.default_rng(seed())
    layouts = command_layouts(cfg)
    row_layout = reference_instance(MatrixUnit(cfg, tag_shape=layouts["matmul_tag"])).row_layout
    dut = form(cfg, command_layout=layouts["matmul"], row_layout=row_layout)
    ub = {addr: _row(rng, cfg.ub_lanes) for addr in range(cfg.ub_depth)}
    latency, spacing, slots = cfg.memory_read_latency, add_spacing(cfg), feed_slots(cfg)
    checked = {"offered": 0, "held_back": 0, "full": 0}

    async def bench(ctx):
        reads = deque()       # (cycle taken, command) of the rows being read
        queue = deque()       # the rows read: (data, new_tile, acc_addr, accumulate)
        entered = deque()     # (cycle, acc_addr) of the rows that entered lately
        for cycle in range(3000):
            command = {"ub_addr": int(rng.integers(0, cfg.ub_depth)),
                       "acc_addr": int(rng.integers(0, 3)),
                       "accumulate": int(rng.random() < 0.6),
                       "new_tile": int(rng.random() < 0.1)}
            offering = rng.random() < 0.7
            taking = rng.random() < 0.7
            ctx.set(dut.matmul.valid, offering)
            for name, value in command.items():
                ctx.set(getattr(dut.matmul.payload, name), value)
            ctx.set(dut.rows.ready, taking)
            arriving = reads[0][1] if reads and reads[0][0] == cycle - latency else None
            for lane, value in enumerate(ub[arriving["ub_addr"]] if arriving
                                         else _row(rng, cfg.ub_lanes)):
                ctx.set(dut.read_data[lane], value)

            room = len(reads) + len(queue) < slots
            recent = {addr for when, addr in entered if when >= cycle - (spacing - 1)}
            head = queue[0] if queue else None
            held_back = bool(head) and head[3] and head[2] in recent
            want = {"ready": int(room), "valid": int(bool(head) and not held_back),
                    "busy": int(bool(reads or queue))}
            got = {"ready": ctx.get(dut.matmul.ready), "valid": ctx.get(dut.rows.valid),
                   "busy": ctx.get(dut.busy)}
            assert got == want, f"cycle {cycle}: {got}, expected {want} (queue {list(queue)})"
            if want["valid"]:
                payload = dut.rows.payload
                offered = ([ctx.get(payload.data[k]) for k in range(cfg.rows)],
                           ctx.get(payload.new_tile), ctx.get(payload.tag.acc_addr),
                           ctx.get(payload.tag.accumulate))
                assert offered == head, f"cycle {cycle}: offered {offered}, expected {head}"
                checked["offered"] += 1
            checked["held_back"] += held_back
            checked["full"] += not room
            await ctx.tick()
            if want["valid"] and taking:
                entered.append((cycle, queue.popleft()[2]))
            if arriving:
                reads.popleft()
                queue.append((ub[arriving["ub_addr"]][:cfg.rows], arriving["new_tile"],
                              arriving["acc_addr"], arriving["accumulate"]))
            if offering and room:
                reads.append((cycle, command))

    _simulate(dut, bench)
    assert min(checked.values()) > 50, checked


@pytest.mark.parametrize("form,cfg", PORTS, ids=["small", "small-hq1", "registered"])
def test_read_ports_against_their_rules(form, cfg):
    """The datapath's own reads offered at random (a ``pending`` a little more often than a
    ``valid``, a ``taken`` a little less), host reads of either memory, and a host that takes
    answers now and then: a memory's own taken read always has its port; a host read is
    taken only while its memory's own read is not offered (for the registered form not
    pending either) and never overruns the answer queue (host_answer_slots rows, less one
    answer taken in the cycle for the small form); the host gets, in order, each row it
    asked for, widened: the Unified Buffer's lanes, or the accumulator words in the first
    ``cols`` lanes and zeros after."""
    rng = np.random.default_rng(seed())
    layouts = command_layouts(cfg)
    dut = form(cfg, host_read_layout=layouts["host_read"],
               host_row_layout=layouts["host_row"])
    latency, depth = cfg.memory_read_latency, host_answer_slots(cfg)
    registered = form is RegisteredReadPorts
    memories = {"ub": {a: _row(rng, cfg.ub_lanes) for a in range(cfg.ub_depth)},
                "acc": {a: _row(rng, cfg.cols, -(1 << 31), 1 << 31)
                        for a in range(cfg.acc_depth)}}
    counts = {"answered": 0, "blocked": 0, "own": 0}

    def widened(memory, addr):
        row = memories[memory][addr]
        return row + [0] * (cfg.ub_lanes - len(row))

    async def bench(ctx):
        reads = {"ub": deque(), "acc": deque()}    # (cycle, address) of the port's reads
        pending_answers = deque()                  # (cycle, memory, address) of host reads
        answers = deque()                          # rows waiting for the host
        request = None
        for cycle in range(3000):
            own = {}
            for memory, port in (("ub", dut.matmul), ("acc", dut.activate)):
                pending = rng.random() < 0.4
                valid = pending and rng.random() < 0.8
                taken = valid and rng.random() < 0.7
                addr = int(rng.integers(0, len(memories[memory])))
                own[memory] = (pending, valid, taken, addr)
                for name, value in zip(("pending", "valid", "taken", "addr"), own[memory]):
                    ctx.set(getattr(port, name), value)
            if request is None and rng.random() < 0.8:
                memory = "acc" if rng.random() < 0.5 else "ub"
                request = (memory, int(rng.integers(0, len(memories[memory]))))
            ctx.set(dut.host_read.valid, request is not None)
            if request:
                ctx.set(dut.host_read.payload.acc, request[0] == "acc")
                ctx.set(dut.host_read.payload.addr, request[1])
            host_takes = rng.random() < 0.6
            ctx.set(dut.host_data.ready, host_takes)
            for memory, port in (("ub", dut.ub), ("acc", dut.acc)):
                lanes = cfg.ub_lanes if memory == "ub" else cfg.cols
                due = reads[memory][0] if reads[memory] and \
                    reads[memory][0][0] == cycle - latency else None
                row = memories[memory][due[1]] if due else _row(rng, lanes)
                for lane, value in enumerate(row):
                    ctx.set(port.data[lane], value)

            held = len(answers) + len(pending_answers)
            taken_now = bool(answers) and host_takes
            room = held < depth or (not registered and taken_now and held < depth + 1)
            if request:
                blocked = own[request[0]][0 if registered else 1]
                counts["blocked"] += blocked
                want_ready = int(room and not blocked)
                assert ctx.get(dut.host_read.ready) == want_ready, \
                    f"cycle {cycle}: host read ready, expected {want_ready}"
            host_taken = bool(request) and room and not blocked
            for memory, port in (("ub", dut.ub), ("acc", dut.acc)):
                _, _, taken, addr = own[memory]
                en = ctx.get(port.en)
                if taken:
                    counts["own"] += 1
                    assert en and ctx.get(port.addr) == addr, f"cycle {cycle}: {memory}"
                    reads[memory].append((cycle, addr))
                elif host_taken and request[0] == memory:
                    assert en and ctx.get(port.addr) == request[1], f"cycle {cycle}: {memory}"
                    reads[memory].append((cycle, request[1]))
                else:
                    assert not en, f"cycle {cycle}: {memory} read with none taken"
            assert ctx.get(dut.host_data.valid) == int(bool(answers)), f"cycle {cycle}"
            if answers:
                got = [ctx.get(dut.host_data.payload[k]) for k in range(cfg.ub_lanes)]
                assert got == answers[0], f"cycle {cycle}: answer {got}, expected {answers[0]}"
            await ctx.tick()
            for memory in reads:
                if reads[memory] and reads[memory][0][0] == cycle - latency:
                    reads[memory].popleft()
            if taken_now:
                answers.popleft()
                counts["answered"] += 1
            if pending_answers and pending_answers[0][0] == cycle - latency:
                _, memory, addr = pending_answers.popleft()
                answers.append(widened(memory, addr))
            if host_taken:
                pending_answers.append((cycle, *request))
                request = None

    _simulate(dut, bench)
    assert min(counts.values()) > 100, counts
