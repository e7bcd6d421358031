"""The board's end of the serial host link (:mod:`tpuer.link`): request frames in, the TPU's
command words out, reply frames with the TPU's reply words back. :class:`SerialLink` and
:class:`RegisteredSerialLink` (fast clocks) share one signature and the
:class:`CommandQueue`; :func:`serial_link` picks one."""

from types import SimpleNamespace

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import crc, stream, wiring
from amaranth.lib.wiring import In, Out

from ..link import (BYTE_TIMEOUT_BITS, COMMAND_QUEUE_WORDS, CRC, CRC_BYTES,
                    FLAG_NEW_SESSION, MAX_REPLY_WORDS, MAX_REQUEST_WORDS, REPLY_HALVINGS_MASK,
                    REPLY_HALVINGS_SHIFT, REPLY_WORDS_BITS, REQUEST_FLAGS, SYNC, Kind,
                    reply_limit)
from .arith import above
from .block_ram import BlockRAM
from .serial_crc import BitSerialCRC
from .uart import RX_BYTE_LAYOUT

__all__ = ["CommandQueue", "SerialLink", "RegisteredSerialLink", "serial_link"]


class CommandQueue(wiring.Component):
    """The link's command queue: ``depth`` words (a power of 2) whose writes are tentative
    until committed.

    A frame's bytes are written as they arrive, each into its lane (``byte_lane``) of the
    word at the tail (``byte_en``; no register gathers the word), and ``word_done`` moves
    the tail past a word. ``commit`` makes the words up to the tail visible on ``cmd``;
    ``roll_back`` drops the uncommitted ones. ``used`` counts the words from the head to
    the tail. Read and write never meet: a word is read again every cycle, and only words
    written cycles before the commit are taken.

    Latency: a word committed in cycle ``t`` is offered on ``cmd`` from cycle ``t + 1``.
    """

    def __init__(self, depth):
        if not isinstance(depth, int) or depth < 2 or depth & (depth - 1):
            raise ValueError(f"queue_words must be a power of 2 from 2 up, not {depth!r}")
        self._depth = depth
        self._pointer_bits = (depth - 1).bit_length() + 1       # one more: full vs empty
        super().__init__({
            "byte": In(8), "byte_lane": In(2), "byte_en": In(1), "word_done": In(1),
            "commit": In(1), "roll_back": In(1),
            "used": Out(self._pointer_bits),
            "cmd": Out(stream.Signature(32)),
        })

    @property
    def depth(self):
        return self._depth

    def elaborate(self, platform):
        m = Module()
        bits = self._pointer_bits
        m.submodules.words = words = BlockRAM(width=32, depth=self._depth, granularity=8)
        head = Signal(bits)              # next word to the TPU
        committed = Signal(bits)         # end of the words the TPU may take
        tail = Signal(bits)              # end of the words written so far
        head_valid = Signal()            # words.read_data holds the word at head
        take = self.cmd.valid & self.cmd.ready
        next_head = Mux(take, head + 1, head)
        m.d.comb += [
            words.read_addr.eq(next_head[:bits - 1]),
            words.read_en.eq(1),
            self.cmd.payload.eq(words.read_data),
            self.cmd.valid.eq(head_valid & (head != committed)),
            words.write_addr.eq(tail[:bits - 1]),
            words.write_data.eq(self.byte.replicate(4)),
            words.write_en.eq(self.byte_en << self.byte_lane),
            self.used.eq(tail - head),
        ]
        m.d.sync += [head.eq(next_head), head_valid.eq(1)]
        with m.If(self.roll_back):
            m.d.sync += tail.eq(committed)
        with m.Elif(self.word_done):
            m.d.sync += tail.eq(tail + 1)
        with m.If(self.commit):
            m.d.sync += committed.eq(tail)
        return m


