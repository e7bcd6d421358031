"""The serial host link, defined once: frames that carry the host command set's 32-bit words
(:mod:`tpuer.protocol`) over a byte stream such as a UART, without loss, and the host's end
of it. ``tpuer.hw.serial_link`` is the board's end.

Every exchange is one request frame from the host and one reply frame from the board::

    request  SYNC  flags  seq  count(2)  words(4 count)  crc(4)
    reply    SYNC  kind   seq  count(2)  words(4 words)  crc(4)

A reply's ``count`` is ``words | took << 7``: the reply words it carries (0 to 64) and
whether the request it answers put words into the command queue (``took`` not 0; a board
may say how many), or not (0: a BUSY, an empty request; in a NAK, which carries no words,
``took`` means nothing).

``SYNC`` is 0x7E; ``count`` and the words are little endian; ``crc`` is CRC-32/MPEG-2 of
every byte after ``SYNC``, high byte first (so a whole frame checks to zero). A 16-bit CRC
is not enough: a byte dropped or doubled on the line shifts the rest of the frame, an
error that any CRC catches only with probability ``1 - 2**-width``, and at ten times the
README's fault rates thousands of frames a minute are garbled so.

* A request whose CRC is wrong, that is cut short (no byte for :data:`BYTE_TIMEOUT_BITS`
  bit times), that has a framing error or a count above :data:`MAX_REQUEST_WORDS` gets a
  ``NAK`` reply naming the ``seq`` it refuses, and changes nothing; but only if that
  ``seq`` is one the host may be sending (the stored reply's or the next; any at a
  session's start): bytes that only look like a frame start, found inside a garbled
  frame, get no reply. Bytes before a SYNC are skipped.
* A request with a new ``seq`` is taken: its words are queued for the TPU (``ACK``), or,
  when the queue has no room for them, refused (``BUSY``), and the host sends them again in
  a later request. The reply carries up to :func:`reply_limit` reply words of the TPU: the
  request's flags ask for at most :data:`MAX_REPLY_WORDS` halved ``(flags >> 1) & 7``
  times, so that a host on a bad line can ask for short replies.
* A request with the ``seq`` of the one before is a retransmission (its reply was lost):
  the board sends that same reply again and executes nothing, so no word is lost or
  doubled. ``FLAG_NEW_SESSION`` makes the board forget the last ``seq``; the host sets it
  only on an empty request, the first of a session.

The host resends a request on a ``NAK`` naming its ``seq``, on a garbled reply, or when no
reply comes in time. Every copy of one ``seq`` carries the same words or none: a ``NAK``
cannot tell which copy it refuses (bytes inside a garbled copy may look like a frame of
that ``seq``), so different words under one ``seq`` could be taken twice or not at all.
When a copy may have been taken (its reply was lost or garbled), or the host wants a
shorter request after a ``NAK``, it asks with an empty request of the same ``seq``: the
answer's ``took`` says whether the board took the words (the stored reply of the request
comes back) or not (the empty request itself was new, and the words go again, as short as
the line needs, under the next ``seq``). It shortens requests and replies while the line
keeps garbling them and lengthens them again while it does not.
"""

import time
from dataclasses import dataclass

from amaranth.lib.crc import catalog

__all__ = ["SYNC", "Kind", "FLAG_NEW_SESSION", "MAX_REQUEST_WORDS", "MAX_REPLY_WORDS",
           "reply_limit", "plausible_seq",
           "CRC", "CRC_BYTES", "frame_crc", "encode_request", "encode_reply", "FrameParser", "LinkError",
           "SerialLink", "HEADER_BYTES"]

SYNC = 0x7E
FLAG_NEW_SESSION = 0x01
#: Words of one request (the board's command queue holds :data:`COMMAND_QUEUE_WORDS`).
MAX_REQUEST_WORDS = 256
COMMAND_QUEUE_WORDS = 512
#: Reply words one reply frame carries at most.
MAX_REPLY_WORDS = 64
#: A reply's ``count``: the reply words, then whether its request put words into the queue.
REPLY_WORDS_BITS = 7


def reply_count(words, took):
    return words | int(bool(took)) << REPLY_WORDS_BITS


#: The request flags' field that halves the reply's words: bits 1..3.
REPLY_HALVINGS_SHIFT, REPLY_HALVINGS_MASK = 1, 0x7
#: Flag bits a request may set; a frame with others is no request.
REQUEST_FLAGS = FLAG_NEW_SESSION | (REPLY_HALVINGS_MASK << REPLY_HALVINGS_SHIFT)
#: A frame whose next byte does not come within this many bit times is cut short.
BYTE_TIMEOUT_BITS = 64
HEADER_BYTES = 5          # SYNC, flags or kind, seq, count (2)
#: CRC-32/MPEG-2, as ``amaranth.lib.crc`` defines it (the RTL uses the same object): not
#: reflected and with no final XOR, so a frame followed by its CRC checks to zero.
CRC = catalog.CRC32_MPEG_2
CRC_BYTES = CRC.crc_width // 8


