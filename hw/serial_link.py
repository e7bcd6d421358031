"""The board's end of the serial host link (:mod:`tpuer.link`): request frames in, the TPU's
command words out, reply frames with the TPU's reply words back."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import crc, stream, wiring
from amaranth.lib.wiring import In, Out

from ..link import (BYTE_TIMEOUT_BITS, COMMAND_QUEUE_WORDS, CRC, CRC_BYTES,
                    FLAG_NEW_SESSION, MAX_REPLY_WORDS, MAX_REQUEST_WORDS, REPLY_HALVINGS_MASK,
                    REPLY_HALVINGS_SHIFT, REPLY_WORDS_BITS, REQUEST_FLAGS, SYNC, Kind,
                    reply_limit)
from .arith import above
from .block_ram import BlockRAM
from .uart import RX_BYTE_LAYOUT

__all__ = ["SerialLink"]


class SerialLink(wiring.Component):
    """Frames between a byte stream (a UART) and the TPU's word streams, loss-free.

    A request's words are written into the command queue as they arrive but become visible
    to ``cmd`` only when the frame's CRC has checked (a bad or cut-short frame is rolled
    back). A request is taken only if the queue has room for all its words; otherwise the
    reply says ``BUSY``. Each reply carries the TPU's reply words that are waiting (at most
    as many as the request's flags ask for, :func:`~tpuer.link.reply_limit`) and whether
    its request put words into the queue (``took``: the registered form sends how many),
    and is kept, so that a retransmitted request
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
    registered_crc : bool
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

    def __init__(self, *, byte_timeout, registered_crc=False,
                 queue_words=COMMAND_QUEUE_WORDS):
        if not isinstance(byte_timeout, int) or byte_timeout < 1:
            raise ValueError(f"byte_timeout must be a positive number of cycles, not "
                             f"{byte_timeout!r}")
        if not isinstance(queue_words, int) or queue_words < 2 or \
                queue_words & (queue_words - 1):
            raise ValueError(f"queue_words must be a power of 2 from 2 up, not "
                             f"{queue_words!r}")
        self._byte_timeout = byte_timeout
        self._queue_words = queue_words
        self._registered_crc = registered_crc
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
        depth = self._queue_words
        ptr_bits = (depth - 1).bit_length() + 1          # one more bit: full vs empty

        # --- command queue: tentative writes, committed when the frame checks ---------
        # Each byte is written into its lane of the word at ``tail`` as it arrives (no
        # register gathers the word). Read and write never meet: a word is read again every
        # cycle, and only words written cycles before the commit are taken.
        m.submodules.queue = queue = BlockRAM(width=32, depth=depth, granularity=8)
        head = Signal(ptr_bits)          # next word to the TPU
        committed = Signal(ptr_bits)     # end of the words the TPU may take
        tail = Signal(ptr_bits)          # end of the words written so far
        head_valid = Signal()            # queue.read_data holds the word at head
        take = self.cmd.valid & self.cmd.ready
        next_head = Mux(take, head + 1, head)
        m.d.comb += [
            queue.read_addr.eq(next_head[:ptr_bits - 1]),
            queue.read_en.eq(1),
            self.cmd.payload.eq(queue.read_data),
            self.cmd.valid.eq(head_valid & (head != committed)),
        ]
        m.d.sync += [head.eq(next_head), head_valid.eq(1)]
        used = Signal(ptr_bits)
        m.d.comb += used.eq(tail - head)

        # --- reply buffer: the last reply's words, kept for a retransmission -----------
        # Written only while collecting a reply, read only while sending one.
        m.submodules.replies = replies = BlockRAM(width=32, depth=MAX_REPLY_WORDS)

        # --- receiving ----------------------------------------------------------------
        # One CRC for both directions: a frame is received or sent, never both at once.
        # It takes the received bytes unless a byte is being sent.
        m.submodules.frame_crc = frame_crc = crc.Processor(CRC(data_width=8))
        # What the CRC takes: with ``registered_crc`` through registers, a cycle later, so
        # that the link's state decode and the CRC's XOR network are not one path.
        crc_in = {name: Signal.like(getattr(frame_crc, name), name=f"crc_{name}")
                  for name in ("data", "valid", "start")}
        crc_domain = m.d.sync if self._registered_crc else m.d.comb
        crc_domain += [getattr(frame_crc, name).eq(value) for name, value in crc_in.items()]
        byte = self.rx_bytes.payload.data
        got = self.rx_bytes.valid
        m.d.comb += [crc_in["data"].eq(byte)]
        flags = Signal(8)
        seq = Signal(8)
        count = Signal(16)
        # Words of the payload received; only frames of at most MAX_REQUEST_WORDS reach the
        # payload, so its count fits in as many bits (``short_count``).
        index = Signal(range(MAX_REQUEST_WORDS + 1))
        short_count = count[:len(index)]
        lane = Signal(2)                 # byte of the current word
        bad = Signal()                   # a framing error inside the frame
        take_words = Signal()            # the words go into the queue
        last_seq = Signal(8)             # the seq of the stored reply
        have_last = Signal()             # a reply is stored (last_seq means something)
        timer = Signal(range(self._byte_timeout + 1))
        # A request is new (executes) unless it repeats the seq of the stored reply.
        new_request = (flags & FLAG_NEW_SESSION).any() | ~have_last | (seq != last_seq)
        # A bad frame may be the host's (and gets a NAK) if its flags are a request's and
        # its seq the stored reply's or the next.
        plausible = ~(flags & ~REQUEST_FLAGS).any() & (
            ~have_last | (seq == last_seq) | (seq == (last_seq + 1)[:8]))
        # The reply words the request asks for at most, less one.
        halvings = flags[REPLY_HALVINGS_SHIFT:REPLY_HALVINGS_SHIFT + 3]
        limit_last = Signal(range(MAX_REPLY_WORDS))
        # The stored reply's request put words into the queue: how many (the registered
        # form), or whether (the small form; the host reads only whether, and the count
        # costs the iCEBreaker cells it lacks, while the registered form's netlist with it
        # is the one that meets 100 MHz on the 85F).
        taken = Signal(range(MAX_REQUEST_WORDS + 1) if self._registered_crc else 1)

        # --- the reply being sent: the stored one, or a NAK that leaves it alone --------
        busy_reply = Signal()            # the stored reply is a BUSY, not an ACK
        nak = Signal()
        reply_count = Signal(range(MAX_REPLY_WORDS + 1))
        reply_room = Signal()            # reply_count < MAX_REPLY_WORDS, kept in a register
        sent = Signal(range(MAX_REPLY_WORDS + 1))
        tx_lane = Signal(3)
        tx_taken = self.tx_bytes.valid & self.tx_bytes.ready
        # Whether the payload word being received, or the reply word being sent, is the
        # last, and the reply word after the one being sent; with ``registered_crc`` from
        # registers (see above).
        last_index, last_sent, sent_next = (index + 1 == short_count,
                                            sent + 1 == reply_count, sent + 1)
        if self._registered_crc:
            registered = (Signal(name="last_index"), Signal(name="last_sent"),
                          Signal.like(sent, name="sent_next"))
            m.d.sync += [register.eq(value) for register, value in
                         zip(registered, (last_index, last_sent, sent_next))]
            last_index, last_sent, sent_next = registered

        # The reply word whose bytes are sent (see ``registered_crc``).
        reply_word = replies.read_data
        if self._registered_crc:
            reply_word = Signal(32, name="reply_word")
            m.d.sync += reply_word.eq(replies.read_data)

        # The header fields and the reply word's byte that the send states choose from.
        kind_byte = Mux(nak, Kind.NAK, Mux(busy_reply, Kind.BUSY, Kind.ACK))
        seq_byte = Mux(nak, seq, last_seq)
        if self._registered_crc:
            count_byte = Mux(nak, 0, Cat(reply_count[:REPLY_WORDS_BITS], taken[0]))
            count_high_byte = Mux(nak, 0, taken[1:])
        else:
            # A NAK carries no words; its ``taken`` means nothing (the stored one is sent).
            count_byte = Cat(Mux(nak, 0, reply_count[:REPLY_WORDS_BITS]), taken)
            count_high_byte = 0
        word_byte = reply_word.word_select(tx_lane[:2], 8)
        if self._registered_crc:
            # The byte to send is made in two register stages: each field's byte, then the
            # state's choice (``tx_value``, the payload). A byte is offered once the state
            # has wanted to send it for ``len(settled)`` cycles without a take, so that both
            # stages, the reply word's copy and the CRC hold what the bytes before it left.
            # The CRC is given each byte sent from ``tx_value`` the cycle after the take
            # (and, through its input registers, takes it a cycle later).
            fields = [Signal(8, name=f"tx_{name}")
                      for name in ("kind", "seq", "count", "count_high", "word")]
            m.d.sync += [field.eq(value) for field, value in
                         zip(fields, (kind_byte, seq_byte, count_byte, count_high_byte,
                                      word_byte))]
            kind_byte, seq_byte, count_byte, count_high_byte, word_byte = fields
            tx_next = Signal(8)             # the byte of this state
            tx_value = Signal(8)
            wants = Signal()                # this is a state that sends
            crc_next = Signal()             # its byte goes into the CRC
            settled = Signal(3)
            crc_pending = Signal()
            m.d.sync += [tx_value.eq(tx_next),
                         settled.eq(Mux(wants & ~tx_taken, Cat(1, settled[:-1]), 0)),
                         crc_pending.eq(tx_taken & crc_next)]
            # (The state leaves a sending state only as its byte is taken, which clears
            # ``settled``, and enters one with ``settled`` clear: so ``settled[-1]``
            # implies ``wants``, and ``valid`` is a register.)
            m.d.comb += [self.tx_bytes.valid.eq(settled[-1]),
                         self.tx_bytes.payload.eq(tx_value)]
            with m.If(crc_pending):
                m.d.comb += [crc_in["data"].eq(tx_value), crc_in["valid"].eq(1)]

        def send(value, *, crc_it=True):
            if self._registered_crc:
                m.d.comb += [wants.eq(1), tx_next.eq(value), crc_next.eq(crc_it)]
                return
            m.d.comb += [self.tx_bytes.valid.eq(1), self.tx_bytes.payload.eq(value)]
            if crc_it:
                m.d.comb += [crc_in["data"].eq(value), crc_in["valid"].eq(tx_taken)]

        def reply(kind):
            """Leave for sending a reply of ``kind``: a NAK, or a new stored reply, filled
            with the TPU's waiting words first."""
            if kind == Kind.NAK:
                # A NAK carries ``seq``, which holds still until the next frame's header.
                m.d.sync += nak.eq(1)
                m.next = "SendSync"
            else:
                assert kind in (Kind.ACK, Kind.BUSY)
                m.d.sync += [nak.eq(0), busy_reply.eq(kind == Kind.BUSY),
                             reply_count.eq(0), reply_room.eq(1),
                             last_seq.eq(seq), have_last.eq(1),
                             taken.eq((short_count if self._registered_crc else
                                       short_count.any()) if kind == Kind.ACK else 0)]
                m.next = "Collect"

        def refuse():
            """A bad frame: a NAK if it may be the host's, else back to the hunt."""
            with m.If(plausible):
                reply(Kind.NAK)
            with m.Else():
                m.next = "Hunt"

        with m.FSM(name="link"):
            with m.State("Hunt"):
                with m.If(got & (byte == SYNC) & ~self.rx_bytes.payload.framing_error):
                    m.d.comb += crc_in["start"].eq(1)
                    m.d.sync += [bad.eq(0), timer.eq(0)]
                    m.next = "Flags"

            def receive(state_next, store=None, action=None):
                """A header or payload byte: CRC it, note framing errors, time out;
                ``store`` is a statement to run on it, ``action`` a function."""
                with m.If(got):
                    m.d.comb += crc_in["valid"].eq(1)
                    m.d.sync += [timer.eq(0),
                                 bad.eq(bad | self.rx_bytes.payload.framing_error)]
                    if store is not None:
                        m.d.sync += store
                    if action:
                        action()
                    if state_next:
                        m.next = state_next
                with m.Elif(timer == self._byte_timeout):
                    m.d.sync += tail.eq(committed)   # cut short
                    if state_next in ("Seq", "CountLow"):
                        m.next = "Hunt"              # before its seq: nobody's frame
                    else:
                        refuse()
                with m.Else():
                    m.d.sync += timer.eq(timer + 1)

            with m.State("Flags"):
                receive("Seq", flags.eq(byte))
            with m.State("Seq"):
                receive("CountLow", seq.eq(byte))
            with m.State("CountLow"):
                receive("CountHigh", count[:8].eq(byte))
            with m.State("CountHigh"):
                receive("Decide", count[8:].eq(byte))
            with m.State("Decide"):
                m.d.sync += [take_words.eq(new_request & (used + short_count <= depth)),
                             index.eq(0), lane.eq(0)]
                with m.Switch(halvings):
                    for h in range(REPLY_HALVINGS_MASK + 1):
                        with m.Case(h):
                            m.d.sync += limit_last.eq(
                                reply_limit(h << REPLY_HALVINGS_SHIFT) - 1)
                with m.If(above(count, MAX_REQUEST_WORDS)):
                    refuse()                         # unexpected frame
                with m.Elif(count == 0):
                    m.next = "Crc"
                with m.Else():
                    m.next = "Payload"
            with m.State("Payload"):
                def payload_byte():
                    m.d.comb += [queue.write_addr.eq(tail[:ptr_bits - 1]),
                                 queue.write_data.eq(byte.replicate(4)),
                                 queue.write_en.eq(take_words << lane)]
                    m.d.sync += lane.eq(lane + 1)
                    with m.If(lane == 3):
                        m.d.sync += [index.eq(index + 1), tail.eq(tail + take_words)]
                        with m.If(last_index):
                            m.next = "Crc"
                receive(None, action=payload_byte)
            with m.State("Crc"):
                # The CRC's bytes, counted in ``lane`` (0 as the state is entered).
                def crc_byte():
                    m.d.sync += lane.eq(lane + 1)
                    with m.If(lane == CRC_BYTES - 1):
                        m.next = "CrcTaken" if self._registered_crc else "Check"
                receive(None, action=crc_byte)
            if self._registered_crc:
                with m.State("CrcTaken"):
                    m.next = "Check"        # the CRC takes the frame's last byte
            with m.State("Check"):
                # The CRC has taken the last byte: the whole frame checks to the residue.
                with m.If(bad | ~frame_crc.match_detected):
                    m.d.sync += tail.eq(committed)
                    refuse()
                with m.Elif(new_request):
                    with m.If(take_words):
                        m.d.sync += committed.eq(tail)
                        reply(Kind.ACK)
                    with m.Else():
                        reply(Kind.BUSY)
                with m.Else():
                    m.d.sync += nak.eq(0)
                    m.next = "SendSync"                          # the stored reply again

            with m.State("Collect"):
                # The TPU's waiting reply words into the reply buffer. Ready comes from a
                # register: the TPU's reply path is long enough without a count compare.
                m.d.comb += self.rsp.ready.eq(reply_room)
                m.d.comb += [replies.write_addr.eq(reply_count),
                             replies.write_data.eq(self.rsp.payload),
                             replies.write_en.eq(self.rsp.valid & self.rsp.ready)]
                with m.If(self.rsp.valid & self.rsp.ready):
                    m.d.sync += [reply_count.eq(reply_count + 1),
                                 reply_room.eq(reply_count != limit_last)]
                with m.Else():
                    m.next = "SendSync"

            with m.State("SendSync"):
                send(SYNC, crc_it=False)
                m.d.comb += crc_in["start"].eq(1)
                m.d.sync += [sent.eq(0), tx_lane.eq(0)]
                with m.If(tx_taken):
                    m.next = "SendKind"
            with m.State("SendKind"):
                send(kind_byte)
                with m.If(tx_taken):
                    m.next = "SendSeq"
            with m.State("SendSeq"):
                send(seq_byte)
                with m.If(tx_taken):
                    m.next = "SendCountLow"
            with m.State("SendCountLow"):
                send(count_byte)
                with m.If(tx_taken):
                    m.next = "SendCountHigh"
            with m.State("SendCountHigh"):
                send(count_high_byte)
                m.d.comb += [replies.read_addr.eq(0), replies.read_en.eq(1)]
                with m.If(tx_taken):
                    with m.If(nak | (reply_count == 0)):
                        m.next = "SendCrc"
                    with m.Else():
                        m.next = "SendWords"
            with m.State("SendWords"):
                send(word_byte)
                m.d.comb += [replies.read_addr.eq(sent), replies.read_en.eq(0)]
                with m.If(tx_taken):
                    m.d.sync += tx_lane.eq(tx_lane + 1)
                    with m.If(tx_lane == 3):
                        m.d.sync += [tx_lane.eq(0), sent.eq(sent + 1)]
                        m.d.comb += [replies.read_addr.eq(sent_next), replies.read_en.eq(1)]
                        with m.If(last_sent):
                            m.next = "SendCrc"
            with m.State("SendCrc"):
                # The CRC's bytes, high first, counted in ``tx_lane`` (0 as it is entered).
                high_first = Cat(*reversed([frame_crc.crc.word_select(k, 8)
                                            for k in range(CRC_BYTES)]))
                send(high_first.word_select(tx_lane[:2], 8), crc_it=False)
                with m.If(tx_taken):
                    m.d.sync += tx_lane.eq(tx_lane + 1)
                    with m.If(tx_lane == CRC_BYTES - 1):
                        m.next = "Hunt"
        return m