class SerialLink(wiring.Component):
    """Frames between a byte stream (a UART) and the TPU's word streams, loss-free.

    A request's words are written into the command queue as they arrive but become visible
    to ``cmd`` only when the frame's CRC has checked (a bad or cut-short frame is rolled
    back). A request is taken only if the queue has room for all its words; otherwise the
    reply says ``BUSY``. Each reply carries the TPU's reply words that are waiting (at most
    as many as the request's flags ask for, :func:`~tpuer.link.reply_limit`) and whether
    its request put words into the queue (``took``; :class:`RegisteredSerialLink` sends how
    many), and is kept, so that a retransmitted request
    (the same ``seq``) is answered with the very same reply and executes nothing. A bad
    frame gets a NAK only if its ``seq`` may be the host's (:func:`~tpuer.link.plausible_seq`)
    and its flags are a request's; others, such as a false frame start inside a garbled
    frame, are dropped without a word.

    Members
    -------
    rx_bytes : In(stream, always ready)
        Bytes from the UART receiver, with their framing-error flag.
    tx_bytes : Out(stream)
        Bytes to the UART transmitter.
    cmd : Out(stream.Signature(32))
        Command words to the TPU, in order, each exactly once.
    rsp : In(stream.Signature(32))
        Reply words from the TPU.

    Parameters
    ----------
    byte_timeout : int
        Clock cycles without a byte after which a frame is cut short (a NAK is sent).
    queue_words : int
        Words of the command queue (the host's :data:`~tpuer.link.COMMAND_QUEUE_WORDS`;
        smaller only for a proof).

    This form feeds the CRC and the transmitter straight from the frame's state, for
    ``cfg.control_registers`` 0; its replies say whether their request put words into
    the queue.
    """

    def __init__(self, *, byte_timeout, queue_words=COMMAND_QUEUE_WORDS):
        if not isinstance(byte_timeout, int) or byte_timeout < 1:
            raise ValueError(f"byte_timeout must be a positive number of cycles, not "
                             f"{byte_timeout!r}")
        self._byte_timeout = byte_timeout
        self._queue = CommandQueue(queue_words)
        super().__init__({
            "rx_bytes": In(stream.Signature(RX_BYTE_LAYOUT, always_ready=True)),
            "tx_bytes": Out(stream.Signature(8)),
            "cmd": Out(stream.Signature(32)),
            "rsp": In(stream.Signature(32)),
        })

    @staticmethod
    def byte_timeout_for(divisor):
        """The byte timeout for a UART of ``divisor`` cycles per bit."""
        return BYTE_TIMEOUT_BITS * divisor

    def elaborate(self, platform):
        m = Module()
        m.submodules.queue = queue = self._queue
        wiring.connect(m, queue.cmd, wiring.flipped(self.cmd))
        # The last reply's words, kept for a retransmission: written only while collecting
        # a reply, read only while sending one.
        m.submodules.replies = replies = BlockRAM(width=32, depth=MAX_REPLY_WORDS)
        # One CRC for both directions: a frame is received or sent, never both at once.
        # It takes the received bytes unless a byte is being sent.
        m.submodules.frame_crc = frame_crc = self._crc_processor()
        crc_in = {name: Signal.like(getattr(frame_crc, name), name=f"crc_{name}")
                  for name in ("data", "valid", "start")}
        self._feed_crc(m, [getattr(frame_crc, name).eq(value)
                           for name, value in crc_in.items()])
        link = self._registers(m)
        link.queue, link.replies, link.frame_crc, link.crc_in = queue, replies, frame_crc, crc_in
        link.byte, link.got = self.rx_bytes.payload.data, self.rx_bytes.valid
        m.d.comb += crc_in["data"].eq(link.byte)
        # The bytes a reply is made of, and how a state sends one.
        reply_word = self._reply_word(m, replies.read_data)
        fields = self._fields(m, {
            "kind": Mux(link.nak, Kind.NAK, Mux(link.busy_reply, Kind.BUSY, Kind.ACK)),
            "seq": Mux(link.nak, link.seq, link.last_seq),
            **self._count_bytes(link),
            "word": reply_word.word_select(link.tx_lane[:2], 8)})
        send = self._sender(m, link)
        with m.FSM(name="link"):
            self._receive_states(m, link)
            self._send_states(m, link, fields, send)
        return m

    def _registers(self, m):
        """The frame's fields and counts, shared by the receiving and the sending states."""
        def named(name, shape=1):
            signal = Signal(shape, name=name)
            setattr(link, name, signal)
            return signal

        link = SimpleNamespace()
        named("flags", 8)
        named("seq", 8)
        named("count", 16)
        # Words of the payload received; only frames of at most MAX_REQUEST_WORDS reach the
        # payload, so its count fits in as many bits (``short_count``).
        index = named("index", range(MAX_REQUEST_WORDS + 1))
        link.short_count = link.count[:len(index)]
        named("lane", 2)                     # byte of the current word
        named("bad")                         # a framing error inside the frame
        named("take_words")                  # the words go into the queue
        named("last_seq", 8)                 # the seq of the stored reply
        named("have_last")                   # a reply is stored (last_seq means something)
        named("timer", range(self._byte_timeout + 1))
        # A request is new (executes) unless it repeats the seq of the stored reply.
        link.new_request = ((link.flags & FLAG_NEW_SESSION).any() | ~link.have_last |
                            (link.seq != link.last_seq))
        # A bad frame may be the host's (and gets a NAK) if its flags are a request's and
        # its seq the stored reply's or the next.
        link.plausible = ~(link.flags & ~REQUEST_FLAGS).any() & (
            ~link.have_last | (link.seq == link.last_seq) |
            (link.seq == (link.last_seq + 1)[:8]))
        # The reply words the request asks for at most, less one.
        link.halvings = link.flags[REPLY_HALVINGS_SHIFT:REPLY_HALVINGS_SHIFT + 3]
        named("limit_last", range(MAX_REPLY_WORDS))
        # The stored reply's request put words into the queue (see ``_taken``).
        named("taken", self._taken_shape)
        # The reply being sent: the stored one, or a NAK that leaves it alone.
        named("busy_reply")                  # the stored reply is a BUSY, not an ACK
        named("nak")
        named("reply_count", range(MAX_REPLY_WORDS + 1))
        named("reply_room")                  # reply_count < MAX_REPLY_WORDS, in a register
        named("sent", range(MAX_REPLY_WORDS + 1))
        named("tx_lane", 3)
        link.tx_taken = self.tx_bytes.valid & self.tx_bytes.ready
        # Whether the payload word being received, or the reply word being sent, is the
        # last, and the reply word after the one being sent.
        link.last_index, link.last_sent, link.sent_next = self._late(
            m, link.index + 1 == link.short_count, link.sent + 1 == link.reply_count,
            link.sent + 1)
        return link

    def _reply(self, m, link, kind):
        """Leave for sending a reply of ``kind``: a NAK, or a new stored reply, filled with
        the TPU's waiting words first."""
        if kind == Kind.NAK:
            # A NAK carries ``seq``, which holds still until the next frame's header.
            m.d.sync += link.nak.eq(1)
            m.next = "SendSync"
            return
        m.d.sync += [link.nak.eq(0), link.busy_reply.eq(kind == Kind.BUSY),
                     link.reply_count.eq(0), link.reply_room.eq(1),
                     link.last_seq.eq(link.seq), link.have_last.eq(1),
                     link.taken.eq(self._taken(link.short_count) if kind == Kind.ACK else 0)]
        m.next = "Collect"

    def _refuse(self, m, link):
        """A bad frame: a NAK if it may be the host's, else back to the hunt."""
        with m.If(link.plausible):
            self._reply(m, link, Kind.NAK)
        with m.Else():
            m.next = "Hunt"

    def _receive(self, m, link, state_next, store=None, action=None):
        """A header or payload byte: CRC it, note framing errors, time out; ``store`` is a
        statement to run on it, ``action`` a function."""
        with m.If(link.got):
            m.d.comb += link.crc_in["valid"].eq(1)
            m.d.sync += [link.timer.eq(0),
                         link.bad.eq(link.bad | self.rx_bytes.payload.framing_error)]
            if store is not None:
                m.d.sync += store
            if action:
                action()
            if state_next:
                m.next = state_next
        with m.Elif(link.timer == self._byte_timeout):
            m.d.comb += link.queue.roll_back.eq(1)      # cut short
            if state_next in ("Seq", "CountLow"):
                m.next = "Hunt"                         # before its seq: nobody's frame
            else:
                self._refuse(m, link)
        with m.Else():
            m.d.sync += link.timer.eq(link.timer + 1)

    def _receive_states(self, m, link):
        """From a frame's SYNC to its check: the header, the payload into the queue, the
        CRC."""
        byte, queue = link.byte, link.queue
        with m.State("Hunt"):
            with m.If(link.got & (byte == SYNC) & ~self.rx_bytes.payload.framing_error):
                m.d.comb += link.crc_in["start"].eq(1)
                m.d.sync += [link.bad.eq(0), link.timer.eq(0)]
                m.next = "Flags"
        for state, state_next, field in (("Flags", "Seq", link.flags),
                                         ("Seq", "CountLow", link.seq),
                                         ("CountLow", "CountHigh", link.count[:8]),
                                         ("CountHigh", "Decide", link.count[8:])):
            with m.State(state):
                self._receive(m, link, state_next, field.eq(byte))
        with m.State("Decide"):
            m.d.sync += [link.take_words.eq(link.new_request &
                                            (queue.used + link.short_count <= queue.depth)),
                         link.index.eq(0), link.lane.eq(0)]
            with m.Switch(link.halvings):
                for h in range(REPLY_HALVINGS_MASK + 1):
                    with m.Case(h):
                        m.d.sync += link.limit_last.eq(
                            reply_limit(h << REPLY_HALVINGS_SHIFT) - 1)
            with m.If(above(link.count, MAX_REQUEST_WORDS)):
                self._refuse(m, link)                    # unexpected frame
            with m.Elif(link.count == 0):
                m.next = "Crc"
            with m.Else():
                m.next = "Payload"
        with m.State("Payload"):
            def payload_byte():
                m.d.comb += [queue.byte.eq(byte), queue.byte_lane.eq(link.lane),
                             queue.byte_en.eq(link.take_words)]
                m.d.sync += link.lane.eq(link.lane + 1)
                with m.If(link.lane == 3):
                    m.d.comb += queue.word_done.eq(link.take_words)
                    m.d.sync += link.index.eq(link.index + 1)
                    with m.If(link.last_index):
                        m.next = "Crc"
            self._receive(m, link, None, action=payload_byte)
        with m.State("Crc"):
            # The CRC's bytes, counted in ``lane`` (0 as the state is entered).
            def crc_byte():
                m.d.sync += link.lane.eq(link.lane + 1)
                with m.If(link.lane == CRC_BYTES - 1):
                    m.next = self._after_crc
            self._receive(m, link, None, action=crc_byte)
        self._crc_settles(m, link)
        with m.State("Check"):
            # The CRC has taken the last byte: the whole frame checks to the residue.
            with m.If(link.bad | ~link.frame_crc.match_detected):
                m.d.comb += queue.roll_back.eq(1)
                self._refuse(m, link)
            with m.Elif(link.new_request):
                with m.If(link.take_words):
                    m.d.comb += queue.commit.eq(1)
                    self._reply(m, link, Kind.ACK)
                with m.Else():
                    self._reply(m, link, Kind.BUSY)
            with m.Else():
                m.d.sync += link.nak.eq(0)
                m.next = "SendSync"                      # the stored reply again
        with m.State("Collect"):
            # The TPU's waiting reply words into the reply buffer. Ready comes from a
            # register: the TPU's reply path is long enough without a count compare.
            replies = link.replies
            m.d.comb += [self.rsp.ready.eq(link.reply_room),
                         replies.write_addr.eq(link.reply_count),
                         replies.write_data.eq(self.rsp.payload),
                         replies.write_en.eq(self.rsp.valid & self.rsp.ready)]
            with m.If(self.rsp.valid & self.rsp.ready):
                m.d.sync += [link.reply_count.eq(link.reply_count + 1),
                             link.reply_room.eq(link.reply_count != link.limit_last)]
            with m.Else():
                m.next = "SendSync"

    def _send_states(self, m, link, fields, send):
        """A reply frame: SYNC, the header (``fields``), the words, the CRC, each byte
        offered by ``send``."""
        replies, tx_taken = link.replies, link.tx_taken
        with m.State("SendSync"):
            send(SYNC, crc_it=False)
            m.d.comb += link.crc_in["start"].eq(1)
            m.d.sync += [link.sent.eq(0), link.tx_lane.eq(0)]
            with m.If(tx_taken):
                m.next = "SendKind"
        for state, field, state_next in (("SendKind", "kind", "SendSeq"),
                                         ("SendSeq", "seq", "SendCountLow"),
                                         ("SendCountLow", "count", "SendCountHigh")):
            with m.State(state):
                send(fields[field])
                with m.If(tx_taken):
                    m.next = state_next
        with m.State("SendCountHigh"):
            send(fields["count_high"])
            m.d.comb += [replies.read_addr.eq(0), replies.read_en.eq(1)]
            with m.If(tx_taken):
                with m.If(link.nak | (link.reply_count == 0)):
                    m.next = "SendCrc"
                with m.Else():
                    m.next = "SendWords"
        with m.State("SendWords"):
            send(fields["word"])
            m.d.comb += [replies.read_addr.eq(link.sent), replies.read_en.eq(0)]
            with m.If(tx_taken):
                m.d.sync += link.tx_lane.eq(link.tx_lane + 1)
                with m.If(link.tx_lane == 3):
                    m.d.sync += [link.tx_lane.eq(0), link.sent.eq(link.sent + 1)]
                    m.d.comb += [replies.read_addr.eq(link.sent_next), replies.read_en.eq(1)]
                    with m.If(link.last_sent):
                        m.next = "SendCrc"
        with m.State("SendCrc"):
            # The CRC's bytes, high first, counted in ``tx_lane`` (0 as it is entered).
            high_first = Cat(*reversed([link.frame_crc.crc.word_select(k, 8)
                                        for k in range(CRC_BYTES)]))
            send(high_first.word_select(link.tx_lane[:2], 8), crc_it=False)
            with m.If(tx_taken):
                m.d.sync += link.tx_lane.eq(link.tx_lane + 1)
                with m.If(link.tx_lane == CRC_BYTES - 1):
                    m.next = "Hunt"

    # --- what the registered form does otherwise ---------------------------------------

    #: ``taken``: whether the stored reply's request put words into the queue (the host
    #: reads only whether, and a count costs the iCEBreaker cells it lacks).
    _taken_shape = 1
    #: The state after a frame's last CRC byte.
    _after_crc = "CrcSettles"

    @staticmethod
    def _taken(short_count):
        return short_count.any()

    @staticmethod
    def _crc_processor():
        """The frame CRC: a bit per cycle (:class:`~tpuer.hw.serial_crc.BitSerialCRC`),
        far fewer cells than a byte per cycle and still eight times faster than a UART's
        bytes."""
        return BitSerialCRC(CRC(data_width=8))

    def _feed_crc(self, m, statements):
        """The CRC takes its inputs in their cycle."""
        m.d.comb += statements

    def _late(self, m, *values):
        """The last-word checks and the next reply word's address, as they are."""
        return values

    def _reply_word(self, m, read_data):
        """The reply word whose bytes are sent: the block RAM's output."""
        return read_data

    @staticmethod
    def _count_bytes(link):
        """The count field: the words (none in a NAK) and whether any were taken (what a
        NAK's says means nothing: the stored one is sent)."""
        return {"count": Cat(Mux(link.nak, 0, link.reply_count[:REPLY_WORDS_BITS]),
                             link.taken),
                "count_high": 0}

    def _fields(self, m, fields):
        """The header fields' and the reply word's bytes, as they are."""
        return fields

    def _crc_settles(self, m, link):
        """States between the CRC bytes and the check: the CRC finishes its last byte."""
        with m.State("CrcSettles"):
            with m.If(link.frame_crc.ready):
                m.next = "Check"

    def _sender(self, m, link):
        """Returns ``send(value, crc_it=True)``, which offers ``value`` on ``tx_bytes`` in
        this state (and gives it to the CRC as it is taken, with ``crc_it``)."""
        def send(value, *, crc_it=True):
            # Offered once the CRC has taken the byte before (and, for its own bytes, all).
            m.d.comb += [self.tx_bytes.valid.eq(link.frame_crc.ready),
                         self.tx_bytes.payload.eq(value)]
            if crc_it:
                m.d.comb += [link.crc_in["data"].eq(value),
                             link.crc_in["valid"].eq(link.tx_taken)]
        return send


