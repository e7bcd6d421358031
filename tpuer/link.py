"""The serial host link, defined once: frames that carry the host command set's 32-bit words
(:mod:`tpuer.protocol`) over a byte stream such as a UART, without loss, and the host's end
of it. ``tpuer.hw.serial_link`` is the board's end.

Every exchange is one request frame from the host and one reply frame from the board::

    request  SYNC  flags  seq  count(2)  words(4 count)  crc(2)
    reply    SYNC  kind   seq  count(2)  words(4 count)  crc(2)

``SYNC`` is 0x7E; ``count`` and the words are little endian; ``crc`` is CRC-16/XMODEM of
every byte after ``SYNC``, high byte first (so a whole frame checks to zero).

* A request whose CRC is wrong, that is cut short (no byte for :data:`BYTE_TIMEOUT_BITS`
  bit times), that has a framing error or a count above :data:`MAX_REQUEST_WORDS` gets a
  ``NAK`` reply and changes nothing; bytes before a SYNC are skipped.
* A request with a new ``seq`` is taken: its words are queued for the TPU (``ACK``), or,
  when the queue has no room for them, refused (``BUSY``), and the host sends them again in
  a later request. The reply carries up to :data:`MAX_REPLY_WORDS` reply words of the TPU.
* A request with the ``seq`` of the one before is a retransmission (its reply was lost):
  the board sends that same reply again and executes nothing, so no word is lost or
  doubled. ``FLAG_NEW_SESSION`` makes the board forget the last ``seq``; the host sets it
  only on an empty request, the first of a session.
"""

import time
from dataclasses import dataclass

from amaranth.lib.crc import catalog

__all__ = ["SYNC", "Kind", "FLAG_NEW_SESSION", "MAX_REQUEST_WORDS", "MAX_REPLY_WORDS",
           "CRC", "crc16", "encode_request", "encode_reply", "FrameParser", "LinkError",
           "SerialLink", "HEADER_BYTES"]

SYNC = 0x7E
FLAG_NEW_SESSION = 0x01
#: Words of one request (the board's command queue holds :data:`COMMAND_QUEUE_WORDS`).
MAX_REQUEST_WORDS = 256
COMMAND_QUEUE_WORDS = 512
#: Reply words one reply frame carries at most.
MAX_REPLY_WORDS = 64
#: A frame whose next byte does not come within this many bit times is cut short.
BYTE_TIMEOUT_BITS = 64
HEADER_BYTES = 5          # SYNC, flags or kind, seq, count (2)
#: CRC-16/XMODEM, as ``amaranth.lib.crc`` defines it (the RTL uses the same object).
CRC = catalog.CRC16_XMODEM


class Kind:
    ACK = 0x01
    BUSY = 0x02
    NAK = 0x03


def crc16(data):
    return CRC(data_width=8).compute(bytes(data))


def _frame(first, seq, words):
    body = bytearray([first, seq & 0xFF]) + len(words).to_bytes(2, "little")
    for word in words:
        body += int(word).to_bytes(4, "little")
    check = crc16(body)
    return bytes([SYNC]) + bytes(body) + check.to_bytes(2, "big")


def encode_request(seq, words, *, new_session=False):
    if len(words) > MAX_REQUEST_WORDS:
        raise ValueError(f"a request carries at most {MAX_REQUEST_WORDS} words, not {len(words)}")
    return _frame(FLAG_NEW_SESSION if new_session else 0, seq, words)


def encode_reply(kind, seq, words=()):
    return _frame(kind, seq, words)


@dataclass
class Frame:
    first: int          # flags of a request, kind of a reply
    seq: int
    words: list
    ok: bool            # the CRC checked


class FrameParser:
    """Bytes in, frames out: skips bytes before a SYNC, waits for the whole frame, and
    reports a frame whose CRC fails with ``ok`` False."""

    def __init__(self, max_words):
        self.max_words = max_words
        self.buffer = bytearray()

    def feed(self, data):
        self.buffer += data
        frames = []
        while True:
            start = self.buffer.find(SYNC)
            if start < 0:
                self.buffer.clear()
                return frames
            del self.buffer[:start]
            if len(self.buffer) < HEADER_BYTES:
                return frames
            count = int.from_bytes(self.buffer[3:5], "little")
            if count > self.max_words:
                del self.buffer[:1]             # a false SYNC: look for the next one
                continue
            size = HEADER_BYTES + 4 * count + 2
            if len(self.buffer) < size:
                return frames
            raw = bytes(self.buffer[:size])
            del self.buffer[:size]
            ok = crc16(raw[1:]) == 0
            words = [int.from_bytes(raw[HEADER_BYTES + 4 * k:HEADER_BYTES + 4 * k + 4], "little")
                     for k in range(count)]
            frames.append(Frame(raw[1], raw[2], words, ok))