class Kind:
    ACK = 0x01
    BUSY = 0x02
    NAK = 0x03


def reply_limit(flags):
    """The reply words a request with ``flags`` asks for at most (1 to 64)."""
    return max(1, MAX_REPLY_WORDS >> ((flags >> REPLY_HALVINGS_SHIFT) & REPLY_HALVINGS_MASK))


def plausible_seq(seq, last_seq):
    """Whether a frame of ``seq`` may be the host's, when the stored reply is of
    ``last_seq`` (``None``: no reply stored yet, any ``seq`` may be)."""
    return last_seq is None or seq in (last_seq, (last_seq + 1) & 0xFF)


def frame_crc(data):
    return CRC(data_width=8).compute(bytes(data))


def _frame(first, seq, words, count=None):
    count = len(words) if count is None else count
    body = bytearray([first, seq & 0xFF]) + count.to_bytes(2, "little")
    for word in words:
        body += int(word).to_bytes(4, "little")
    check = frame_crc(body)
    return bytes([SYNC]) + bytes(body) + check.to_bytes(CRC_BYTES, "big")


def encode_request(seq, words, *, new_session=False, reply_halvings=0):
    if len(words) > MAX_REQUEST_WORDS:
        raise ValueError(f"a request carries at most {MAX_REQUEST_WORDS} words, not {len(words)}")
    if not 0 <= reply_halvings <= REPLY_HALVINGS_MASK:
        raise ValueError(f"reply_halvings must be 0 to {REPLY_HALVINGS_MASK}, not "
                         f"{reply_halvings}")
    flags = (FLAG_NEW_SESSION if new_session else 0) | (reply_halvings << REPLY_HALVINGS_SHIFT)
    return _frame(flags, seq, words)


def encode_reply(kind, seq, words=(), took=False):
    return _frame(kind, seq, words, count=reply_count(len(words), took))


@dataclass
class Frame:
    first: int          # flags of a request, kind of a reply
    seq: int
    words: list
    ok: bool            # the CRC checked
    took: bool = False  # of a reply: its request put words into the queue


class FrameParser:
    """Bytes in, frames out: skips bytes before a SYNC, waits for the whole frame, and
    reports a frame whose CRC fails with ``ok`` False. With ``replies``, the count is a
    reply's (words and ``took``)."""

    def __init__(self, max_words, *, replies=False):
        self.max_words = max_words
        self.replies = replies
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
            took = False
            if self.replies:
                count, took = (count & ((1 << REPLY_WORDS_BITS) - 1),
                               bool(count >> REPLY_WORDS_BITS))
            if count > self.max_words:
                del self.buffer[:1]             # a false SYNC: look for the next one
                continue
            size = HEADER_BYTES + 4 * count + CRC_BYTES
            if len(self.buffer) < size:
                return frames
            raw = bytes(self.buffer[:size])
            del self.buffer[:size]
            ok = frame_crc(raw[1:]) == 0
            words = [int.from_bytes(raw[HEADER_BYTES + 4 * k:HEADER_BYTES + 4 * k + 4], "little")
                     for k in range(count)]
            frames.append(Frame(raw[1], raw[2], words, ok, took))


class LinkError(RuntimeError):
    """The board does not answer, or keeps refusing; the message names the port."""


