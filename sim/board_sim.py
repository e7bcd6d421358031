"""The whole board, simulated: the TPU behind its UART on Verilator (or Icarus), reachable
through a pseudo-terminal, so that ``tpuer.Device(backend="serial", port=board.port)``
drives it with the very driver that drives a real board."""

import json
import tempfile
import threading
import time
from pathlib import Path

from . import cocotb_backend as backend

__all__ = ["SimulatedBoard"]


class SimulatedBoard:
    """A simulated board; use it as a context manager::

        with SimulatedBoard(cfg, faults={"flip": 1e-3, "seed": 2}) as board:
            device = tpuer.Device(cfg, backend="serial", port=board.port)

    ``faults`` injures the line (per-byte rates ``flip``, ``drop``, ``duplicate``,
    ``break_stop``, ``pause``); :attr:`faults_injected` counts what was done, once closed.
    The board's UART runs at ``divisor`` clock cycles per bit.
    """

    def __init__(self, cfg, *, simulator="verilator", faults=None, divisor=None,
                 start_timeout=600):
        from ..tb.board_tb import SIM_DIVISOR
        self.cfg = cfg
        self.simulator = simulator
        self.faults = dict(faults or {})
        self.divisor = divisor or SIM_DIVISOR
        self.start_timeout = start_timeout
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
        env = {"TPUER_PTY_FILE": str(self._pty_file), "TPUER_STOP_FILE": str(self._stop_file),
               "TPUER_FAULTS": json.dumps(self.faults), "TPUER_JOB_OUT": str(self._out)}

        def serve():
            try:
                backend.run(built, test_module="tpuer.tb.board_pty", testcase="serve",
                            extra_env=env)
            except BaseException as error:        # reported by close() or __enter__
                self._error = error

        self._thread = threading.Thread(target=serve, name="simulated board", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self.start_timeout
        while not self._pty_file.exists():
            if self._error is not None or not self._thread.is_alive():
                raise RuntimeError(f"the simulated board did not start: {self._error}")
            if time.monotonic() > deadline:
                raise RuntimeError("the simulated board did not open its terminal in time")
            time.sleep(0.05)
        self.port = self._pty_file.read_text()
        return self

    def close(self):
        if self._thread is None:
            return
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
