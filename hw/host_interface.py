"""The host interface: the word-stream command set of :mod:`tpuer.protocol`, turned into the
core's host ports. A :class:`CommandParser` reads the commands and a :class:`ReplySender`
sends the replies; each has a registered sibling for fast clocks, picked with the other by
:class:`HostInterface` from ``cfg.control_registers``."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from ..isa import CoreState, DMAKind
from ..protocol import (HEADER_LAYOUT, MEMORY_ADDRESS_LAYOUT, STATUS_FIELDS, STATUS_STATE_LAYOUT,
                        STATUS_WORDS, WORD_BITS, LANE_BITS, Command, Memory, Reply,
                        check_lane_width, header, host_row_words, weight_row_words)
from .arith import above
from .host_dma import DMA_REQUEST_LAYOUT
from .sequencer import ProgramWrite, RunControl, Status
from .weight_reader import WeightWrite

__all__ = ["REPLY_DUE_LAYOUT", "CommandParser", "RegisteredCommandParser", "ReplySender",
           "RegisteredReplySender", "command_parser", "reply_sender", "HostInterface"]

#: A reply the parser asks for: a status reply (``status``), else the one word of a
#: ``BAD_COMMAND`` or ``REFUSED`` reply (``reply``) to the command ``opcode``.
REPLY_DUE_LAYOUT = data.StructLayout({"status": 1, "reply": 8, "opcode": 8})


class RowsTo(enum.Enum, shape=2):
    """Where the ``DATA`` rows under way go."""
    PROGRAM = 0         # to a running program's host reads
    MEMORY = 1          # to a WRITE_MEMORY's transfer
    NOWHERE = 2         # dropped


class CommandParser(wiring.Component):
    """Reads commands from ``cmd``, a word per cycle, and drives the core's host ports.

    A header with an unknown opcode asks for a ``BAD_COMMAND`` reply and the next word is
    read as a header, so the parser never locks up on bad input. ``DATA`` rows that arrive
    while the core is not running are dropped, so they cannot block the stream.
    ``READ_MEMORY`` and ``WRITE_MEMORY`` become host DMA transfers on ``memory_request``;
    one that names rows outside the memory, or comes while a program runs (``running``),
    asks for a ``REFUSED`` reply (and its rows are dropped). So does a ``WRITE_PROGRAM``
    while a program runs (its instructions are dropped). A reply asked for on
    ``reply_due`` is held until taken; no header is read meanwhile.

    This form acts on a memory command's checks in the cycle its address word comes and
    writes program words as their second word comes, for ``cfg.control_registers`` 0.

    Members
    -------
    cmd : In(stream.Signature(WORD_BITS))
    program_write, control, weight_write : Out
        The core's ports (:class:`~tpuer.hw.sequencer.ProgramWrite`,
        :class:`~tpuer.hw.sequencer.RunControl`, :class:`~tpuer.hw.weight_reader.WeightWrite`).
    host_in : Out(stream.Signature(ArrayLayout(operand, ub_lanes)))
        ``DATA`` rows for a program or a ``WRITE_MEMORY``.
    memory_request : Out(stream.Signature(DMA_REQUEST_LAYOUT))
    running : In(1)
        A program runs.
    reply_due : Out(stream.Signature(REPLY_DUE_LAYOUT))
    """

    def __init__(self, cfg):
        check_lane_width(cfg)
        self._cfg = cfg
        super().__init__({
            "cmd": In(stream.Signature(WORD_BITS)),
            "program_write": Out(ProgramWrite(cfg)),
            "control": Out(RunControl()),
            "weight_write": Out(WeightWrite(cfg)),
            "host_in": Out(stream.Signature(data.ArrayLayout(cfg.operand_shape, cfg.ub_lanes))),
            "memory_request": Out(stream.Signature(DMA_REQUEST_LAYOUT)),
            "running": In(1),
            "reply_due": Out(stream.Signature(REPLY_DUE_LAYOUT)),
        })

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        word = self.cmd.payload
        head = data.View(HEADER_LAYOUT, word)
        count = Signal(24)
        addr = Signal(17)
        widest = max(weight_row_words(cfg), host_row_words(cfg))
        # The words of a row being gathered; its first word also holds an instruction's
        # first word until the second comes.
        buffer = Signal(32 * widest, reset_less=True)
        low = buffer[:32]
        index = Signal(range(widest + 1))
        took = self.cmd.valid & self.cmd.ready
        running = self.running
        rows_to = Signal(RowsTo)
        memory_write = Signal()
        program_refused = Signal()      # the WRITE_PROGRAM under way came while running
        memory_kind = Signal(DMAKind)
        due = self.reply_due

        def refuse(opcode, reply=Reply.REFUSED.value):
            m.d.sync += [due.valid.eq(1), due.payload.status.eq(0),
                         due.payload.reply.eq(reply), due.payload.opcode.eq(opcode)]

        with m.If(due.valid & due.ready):
            m.d.sync += due.valid.eq(0)
        m.d.sync += [self.control.start.eq(0), self.control.abort.eq(0)]
        self._program_port(m, addr, Cat(low, word))
        with m.FSM(name="parser"):
            with m.State("Header"):
                m.d.comb += self.cmd.ready.eq(~due.valid)
                with m.If(took):
                    m.d.sync += [count.eq(head.count), index.eq(0)]
                    with m.Switch(head.opcode):
                        with m.Case(Command.WRITE_PROGRAM.value):
                            # A running program cannot be changed: its words are read
                            # and dropped.
                            m.d.sync += program_refused.eq(running)
                            with m.If(running):
                                refuse(Command.WRITE_PROGRAM.value)
                            m.next = "ProgramAddress"
                        with m.Case(Command.WRITE_WEIGHTS.value):
                            m.next = "WeightAddress"
                        with m.Case(Command.START.value):
                            m.next = "StartAddress"
                        with m.Case(Command.DATA.value):
                            m.d.sync += rows_to.eq(RowsTo.PROGRAM)
                            with m.If(head.count != 0):
                                m.next = "Data"
                        with m.Case(Command.READ_MEMORY.value, Command.WRITE_MEMORY.value):
                            m.d.sync += memory_write.eq(head.opcode == Command.WRITE_MEMORY.value)
                            m.next = "MemoryAddress"
                        with m.Case(Command.STATUS.value):
                            m.d.sync += [due.valid.eq(1), due.payload.status.eq(1)]
                        with m.Case(Command.ABORT.value):
                            # Registered, like START: no path from the link's words into
                            # the sequencer's issue logic.
                            m.d.sync += self.control.abort.eq(1)
                        with m.Default():
                            refuse(head.opcode, Reply.BAD_COMMAND.value)

            with m.State("MemoryAddress"):
                m.d.comb += self.cmd.ready.eq(1)
                where = data.View(MEMORY_ADDRESS_LAYOUT, word)
                in_ub = ((where.memory == Memory.UNIFIED_BUFFER.value) &
                         ~above(where.row + count, cfg.ub_depth))
                in_acc = ((where.memory == Memory.ACCUMULATORS.value) & ~memory_write &
                          ~above(where.row + count, cfg.acc_depth))
                fits = (~running & (where.reserved == 0) & ~above(count, (1 << 16) - 1) &
                        (in_ub | in_acc))

                def act_on(fits):
                    with m.If(fits):
                        _goto(m, count == 0, "Header", "MemoryRequest")
                    with m.Else():
                        refuse(Mux(memory_write, Command.WRITE_MEMORY.value,
                                   Command.READ_MEMORY.value))
                        m.d.sync += rows_to.eq(RowsTo.NOWHERE)
                        _goto(m, memory_write & (count != 0), "Data", "Header")

                with m.If(took):
                    m.d.sync += [addr.eq(where.row), memory_kind.eq(
                        Mux(memory_write, DMAKind.READ_HOST,
                            Mux(where.memory == Memory.ACCUMULATORS.value, DMAKind.WRITE_ACC,
                                DMAKind.WRITE_UB)))]
                    self._check_memory(m, fits, act_on)
            self._more_states(m, act_on)
            with m.State("MemoryRequest"):
                m.d.comb += [self.memory_request.valid.eq(1),
                             self.memory_request.payload.kind.eq(memory_kind),
                             self.memory_request.payload.addr.eq(addr),
                             self.memory_request.payload.count.eq(count)]
                with m.If(self.memory_request.ready):
                    m.d.sync += rows_to.eq(RowsTo.MEMORY)
                    _goto(m, memory_write, "Data", "Header")

            with m.State("ProgramAddress"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(took):
                    m.d.sync += addr.eq(word)
                    _goto(m, count == 0, "Header", "ProgramLow")
            with m.State("ProgramLow"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(took):
                    m.d.sync += low.eq(word)
                    m.next = "ProgramHigh"
            with m.State("ProgramHigh"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(took):
                    self._program_write(m, addr, Cat(low, word),
                                        ~above(addr, cfg.program_depth - 1) & ~program_refused)
                    m.d.sync += [addr.eq(addr + 1), count.eq(count - 1)]
                    _goto(m, count == 1, "Header", "ProgramLow")

            self._weight_states(m, addr, count, index, buffer)
            with m.State("StartAddress"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(took):
                    # Registered: the link's words need not reach the sequencer's fetch in
                    # the same cycle.
                    m.d.sync += [self.control.start.eq(1), self.control.start_pc.eq(word)]
                    m.next = "Header"
            self._data_states(m, count, index, buffer, rows_to)
        return m

    def _weight_states(self, m, addr, count, index, buffer):
        """WRITE_WEIGHTS' rows, gathered a word at a time into the weight memory."""
        cfg = self._cfg
        words = weight_row_words(cfg)
        with m.State("WeightAddress"):
            m.d.comb += self.cmd.ready.eq(1)
            with m.If(self.cmd.valid):
                m.d.sync += addr.eq(self.cmd.payload)
                _goto(m, count == 0, "Header", "Weights")
        with m.State("Weights"):
            m.d.comb += self.cmd.ready.eq(1)
            # The row's address and whether its last word may come now are known from
            # registers, before the word is: the weight reader keeps clear of it.
            m.d.comb += self.weight_write.armed.eq(index == words - 1)
            with m.If(self.cmd.valid):
                m.d.sync += [buffer.word_select(index, 32).eq(self.cmd.payload),
                             index.eq(index + 1)]
                with m.If(index == words - 1):
                    m.d.comb += self.weight_write.en.eq(
                        ~above(addr, cfg.weight_memory_depth - 1))
                    m.d.sync += [addr.eq(addr + 1), count.eq(count - 1), index.eq(0)]
                    with m.If(count == 1):
                        m.next = "Header"
        weight_row = _row_from(buffer, self.cmd.payload, words)
        for lane, bits in enumerate(_lanes(weight_row, cfg.cols)):
            m.d.comb += self.weight_write.data[lane].eq(bits)
        m.d.comb += self.weight_write.addr.eq(addr)

    def _data_states(self, m, count, index, buffer, rows_to):
        """DATA rows, gathered a word at a time and pushed whole to where they go."""
        cfg = self._cfg
        with m.State("Data"):
            m.d.comb += self.cmd.ready.eq(1)
            with m.If(self.cmd.valid):
                m.d.sync += [buffer.word_select(index, 32).eq(self.cmd.payload),
                             index.eq(index + 1)]
                with m.If(index == host_row_words(cfg) - 1):
                    m.next = "DataPush"
        with m.State("DataPush"):
            for lane, bits in enumerate(_lanes(buffer, cfg.ub_lanes)):
                m.d.comb += self.host_in.payload[lane].eq(bits)
            deliver = Mux(rows_to == RowsTo.PROGRAM, self.running, rows_to == RowsTo.MEMORY)
            m.d.comb += self.host_in.valid.eq(deliver)
            with m.If(~deliver | self.host_in.ready):
                m.d.sync += [count.eq(count - 1), index.eq(0)]
                _goto(m, count == 1, "Header", "Data")

    def _program_port(self, m, addr, word):
        """What drives the program write port outside ``ProgramHigh``: nothing here."""

    def _program_write(self, m, addr, word, en):
        """A program word written in the cycle its second half comes."""
        m.d.comb += [self.program_write.addr.eq(addr), self.program_write.data.eq(word),
                     self.program_write.en.eq(en)]

    def _check_memory(self, m, fits, act_on):
        """A memory command's checks acted on as its address word comes."""
        act_on(fits)

    def _more_states(self, m, act_on):
        """States of the registered form: none here."""


