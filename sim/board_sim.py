"""The whole board, simulated: the TPU behind its UART on Verilator (or Icarus), reachable
through a pseudo-terminal, so that ``tpuer.Device(backend="serial", port=board.port)``
drives it with the very driver that drives a real board; or, with ``in_step=True``,
through a port object whose time is the simulation's, so that a seed gives the same run
every time."""

import json
import math
import socket
import tempfile
import threading
import time
from pathlib import Path

from . import cocotb_backend as backend

__all__ = ["SimulatedBoard", "InStepPort"]


class SimulatedBoard:
    """A simulated board; use it as a context manager::

        with SimulatedBoard(cfg, faults={"flip": 1e-3, "seed": 2}) as board:
            device = tpuer.Device(cfg, backend="serial", port=board.port)

    ``faults`` injures the line (per-byte rates ``flip``, ``drop``, ``duplicate``,
    ``break_stop``, ``pause``); :attr:`faults_injected` counts what was done, once closed.
    The board's UART runs at ``divisor`` clock cycles per bit. ``board.port`` is the name
    of a pseudo-terminal, in wall-clock time; with ``in_step`` it is a port object (see
    :class:`InStepPort`) on which a bit takes ``1 / baud`` seconds of simulated time.
    """

    def __init__(self, cfg, *, simulator="verilator", faults=None, divisor=None,
                 start_timeout=600, in_step=False, baud=115200):
        from ..tb.board_tb import SIM_DIVISOR
        self.cfg = cfg
        self.simulator = simulator
        self.faults = dict(faults or {})
        self.divisor = divisor or SIM_DIVISOR
        self.start_timeout = start_timeout
        self.in_step = in_step
        self.baud = baud
        self.port = None
        self.faults_injected = {}
        self._thread = None
        self._error = None

    def __enter__(self):
        from ..tb.board_harness import BoardHarness
        built = backend.build(f"board{self.divisor}", self.cfg, self.simulator,
                              component=BoardHarness(self.cfg, divisor=self.divisor))
        self._dir = tempfile.TemporaryDirectory(prefix="tpuer-board-")
        folder = Path(self._dir.name)
        self._pty_file, self._stop_file = folder / "pty", folder / "stop"
        self._out = folder / "faults.json"
        env = {"TPUER_FAULTS": json.dumps(self.faults), "TPUER_JOB_OUT": str(self._out)}
        if self.in_step:
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(folder / "line"))
            listener.listen(1)
            listener.settimeout(0.2)
            env["TPUER_SOCKET"] = str(folder / "line")
            testcase = "serve_in_step"
        else:
            env.update(TPUER_PTY_FILE=str(self._pty_file), TPUER_STOP_FILE=str(self._stop_file))
            testcase = "serve"

        def serve():
            try:
                backend.run(built, test_module="tpuer.tb.board_pty", testcase=testcase,
                            extra_env=env)
            except BaseException as error:        # reported by close() or __enter__
                self._error = error

        self._thread = threading.Thread(target=serve, name="simulated board", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.in_step:
                try:
                    connection, _ = listener.accept()
                    listener.close()
                    self.port = InStepPort(connection, self.divisor * self.baud)
                    return self
                except socket.timeout:
                    pass
            elif self._pty_file.exists():
                self.port = self._pty_file.read_text()
                return self
            if self._error is not None or not self._thread.is_alive():
                raise RuntimeError(f"the simulated board did not start: {self._error}")
            if time.monotonic() > deadline:
                raise RuntimeError("the simulated board did not open its line in time")
            time.sleep(0.05)

    def close(self):
        if self._thread is None:
            return
        if self.in_step:
            self.port.close()
        else:
            self._stop_file.write_text("stop")
        self._thread.join(timeout=120)
        if self._out.exists():
            self.faults_injected = json.loads(self._out.read_text())
        self._thread = None
        self._dir.cleanup()
        if self._error is not None:
            raise RuntimeError(f"the simulated board failed: {self._error}")

    def __exit__(self, *exc):
        self.close()


class InStepPort:
    """A serial port (``write``, ``read``, ``in_waiting``) with a clock of its own
    (``clock``, ``sleep``) onto a simulated board that runs only when asked: the time
    it reads is the simulation's, ``cycles_per_second`` cycles a second. A read with
    nothing waiting runs the board until a byte arrives, for ``read_timeout`` seconds at
    most; the bytes written go onto the line as the board next runs."""

    def __init__(self, connection, cycles_per_second, *, read_timeout=0.05):
        self._connection = connection
        self._answers = connection.makefile("r")
        self.cycles_per_second = cycles_per_second
        self.read_timeout = read_timeout
        self.cycle = 0
        self._to_send = bytearray()
        self._received = bytearray()

    def clock(self):
        return self.cycle / self.cycles_per_second

    def sleep(self, seconds):
        self._run(seconds, first_byte=False)

    def write(self, data):
        self._to_send += bytes(data)

    def read(self, size=1):
        if not self._received:
            self._run(self.read_timeout, first_byte=True)
        out = bytes(self._received[:size])
        del self._received[:size]
        return out

    @property
    def in_waiting(self):
        return len(self._received)

    def _run(self, seconds, *, first_byte):
        until = self.cycle + max(1, math.ceil(seconds * self.cycles_per_second))
        request = {"send": self._to_send.hex(), "until": until, "first_byte": first_byte}
        self._to_send.clear()
        self._connection.sendall((json.dumps(request) + "\n").encode())
        line = self._answers.readline()
        if not line:
            raise ConnectionError("the simulated board has stopped")
        answer = json.loads(line)
        self.cycle = answer["cycle"]
        self._received += bytes.fromhex(answer["bytes"])

    def close(self):
        try:
            self._connection.sendall(b'{"stop": true}\n')
        except OSError:
            pass
        self._connection.close()
