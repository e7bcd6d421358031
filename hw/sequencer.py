"""The CISC instruction sequencer: fetch, checks, hazards, issue and retirement.

Two forms behind one signature, chosen by :func:`sequencer`: :class:`Sequencer` for small
FPGAs at slow clocks, :class:`RegisteredSequencer` for fast clocks. Their parts are
components of their own: :class:`~tpuer.hw.program_memory.ProgramMemory`,
:class:`~tpuer.hw.instruction_checks.InstructionChecks`,
:class:`~tpuer.hw.hazard_tracker.HazardTracker`,
:class:`~tpuer.hw.parameter_registers.ParameterRegisters` and
:class:`~tpuer.hw.counters.PerformanceCounters` (each with a registered sibling); what is
left here is the fetch stage, the state checks and the issue.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..isa import (END_BITS, FIELD_BITS, INSTRUCTION_BITS, INSTRUCTION_LAYOUT, STATE_CHECKS,
                   CoreState, ErrorCode, Opcode, dma_kind, tiles_held)
from .activation import PARAM_WRITE_LAYOUT, ActivationUnit
from .activation_units import activation_unit_class
from .activation_issuer import ACTIVATE_REQUEST_LAYOUT, ActivationView
from .arith import above, any_of
from .counters import COUNTER_BITS, PerformanceCounters, PipelinedCounters
from .datapath import command_layouts
from .hazard_tracker import HazardTracker, RegisteredHazardTracker
from .host_dma import DMA_REQUEST_LAYOUT, TransferView
from .instruction_checks import (VERDICTS_LAYOUT, InstructionChecks, OPCODE_LAYOUT, judge,
                                 opcode_bits)
from .parameter_registers import ParameterRegisters, RegisteredParameterRegisters
from .program_memory import ProgramMemory

__all__ = ["Sequencer", "RegisteredSequencer", "sequencer", "STATUS_SHAPES", "Status",
           "RunControl", "ProgramWrite", "fetch_fill_cycles", "program_word_bits"]

#: The status register and the performance counters, as the sequencer drives them and the
#: core and the host interface pass them on.
STATUS_SHAPES = {"state": CoreState, "error": ErrorCode, "error_pc": END_BITS,
                 **{name: COUNTER_BITS for name in ("cycles", "mxu_busy_cycles",
                                                    "weight_stall_cycles", "instructions")}}


def sequencer(cfg):
    """The sequencer ``cfg`` asks for: :class:`RegisteredSequencer` with
    ``cfg.control_registers``, else :class:`Sequencer`."""
    return RegisteredSequencer(cfg) if cfg.control_registers else Sequencer(cfg)


def _form(cfg):
    return RegisteredSequencer if cfg.control_registers else Sequencer


def program_word_bits(cfg):
    """Bits of a word of the instruction memory of ``cfg``'s sequencer."""
    return INSTRUCTION_BITS + _form(cfg).STORED_BITS


def fetch_fill_cycles(cfg):
    """Cycles between ``start`` and the first instruction's first step in ``cfg``'s
    sequencer, while its fetch stage fills."""
    return len(_form(cfg).FILL_STATES)


class Status(wiring.Signature):
    """The status register and the performance counters (:data:`STATUS_SHAPES`), as the
    sequencer drives them and the core and the host interface pass them on."""

    def __init__(self):
        super().__init__({name: Out(shape) for name, shape in STATUS_SHAPES.items()})


class RunControl(wiring.Signature):
    """The host's control of a run, as the host drives it: a one-cycle ``start`` runs from
    instruction ``start_pc``; ``abort`` stops a running program."""

    def __init__(self):
        super().__init__({"start": Out(1), "start_pc": Out(FIELD_BITS), "abort": Out(1)})


class ProgramWrite(wiring.Signature):
    """A write port into the instruction memory, as the host drives it: instruction word
    ``data`` into word ``addr`` while ``en``."""

    def __init__(self, cfg):
        super().__init__({"addr": Out(cfg.program_addr_width), "data": Out(INSTRUCTION_BITS),
                          "en": Out(1)})