class RegisteredCommandParser(CommandParser):
    """A :class:`CommandParser` for fast clocks (``cfg.control_registers`` 1): a memory
    command's checks are acted on a cycle later from a register (state ``MemoryCheck``),
    so that the address word's adder and comparisons do not reach the parser's decisions;
    a program word goes into the program memory a cycle later from registers, its address
    and data not gated by the state, as the memory's pins are far from the parser (a START
    takes two words more, so the program is complete before it can run)."""

    def _program_port(self, m, addr, word):
        m.d.sync += [self.program_write.en.eq(0), self.program_write.addr.eq(addr),
                     self.program_write.data.eq(word)]

    def _program_write(self, m, addr, word, en):
        m.d.sync += self.program_write.en.eq(en)

    def _check_memory(self, m, fits, act_on):
        self._memory_fits = Signal()
        m.d.sync += self._memory_fits.eq(fits)
        m.next = "MemoryCheck"

    def _more_states(self, m, act_on):
        with m.State("MemoryCheck"):
            act_on(self._memory_fits)


class ReplySender(wiring.Component):
    """Sends replies on ``rsp``, a whole reply at a time: the ``STATUS`` reply or the one
    word of a ``BAD_COMMAND`` / ``REFUSED`` reply that ``reply_due`` asks for (taken as
    its last word is sent), else a ``ROW`` reply for each row on ``host_out``. The status
    words are read as they are sent: the counters of a running program go on between the
    words.

    This form offers a word per cycle, picked straight from the status and the row, for
    ``cfg.control_registers`` 0.

    Members
    -------
    rsp : Out(stream.Signature(WORD_BITS))
    reply_due : In(stream.Signature(REPLY_DUE_LAYOUT))
    host_out : In(stream.Signature(ArrayLayout(acc, ub_lanes)))
        Rows the core writes to the host.
    status : In(Status)
    """

    def __init__(self, cfg):
        self._cfg = cfg
        super().__init__({
            "rsp": Out(stream.Signature(WORD_BITS)),
            "reply_due": In(stream.Signature(REPLY_DUE_LAYOUT)),
            "host_out": In(stream.Signature(data.ArrayLayout(cfg.acc_shape, cfg.ub_lanes))),
            "status": In(Status()),
        })

    def elaborate(self, platform):
        lanes = self._cfg.ub_lanes
        m = Module()
        due = self.reply_due
        # A header, then the words; the registered form counts in ``word`` the words sent
        # after the header (the small one needs no count, see ``_sent``).
        word = Signal(range(max(lanes, STATUS_WORDS) + 1))
        header_sent = Signal()
        last_word = Signal()    # header_sent and word == words - 1: a register, so that
        #                         taking a row (``host_out.ready``) waits on no comparison
        status_words = [_state_word(self.status) if name == "state_word"
                        else getattr(self.status, name) for name in STATUS_FIELDS]
        offer = self._offers(m, word, status_words, self.host_out.payload)
        with m.FSM(name="replies"):
            with m.State("Idle"):
                m.d.sync += [word.eq(0), header_sent.eq(0), last_word.eq(0)]
                self._idle(m)
                with m.If(due.valid & due.payload.status):
                    self._begin(m, "Status")
                    m.next = "Status"
                with m.Elif(due.valid):
                    m.d.comb += [self.rsp.valid.eq(1),
                                 self.rsp.payload.eq(Cat(due.payload.opcode, Const(0, 16),
                                                         due.payload.reply)),
                                 due.ready.eq(self.rsp.ready)]
                with m.Elif(self.host_out.valid):
                    self._begin(m, "Row")
                    m.next = "Row"
            for state, words, done in (("Status", STATUS_WORDS, due.ready),
                                       ("Row", lanes, self.host_out.ready)):
                with m.State(state):
                    with m.If(offer()):
                        self._sent(m, state, words, done, word, header_sent, last_word)
        return m

    def _sent(self, m, state, words, done, word, header_sent, last_word):
        """A word of ``state`` is sent: after the reply's last (here told by the pick of
        its last word, a register), ``done`` and back to ``Idle``."""
        with m.If(self._pick[self._slots.index((state, words - 1))]):
            m.d.comb += done.eq(1)
            m.next = "Idle"

    def _offers(self, m, word, status_words, row):
        """Returns ``offer()``, which offers the word due and returns the signal that says
        it is sent. The word due is picked by a one-hot register, a bit per header and word
        (``pick``, moved on as each word is sent), through an AND-OR of the picks, not
        through a multiplexer decoded from the state and a word count (on the iCE40 that
        takes a reply sender's logic from 362 LUTs to 253)."""
        lanes = self._cfg.ub_lanes
        status_words, row = self._sources(m, status_words, row)
        slots = {("Status", None): header(Reply.STATUS, STATUS_WORDS),
                 **{("Status", i): value for i, value in enumerate(status_words)},
                 ("Row", None): header(Reply.ROW, lanes),
                 **{("Row", i): row[i].as_signed() for i in range(lanes)}}
        self._slots = list(slots)
        self._pick = pick = Signal(len(slots))
        self._before_picks(m)
        picked = []
        for k, ((state, index), value) in enumerate(slots.items()):
            part = Signal(32, name=f"reply_{state.lower()}_"
                                   f"{'header' if index is None else index}")
            m.d.comb += part.eq(Mux(pick[k], value, 0))
            picked.append(part)
        return self._offer(m, Cat(*(Cat(*bits).any() for bits in zip(*picked))))

    def _sources(self, m, status_words, row):
        """The status words and the row the reply words are picked from: as they are."""
        return status_words, row

    def _before_picks(self, m):
        """Registers of the registered form: none here."""

    def _offer(self, m, due):
        """Offers ``due`` in its cycle, a word per cycle."""
        def offer():
            m.d.comb += [self.rsp.valid.eq(1), self.rsp.payload.eq(due)]
            with m.If(self.rsp.ready):
                # The header's slot is followed by its words' (``slots``).
                m.d.sync += self._pick.eq(self._pick << 1)
            return self.rsp.ready
        return offer

    def _idle(self, m):
        """What the registered form clears while idle: nothing here."""

    def _begin(self, m, state):
        """A reply starts: its header is picked."""
        m.d.sync += self._pick.eq(1 << self._slots.index((state, None)))