class SerialLink:
    """The host's end: sends words in requests, retries until each is taken exactly once,
    and collects the TPU's reply words. ``port`` is a pyserial-like object (``write``;
    ``read`` that returns after a short timeout; ``in_waiting``); ``name`` is for
    messages. Time is the port's ``clock()`` and ``sleep()`` where it has them (a
    simulated line), else the wall clock.

    ``retries`` counts every request sent again (after a NAK, a corrupted or missing reply)
    and ``busy`` every request the board refused for want of room. ``attempts`` bounds the
    sends of one request that bring no reply at all (a board that answers, if garbled,
    gets ten times as many).
    """

    #: The shortest request and the most reply halvings a bad line brings them to.
    MIN_CHUNK = 4
    MAX_HALVINGS = 4
    #: Clean exchanges in a row after which replies may be twice as long again.
    CLEAN_TO_LENGTHEN = 16

    def __init__(self, port, *, name="the serial port", timeout=0.5, attempts=20,
                 busy_wait=0.002, max_busy=100_000):
        self.port = port
        self.name = name
        self.timeout = timeout
        self.attempts = attempts
        self.busy_wait = busy_wait
        self.max_busy = max_busy
        self.clock = getattr(port, "clock", time.monotonic)
        self.sleep = getattr(port, "sleep", time.sleep)
        self.seq = 0
        self.retries = 0
        self.requests = 0          # frames sent, first copies and retries
        self.busy = 0
        self.replies = []          # TPU reply words, in order
        self.chunk = MAX_REQUEST_WORDS   # words per request: halved on a bad line
        self.reply_halvings = 0          # replies of MAX_REPLY_WORDS >> this at most
        self._clean = 0                  # clean exchanges in a row
        self._parser = FrameParser(MAX_REPLY_WORDS, replies=True)
        self._new_session = True

    def _exchange(self, words, *, new_session=False):
        """One request until a good reply to it arrives; returns (its kind, the words the
        board took of ``words``: all or, when a probe found them not taken, none)."""
        maybe_taken = False        # a copy went out whose fate is unknown, or a probe is due
        failures = silent = 0
        while True:
            # Once a copy may have been taken, an empty request of the same seq asks.
            sent = [] if maybe_taken else words
            request = encode_request(self.seq, sent, new_session=new_session,
                                     reply_halvings=self.reply_halvings)
            self.port.write(request)
            self.requests += 1
            reply = self._await_reply(self.seq)
            if reply is not None and reply.ok and reply.first != Kind.NAK:
                self.replies.extend(reply.words)
                self.seq = (self.seq + 1) & 0xFF
                if failures == 0:  # a clean exchange: longer requests, later replies too
                    self.chunk = min(MAX_REQUEST_WORDS, self.chunk * 2)
                    self._clean += 1
                    if self._clean >= self.CLEAN_TO_LENGTHEN:
                        self.reply_halvings = max(0, self.reply_halvings - 1)
                        self._clean = 0
                if maybe_taken and words and not reply.took:
                    return Kind.ACK, []          # the empty request was the new one
                return reply.first, words
            failures += 1
            silent = silent + 1 if reply is None else 0
            self.retries += 1
            self._clean = 0
            if silent >= self.attempts or failures >= 10 * self.attempts:
                raise LinkError(f"no good reply from {self.name} after {self.attempts} "
                                f"attempts ({self.timeout} s each): is the board connected, "
                                f"programmed and set to the same baud rate?")
            if reply is not None and reply.ok:         # a NAK of this seq
                # A NAK cannot say which copy of the seq it refuses (one may have come
                # from bytes that only looked like a frame, found inside an earlier copy),
                # so every copy of a seq carries the same words: a shorter request goes
                # under the next seq, after an empty probe has settled this one.
                if sent and len(words) > self.MIN_CHUNK:
                    self.chunk = max(self.MIN_CHUNK, min(self.chunk, len(words)) // 2)
                    maybe_taken = True
            else:
                # No reply, or a garbled one: this copy may have been taken. Replies and
                # requests from now on are shorter.
                maybe_taken = maybe_taken or bool(sent)
                self.reply_halvings = min(self.MAX_HALVINGS, self.reply_halvings + 1)
                self.chunk = max(self.MIN_CHUNK, self.chunk // 2)

    def _await_reply(self, seq):
        """The reply to request ``seq``, a NAK of it or a garbled frame (either means: send
        it again), or ``None`` after the timeout. A good reply to another request (the
        answer to a retransmission that was not needed after all) and a NAK of another
        ``seq`` are skipped. Bytes of a frame still unfinished at the timeout are dropped:
        a garbled count would otherwise swallow the replies that follow, one
        retransmission after another."""
        deadline = self.clock() + self.timeout
        while self.clock() < deadline:
            data = self.port.read(1)          # returns as soon as a byte is there
            waiting = getattr(self.port, "in_waiting", 0)
            if data and waiting:
                data += self.port.read(waiting)
            for frame in self._parser.feed(data) if data else ():
                if frame.ok and frame.seq != seq:
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
            kind, sent = self._exchange(words[position:position + self.chunk])
            if words and not sent:
                continue                 # the board took none of them: again, shorter
            if kind == Kind.BUSY:
                busy += 1
                self.busy += 1
                if busy > self.max_busy:
                    raise LinkError(f"{self.name}: the TPU takes no more commands")
                self.sleep(self.busy_wait)
                continue
            busy = 0
            position += len(sent)
            if not words:
                return

    def poll(self):
        """An empty request: fetches reply words the TPU has made since."""
        self.send([])
