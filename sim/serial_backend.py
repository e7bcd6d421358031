"""The ``serial`` back end of ``tpuer.Device``: a TPU on a board (or a simulated board behind
a pseudo-terminal), driven through the host command set (:mod:`tpuer.protocol`) over the
serial link (:mod:`tpuer.link`)."""

import numpy as np

from ..isa import CoreState
from ..link import LinkError, SerialLink
from ..protocol import decode_replies, encode

__all__ = ["SerialBackend", "open_port"]


def open_port(port, baud):
    """``port`` opened with pyserial, or a clear error naming it."""
    try:
        import serial
    except ImportError:
        raise LinkError("the serial back end needs pyserial: pip install pyserial") from None
    try:
        return serial.Serial(port, baudrate=baud, timeout=0.05, write_timeout=5)
    except (serial.SerialException, OSError) as error:
        raise LinkError(f"cannot open {port}: {error}") from None


class SerialBackend:
    """Runs driver steps on a TPU over a serial port: weights, program, START and the
    input rows go out; the status is polled until the core stops; the ROW replies are the
    rows WRITE_HOST sent. Counts the link's retransmissions in :attr:`retries`."""

    name = "serial"

    def __init__(self, cfg, *, port=None, baud=115200, timeout=0.5, max_polls=1_000_000):
        if port is None:
            raise ValueError("the serial back end needs port=, the board's serial port "
                             "(for example /dev/ttyUSB1)")
        if not (isinstance(baud, int) and baud > 0):
            raise ValueError(f"baud must be a positive integer, not {baud!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        self.cfg = cfg
        self.max_polls = max_polls
        self.link = SerialLink(open_port(port, baud), name=str(port), timeout=timeout)
        self._words = []
        self._loaded = None          # the weight tiles the board holds
        self._program = None         # and the program

    @property
    def retries(self):
        return self.link.retries

    def _replies(self):
        """The replies completed since the last call (a reply may span link frames)."""
        self._words += self.link.replies
        self.link.replies.clear()
        replies, self._words = decode_replies(self._words)
        for kind, value in replies:
            if kind in ("bad_command", "refused"):
                raise LinkError(f"{self.link.name}: the TPU answered {kind} to command "
                                f"{value:#04x}; are the board and this driver of one version?")
        return replies

    def run(self, steps):
        from ..tb.core_tb import CoreRun
        cfg = self.cfg
        runs = []
        for step in steps:
            words = []
            weights = np.asarray(step.weights)
            # The weight memory keeps its tiles from program to program: send them only
            # when they change (every block of a layer uses the same ones).
            if len(weights) and not (self._loaded is not None and
                                     self._loaded.shape == weights.shape and
                                     np.array_equal(self._loaded, weights)):
                words += encode.write_weights(cfg, 0, list(weights.reshape(-1, cfg.cols)))
                self._loaded = weights.copy()
            program = [int(i.encode()) for i in step.program]
            if program != self._program:          # so is the instruction memory
                words += encode.write_program(0, program)
                self._program = program
            words += encode.start(0)
            if len(step.host_in):
                words += encode.data(cfg, step.host_in)
            self.link.send(words)
            rows, status, pending = [], None, 0
            for _ in range(self.max_polls):
                if status is not None and pending == 0:
                    break
                if status is None:
                    self.link.send(encode.status())
                    pending += 1
                else:
                    self.link.poll()   # the replies of STATUS commands still on their way
                for kind, value in self._replies():
                    if kind == "row":
                        rows.append(value)
                    elif kind == "status":
                        pending -= 1
                        # Every STATUS was sent after START: a stopped core is this run's
                        # end, and the core stops only when its last row has left.
                        if status is None and value["state"] is not CoreState.RUNNING:
                            status = value
            else:
                raise LinkError(f"{self.link.name}: the program still runs after "
                                f"{self.max_polls} polls")
            runs.append(CoreRun(state=status["state"], error=status["error"],
                                error_pc=status["error_pc"], host_out=rows,
                                cycles=status["cycles"],
                                mxu_busy_cycles=status["mxu_busy_cycles"],
                                weight_stall_cycles=status["weight_stall_cycles"],
                                instructions=status["instructions"]))
        return runs