class RegisteredReplySender(ReplySender):
    """A :class:`ReplySender` for fast clocks (``cfg.control_registers`` 1): each word is
    offered from a register (``reply``), loaded in the cycle before it is offered
    (``settled`` says the register holds the word due), so that no logic of the status
    fields or of the row's lanes sits before the reply stream's buffer: a word every other
    cycle. The status words come through copies a cycle late, so that the counters' adders
    end at a register, and the row's lanes from a copy without an enable, so that the
    answer queue's multiplexer ends at one (the row holds still from the cycle before its
    reply starts until its last word takes it)."""

    def _sources(self, m, status_words, row):
        status_copies = [Signal.like(value, reset_less=True, name=f"{name}_copy")
                         for name, value in zip(STATUS_FIELDS, status_words)]
        row_copy = Signal(row.shape(), reset_less=True, name="row_copy")
        m.d.sync += [copy.eq(value) for copy, value in zip(status_copies, status_words)]
        m.d.sync += row_copy.eq(row)
        return status_copies, row_copy

    def _before_picks(self, m):
        self._settled = Signal(name="_settled")
        self._reply = Signal(32, name="reply")

    def _offer(self, m, due):
        settled, reply, pick = self._settled, self._reply, self._pick
        m.d.sync += reply.eq(due)

        def offer():
            sent = settled & self.rsp.ready
            m.d.comb += [self.rsp.valid.eq(settled), self.rsp.payload.eq(reply)]
            m.d.sync += settled.eq(~sent)
            with m.If(sent):
                m.d.sync += pick.eq(pick << 1)
            return sent
        return offer

    def _idle(self, m):
        m.d.sync += self._settled.eq(0)

    def _sent(self, m, state, words, done, word, header_sent, last_word):
        # Counted: the header, then the words (``last_word`` a register, so that taking a
        # row waits on no comparison).
        m.d.sync += [header_sent.eq(1),
                     last_word.eq(Mux(header_sent, word + 2 == words, words == 1))]
        with m.If(header_sent):
            m.d.sync += word.eq(word + 1)
            with m.If(last_word):
                m.d.comb += done.eq(1)
                m.next = "Idle"


