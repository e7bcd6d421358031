"""cocotb test module: the simulated board behind a pseudo-terminal.

The board (:class:`~tpuer.tb.board_harness.BoardHarness`: the TPU behind its UART, with a
host-side UART beside it) runs on the simulator; this module opens a pseudo-terminal and
moves bytes between it and the host-side UART, so that any program that opens the
terminal (``tpuer.Device(backend="serial", port=...)``) talks to the board as to a real
one. It can injure the line on the way: bits flipped, bytes dropped or doubled, stop bits
broken, pauses.

Environment: ``TPUER_PTY_FILE`` (where to write the terminal's name), ``TPUER_STOP_FILE``
(its appearance ends the run), ``TPUER_FAULTS`` (JSON: per-byte rates ``flip``, ``drop``,
``duplicate``, ``break_stop``, ``pause``, and ``seed``), ``TPUER_JOB_OUT`` (JSON of the
faults injected, written at the end).
"""

import json
import os
import random
import select
import time
import tty

import cocotb
from cocotb.triggers import Timer

from ..sim.line_faults import LineFaults
from .harness import CocotbIO

#: Wall-clock seconds without a byte after which the simulated board gives up.
IDLE_LIMIT_S = 600
#: Cycles the bridge rests when no byte moved.
REST_CYCLES = 64
CLOCK_NS = 10                    # CocotbIO's clock period


@cocotb.test()
async def serve(dut):
    io = await CocotbIO.start(dut, period_ns=CLOCK_NS)
    faults = json.loads(os.environ.get("TPUER_FAULTS", "{}") or "{}")
    rng = random.Random(faults.get("seed", 1))
    counts = {}
    to_board, from_board = LineFaults(faults, rng, counts, "to_board"), \
        LineFaults(faults, rng, counts, "from_board")
    master, slave = os.openpty()
    tty.setraw(slave)
    os.set_blocking(master, False)
    with open(os.environ["TPUER_PTY_FILE"] + ".tmp", "w") as file:
        file.write(os.ttyname(slave))
    os.replace(os.environ["TPUER_PTY_FILE"] + ".tmp", os.environ["TPUER_PTY_FILE"])
    stop_file = os.environ["TPUER_STOP_FILE"]

    for name in ("host_tx__valid", "line_break"):
        io.set(name, 0)
    outgoing = []                    # (byte, break_stop) for the board
    last_byte = time.monotonic()
    pause_until = 0
    idle = 0
    while True:
        if select.select([master], [], [], 0)[0]:
            try:
                data = os.read(master, 4096)
            except OSError:
                data = b""
            for byte in data:
                outgoing.extend(to_board.carry(byte))
            if data:
                last_byte = time.monotonic()
        sending = bool(outgoing) and io.cycle >= pause_until
        if sending:
            byte, broken = outgoing[0]
            io.set("host_tx__payload", byte | (int(broken) << 8))
        io.set("host_tx__valid", int(sending))
        io.set("host_rx__ready", 1)
        await io.settle()
        tx_taken = sending and io.get("host_tx__ready")
        rx_byte = io.get("host_rx__payload") if io.get("host_rx__valid") else None
        await io.tick()
        if tx_taken:
            outgoing.pop(0)
            if rng.random() < faults.get("pause", 0.0):
                counts["pause"] = counts.get("pause", 0) + 1
                pause_until = io.cycle + rng.randrange(100, 5000)
        if rx_byte is not None:
            for byte, _ in from_board.carry(rx_byte):
                os.write(master, bytes([byte]))
            last_byte = time.monotonic()
        if tx_taken or rx_byte is not None:
            idle = 0
            continue
        # Nothing moved: rest both streams while the UARTs work (a byte takes 10 bit
        # times; the host-side queues hold 64 bytes, so nothing is lost meanwhile).
        io.set("host_tx__valid", 0)
        io.set("host_rx__ready", 0)
        # A timer costs one callback where ClockCycles costs one per cycle; it ends half
        # a cycle before an edge, so the inputs set next are taken at that edge.
        await Timer(REST_CYCLES * CLOCK_NS - CLOCK_NS // 2, unit="ns")
        io.cycle += REST_CYCLES
        idle += 1
        if idle > 4096:
            time.sleep(0.0005)           # a quiet line: leave the processor to the host
        if idle % 256 == 0 and (os.path.exists(stop_file) or
                                time.monotonic() - last_byte > IDLE_LIMIT_S):
            break
    if os.environ.get("TPUER_JOB_OUT"):
        with open(os.environ["TPUER_JOB_OUT"], "w") as file:
            json.dump(counts, file)
    os.close(master)
    os.close(slave)