class Sequencer(wiring.Component):
    """Runs a program from its instruction memory, one instruction after another, driving
    the datapath's command streams. This form is for small FPGAs at slow clocks.

    Every instruction is checked before it does anything
    (:class:`~tpuer.hw.instruction_checks.InstructionChecks`, then the state checks of
    :data:`~tpuer.isa.STATE_CHECKS`); a bad one stops the core in state ``ERROR`` with an
    :class:`~tpuer.isa.ErrorCode` and its index (``error_pc``), so the core never writes
    outside a memory and never waits for a weight tile that no READ_WEIGHTS asked for.
    Hazards are kept in hardware, conservatively
    (:class:`~tpuer.hw.hazard_tracker.HazardTracker`); READ_HOST, WRITE_HOST and CONFIG
    also wait until every activated row has been written; SYNC and HALT wait for
    everything, weight reads and host transfers included. READ_HOST and WRITE_HOST retire
    once the DMA engine takes them, and ACTIVATE once the activation issuer does, so host
    transfers and requantisation overlap products. MATMUL rows stream one per cycle and
    consecutive instructions follow without a gap: the instruction under way is decoded
    from a register while the next one waits on the memory's output (which holds still
    while nothing is read) and is decoded as it is loaded, and the memory reads the one
    after. :func:`fetch_fill_cycles` cycles fill this stage as a run begins.

    Members
    -------
    program_write : In(ProgramWrite)
        The host's port into the instruction memory; ignored while a program runs.
    control : In(RunControl)
        A one-cycle ``start`` runs from ``start_pc`` (from any state but ``RUNNING``); it
        clears the error and the counters. ``abort`` stops a running program after the
        current step (state ``IDLE``) and cancels the host transfer under way
        (``dma_cancel``).
    status : Out(Status)
        The status register (``state``, ``error``, ``error_pc``) and the performance
        counters of the last run (:class:`~tpuer.hw.counters.PerformanceCounters`).
    matmul, activate_request, params, param_write : Out
        Commands to the datapath (see :class:`Datapath`); ``matmul_pending`` is high while
        a MATMUL with rows left is under way, whether or not its row waits on a hazard (a
        superset of ``matmul.valid``, from registers). CONFIG writes ``params``
        (:class:`~tpuer.hw.parameter_registers.ParameterRegisters`), or ``param_write``
        for the parameters a lane-serial activation unit keeps itself.
    dma_request : Out(stream)
        READ_HOST and WRITE_HOST, handed to the host DMA engine
        (:class:`~tpuer.hw.host_dma.HostDMA`); ``dma_pending`` is high while one waits to
        be handed over, whether or not it waits on a hazard (a superset of
        ``dma_request.valid``); ``dma_claim`` says that the DMA engine's next request is
        the sequencer's (here ``dma_request.valid``), so that the engine serves others only
        when it is low; ``transfer`` In: the transfer under way.
    weight_request : Out(stream)
        READ_WEIGHTS requests to the weight reader; ``weight_reader_busy`` In.
    matmul_busy, acc_bank_busy, activate_busy, weight_stall, vector_issued : In
        The datapath's status (``activate_busy`` includes the activation issuer).
    activation : In(ActivationView)
        The ACTIVATE under way in the activation issuer.
    """

    #: The sequencer's parts, by role.
    Checks = InstructionChecks
    Hazards = HazardTracker
    Parameters = ParameterRegisters
    Counters = PerformanceCounters
    #: The states in which the fetch stage fills as a run begins.
    FILL_STATES = ("Fill", "Prime")
    #: Bits stored beside each instruction in the instruction memory.
    STORED_BITS = 0

    def __init__(self, cfg):
        self._cfg = cfg
        layouts = command_layouts(cfg)
        super().__init__({
            "program_write": In(ProgramWrite(cfg)),
            "control": In(RunControl()),
            "status": Out(Status()),
            "matmul": Out(stream.Signature(layouts["matmul"])),
            "matmul_pending": Out(1),
            "activate_request": Out(stream.Signature(ACTIVATE_REQUEST_LAYOUT)),
            "activation": In(ActivationView()),
            "params": Out(ActivationUnit.params_layout_for(cfg)),
            "param_write": Out(PARAM_WRITE_LAYOUT),
            "dma_request": Out(stream.Signature(DMA_REQUEST_LAYOUT)),
            "dma_pending": Out(1),
            "dma_claim": Out(1),
            "dma_cancel": Out(1),
            "transfer": In(TransferView()),
            "weight_request": Out(stream.Signature(data.StructLayout(
                {"tile": FIELD_BITS, "tiles": FIELD_BITS}))),
            "weight_reader_busy": In(1),
            "matmul_busy": In(1),
            "acc_bank_busy": In(2),
            "activate_busy": In(1),
            "weight_stall": In(1),
            "vector_issued": In(1),
        })

    # --- the fetch stage -----------------------------------------------------------------

    def _program_memory(self, m):
        """The instruction memory; the program cannot change while it runs (the memory may
        be single-ported)."""
        m.submodules.program = program = ProgramMemory(self._cfg.program_depth)
        m.d.comb += [program.write_addr.eq(self.program_write.addr),
                     program.write_data.eq(self.program_write.data),
                     program.write_en.eq(self.program_write.en &
                                         (self.status.state != CoreState.RUNNING))]
        return program

    def _fetch(self, m, r):
        """The next instruction and its decode: the memory's output, decoded as it is
        loaded. Sets ``r.fetched`` (a view of the instruction) and ``r.decoded`` (its
        ``is_op`` by opcode, ``a_end``, ``b_end``, ``verdicts``, ``error`` and ``bad``)."""
        m.submodules.checks = checks = self.Checks(self._cfg)
        r.fetched = data.View(INSTRUCTION_LAYOUT, r.program.read_data)
        m.d.comb += checks.instruction.eq(r.fetched)
        r.decoded = {"is_op": opcode_bits(checks.is_op), "a_end": checks.a_end,
                     "b_end": checks.b_end, "verdicts": checks.verdicts,
                     "error": checks.error, "bad": checks.bad}

    def _tile_checks(self, r):
        """The checks that depend on the tiles in the Weight FIFO, as the next instruction
        is loaded, with the count of tiles it will find: the tiles after this cycle, when
        an instruction retires into the next one (the retiring READ_WEIGHTS adds its count,
        a switching MATMUL of one row takes one; both are kept from the load). Returns the
        two failures and the registers to update at the load."""
        tiles_added = Signal(len(r.tiles), name="tiles_added")
        takes_tile = Signal(name="takes_tile")
        tiles_then = Mux(r.priming, r.tiles,
                         r.tiles + tiles_added - (takes_tile & r.first_row))
        return tiles_then, [tiles_added.eq(r.fetched_tiles_added),
                            takes_tile.eq(r.fetched_takes_tile)]

    def _load(self, m, r):
        """What the sequencer keeps of an instruction as it is loaded (``r.load``), checks
        made: the instruction under way sits in a register (``instr``) with its one-hot
        opcode, its ends, its static error and the state checks' outcome."""
        cfg = self._cfg
        fetched, decoded = r.fetched, r.decoded
        tile_bits = len(r.tiles)
        r.fetched_takes_tile = (decoded["is_op"][Opcode.MATMUL] & fetched.flags[1] &
                                (fetched.count != 0))
        r.fetched_tiles_added = Mux(decoded["is_op"][Opcode.READ_WEIGHTS],
                                    fetched.count[:tile_bits], 0)
        tiles_then, tile_updates = self._tile_checks(r)
        overflows = decoded["is_op"][Opcode.READ_WEIGHTS] & (
            decoded["verdicts"].many_tiles |
            (tiles_then + fetched.count[:tile_bits] > tiles_held(cfg)))
        finds_no_tile = r.fetched_takes_tile & (tiles_then == 0)
        r.fails = Cat(*decoded["bad"]).any() | overflows | finds_no_tile
        r.instr = Signal(INSTRUCTION_LAYOUT, name="instr")
        r.is_op = {code: Signal(name=f"is_{code.name.lower()}") for code in Opcode}
        r.a_end, r.b_end = Signal(END_BITS, name="a_end"), Signal(END_BITS, name="b_end")
        r.count_zero = Signal(name="count_zero")
        # The row being issued is the instruction's last (a MATMUL's): kept in a register,
        # so that no adder or wide comparison sits before the issue decision.
        r.last_step = Signal(name="last_step")
        static_error = Signal(ErrorCode, name="static_error")
        static_bad_parts = Signal(2, name="static_bad_parts")
        weight_overflow, no_weights = Signal(name="weight_overflow"), Signal(name="no_weights")
        with m.If(r.load):
            m.d.sync += [r.instr.eq(fetched), r.a_end.eq(decoded["a_end"]),
                         r.b_end.eq(decoded["b_end"]), static_error.eq(decoded["error"]),
                         r.count_zero.eq(fetched.count == 0),
                         static_bad_parts.eq(Cat(*decoded["bad"])),
                         weight_overflow.eq(overflows), no_weights.eq(finds_no_tile),
                         *tile_updates, r.last_step.eq(fetched.count == 1),
                         *(r.is_op[code].eq(decoded["is_op"][code]) for code in Opcode)]
        # Per opcode, every static check comes before the state's.
        static_bad = Signal(name="static_bad")
        m.d.comb += static_bad.eq(static_bad_parts.any())
        r.error = Signal(ErrorCode, name="error")
        r.checks_failed = static_bad | weight_overflow | no_weights
        m.d.comb += r.error.eq(Mux(static_bad, static_error,
                                   Mux(weight_overflow, STATE_CHECKS[Opcode.READ_WEIGHTS],
                                       Mux(no_weights, STATE_CHECKS[Opcode.MATMUL],
                                           ErrorCode.NONE))))

    def _has_error(self, m, r):
        """Whether the instruction under way fails a check."""
        has_error = Signal(name="has_error")
        m.d.comb += has_error.eq(r.checks_failed)
        return has_error

    def _read_address(self, m, r):
        """The memory's output is the instruction after ``instr``: reading ``pc + 2`` when
        ``instr`` moves on keeps it so."""
        m.d.comb += r.program.read_addr.eq(r.pc + 2)

    # --- the parts -----------------------------------------------------------------------

    def _parts(self, m, r):
        """The hazard tracker, the parameter registers and the counters, wired."""
        cfg = self._cfg
        m.submodules.hazards = hazards = self.Hazards(cfg)
        current, upcoming = hazards.current, hazards.upcoming
        m.d.comb += [
            hazards.load.eq(r.load), hazards.priming.eq(r.priming),
            current.instr.eq(r.instr), current.a_end.eq(r.a_end), current.b_end.eq(r.b_end),
            current.count_zero.eq(r.count_zero),
            *(opcode_bits(current.is_op)[code].eq(r.is_op[code]) for code in Opcode),
            upcoming.instr.eq(r.fetched), upcoming.a_end.eq(r.decoded["a_end"]),
            upcoming.b_end.eq(r.decoded["b_end"]),
            *(opcode_bits(upcoming.is_op)[code].eq(r.decoded["is_op"][code])
              for code in Opcode),
            hazards.activate_busy.eq(self.activate_busy),
            hazards.acc_bank_busy.eq(self.acc_bank_busy),
        ]
        wiring.connect(m, wiring.flipped(self.transfer), hazards.transfer)
        wiring.connect(m, wiring.flipped(self.activation), hazards.activation)
        r.hazards = hazards

        handed_on = activation_unit_class(cfg).KEPT_PARAMETERS
        m.submodules.parameters = parameters = self.Parameters(cfg, handed_on=handed_on)
        instr = r.instr
        m.d.comb += [parameters.param.eq(instr.flags), parameters.lane.eq(instr.count),
                     parameters.value.eq(Cat(instr.a, instr.b)),
                     self.params.eq(parameters.params),
                     self.param_write.eq(parameters.param_write)]
        r.parameters = parameters

        m.submodules.counters = counters = self.Counters()
        m.d.comb += [counters.running.eq(r.running),
                     counters.vector_issued.eq(self.vector_issued),
                     counters.weight_stall.eq(self.weight_stall),
                     counters.retires.eq(r.retiring)]
        m.d.comb += [getattr(self.status, name).eq(getattr(counters, name))
                     for name in ("cycles", "mxu_busy_cycles", "weight_stall_cycles",
                                  "instructions")]
        r.counters = counters

    def _payloads(self, m, r):
        """Every command's payload comes straight from the instruction (only ``valid``
        waits for the checks), so the hazard logic is not on the payloads' paths."""
        instr = r.instr
        flags, a, b, n = instr.flags, instr.a, instr.b, instr.count
        m.d.comb += [
            self.dma_request.payload.kind.eq(dma_kind(r.is_op[Opcode.READ_HOST], flags[0],
                                                      select=Mux)),
            self.dma_request.payload.addr.eq(a),
            self.dma_request.payload.count.eq(n),
            self.weight_request.payload.tile.eq(a),
            self.weight_request.payload.tiles.eq(n),
            self.matmul.payload.ub_addr.eq(r.ub_row),
            self.matmul.payload.acc_addr.eq(r.acc_row),
            self.matmul.payload.accumulate.eq(flags[0]),
            self.matmul.payload.new_tile.eq(flags[1] & r.first_row),
            self.activate_request.payload.acc_addr.eq(a),
            self.activate_request.payload.ub_addr.eq(b),
            self.activate_request.payload.count.eq(n),
            self.activate_request.payload.acc_end.eq(r.a_end),
            self.activate_request.payload.ub_end.eq(r.b_end),
        ]

    # --- issue and retirement ------------------------------------------------------------

    def _live(self, m, r):
        """Per kind of instruction, whether the instruction under way is of that kind and
        may go: in Run, no abort, inside the memory, every check passed (and for those
        with rows, a count that is not 0)."""
        go, moves = Signal(name="go"), Signal(name="moves")
        is_op = r.is_op
        m.d.comb += [go.eq(r.in_run & ~self.control.abort & ~r.beyond_end & ~r.has_error),
                     moves.eq(go & ~r.count_zero)]
        r.go = go
        return {"halt": go & is_op[Opcode.HALT], "config": go & is_op[Opcode.CONFIG],
                "dma": moves & (is_op[Opcode.READ_HOST] | is_op[Opcode.WRITE_HOST]),
                "weights": moves & is_op[Opcode.READ_WEIGHTS],
                "matmul": moves & is_op[Opcode.MATMUL],
                "activate": moves & is_op[Opcode.ACTIVATE]}

    def _retires(self, r, handed_over):
        """Whether the instruction retires this cycle, as one flat expression of the checks
        and the handshakes, so that the fetch it starts is not at the end of a chain of
        decisions."""
        is_op = r.is_op
        counted = (is_op[Opcode.READ_HOST] | is_op[Opcode.WRITE_HOST] |
                   is_op[Opcode.READ_WEIGHTS] | is_op[Opcode.MATMUL] | is_op[Opcode.ACTIVATE])
        done_now = (is_op[Opcode.NOP] | (is_op[Opcode.SYNC] & r.all_idle) |
                    (r.count_zero & counted) |      # a zero count does nothing (CONFIG's
                    #                                 count is a lane)
                    (is_op[Opcode.CONFIG] & ~self.activate_busy))
        codes = {"dma": is_op[Opcode.READ_HOST] | is_op[Opcode.WRITE_HOST],
                 "weights": is_op[Opcode.READ_WEIGHTS], "matmul": is_op[Opcode.MATMUL],
                 "activate": is_op[Opcode.ACTIVATE]}
        return r.go & (done_now | (~r.count_zero & any_of(
            codes[kind] & handed for kind, handed in handed_over.items())))

    def _issue(self, m, r, live):
        """The handshakes, CONFIG's writes and the retirement of the instruction under way.
        ``is_op`` is one-hot, so each kind has its own branch, guarded only by one flag
        (``live``): short paths to the handshakes."""
        hazards, n = r.hazards, r.instr.count
        m.d.comb += [r.parameters.write.eq(live["config"] & ~self.activate_busy),
                     self.dma_claim.eq(self._dma_claim())]
        with m.If(live["dma"]):
            # Handed to the host DMA engine, which moves the rows while the sequencer goes
            # on; instructions that touch those rows wait for it.
            m.d.comb += self.dma_pending.eq(1)
            with m.If(hazards.dma_free):
                m.d.comb += self.dma_request.valid.eq(1)
        with m.If(live["weights"]):
            m.d.comb += self.weight_request.valid.eq(1)
            with m.If(self.weight_request.ready):
                m.d.sync += r.tiles.eq(r.tiles + n)
        with m.If(live["matmul"]):
            m.d.comb += self.matmul_pending.eq(1)
            with m.If(hazards.matmul_free):
                m.d.comb += self.matmul.valid.eq(1)
                with m.If(self.matmul.ready):
                    m.d.sync += [r.ub_row.eq(r.ub_row + 1), r.acc_row.eq(r.acc_row + 1),
                                 r.rows_left.eq(r.rows_left - 1), r.first_row.eq(0)]
                    with m.If(r.instr.flags[1] & r.first_row):
                        m.d.sync += r.tiles.eq(r.tiles - 1)
                    with m.If(~r.last_step):     # (retiring loads the next one's)
                        m.d.sync += r.last_step.eq(r.rows_left == 2)
        with m.If(live["activate"]):
            with m.If(hazards.activate_free):
                m.d.comb += self.activate_request.valid.eq(1)
        handed_over = {
            "dma": hazards.dma_free & self.dma_request.ready,
            "weights": self.weight_request.ready,
            "matmul": hazards.matmul_free & self.matmul.ready & r.last_step,
            "activate": hazards.activate_free & self.activate_request.ready}
        retire_now = Signal(name="retire_now")
        m.d.comb += retire_now.eq(self._retires(r, handed_over))
        with m.If(retire_now):
            self._retire(m, r)

    def _dma_claim(self):
        return self.dma_request.valid

    def _retire(self, m, r):
        m.d.sync += [r.pc.eq(r.pc + 1), r.first_row.eq(1),
                     r.beyond_end.eq(above(r.pc, self._cfg.program_depth - 2))]
        m.d.comb += [r.program.read_en.eq(1), r.load.eq(1), r.retiring.eq(1)]

    def _stop(self, m, r, state):
        """The run ends in ``state`` (in a state of the FSM)."""
        m.d.sync += self.status.state.eq(state)
        m.next = "Idle"

    def _start(self, m, r):
        """START in Idle: the run begins from ``start_pc``."""
        m.d.comb += [r.program.read_addr.eq(self.control.start_pc), r.program.read_en.eq(1)]

    def _fill(self, m, r, state):
        """The fill state ``state``: the first instruction waits on the memory's output
        (Fill), then goes into ``instr`` while the second comes out (Prime)."""
        if state == "Prime":
            m.d.comb += [r.program.read_addr.eq(r.pc + 1), r.program.read_en.eq(1),
                         r.load.eq(1), r.priming.eq(1)]

    def _flags_at_load(self, m, r):
        """Registers made at the load besides the instruction's (none in this form)."""

    # --- the whole -----------------------------------------------------------------------

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        r = _Registers()
        r.program = self._program_memory(m)
        r.pc = Signal(END_BITS, name="pc")      # index of the instruction in ``instr``
        # A MATMUL's rows are counted in registers of their own: the UB and accumulator
        # rows of the next vector and the rows left, so that no adder sits on the
        # command's payload and none before ``last_step``. The load sets them (at the end
        # of this description, so that it comes after the last row's count).
        r.ub_row, r.acc_row = Signal(FIELD_BITS, name="ub_row"), Signal(FIELD_BITS,
                                                                       name="acc_row")
        r.rows_left = Signal(FIELD_BITS, name="rows_left")
        r.first_row = Signal(name="first_row")      # no row of the instruction is done yet
        # weight tiles read but not yet switched in
        r.tiles = Signal(range(cfg.weight_fifo_tiles + 2), name="tiles")
        r.load = Signal(name="load")        # ``instr`` takes the next instruction
        r.priming = Signal(name="priming")  # the first instruction of a run is loaded
        r.retiring = Signal(name="retiring")
        r.beyond_end = Signal(name="beyond_end")    # pc is past the instruction memory
        r.running, r.in_run = Signal(name="running"), Signal(name="in_run")
        m.d.comb += r.running.eq(self.status.state == CoreState.RUNNING)
        self._fetch(m, r)
        self._load(m, r)
        r.has_error = self._has_error(m, r)
        r.all_idle = (~self.matmul_busy & ~self.activate_busy & ~self.weight_reader_busy &
                      ~self.transfer.busy)
        self._parts(m, r)
        self._payloads(m, r)
        m.d.comb += r.program.read_en.eq(0)
        self._read_address(m, r)
        self._run(m, r)
        with m.If(r.load):
            m.d.sync += [r.ub_row.eq(r.fetched.a), r.acc_row.eq(r.fetched.b),
                         r.rows_left.eq(r.fetched.count)]
            self._flags_at_load(m, r)
        return m

    def _run(self, m, r):
        """The run's states: Idle, the fill states, Run, and Drain after an error."""
        cfg = self._cfg
        live = self._live(m, r)
        with m.FSM(name="sequencer"):
            with m.State("Idle"):
                with m.If(self.control.start):
                    m.d.sync += [r.pc.eq(self.control.start_pc), r.first_row.eq(1),
                                 r.beyond_end.eq(above(self.control.start_pc,
                                                       cfg.program_depth - 1)),
                                 self.status.state.eq(CoreState.RUNNING),
                                 self.status.error.eq(ErrorCode.NONE), self.status.error_pc.eq(0)]
                    m.d.comb += r.counters.clear.eq(1)
                    self._start(m, r)
                    m.next = self.FILL_STATES[0]
            for k, state in enumerate(self.FILL_STATES):
                with m.State(state):
                    self._fill(m, r, state)
                    with m.If(self.control.abort):
                        m.d.comb += self.dma_cancel.eq(1)
                        self._stop(m, r, CoreState.IDLE)
                    with m.Else():
                        m.next = (*self.FILL_STATES, "Run")[k + 1]
            with m.State("Drain"):
                # Earlier instructions finish (host transfers included) before the error
                # shows, so that the host's view matches the golden model's.
                with m.If(self.control.abort):
                    m.d.comb += self.dma_cancel.eq(1)
                    self._stop(m, r, CoreState.ERROR)
                with m.Elif(r.all_idle):
                    self._stop(m, r, CoreState.ERROR)
            with m.State("Run"):
                m.d.comb += r.in_run.eq(1)
                with m.If(self.control.abort):
                    m.d.comb += self.dma_cancel.eq(1)
                    self._stop(m, r, CoreState.IDLE)
                with m.Elif(r.beyond_end):
                    m.d.sync += [self.status.error.eq(ErrorCode.PROGRAM_END),
                                 self.status.error_pc.eq(r.pc)]
                    m.next = "Drain"
                with m.Elif(r.has_error):
                    m.d.sync += [self.status.error.eq(r.error), self.status.error_pc.eq(r.pc)]
                    m.next = "Drain"
                with m.If(live["halt"] & r.all_idle):
                    m.d.comb += r.retiring.eq(1)
                    self._stop(m, r, CoreState.HALTED)
        self._issue(m, r, live)


