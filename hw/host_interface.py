"""The host interface: the word-stream command set of :mod:`tpuer.protocol`, turned into the
core's host ports."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..isa import CoreState, DMAKind
from ..protocol import (HEADER_LAYOUT, MEMORY_ADDRESS_LAYOUT, STATUS_FIELDS, STATUS_STATE_LAYOUT,
                        STATUS_WORDS, WORD_BITS, LANE_BITS, Command, Memory, Reply,
                        check_lane_width, header, host_row_words, weight_row_words)
from .arith import above
from .host_dma import DMA_REQUEST_LAYOUT
from .sequencer import ProgramWrite, RunControl, Status
from .weight_reader import WeightWrite

__all__ = ["HostInterface"]


class HostInterface(wiring.Component):
    """Parses commands from ``cmd`` one word per cycle and drives the core; sends ``ROW``
    replies for the rows the core writes to the host and ``STATUS`` / ``BAD_COMMAND``
    replies on ``rsp``, a whole reply at a time: with ``cfg.control_registers`` (for fast
    clocks) a word every other cycle, each from a register, else a word per cycle. See
    :mod:`tpuer.protocol` for the words.

    A header with an unknown opcode is answered with ``BAD_COMMAND`` and the next word is
    read as a header, so the interface never locks up on bad input. ``DATA`` rows that
    arrive while the core is not running are dropped, so they cannot block the stream.
    ``READ_MEMORY`` and ``WRITE_MEMORY`` become host DMA transfers on ``memory_request``;
    one that names rows outside the memory, or comes while a program runs, is answered
    with ``REFUSED`` (and its rows dropped). So is a ``WRITE_PROGRAM`` while a program
    runs (its instructions are dropped).
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
        # The register stages that fast clocks need (``cfg.control_registers``) are
        # marked ``fast`` below.
        fast = bool(cfg.control_registers)
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
        status_request = Signal()
        bad_request = Signal()          # a BAD_COMMAND or REFUSED reply is due
        bad_reply = Signal(8)
        bad_opcode = Signal(8)
        took = self.cmd.valid & self.cmd.ready
        running = self.status.state == CoreState.RUNNING
        # Where DATA rows go: to a running program, to a WRITE_MEMORY, or nowhere.
        rows_mode = Signal(2)
        ROWS_TO_PROGRAM, ROWS_TO_MEMORY, ROWS_DROPPED = 0, 1, 2
        memory_write = Signal()
        program_refused = Signal()      # the WRITE_PROGRAM under way came while running
        memory_kind = Signal(DMAKind)
        memory_fits = Signal()          # the READ_MEMORY / WRITE_MEMORY under way is valid

        def int8_lanes(bits, lanes):
            return [bits[LANE_BITS * k:LANE_BITS * (k + 1)] for k in range(lanes)]

        m.d.sync += [self.control.start.eq(0), self.control.abort.eq(0)]
        if fast:
            m.d.sync += [self.program_write.en.eq(0), self.program_write.addr.eq(addr),
                         self.program_write.data.eq(Cat(low, word))]
        with m.FSM(name="parser"):
            with m.State("Header"):
                m.d.comb += self.cmd.ready.eq(~status_request & ~bad_request)
                with m.If(took):
                    m.d.sync += [count.eq(head.count), index.eq(0)]
                    with m.Switch(head.opcode):
                        with m.Case(Command.WRITE_PROGRAM.value):
                            # A running program cannot be changed: its words are read
                            # and dropped.
                            m.d.sync += program_refused.eq(running)
                            with m.If(running):
                                m.d.sync += [bad_request.eq(1),
                                             bad_reply.eq(Reply.REFUSED.value),
                                             bad_opcode.eq(Command.WRITE_PROGRAM.value)]
                            m.next = "ProgramAddress"
                        with m.Case(Command.WRITE_WEIGHTS.value):
                            m.next = "WeightAddress"
                        with m.Case(Command.START.value):
                            m.next = "StartAddress"
                        with m.Case(Command.DATA.value):
                            m.d.sync += rows_mode.eq(ROWS_TO_PROGRAM)
                            with m.If(head.count != 0):
                                m.next = "Data"
                        with m.Case(Command.READ_MEMORY.value, Command.WRITE_MEMORY.value):
                            m.d.sync += memory_write.eq(head.opcode == Command.WRITE_MEMORY.value)
                            m.next = "MemoryAddress"
                        with m.Case(Command.STATUS.value):
                            m.d.sync += status_request.eq(1)
                        with m.Case(Command.ABORT.value):
                            # Registered, like START: no path from the link's words into
                            # the sequencer's issue logic.
                            m.d.sync += self.control.abort.eq(1)
                        with m.Default():
                            m.d.sync += [bad_request.eq(1), bad_opcode.eq(head.opcode),
                                         bad_reply.eq(Reply.BAD_COMMAND.value)]

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
                        m.d.sync += [bad_request.eq(1), bad_reply.eq(Reply.REFUSED.value),
                                     bad_opcode.eq(Mux(memory_write,
                                                       Command.WRITE_MEMORY.value,
                                                       Command.READ_MEMORY.value)),
                                     rows_mode.eq(ROWS_DROPPED)]
                        _goto(m, memory_write & (count != 0), "Data", "Header")

                with m.If(took):
                    m.d.sync += [addr.eq(where.row), memory_kind.eq(
                        Mux(memory_write, DMAKind.READ_HOST,
                            Mux(where.memory == Memory.ACCUMULATORS.value, DMAKind.WRITE_ACC,
                                DMAKind.WRITE_UB)))]
                    if fast:
                        m.d.sync += memory_fits.eq(fits)
                        m.next = "MemoryCheck"
                    else:
                        act_on(fits)
            if fast:
                with m.State("MemoryCheck"):
                    # The checks' outcome, a cycle later from a register: the address
                    # word's adder and comparisons do not reach the parser's decisions.
                    act_on(memory_fits)
            with m.State("MemoryRequest"):
                m.d.comb += [self.memory_request.valid.eq(1),
                             self.memory_request.payload.kind.eq(memory_kind),
                             self.memory_request.payload.addr.eq(addr),
                             self.memory_request.payload.count.eq(count)]
                with m.If(self.memory_request.ready):
                    m.d.sync += rows_mode.eq(ROWS_TO_MEMORY)
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
                    if fast:
                        # Into the program memory a cycle later, from registers, its address
                        # and data not gated by the state: the memory's pins are far from
                        # the parser. (A START takes two words more, so the program is
                        # complete before it can run.)
                        m.d.sync += self.program_write.en.eq(
                            ~above(addr, cfg.program_depth - 1) & ~program_refused)
                    else:
                        m.d.comb += [self.program_write.addr.eq(addr),
                                     self.program_write.data.eq(Cat(low, word)),
                                     self.program_write.en.eq(
                                         ~above(addr, cfg.program_depth - 1) &
                                         ~program_refused)]
                    m.d.sync += [addr.eq(addr + 1), count.eq(count - 1)]
                    _goto(m, count == 1, "Header", "ProgramLow")

            with m.State("WeightAddress"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(took):
                    m.d.sync += addr.eq(word)
                    _goto(m, count == 0, "Header", "Weights")
            with m.State("Weights"):
                m.d.comb += self.cmd.ready.eq(1)
                words = weight_row_words(cfg)
                # The row's address and whether its last word may come now are known from
                # registers, before the word is: the weight reader keeps clear of it.
                m.d.comb += self.weight_write.armed.eq(index == words - 1)
                with m.If(took):
                    m.d.sync += buffer.word_select(index, 32).eq(word)
                    m.d.sync += index.eq(index + 1)
                    with m.If(index == words - 1):
                        m.d.comb += self.weight_write.en.eq(
                            ~above(addr, cfg.weight_memory_depth - 1))
                        m.d.sync += [addr.eq(addr + 1), count.eq(count - 1), index.eq(0)]
                        with m.If(count == 1):
                            m.next = "Header"

            with m.State("StartAddress"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(took):
                    # Registered: the link's words need not reach the sequencer's fetch in
                    # the same cycle.
                    m.d.sync += [self.control.start.eq(1), self.control.start_pc.eq(word)]
                    m.next = "Header"

            with m.State("Data"):
                m.d.comb += self.cmd.ready.eq(1)
                words = host_row_words(cfg)
                with m.If(took):
                    m.d.sync += [buffer.word_select(index, 32).eq(word), index.eq(index + 1)]
                    with m.If(index == words - 1):
                        m.next = "DataPush"
            with m.State("DataPush"):
                for lane, bits in enumerate(int8_lanes(buffer, cfg.ub_lanes)):
                    m.d.comb += self.host_in.payload[lane].eq(bits)
                deliver = Mux(rows_mode == ROWS_TO_PROGRAM, running, rows_mode == ROWS_TO_MEMORY)
                m.d.comb += self.host_in.valid.eq(deliver)
                with m.If(~deliver | self.host_in.ready):
                    m.d.sync += [count.eq(count - 1), index.eq(0)]
                    _goto(m, count == 1, "Header", "Data")

        weight_row = _row_from(buffer, self.cmd.payload, weight_row_words(cfg))
        for lane, bits in enumerate(int8_lanes(weight_row, cfg.cols)):
            m.d.comb += self.weight_write.data[lane].eq(bits)
        m.d.comb += self.weight_write.addr.eq(addr)

        # --- replies: one whole reply at a time ------------------------------------------
        # A header, then the words; ``word`` counts the words sent after the header.
        lanes = cfg.ub_lanes
        word = Signal(range(max(lanes, STATUS_WORDS) + 1))
        header_sent = Signal()
        last_word = Signal()    # header_sent and word == words - 1: a register, so that
        #                         taking a row (``host_out.ready``) waits on no comparison
        # The status words are read as they are sent: the counters of a running program
        # go on between the words. With ``fast`` they come through a register (a cycle
        # late), so that the counters' adders end at a register, not at the reply
        # register.
        # With ``fast``, a status or row reply's words are offered from a register
        # (``reply``), loaded in the cycle before each is offered (``settled`` says the
        # register holds the word due), so that no multiplexer of the status fields or of
        # the row's lanes sits before the reply stream's buffer: a word every other cycle.
        reply = Signal(32)
        settled = Signal()
        status_words = [_state_word(self.status) if name == "state_word"
                        else getattr(self.status, name) for name in STATUS_FIELDS]
        status_now = status_words
        row = self.host_out.payload
        if fast:
            # The row's lanes are chosen from a copy a cycle late, so that the answer
            # queue's multiplexer ends at a register, not at the reply register. The copy
            # has no enable (a wide one would wait on the reply's state): the row holds
            # still from the cycle before its reply starts until its last word takes it.
            status_words = [Signal.like(value, reset_less=True, name=f"{name}_copy")
                            for name, value in zip(STATUS_FIELDS, status_now)]
            row = Signal(self.host_out.payload.shape(), reset_less=True, name="row_copy")
            m.d.sync += [copy.eq(value) for copy, value in zip(status_words, status_now)]
            m.d.sync += row.eq(self.host_out.payload)
        status_word, row_word = Signal(32), Signal(32)
        if fast:
            # The reply register takes the word due through an AND-OR of one-hot picks,
            # a bit per header and word (``pick``, moved on as each word is sent), not
            # through a multiplexer decoded from the state and the word count.
            slots = {("Status", None): header(Reply.STATUS, STATUS_WORDS),
                     **{("Status", i): value for i, value in enumerate(status_words)},
                     ("Row", None): header(Reply.ROW, lanes),
                     **{("Row", i): row[i].as_signed() for i in range(lanes)}}
            pick = Signal(len(slots))
            picked = []
            for k, ((state, index), value) in enumerate(slots.items()):
                part = Signal(32, name=f"reply_{state.lower()}_"
                                       f"{'header' if index is None else index}")
                m.d.comb += part.eq(Mux(pick[k], value, 0))
                picked.append(part)
            m.d.sync += reply.eq(Cat(*(Cat(*bits).any() for bits in zip(*picked))))

            def pick_header(state):
                return pick.eq(1 << list(slots).index((state, None)))
        else:
            with m.Switch(word):
                for index in range(max(STATUS_WORDS, lanes)):
                    with m.Case(index):
                        if index < STATUS_WORDS:
                            m.d.comb += status_word.eq(status_words[index])
                        if index < lanes:
                            m.d.comb += row_word.eq(row[index].as_signed())
        with m.FSM(name="replies"):
            with m.State("Idle"):
                m.d.sync += [word.eq(0), header_sent.eq(0), last_word.eq(0), settled.eq(0)]
                with m.If(status_request):
                    if fast:
                        m.d.sync += pick_header("Status")
                    m.next = "Status"
                with m.Elif(bad_request):
                    m.d.comb += [self.rsp.valid.eq(1),
                                 self.rsp.payload.eq(Cat(bad_opcode, Const(0, 16), bad_reply))]
                    with m.If(self.rsp.ready):
                        m.d.sync += bad_request.eq(0)
                with m.Elif(self.host_out.valid):
                    if fast:
                        m.d.sync += pick_header("Row")
                    m.next = "Row"
            for state, kind, words, value in (("Status", Reply.STATUS, STATUS_WORDS, status_word),
                                              ("Row", Reply.ROW, lanes, row_word)):
                with m.State(state):
                    if fast:
                        sent = settled & self.rsp.ready
                        m.d.comb += [self.rsp.valid.eq(settled), self.rsp.payload.eq(reply)]
                        m.d.sync += settled.eq(~sent)
                        with m.If(sent):
                            # The header's slot is followed by its words' (``slots``).
                            m.d.sync += pick.eq(pick << 1)
                    else:
                        sent = self.rsp.ready
                        due = Mux(header_sent, value, header(kind, words))
                        m.d.comb += [self.rsp.valid.eq(1), self.rsp.payload.eq(due)]
                    with m.If(sent):
                        m.d.sync += [header_sent.eq(1),
                                     last_word.eq(Mux(header_sent, word + 2 == words,
                                                      words == 1))]
                        with m.If(header_sent):
                            m.d.sync += word.eq(word + 1)
                            with m.If(last_word):
                                if state == "Status":
                                    m.d.sync += status_request.eq(0)
                                else:
                                    m.d.comb += self.host_out.ready.eq(1)
                                m.next = "Idle"
        return m


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
