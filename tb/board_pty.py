"""cocotb test module: the simulated board's serial line, to a host outside the simulator.

The board (:class:`~tpuer.tb.board_harness.BoardHarness`: the TPU behind its UART, with a
host-side UART beside it) runs on the simulator; a :class:`LineBridge` moves bytes between
the host-side UART and a host, injuring them on the way if asked (bits flipped, bytes
dropped or doubled, stop bits broken, pauses). Two tests, two kinds of host:

* ``serve``: a pseudo-terminal, so that any program that opens it
  (``tpuer.Device(backend="serial", port=...)``) talks to the board as to a real one, in
  wall-clock time.
* ``serve_in_step``: a socket over which the host's port
  (:class:`~tpuer.sim.board_sim.SimulatedBoard` with ``in_step=True``) asks for each
  stretch of simulated time; the simulator stands still in between, so the host's
  timeouts are simulated time and a seed gives the same run every time. Each request
  is a line of JSON, ``{"send": hex, "until": cycle, "first_byte": bool}`` (send those
  bytes now, then run until that cycle, or with ``first_byte`` until bytes have reached the
  host and the line has been quiet for :data:`QUIET_CYCLES`) or ``{"stop": true}``; each answer ``{"cycle": n, "bytes": hex}``.

Environment: ``TPUER_FAULTS`` (JSON: per-byte rates ``flip``, ``drop``, ``duplicate``,
``break_stop``, ``pause``, and ``seed``), ``TPUER_JOB_OUT`` (JSON of the faults injected,
written at the end); for ``serve`` ``TPUER_PTY_FILE`` (where to write the terminal's name)
and ``TPUER_STOP_FILE`` (its appearance ends the run); for ``serve_in_step``
``TPUER_SOCKET`` (the host's listening socket).
"""

import json
import os
import random
import select
import socket
import time
import tty

import cocotb
from cocotb.triggers import Timer

from ..sim.line_faults import LineFaults
from .harness import CocotbIO

#: Wall-clock seconds without a byte after which the pseudo-terminal's board gives up.
IDLE_LIMIT_S = 600
#: Cycles the bridge rests at most when no byte moved.
REST_CYCLES = 64
CLOCK_NS = 10                    # CocotbIO's clock period
#: Cycles a pause of the line lasts, at least and at most (the board's byte timeout is
#: 64 bit times: 256 cycles at the simulated UART's 4 cycles a bit).
PAUSE_CYCLES = (100, 5000)
#: With ``first_byte``, the run ends once bytes came and then none for this many cycles
#: (two bytes' time at 4 cycles a bit): a frame comes back in one answer, not a byte each.
QUIET_CYCLES = 80