class RegisteredSequencer(Sequencer):
    """:class:`Sequencer` for fast clocks: the same instructions, checks and cycles but one
    more fill cycle (:func:`fetch_fill_cycles`), with register stages wherever a late
    decision would otherwise reach many bits.

    - Each instruction's static checks are worked out as the host writes it and stored
      beside it (:data:`~tpuer.hw.instruction_checks.VERDICTS_LAYOUT`, :attr:`STORED_BITS`
      more bits a word). The next instruction waits already decoded in a register
      (``upcoming``), the one after it in the memory's own output register
      (``following``, a DP16KD's on an ECP5) while its ends and opcode are decoded, and
      the memory reads the one after that: the memory's slow output only ever goes into a
      register, the decoding has a cycle of its own, and the retirement enables a few block
      RAM pins, not a register of every bit.
    - The tiles the instruction will find, whether a check fails and, per kind of
      instruction, whether it may go (``armed``) are registers made at the load, so that
      the handshakes and the retirement start from one flag each; the fill states' reads
      and the first load come from flags too (``filling``, ``in_prime``), not a decoder of
      the state; the memory's read address is a counter of its own (``fetch_addr``).
    - Its parts are the registered forms:
      :class:`~tpuer.hw.hazard_tracker.RegisteredHazardTracker`,
      :class:`~tpuer.hw.parameter_registers.RegisteredParameterRegisters` (``params``
      changes a cycle later) and :class:`~tpuer.hw.counters.PipelinedCounters`.
    - ``dma_claim`` is ``dma_pending``, which comes from registers here: the DMA
      engine's request is chosen while the sequencer's transfer is pending, hazards or
      not, so that the late handshake does not choose the payload the engine adds and
      stores.
    """

    Hazards = RegisteredHazardTracker
    Parameters = RegisteredParameterRegisters
    Counters = PipelinedCounters
    FILL_STATES = ("Fill", "Decode", "Prime")
    STORED_BITS = VERDICTS_LAYOUT.size
    #: The kinds of instruction that have an armed flag.
    ARMED = ("halt", "config", "sync", "quick", "dma", "weights", "matmul", "activate")

    def _program_memory(self, m):
        """The instruction memory, each word with its instruction's checks. They are worked
        out in the cycle of the host's write, and the word is written in the next (from
        registers, so that no carry chain of the checks ends at the block RAM); so a START
        must come two cycles after a program write at the earliest (the host interface's
        come later)."""
        m.submodules.write_checks = write_checks = self.Checks(self._cfg)
        m.d.comb += write_checks.instruction.eq(self.program_write.data)
        m.submodules.program = program = ProgramMemory(
            self._cfg.program_depth, registered_output=True, extra_bits=self.STORED_BITS)
        write_addr = Signal.like(self.program_write.addr, name="program_write_at",
                                 reset_less=True)
        write_word = Signal(INSTRUCTION_BITS + self.STORED_BITS, name="program_write_word",
                            reset_less=True)
        write_pending = Signal(name="program_write_pending")
        m.d.sync += [write_addr.eq(self.program_write.addr),
                     write_word.eq(Cat(self.program_write.data, write_checks.verdicts)),
                     write_pending.eq(self.program_write.en)]
        m.d.comb += [program.write_addr.eq(write_addr), program.write_data.eq(write_word),
                     program.write_en.eq(write_pending &
                                         (self.status.state != CoreState.RUNNING)),
                     program.output_en.eq(program.read_en)]
        return program

    def _fetch(self, m, r):
        """``upcoming``, decoded as it was loaded from ``following``: its ends and one-hot
        opcode decoded there, its checks as stored beside it, each kept in a register of
        its own; the error code and the flags are made from those registers, so that no
        chain of multiplexers follows the range checks' carry chains within the cycle."""
        m.submodules.checks = checks = self.Checks(self._cfg)
        following = r.program.read_data[:INSTRUCTION_BITS]
        following_verdicts = r.program.read_data[INSTRUCTION_BITS:]
        m.d.comb += checks.instruction.eq(following)
        upcoming = Signal(INSTRUCTION_BITS, name="upcoming")
        kept = {"a_end": Signal(END_BITS, name="upcoming_a_end"),
                "b_end": Signal(END_BITS, name="upcoming_b_end"),
                "is_op": Signal(OPCODE_LAYOUT, name="upcoming_is_op"),
                "verdicts": Signal(VERDICTS_LAYOUT, name="upcoming_verdicts")}
        r.fill_upcoming = [upcoming.eq(following), kept["a_end"].eq(checks.a_end),
                           kept["b_end"].eq(checks.b_end), kept["is_op"].eq(checks.is_op),
                           kept["verdicts"].eq(following_verdicts)]
        r.fetched = data.View(INSTRUCTION_LAYOUT, upcoming)
        is_op = opcode_bits(kept["is_op"])
        error, bad = judge(is_op, kept["verdicts"])
        r.decoded = {"is_op": is_op, "a_end": kept["a_end"], "b_end": kept["b_end"],
                     "verdicts": kept["verdicts"], "error": error, "bad": bad}
        with m.If(r.load):
            m.d.sync += r.fill_upcoming

    def _tile_checks(self, r):
        """As :meth:`Sequencer._tile_checks`, but the count the tiles will have once the
        instruction under way is done is itself a register (``tiles_after``), made at the
        load: one adder before the checks, not three."""
        tiles_after = Signal(len(r.tiles), name="tiles_after")
        tiles_then = Mux(r.priming, r.tiles, tiles_after)
        return tiles_then, [tiles_after.eq(tiles_then + r.fetched_tiles_added -
                                           r.fetched_takes_tile)]

    def _has_error(self, m, r):
        """Whether a check fails is a register of its own (its parts are registers by
        now), so that the issue decision starts from one flag."""
        has_error = Signal(name="has_error")
        with m.If(r.load):
            m.d.sync += has_error.eq(r.fails)
        return has_error

    def _read_address(self, m, r):
        """The memory's output is the instruction three after ``instr``: its address is a
        register of its own, counted up with every read of a run."""
        r.fetch_addr = Signal(END_BITS, name="fetch_addr")
        m.d.comb += r.program.read_addr.eq(r.fetch_addr)
        r.filling, r.in_prime = Signal(name="filling"), Signal(name="in_prime")
        with m.If(r.filling):
            m.d.comb += r.program.read_en.eq(1)
            m.d.sync += r.fetch_addr.eq(r.fetch_addr + 1)
        with m.If(r.in_prime):
            m.d.comb += [r.load.eq(1), r.priming.eq(1)]

    def _live(self, m, r):
        """Each armed flag with no abort under way. (The armed flags are clear in every
        state but Run: made so at the load, and cleared as the core stops.)"""
        r.armed = {kind: Signal(name=f"{kind}_armed") for kind in self.ARMED}
        return {kind: ~self.control.abort & flag for kind, flag in r.armed.items()}

    def _dma_claim(self):
        return self.dma_pending

    def _retires(self, r, handed_over):
        armed = r.armed
        return ~self.control.abort & (
            armed["quick"] | (armed["sync"] & r.all_idle) |
            (armed["config"] & ~self.activate_busy) |
            any_of(armed[kind] & handed for kind, handed in handed_over.items()))

    def _retire(self, m, r):
        super()._retire(m, r)
        m.d.sync += r.fetch_addr.eq(r.fetch_addr + 1)

    def _stop(self, m, r, state):
        super()._stop(m, r, state)
        m.d.sync += [*(flag.eq(0) for flag in r.armed.values()), r.filling.eq(0),
                     r.in_prime.eq(0)]

    def _start(self, m, r):
        super()._start(m, r)
        m.d.sync += [r.fetch_addr.eq(self.control.start_pc + 1), r.filling.eq(1)]

    def _fill(self, m, r, state):
        """The first instruction into ``following``; then into ``upcoming``, decoded, while
        the second goes into ``following``; then into ``instr`` while the second goes into
        ``upcoming``, the third into ``following`` and the fourth onto the memory's
        output. (``filling`` reads meanwhile, ``in_prime`` loads.)"""
        if state == "Decode":
            m.d.sync += [*r.fill_upcoming, r.in_prime.eq(1)]   # (an abort clears it)
        elif state == "Prime":
            m.d.sync += [r.filling.eq(0), r.in_prime.eq(0)]

    def _flags_at_load(self, m, r):
        """The armed flags. (An abort as the first instruction is loaded stops the core:
        none armed.)"""
        fetched, is_next = r.fetched, r.decoded["is_op"]
        beyond_last = above(r.pc, self._cfg.program_depth - 2)
        clear = ~r.fails & ~Mux(r.priming, r.beyond_end, beyond_last) & ~self.control.abort
        moving = clear & (fetched.count != 0)
        rows_op = (is_next[Opcode.READ_HOST] | is_next[Opcode.WRITE_HOST] |
                   is_next[Opcode.READ_WEIGHTS] | is_next[Opcode.MATMUL] |
                   is_next[Opcode.ACTIVATE])
        armed = r.armed
        m.d.sync += [
            armed["halt"].eq(clear & is_next[Opcode.HALT]),
            armed["config"].eq(clear & is_next[Opcode.CONFIG]),
            armed["sync"].eq(clear & is_next[Opcode.SYNC]),
            # a NOP, or a count of 0 rows (CONFIG's count is a lane): done at once
            armed["quick"].eq(clear & (is_next[Opcode.NOP] |
                                       ((fetched.count == 0) & rows_op))),
            armed["dma"].eq(moving & (is_next[Opcode.READ_HOST] |
                                      is_next[Opcode.WRITE_HOST])),
            armed["weights"].eq(moving & is_next[Opcode.READ_WEIGHTS]),
            armed["matmul"].eq(moving & is_next[Opcode.MATMUL]),
            armed["activate"].eq(moving & is_next[Opcode.ACTIVATE]),
        ]


class _Registers:
    """The signals the parts of a sequencer's description share while it is made."""