class RegisteredSerialLink(SerialLink):
    """A :class:`SerialLink` for fast clocks (``cfg.control_registers`` 1), its replies
    saying how many words their request put into the queue.

    The bytes sent come from registers: each header field's byte and the reply word's
    byte in one, the state's choice among them in the next (``tx_bytes.payload``);
    and the reply words' bytes are chosen from a copy of the block RAM's output a
    cycle late, so that the block RAM's slow output ends at a register. The CRC takes
    what it is given through registers (a cycle later): a byte sent two cycles after
    the transmitter took it, a received byte a cycle after it came (so a request
    frame's check waits a cycle more). A byte is offered only after the state has
    wanted to send it for three cycles, by when all of them hold it and the CRC holds
    the bytes before it: four cycles a byte at most, nothing beside a UART's ten bit
    times. The checks for a frame's last payload word and a reply's last word, and
    the next reply word's address, are registers too, made a cycle after the counts
    they come from change (a word takes four bytes, so they are ready for the next
    word's last byte).
    """

    _taken_shape = range(MAX_REQUEST_WORDS + 1)
    _after_crc = "CrcTaken"

    @staticmethod
    def _crc_processor():
        return crc.Processor(CRC(data_width=8))

    @staticmethod
    def _taken(short_count):
        return short_count

    def _feed_crc(self, m, statements):
        # Through registers, a cycle later, so that the link's state decode and the CRC's
        # XOR network are not one path.
        m.d.sync += statements

    def _late(self, m, *values):
        registers = (Signal(name="last_index"), Signal(name="last_sent"),
                     Signal.like(values[2], name="sent_next"))
        m.d.sync += [register.eq(value) for register, value in zip(registers, values)]
        return registers

    def _reply_word(self, m, read_data):
        reply_word = Signal(32, name="reply_word")
        m.d.sync += reply_word.eq(read_data)
        return reply_word

    @staticmethod
    def _count_bytes(link):
        return {"count": Mux(link.nak, 0, Cat(link.reply_count[:REPLY_WORDS_BITS],
                                              link.taken[0])),
                "count_high": Mux(link.nak, 0, link.taken[1:])}

    def _fields(self, m, fields):
        registers = {name: Signal(8, name=f"tx_{name}") for name in fields}
        m.d.sync += [registers[name].eq(value) for name, value in fields.items()]
        return registers

    def _crc_settles(self, m, link):
        with m.State("CrcTaken"):
            m.next = "Check"            # the CRC takes the frame's last byte

    def _sender(self, m, link):
        # The byte to send is made in two register stages: each field's byte
        # (``_fields``), then the state's choice (``tx_value``, the payload). A byte is
        # offered once the state has wanted to send it for ``len(settled)`` cycles without
        # a take, so that both stages, the reply word's copy and the CRC hold what the
        # bytes before it left. The CRC is given each byte sent from ``tx_value`` the cycle
        # after the take (and, through its input registers, takes it a cycle later).
        tx_next = Signal(8)             # the byte of this state
        tx_value = Signal(8)
        wants = Signal()                # this is a state that sends
        crc_next = Signal()             # its byte goes into the CRC
        settled = Signal(3)
        crc_pending = Signal()
        m.d.sync += [tx_value.eq(tx_next),
                     settled.eq(Mux(wants & ~link.tx_taken, Cat(1, settled[:-1]), 0)),
                     crc_pending.eq(link.tx_taken & crc_next)]
        # (The state leaves a sending state only as its byte is taken, which clears
        # ``settled``, and enters one with ``settled`` clear: so ``settled[-1]`` implies
        # ``wants``, and ``valid`` is a register.)
        m.d.comb += [self.tx_bytes.valid.eq(settled[-1]), self.tx_bytes.payload.eq(tx_value)]
        with m.If(crc_pending):
            m.d.comb += [link.crc_in["data"].eq(tx_value), link.crc_in["valid"].eq(1)]

        def send(value, *, crc_it=True):
            m.d.comb += [wants.eq(1), tx_next.eq(value), crc_next.eq(crc_it)]
        return send


def serial_link(cfg, **parameters):
    """The link ``cfg`` asks for: :class:`RegisteredSerialLink` with
    ``cfg.control_registers``, else :class:`SerialLink`."""
    return (RegisteredSerialLink if cfg.control_registers else SerialLink)(**parameters)