class LineBridge:
    """The line between a host and the board's host-side UART, a byte at a time."""

    def __init__(self, io, faults):
        self.io = io
        self.faults = faults
        self.rng = random.Random(faults.get("seed", 1))
        self.counts = {}
        self._to_board = LineFaults(faults, self.rng, self.counts, "to_board")
        self._from_board = LineFaults(faults, self.rng, self.counts, "from_board")
        self._outgoing = []              # (byte, break_stop) for the board
        self._pause_until = 0
        for name in ("host_tx__valid", "line_break"):
            io.set(name, 0)

    def give(self, data):
        """Bytes from the host, onto the line towards the board."""
        for byte in data:
            self._outgoing.extend(self._to_board.carry(byte))

    async def step(self):
        """One cycle: the next byte offered to the board, one taken from it. Returns
        whether a byte moved and the bytes that reach the host."""
        io = self.io
        sending = bool(self._outgoing) and io.cycle >= self._pause_until
        if sending:
            byte, broken = self._outgoing[0]
            io.set("host_tx__payload", byte | (int(broken) << 8))
        io.set("host_tx__valid", int(sending))
        io.set("host_rx__ready", 1)
        await io.settle()
        tx_taken = sending and io.get("host_tx__ready")
        rx_byte = io.get("host_rx__payload") if io.get("host_rx__valid") else None
        await io.tick()
        if tx_taken:
            self._outgoing.pop(0)
            if self.rng.random() < self.faults.get("pause", 0.0):
                self.counts["pause"] = self.counts.get("pause", 0) + 1
                self._pause_until = io.cycle + self.rng.randrange(*PAUSE_CYCLES)
        arrived = [] if rx_byte is None else [b for b, _ in self._from_board.carry(rx_byte)]
        return tx_taken or rx_byte is not None, arrived

    async def rest(self, cycles=REST_CYCLES):
        """Both streams rest for ``cycles`` (at least 1) while the UARTs work: a byte takes
        10 bit times, and the host-side queues hold 64 bytes, so nothing is lost."""
        self.io.set("host_tx__valid", 0)
        self.io.set("host_rx__ready", 0)
        # A timer costs one callback where ClockCycles costs one per cycle; it ends half
        # a cycle before an edge, so the inputs set next are taken at that edge.
        await Timer(cycles * CLOCK_NS - CLOCK_NS // 2, unit="ns")
        self.io.cycle += cycles

    def report(self):
        if os.environ.get("TPUER_JOB_OUT"):
            with open(os.environ["TPUER_JOB_OUT"], "w") as file:
                json.dump(self.counts, file)


def _faults():
    return json.loads(os.environ.get("TPUER_FAULTS", "{}") or "{}")


@cocotb.test()
async def serve(dut):
    io = await CocotbIO.start(dut, period_ns=CLOCK_NS)
    bridge = LineBridge(io, _faults())
    master, slave = os.openpty()
    tty.setraw(slave)
    os.set_blocking(master, False)
    with open(os.environ["TPUER_PTY_FILE"] + ".tmp", "w") as file:
        file.write(os.ttyname(slave))
    os.replace(os.environ["TPUER_PTY_FILE"] + ".tmp", os.environ["TPUER_PTY_FILE"])
    stop_file = os.environ["TPUER_STOP_FILE"]
    last_byte = time.monotonic()
    idle = 0
    while True:
        if select.select([master], [], [], 0)[0]:
            try:
                data = os.read(master, 4096)
            except OSError:
                data = b""
            bridge.give(data)
            if data:
                last_byte = time.monotonic()
        moved, arrived = await bridge.step()
        if arrived:
            os.write(master, bytes(arrived))
            last_byte = time.monotonic()
        if moved:
            idle = 0
            continue
        await bridge.rest()
        idle += 1
        if idle > 4096:
            time.sleep(0.0005)           # a quiet line: leave the processor to the host
        if idle % 256 == 0 and (os.path.exists(stop_file) or
                                time.monotonic() - last_byte > IDLE_LIMIT_S):
            break
    bridge.report()
    os.close(master)
    os.close(slave)


@cocotb.test()
async def serve_in_step(dut):
    io = await CocotbIO.start(dut, period_ns=CLOCK_NS)
    bridge = LineBridge(io, _faults())
    host = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    host.connect(os.environ["TPUER_SOCKET"])
    requests = host.makefile("r")
    for line in requests:
        request = json.loads(line)
        if request.get("stop"):
            break
        bridge.give(bytes.fromhex(request["send"]))
        arrived, last_arrival = [], None
        while io.cycle < request["until"]:
            if (request["first_byte"] and last_arrival is not None and
                    io.cycle - last_arrival >= QUIET_CYCLES):
                break
            moved, more = await bridge.step()
            if more:
                arrived += more
                last_arrival = io.cycle
            if not moved:
                await bridge.rest(max(1, min(REST_CYCLES, request["until"] - io.cycle - 1)))
        host.sendall((json.dumps({"cycle": io.cycle, "bytes": bytes(arrived).hex()}) +
                      "\n").encode())
    bridge.report()
    host.close()