class LinkError(RuntimeError):
    """The board does not answer, or keeps refusing; the message names the port."""


class SerialLink:
    """The host's end: sends words in requests, retries until each is taken exactly once,
    and collects the TPU's reply words. ``port`` is a pyserial-like object (``write``;
    ``read`` that returns after a short timeout; ``in_waiting``); ``name`` is for
    messages.

    ``retries`` counts every request sent again (after a NAK, a corrupted or missing reply)
    and ``busy`` every request the board refused for want of room.
    """

    def __init__(self, port, *, name="the serial port", timeout=0.5, attempts=20,
                 busy_wait=0.002, max_busy=100_000):
        self.port = port
        self.name = name
        self.timeout = timeout
        self.attempts = attempts
        self.busy_wait = busy_wait
        self.max_busy = max_busy
        self.seq = 0
        self.retries = 0
        self.busy = 0
        self.replies = []          # TPU reply words, in order
        self.chunk = MAX_REQUEST_WORDS   # words per request: halved on a bad line
        self._parser = FrameParser(MAX_REPLY_WORDS)
        self._new_session = True

    def _exchange(self, words, *, new_session=False):
        """One request until a good reply to it arrives; returns its kind."""
        request = encode_request(self.seq, words, new_session=new_session)
        for attempt in range(self.attempts):
            if attempt:
                self.retries += 1
            self.port.write(request)
            reply = self._await_reply(self.seq)
            if reply is None or not reply.ok or reply.first == Kind.NAK:
                continue
            self.replies.extend(reply.words)
            self.seq = (self.seq + 1) & 0xFF
            # A line that garbles long requests gets shorter ones (a retransmission must
            # repeat its request exactly, so only the next request can change).
            self.chunk = max(16, self.chunk // 2) if attempt > 1 else \
                min(MAX_REQUEST_WORDS, self.chunk * 2)
            return reply.first
        raise LinkError(f"no good reply from {self.name} after {self.attempts} attempts "
                        f"({self.timeout} s each): is the board connected, programmed and "
                        f"set to the same baud rate?")

    def _await_reply(self, seq):
        """The reply to request ``seq``, a NAK or a garbled frame (either means: send it
        again), or ``None`` after the timeout. A good reply to an earlier request (the
        answer to a retransmission that was not needed after all) is skipped. Bytes of a
        frame still unfinished at the timeout are dropped: a garbled count would otherwise
        swallow the replies that follow, one retransmission after another."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            data = self.port.read(1)          # returns as soon as a byte is there
            waiting = getattr(self.port, "in_waiting", 0)
            if data and waiting:
                data += self.port.read(waiting)
            for frame in self._parser.feed(data) if data else ():
                if frame.ok and frame.first != Kind.NAK and frame.seq != seq:
                    continue
                self._parser.buffer.clear()
                return frame
        self._parser.buffer.clear()
        return None

    def start_session(self):
        """The first exchange: an empty request that makes the board forget the last
        ``seq`` (a retransmission of it is harmless, it carries no word). Reply words that
        the TPU made before the session are dropped."""
        self._exchange([], new_session=True)
        self.replies.clear()
        self._new_session = False

    def send(self, words):
        """Send ``words`` (any number): each request is queued exactly once."""
        if self._new_session:
            self.start_session()
        words = list(words)
        position = 0
        busy = 0
        while position < len(words) or not words:
            chunk = words[position:position + self.chunk]
            if self._exchange(chunk) == Kind.BUSY:
                busy += 1
                self.busy += 1
                if busy > self.max_busy:
                    raise LinkError(f"{self.name}: the TPU takes no more commands")
                time.sleep(self.busy_wait)
                continue
            busy = 0
            position += len(chunk)
            if not words:
                return

    def poll(self):
        """An empty request: fetches reply words the TPU has made since."""
        self.send([])