class HostInterface(wiring.Component):
    """Parses commands from ``cmd`` one word per cycle and drives the core; sends ``ROW``
    replies for the rows the core writes to the host and ``STATUS`` / ``BAD_COMMAND`` /
    ``REFUSED`` replies on ``rsp``, a whole reply at a time: with ``cfg.control_registers``
    (for fast clocks) a word every other cycle, each from a register, else a word per
    cycle. See :mod:`tpuer.protocol` for the words, :class:`CommandParser` and
    :class:`ReplySender` for the behaviour.
    """

    def __init__(self, cfg):
        check_lane_width(cfg)
        self._cfg = cfg
        super().__init__({
            "cmd": In(stream.Signature(WORD_BITS)),
            "rsp": Out(stream.Signature(WORD_BITS)),
            "program_write": Out(ProgramWrite(cfg)),
            "control": Out(RunControl()),
            "weight_write": Out(WeightWrite(cfg)),
            "host_in": Out(stream.Signature(data.ArrayLayout(cfg.operand_shape, cfg.ub_lanes))),
            "host_out": In(stream.Signature(data.ArrayLayout(cfg.acc_shape, cfg.ub_lanes))),
            "memory_request": Out(stream.Signature(DMA_REQUEST_LAYOUT)),
            "status": In(Status()),
        })

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        m.submodules.parser = parser = command_parser(cfg)
        m.submodules.replies = replies = reply_sender(cfg)
        wiring.connect(m, wiring.flipped(self.cmd), parser.cmd)
        wiring.connect(m, parser.program_write, wiring.flipped(self.program_write))
        wiring.connect(m, parser.control, wiring.flipped(self.control))
        wiring.connect(m, parser.weight_write, wiring.flipped(self.weight_write))
        wiring.connect(m, parser.host_in, wiring.flipped(self.host_in))
        wiring.connect(m, parser.memory_request, wiring.flipped(self.memory_request))
        m.d.comb += parser.running.eq(self.status.state == CoreState.RUNNING)
        wiring.connect(m, parser.reply_due, replies.reply_due)
        wiring.connect(m, wiring.flipped(self.host_out), replies.host_out)
        wiring.connect(m, wiring.flipped(self.status), replies.status)
        wiring.connect(m, replies.rsp, wiring.flipped(self.rsp))
        return m


def command_parser(cfg):
    """The parser ``cfg`` asks for: :class:`RegisteredCommandParser` with
    ``cfg.control_registers``, else :class:`CommandParser`."""
    return (RegisteredCommandParser if cfg.control_registers else CommandParser)(cfg)


def reply_sender(cfg):
    """The reply sender ``cfg`` asks for: :class:`RegisteredReplySender` with
    ``cfg.control_registers``, else :class:`ReplySender`."""
    return (RegisteredReplySender if cfg.control_registers else ReplySender)(cfg)


def _lanes(bits, lanes):
    """``lanes`` lanes of :data:`~tpuer.protocol.LANE_BITS` bits from ``bits``."""
    return [bits[LANE_BITS * k:LANE_BITS * (k + 1)] for k in range(lanes)]


def _state_word(interface):
    """The state word (:data:`~tpuer.protocol.STATUS_STATE_LAYOUT`) from the members of
    ``interface`` (a :class:`~tpuer.hw.sequencer.Status`) named as its fields: each at its
    offset, the gaps between them 0."""
    parts, end = [], 0
    for name, field in STATUS_STATE_LAYOUT:
        value = getattr(interface, name).as_value()
        assert len(value) <= field.width, f"{name} is wider than its status field"
        if field.offset > end:
            parts.append(Const(0, field.offset - end))
        parts.append(value)
        end = field.offset + len(value)
    return Cat(*parts)


def _goto(m, condition, when_true, when_false):
    """Inside an FSM state: go to ``when_true`` if ``condition`` holds, else ``when_false``."""
    with m.If(condition):
        m.next = when_true
    with m.Else():
        m.next = when_false


def _row_from(buffer, word, words):
    """The bits of a row of ``words`` words whose last word arrives now (``word``) and
    whose others are in ``buffer``."""
    if words == 1:
        return word
    return Cat(buffer[:32 * (words - 1)], word)
