"""The CISC instruction sequencer: program memory, decoder, hazard checks and issue."""

import functools
import operator

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..isa import (ALL_LANES, CONFIG_DEFAULTS, DEFINED_FLAGS, DMA_HAZARDS, INSTRUCTION_BITS,
                   INSTRUCTION_LAYOUT, RANGE_CHECKS, STATE_CHECKS, ConfigParam, CoreState,
                   DMAKind, ErrorCode, Opcode, WriteHostFlag, config_ranges, dma_kind,
                   kind_in, memory_depths, tiles_held)
from .activation import PARAM_WRITE_LAYOUT, ActivationUnit
from .arith import above, any_of, outside
from .activation_issuer import ACTIVATE_REQUEST_LAYOUT
from .datapath import command_layouts
from .host_dma import DMA_REQUEST_LAYOUT
from .program_memory import ProgramMemory

__all__ = ["Sequencer", "STATUS_SHAPES", "STORED_CHECK_BITS", "control_shapes",
           "fetch_fill_cycles", "program_word_bits"]

#: The status register and the performance counters, as the sequencer drives them and the
#: core and the host interface pass them on.
STATUS_SHAPES = {"state": CoreState, "error": ErrorCode, "error_pc": 17, "cycles": 32,
                 "mxu_busy_cycles": 32, "weight_stall_cycles": 32, "instructions": 32}


#: Bits the instruction memory keeps beside each instruction with ``cfg.control_registers``
#: (:meth:`Sequencer._stored_checks`): three flags and the nine range and value checks.
STORED_CHECK_BITS = 12


def program_word_bits(cfg):
    """Bits of a word of the instruction memory: the instruction, and with
    ``cfg.control_registers`` its stored checks."""
    return INSTRUCTION_BITS + (STORED_CHECK_BITS if cfg.control_registers else 0)


def fetch_fill_cycles(cfg):
    """Cycles between ``start`` and the first instruction's first step: the fetch stage
    fills (three with ``cfg.control_registers``, which decodes each instruction a cycle
    before it is loaded; two without)."""
    return 3 if cfg.control_registers else 2


def control_shapes(cfg):
    """The host's control of the sequencer: the instruction memory's write port, start and
    abort."""
    return {"program_write_addr": cfg.program_addr_width,
            "program_write_data": INSTRUCTION_BITS, "program_write_en": 1,
            "start": 1, "start_pc": 16, "abort_run": 1}


class Sequencer(wiring.Component):
    """Runs a program from its instruction memory, one instruction after another, driving
    the datapath's command streams.

    Every instruction is checked before it does anything; a bad one stops the core in state
    ``ERROR`` with an :class:`~tpuer.isa.ErrorCode` and its index (``error_pc``), so the
    core never writes outside a memory and never waits for a weight tile that no
    READ_WEIGHTS asked for. Hazards are kept in hardware, conservatively: ACTIVATE and
    WRITE_HOST of accumulators wait until every issued matrix row bound for the same half of
    the accumulator memory has been written; READ_HOST, WRITE_HOST and CONFIG wait until
    every activated row has been written; MATMUL waits while an activation still has to read
    its accumulator rows or write UB rows it reads; MATMUL and ACTIVATE wait while the host
    DMA engine moves rows they read or write; SYNC and HALT wait for everything, weight
    reads and host transfers included. READ_HOST and WRITE_HOST retire once the DMA engine
    takes them, and ACTIVATE once the activation issuer
    (:class:`~tpuer.hw.activation_issuer.ActivationIssuer`) does, so host transfers and
    requantisation overlap products. MATMUL rows stream one per cycle and consecutive
    instructions follow without a gap: the instruction under way is decoded from a register
    while the next one waits in another (without ``cfg.control_registers``, on the memory's
    output, and is decoded as it is loaded) and the memory reads the one after; with
    ``cfg.control_registers`` the next one waits already decoded, and the one after it in a
    third register (the instruction memory's own output register) while it is decoded; its
    static checks were worked out as the host wrote it and are stored beside it
    (:data:`STORED_CHECK_BITS` more bits a word). :func:`fetch_fill_cycles` cycles fill
    this stage as a run begins.

    Members
    -------
    program_write_addr, program_write_data, program_write_en : In
        The host's port into the instruction memory (:class:`ProgramMemory`); ignored
        while a program runs.
    start, start_pc : In
        A one-cycle ``start`` runs from ``start_pc`` (from any state but ``RUNNING``); it
        clears the error and the counters.
    abort_run : In
        Stops a running program after the current step (state ``IDLE``) and cancels the
        host transfer under way.
    state, error, error_pc : Out
        The status register.
    cycles, mxu_busy_cycles, weight_stall_cycles, instructions : Out(32)
        Performance counters of the last run: cycles running, cycles a vector entered the
        matrix unit, cycles a vector waited for its weight tile, instructions retired.
    matmul, activate_request, params, param_write : Out
        Commands to the datapath (see :class:`Datapath`); ``matmul_pending`` is high while
        a MATMUL with rows left is under way, whether or not its row waits on a hazard (a
        superset of ``matmul.valid``, from registers). With a lane-serial activation unit
        (``cfg.activation_steps``), CONFIG writes biases and multipliers on
        ``param_write`` instead of into ``params``. ``params`` changes the cycle after
        the CONFIG retires (with ``cfg.control_registers``, a cycle later);
        ``param_write`` is valid while it retires.
    dma_request : Out(stream)
        READ_HOST and WRITE_HOST, handed to the host DMA engine
        (:class:`~tpuer.hw.host_dma.HostDMA`); ``dma_pending`` is high while one waits to
        be handed over, whether or not it waits on a hazard (a superset of
        ``dma_request.valid``, with ``cfg.control_registers`` from registers);
        ``dma_busy``, ``dma_kind``, ``dma_low``, ``dma_high`` In: the transfer under way,
        for the hazard checks.
    weight_request : Out(stream)
        READ_WEIGHTS requests to the weight reader; ``weight_reader_busy`` In.
    matmul_busy, activate_busy, weight_stall, vector_issued : In
        The datapath's status (``activate_busy`` includes the activation issuer).
    issuer_busy, issuer_acc_low, issuer_acc_high, issuer_ub_low, issuer_ub_high : In
        The ACTIVATE under way in the activation issuer, for the hazard checks.
    """

    def __init__(self, cfg):
        self._cfg = cfg
        layouts = command_layouts(cfg)
        super().__init__({
            **{name: In(shape) for name, shape in control_shapes(cfg).items()},
            **{name: Out(shape) for name, shape in STATUS_SHAPES.items()},
            "matmul": Out(stream.Signature(layouts["matmul"])),
            "matmul_pending": Out(1),
            "activate_request": Out(stream.Signature(ACTIVATE_REQUEST_LAYOUT)),
            "issuer_busy": In(1),
            "issuer_acc_low": In(17), "issuer_acc_high": In(17),
            "issuer_ub_low": In(17), "issuer_ub_high": In(17),
            # After reset: the ISA's defaults (a multiplier of ~1.0, everything else 0).
            "params": Out(ActivationUnit.params_layout_for(cfg),
                          init={"multiplier": [CONFIG_DEFAULTS[ConfigParam.MULTIPLIER]] *
                                cfg.cols}),
            "param_write": Out(PARAM_WRITE_LAYOUT),
            "dma_request": Out(stream.Signature(DMA_REQUEST_LAYOUT)),
            "dma_pending": Out(1),
            "dma_cancel": Out(1),
            "dma_busy": In(1),
            "dma_kind": In(DMAKind),
            "dma_low": In(17),
            "dma_high": In(17),
            "weight_request": Out(stream.Signature(data.StructLayout({"tile": 16,
                                                                      "tiles": 16}))),
            "weight_reader_busy": In(1),
            "matmul_busy": In(1),
            "acc_bank_busy": In(2),
            "activate_busy": In(1),
            "weight_stall": In(1),
            "vector_issued": In(1),
        })

    def _static_decode(self, m, instr):
        """What can be told from instruction word ``instr`` alone: ``is_op`` (a bit per
        :class:`Opcode`), the ends ``a_end = a + count`` and ``b_end = b + count``, and
        ``error``, the first failing check that does not depend on the core's state (the
        ones that do are in :meth:`elaborate`), and ``bad``, two flags that say whether
        there is one."""
        cfg = self._cfg
        op, flags, a, b, n = instr.opcode, instr.flags, instr.a, instr.b, instr.count
        is_op = {code: op == code.value for code in Opcode}
        defined_flags = Signal(4)     # as wide as the field, so ~ covers every bit
        defined = 0                   # CONFIG's flags name a parameter: checked apart
        for code, code_flags in reversed(DEFINED_FLAGS.items()):
            if code is not Opcode.CONFIG:
                defined = Mux(is_op[code], code_flags, defined)
        m.d.comb += defined_flags.eq(defined)
        a_end, b_end = a + n, b + n
        ends, depths = {"a": a_end, "b": b_end}, memory_depths(cfg)
        from_acc = flags[WriteHostFlag.FROM_ACC.bit_length() - 1]
        applies = {None: None, True: from_acc, False: ~from_acc}

        def range_check(check):
            over = above(ends[check.field], depths[check.memory])
            condition = applies[check.from_acc]
            return (over if condition is None else condition & over), check.error

        value = Cat(a, b).as_signed()
        # Each parameter's range against constants (cheap: mostly sign-extension checks),
        # then the one the flags name.
        config_out_of_range = Signal()
        with m.Switch(flags):
            for p, (low, high) in config_ranges(cfg).items():
                with m.Case(int(p)):
                    m.d.comb += config_out_of_range.eq(outside(value, low, high))
        # The opcode is one-hot (or no opcode at all): each opcode's checks in parallel,
        # in their order (:data:`~tpuer.isa.RANGE_CHECKS`), then the checks every
        # instruction has before them.
        checks = {code: [range_check(check) for check in code_checks]
                  for code, code_checks in RANGE_CHECKS.items()}
        checks[Opcode.CONFIG] = [(((n != ALL_LANES) & above(n, cfg.cols - 1)) |
                                  config_out_of_range, ErrorCode.BAD_CONFIG)]
        bad_flags = ((is_op[Opcode.CONFIG] & (flags > DEFINED_FLAGS[Opcode.CONFIG])) |
                     (~is_op[Opcode.CONFIG] & ((flags & ~defined_flags) != 0)))
        no_opcode = ~Cat(*(is_op[code] for code in Opcode)).any()
        bad_field = (instr.reserved != 0) | bad_flags
        chosen, bad = self._judge(is_op, checks, no_opcode, bad_field)
        return {"is_op": is_op, "a_end": a_end, "b_end": b_end, "error": chosen, "bad": bad,
                "checks": checks, "no_opcode": no_opcode, "bad_field": bad_field,
                "many_tiles": above(n, tiles_held(cfg))}

    @staticmethod
    def _stored_checks(decoded):
        """The bits of a :meth:`_static_decode` that the instruction memory keeps beside an
        instruction (with ``cfg.control_registers``): ``many_tiles``, ``no_opcode``,
        ``bad_field`` and every check's outcome, in that order."""
        return [decoded["many_tiles"], decoded["no_opcode"], decoded["bad_field"],
                *(fails for code_checks in decoded["checks"].values()
                  for fails, _ in code_checks)]

    @staticmethod
    def _unpack_checks(decoded, bits):
        """What :meth:`_stored_checks` stored, from ``bits``: a dictionary like a
        :meth:`_static_decode` (``decoded``, the instruction's own, gives the layout)."""
        it = iter(range(len(bits)))
        take = lambda: bits[next(it)]
        unpacked = {key: take() for key in ("many_tiles", "no_opcode", "bad_field")}
        unpacked["checks"] = {code: [(take(), error) for _, error in code_checks]
                              for code, code_checks in decoded["checks"].items()}
        return unpacked

    @staticmethod
    def _judge(is_op, checks, no_opcode, bad_field):
        """The static error of an instruction from its checks (``checks``: per opcode, its
        ``(fails, ErrorCode)`` pairs in order; ``no_opcode``; ``bad_field``): the first
        failing check's code, and ``bad``, two flags that say whether there is one."""
        opcode_error = 0
        for code, code_checks in checks.items():
            first_failing = ErrorCode.NONE
            for fails, error in reversed(code_checks):
                first_failing = Mux(fails, error, first_failing)
            opcode_error = opcode_error | Mux(is_op[code], first_failing, ErrorCode.NONE)
        chosen = Mux(no_opcode, ErrorCode.BAD_OPCODE,
                     Mux(bad_field, ErrorCode.BAD_FIELD, opcode_error))
        # Whether any check fails, in two ORs of the conditions (the instruction's form;
        # its ranges and values): no chain of multiplexers between the range checks' carry
        # chains and the issue decision.
        bad = (no_opcode | bad_field, any_of(is_op[code] & fails
                                             for code, code_checks in checks.items()
                                             for fails, _ in code_checks))
        return chosen, bad

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        # The register stages that fast clocks need (``cfg.control_registers``) are
        # marked ``fast`` below.
        fast = bool(cfg.control_registers)
        # With ``fast``, the memory's own output register holds ``following`` (below), and
        # each instruction's static checks are worked out as it is written and stored
        # beside it (``stored_checks``): the decode that follows the memory's output is
        # then only the ends' adders and the opcode's one-hot bits.
        written = data.View(INSTRUCTION_LAYOUT, self.program_write_data)
        stored_checks = self._stored_checks(self._static_decode(m, written)) if fast else []
        assert len(Cat(*stored_checks)) == program_word_bits(cfg) - INSTRUCTION_BITS
        m.submodules.program = program = ProgramMemory(
            cfg.program_depth, registered_output=fast, extra_bits=len(Cat(*stored_checks)))
        # The program cannot change while it runs (the memory may be single-ported).
        m.d.comb += [program.write_addr.eq(self.program_write_addr),
                     program.write_data.eq(Cat(self.program_write_data, *stored_checks)),
                     program.write_en.eq(self.program_write_en &
                                         (self.state != CoreState.RUNNING))]

        pc = Signal(17)                 # index of the instruction in ``instr``
        # A MATMUL's rows are counted in registers of their own: the UB and accumulator
        # rows of the next vector and the rows left, so that no adder sits on the
        # command's payload and none before ``last_step``. The instruction's load sets
        # them (at the end of this description, so that it comes after the last row's
        # count).
        # (``rows_left`` is named explicitly: Amaranth's name tracer does not name it once
        # a nested function closes over it. Naming the other two as well would rename
        # them in the netlist of every board.)
        ub_row, acc_row, rows_left = Signal(16), Signal(16), Signal(16, name="rows_left")
        first_row = Signal()            # no row of the instruction is done yet
        tiles = Signal(range(cfg.weight_fifo_tiles + 2))   # read but not yet switched in

        # --- fetch and static decode -----------------------------------------------------
        # The instruction under way sits in a register (``instr``) with what can be told
        # from it alone: the one-hot opcode, the ends ``a + n`` and ``b + n`` and the
        # static error. The next instruction waits in a register (``upcoming``) with the
        # same already decoded, the one after it in another (``following``, the memory's
        # own output register) while it is decoded, and the one after that is read into
        # the memory: so an instruction retires into the next without a gap while the
        # memory's slow output only ever goes into a register and the decoding has a
        # cycle of its own. Without ``fast`` (a small FPGA
        # at a slow clock) the memory's output itself holds the next instruction (it holds
        # still while nothing is read), and the decoding starts from there as it is
        # loaded: the fetch keeps its timing, two cycles nearer to the memory.
        if fast:
            upcoming = Signal(INSTRUCTION_BITS)
            # The memory's output register (on an ECP5 the DP16KD's own), which takes the
            # word read whenever the memory reads the next: so the retirement enables a
            # few block RAM pins, not a register of every bit.
            following = program.read_data[:INSTRUCTION_BITS]
            following_checks = program.read_data[INSTRUCTION_BITS:]
            m.d.comb += program.output_en.eq(program.read_en)
        else:
            upcoming = program.read_data
        ahead = 3 if fast else 1        # the memory's output is pc + ahead
        fetched = data.View(INSTRUCTION_LAYOUT, upcoming)
        load = Signal()                 # ``instr`` takes ``upcoming``, which takes the memory
        instr = Signal(INSTRUCTION_LAYOUT)
        is_op = {code: Signal(name=f"is_{code.name.lower()}") for code in Opcode}
        a_end, b_end = Signal(17), Signal(17)
        static_error = Signal(ErrorCode)
        count_zero = Signal()            # the count is 0
        # The checks that depend on the tiles in the Weight FIFO, made as the instruction
        # is loaded (with the count of tiles it will find), so that the issue decision
        # starts from registers: READ_WEIGHTS would overflow the FIFO; a switching MATMUL
        # finds no tile.
        weight_overflow = Signal(name="weight_overflow")
        no_weights = Signal(name="no_weights")
        static_bad = Signal()            # static_error is not NONE: one of two registers
        static_bad_parts = Signal(2)
        m.d.comb += static_bad.eq(static_bad_parts.any())
        priming = Signal()               # the first instruction of a run is loaded
        # The row being issued is the instruction's last (a MATMUL's): kept in a register,
        # so that no adder or wide comparison sits before the issue decision.
        last_step = Signal()
        # Which halves of the accumulator memory rows ``a...`` touch.
        a_in_low_half, a_in_high_half = Signal(), Signal()
        acc_watch = Signal(2)            # the same, with ``fast``, where they matter (below)
        half = cfg.acc_depth // 2
        if fast:
            # ``upcoming``'s static decode, made as it was loaded: its ends and one-hot
            # opcode from ``following``, its checks as stored beside it.
            predecoded = self._static_decode(m, data.View(INSTRUCTION_LAYOUT, following))
            stored = self._unpack_checks(predecoded, following_checks)
            # Its checks are kept one by one, and the error code and the flags made from
            # them as it is loaded, so that no chain of multiplexers follows the range
            # checks' carry chains within the cycle.
            fill_upcoming = [upcoming.eq(following)]

            def kept(value, name):
                register = Signal(len(value), name=f"upcoming_{name}")
                fill_upcoming.append(register.eq(value))
                return register

            decoded = {key: kept(predecoded[key], key) for key in ("a_end", "b_end")}
            decoded.update({key: kept(stored[key], key)
                            for key in ("many_tiles", "no_opcode", "bad_field")})
            decoded["is_op"] = {code: kept(predecoded["is_op"][code],
                                           f"is_{code.name.lower()}") for code in Opcode}
            decoded["checks"] = {
                code: [(kept(fails, f"{code.name.lower()}_check{k}"), error)
                       for k, (fails, error) in enumerate(code_checks)]
                for code, code_checks in stored["checks"].items()}
            decoded["error"], decoded["bad"] = self._judge(
                decoded["is_op"], decoded["checks"], decoded["no_opcode"], decoded["bad_field"])
        else:
            decoded = self._static_decode(m, fetched)
        # The tiles after this cycle, when an instruction retires into the next one: the
        # retiring READ_WEIGHTS adds its count (``tiles_added``), a switching MATMUL
        # (``takes_tile``) of one row takes one. Both are kept from the load. (Checked
        # instructions only, so a count of tiles is small.) With ``fast``, the count the
        # tiles will have once the instruction under way is done is itself a register
        # (``tiles_after``), made at the load: one adder before the checks, not three.
        tile_bits = len(tiles)
        fetched_tiles = fetched.count[:tile_bits]
        fetched_takes_tile = (decoded["is_op"][Opcode.MATMUL] & fetched.flags[1] &
                              (fetched.count != 0))
        fetched_tiles_added = Mux(decoded["is_op"][Opcode.READ_WEIGHTS], fetched_tiles, 0)
        if fast:
            tiles_after = Signal(tile_bits)
            tiles_then = Mux(priming, tiles, tiles_after)
            tile_updates = [tiles_after.eq(tiles_then + fetched_tiles_added -
                                           fetched_takes_tile)]
        else:
            tiles_added = Signal(tile_bits)
            takes_tile = Signal()
            tiles_then = Mux(priming, tiles, tiles + tiles_added - (takes_tile & first_row))
            tile_updates = [tiles_added.eq(fetched_tiles_added),
                            takes_tile.eq(fetched_takes_tile)]
        overflows = decoded["is_op"][Opcode.READ_WEIGHTS] & (
            decoded["many_tiles"] | (tiles_then + fetched_tiles > tiles_held(cfg)))
        finds_no_tile = fetched_takes_tile & (tiles_then == 0)
        fails = Cat(*decoded["bad"]).any() | overflows | finds_no_tile
        has_error = Signal()            # some check fails
        with m.If(load):
            if fast:
                # Whether a check fails is a register of its own (its parts are registers
                # by now), so that the issue decision starts from one flag.
                m.d.sync += [*fill_upcoming, has_error.eq(fails)]
            m.d.sync += [instr.eq(fetched), a_end.eq(decoded["a_end"]),
                         b_end.eq(decoded["b_end"]),
                         static_error.eq(decoded["error"]), count_zero.eq(fetched.count == 0),
                         static_bad_parts.eq(Cat(*decoded["bad"])),
                         weight_overflow.eq(overflows),
                         no_weights.eq(finds_no_tile),
                         *tile_updates,
                         last_step.eq(fetched.count == 1),
                         a_in_low_half.eq(~above(fetched.a, half - 1)),
                         a_in_high_half.eq(above(decoded["a_end"], half))]
            m.d.sync += [is_op[code].eq(decoded["is_op"][code]) for code in Opcode]

        # --- dynamic checks --------------------------------------------------------------
        flags, a, b, n = instr.flags, instr.a, instr.b, instr.count
        from_acc = flags[0]
        switch = flags[1]
        dma_op = is_op[Opcode.READ_HOST] | is_op[Opcode.WRITE_HOST]   # handed to the DMA
        value = Cat(a, b).as_signed()
        lane = n
        param = flags
        error = Signal(ErrorCode)
        dynamic_error = Mux(weight_overflow, STATE_CHECKS[Opcode.READ_WEIGHTS],
                            Mux(no_weights, STATE_CHECKS[Opcode.MATMUL], ErrorCode.NONE))
        # Per opcode, every static check comes before the dynamic one.
        m.d.comb += error.eq(Mux(static_bad, static_error, dynamic_error))
        if not fast:
            m.d.comb += has_error.eq(static_bad | weight_overflow | no_weights)

        # --- status and counters ---------------------------------------------------------
        running = Signal()
        m.d.comb += running.eq(self.state == CoreState.RUNNING)
        # Each counter adds a one-bit count every cycle (an adder's carry-in, no hold
        # multiplexer); START clears them, later in this description, so it comes first.
        # With ``fast``, the counts decided late in the cycle (an instruction retires, a
        # vector enters the matrix unit or waits for its tile) go into a register first
        # (``pending``) and into the total a cycle later, so that no carry waits for them;
        # the counter shows the total plus the pending count, the same value.
        # With ``fast`` START does not clear the totals itself (a late decision that reached
        # every bit): it sets ``fresh``, and in the next cycle the totals count as 0, both
        # as shown and as added to (no count is pending after a cycle outside RUNNING).
        retiring = Signal()             # an instruction retires this cycle
        fresh = Signal()                # START was taken in the cycle before (``fast``)
        counter_registers = []          # the registers START clears
        if fast:
            m.d.sync += fresh.eq(0)
            cycles_total = Signal(len(self.cycles), name="cycles_total")
            m.d.sync += cycles_total.eq(Mux(fresh, 0, cycles_total) + running)
            m.d.comb += self.cycles.eq(Mux(fresh, 0, cycles_total))
        else:
            m.d.sync += self.cycles.eq(self.cycles + running)
            counter_registers.append(self.cycles)
        for counter, event in ((self.mxu_busy_cycles, running & self.vector_issued),
                               (self.weight_stall_cycles, running & self.weight_stall),
                               (self.instructions, retiring)):
            if not fast:
                m.d.sync += counter.eq(counter + event)
                counter_registers.append(counter)
                continue
            total = Signal(len(counter), name=f"{counter.name}_total")
            pending = Signal(name=f"{counter.name}_pending")
            total_now = Mux(fresh, 0, total)
            m.d.sync += [total.eq(total_now + pending), pending.eq(event)]
            m.d.comb += counter.eq(total_now + pending)

        params = self.params
        # CONFIG says which parameters to write, a bit per parameter and lane. With
        # ``fast`` the bits and the value are registers, and the parameters are written a
        # cycle after the CONFIG retires: the decision to retire it reaches a handful of
        # flip-flops, not the enables of every parameter bit. (A row that an ACTIVATE
        # after it requantises reaches the parameters cycles later.)
        config_lanes = {p: Signal(cfg.cols, name=f"config_{p.name.lower()}_lanes")
                        for p in (ConfigParam.BIAS, ConfigParam.MULTIPLIER, ConfigParam.SHIFT)}
        config_zero_point = Signal(name="config_zero_point")
        config_relu = Signal(name="config_relu")
        config_bits = (*config_lanes.values(), config_zero_point, config_relu)
        if fast:
            config_value = Signal.like(value, name="config_value")
            config_domain = "sync"
            m.d.sync += [config_value.eq(value), *(bits.eq(0) for bits in config_bits)]
        else:
            config_value = value
            config_domain = "comb"
        for p, target in ((ConfigParam.BIAS, params.bias),
                          (ConfigParam.MULTIPLIER, params.multiplier),
                          (ConfigParam.SHIFT, params.shift)):
            for index in range(cfg.cols):
                with m.If(config_lanes[p][index]):
                    m.d.sync += target[index].eq(config_value)
        with m.If(config_zero_point):
            m.d.sync += params.zero_point.eq(config_value)
        with m.If(config_relu):
            m.d.sync += params.relu.eq(config_value[0])
        all_idle = (~self.matmul_busy & ~self.activate_busy & ~self.weight_reader_busy &
                    ~self.dma_busy)

        # The hazard checks matter only for an instruction that passed its range checks,
        # against transfers that passed theirs: every row number and end is then at most
        # the larger memory's depth, so they compare only that many bits.
        row_bits = cfg.row_bits

        def overlaps(rows, low, high):
            """Rows ``[start, end)`` meet rows ``[low, high)``."""
            start, end = (value[:row_bits] for value in rows)
            low, high = low[:row_bits], high[:row_bits]
            return (low < end) & (start < high)

        # Whether the instruction's rows meet those of the DMA transfer and of the
        # activation under way, compared as the instruction is loaded, so that the issue
        # decision starts from registers. Those rows change only when the sequencer hands
        # over a transfer or an ACTIVATE, which is when the instruction before retires:
        # so the comparison is made with the rows they will have from the next cycle on.
        ov_dma_a, ov_dma_b = Signal(), Signal()       # rows a / b meet the DMA's
        ov_ub_a, ov_acc_b = Signal(), Signal()        # rows a / b meet the activation's
        handed_dma = ~priming & ~count_zero & dma_op
        handed_activate = ~priming & ~count_zero & is_op[Opcode.ACTIVATE]
        dma_next = (Mux(handed_dma, a[:row_bits], self.dma_low[:row_bits]),
                    Mux(handed_dma, a_end[:row_bits], self.dma_high[:row_bits]))
        acc_next = (Mux(handed_activate, a[:row_bits], self.issuer_acc_low[:row_bits]),
                    Mux(handed_activate, a_end[:row_bits], self.issuer_acc_high[:row_bits]))
        # The issuer covers the UB rows of the ACTIVATE before too while they are still on
        # their way (it is idle when it takes one, so activate_busy is the datapath's).
        ub_low, ub_high = self.issuer_ub_low[:row_bits], self.issuer_ub_high[:row_bits]
        new_low, new_high = b[:row_bits], b_end[:row_bits]
        merged = (Mux(new_low < ub_low, new_low, ub_low),
                  Mux(new_high > ub_high, new_high, ub_high))
        ub_next = (Mux(handed_activate, Mux(self.activate_busy, merged[0], new_low), ub_low),
                   Mux(handed_activate, Mux(self.activate_busy, merged[1], new_high), ub_high))
        next_rows_a = (fetched.a, decoded["a_end"])
        next_rows_b = (fetched.b, decoded["b_end"])
        dma_kind_handed = dma_kind(is_op[Opcode.READ_HOST], from_acc, select=Mux)
        if fast:
            # Each range the rows may meet is compared on its own and the flags are chosen
            # after: no multiplexer before the comparators. The transfer's kind is folded
            # in too (``dma_hazard``: the DMA engine's rows block the instruction while it
            # is busy).
            def overlaps_either(rows, handed, given, kept):
                return Mux(handed, overlaps(rows, *given), overlaps(rows, *kept))

            # The DMA hazard is one AND-OR: a term per row range (a, b) and per transfer
            # (the one handed over now, or the one kept), each a comparison gated by a
            # flag made from registers beside it.
            next_is_matmul = decoded["is_op"][Opcode.MATMUL]
            dma_terms = []
            for chosen, kind, rows in ((handed_dma, dma_kind_handed, (a, a_end)),
                                       (~handed_dma, self.dma_kind,
                                        (self.dma_low, self.dma_high))):
                # The hazard matrix (:data:`~tpuer.isa.DMA_HAZARDS`) for the next
                # instruction: a MATMUL's, or else an ACTIVATE's (the only other kind the
                # flag blocks).
                # (Only a MATMUL's rows a meet a transfer's: one AND there, no multiplexer.)
                assert "a" not in DMA_HAZARDS[Opcode.ACTIVATE]
                matmul_kinds, activate_kinds = (DMA_HAZARDS[Opcode.MATMUL],
                                                DMA_HAZARDS[Opcode.ACTIVATE])
                hazard_a = chosen & next_is_matmul & kind_in(kind, matmul_kinds["a"])
                hazard_b = chosen & Mux(next_is_matmul, kind_in(kind, matmul_kinds["b"]),
                                        kind_in(kind, activate_kinds["b"]))
                dma_terms += [hazard_a & overlaps(next_rows_a, *rows),
                              hazard_b & overlaps(next_rows_b, *rows)]
            start, end = (value[:row_bits] for value in next_rows_a)
            below_new, below_old = new_low < end, ub_low < end
            above_new, above_old = start < new_high, start < ub_high
            meets_ub_a = Mux(handed_activate,
                             Mux(self.activate_busy,
                                 (below_new | below_old) & (above_new | above_old),
                                 below_new & above_new),
                             below_old & above_old)
            dma_hazard = Signal()
            with m.If(load):
                m.d.sync += [
                    dma_hazard.eq(Cat(*dma_terms).any()),
                    ov_ub_a.eq(meets_ub_a),
                    ov_acc_b.eq(overlaps_either(next_rows_b, handed_activate, (a, a_end),
                                                (self.issuer_acc_low, self.issuer_acc_high)))]
            dma_blocks_matmul = dma_blocks_activate = self.dma_busy & dma_hazard
            # The halves of the accumulator memory whose pending products the instruction
            # waits for (an ACTIVATE's, or a WRITE_HOST's from the accumulators), from the
            # load.
            acc_rows_a_pending = (acc_watch & self.acc_bank_busy).any()
        else:
            with m.If(load):
                m.d.sync += [ov_dma_a.eq(overlaps(next_rows_a, *dma_next)),
                             ov_dma_b.eq(overlaps(next_rows_b, *dma_next)),
                             ov_ub_a.eq(overlaps(next_rows_a, *ub_next)),
                             ov_acc_b.eq(overlaps(next_rows_b, *acc_next))]

            # Products are still going into accumulator rows ``a...``.
            acc_rows_a_pending = ((self.acc_bank_busy[0] & a_in_low_half) |
                                  (self.acc_bank_busy[1] & a_in_high_half))

            def dma_blocks(code):
                """The transfer under way meets rows of the instruction (of opcode ``code``) that
                it must not (:data:`~tpuer.isa.DMA_HAZARDS`)."""
                overlap = {"a": ov_dma_a, "b": ov_dma_b}
                return self.dma_busy & any_of(kind_in(self.dma_kind, kinds) & overlap[field]
                                              for field, kinds in DMA_HAZARDS[code].items())

            dma_blocks_matmul = dma_blocks(Opcode.MATMUL)
            dma_blocks_activate = dma_blocks(Opcode.ACTIVATE)
        # An activation under way still reads accumulator rows (until the issuer is done)
        # and writes UB rows (until the activation unit is empty).
        activation_blocks_matmul = ((self.activate_busy & ov_ub_a) |
                                    (self.issuer_busy & ov_acc_b))
        # What each kind of instruction waits for, besides the handshake.
        matmul_free = ~activation_blocks_matmul & ~dma_blocks_matmul
        activate_free = ~acc_rows_a_pending & ~dma_blocks_activate
        if fast:
            dma_free = ~self.activate_busy & ~acc_rows_a_pending
        else:
            dma_free = ~self.activate_busy & ~(is_op[Opcode.WRITE_HOST] & from_acc &
                                               acc_rows_a_pending)

        # Every command's payload comes straight from the instruction (only ``valid`` waits
        # for the checks), so the hazard logic is not on the payloads' paths.
        m.d.comb += [
            self.param_write.multiplier.eq(param == ConfigParam.MULTIPLIER),
            self.param_write.all_lanes.eq(lane == ALL_LANES),
            self.param_write.lane.eq(lane),
            self.param_write.value.eq(value),
            self.dma_request.payload.kind.eq(dma_kind_handed),
            self.dma_request.payload.addr.eq(a),
            self.dma_request.payload.count.eq(n),
            self.weight_request.payload.tile.eq(a),
            self.weight_request.payload.tiles.eq(n),
            self.matmul.payload.ub_addr.eq(ub_row),
            self.matmul.payload.acc_addr.eq(acc_row),
            self.matmul.payload.accumulate.eq(flags[0]),
            self.matmul.payload.new_tile.eq(switch & first_row),
            self.activate_request.payload.acc_addr.eq(a),
            self.activate_request.payload.ub_addr.eq(b),
            self.activate_request.payload.count.eq(n),
            self.activate_request.payload.acc_end.eq(a_end),
            self.activate_request.payload.ub_end.eq(b_end),
        ]

        # The memory's output is the instruction ``ahead`` after ``instr``: reading
        # ``pc + ahead + 1`` when ``instr`` moves on keeps it so. With ``fast`` that
        # address is a register of its own (``fetch_addr``), counted up with every read of
        # a run: no adder and no multiplexer of the fill states on the memory's address.
        fetch_addr = Signal(17)
        m.d.comb += [program.read_addr.eq(fetch_addr if fast else pc + ahead + 1),
                     program.read_en.eq(0)]

        beyond_end = Signal()           # pc is past the instruction memory
        beyond_last = above(pc, cfg.program_depth - 2)
        # With ``fast``, registers made at the load, so that the handshakes and the
        # retirement start from one flag each: ``armed[kind]`` says that the instruction
        # has passed its checks, is inside the memory and is of that kind (``"matmul"``,
        # one with rows, also gives the UB's read port).
        armed = {kind: Signal(name=f"{kind}_armed")
                 for kind in ("halt", "config", "sync", "quick", "dma", "weights", "matmul",
                              "activate")} if fast else {}

        def retire():
            m.d.sync += [pc.eq(pc + 1), first_row.eq(1),
                         beyond_end.eq(beyond_last)]
            m.d.comb += [program.read_en.eq(1), load.eq(1), retiring.eq(1)]
            if fast:
                m.d.sync += fetch_addr.eq(fetch_addr + 1)

        # With ``fast``, the fill states' reads and the first load come from registers
        # (``filling``: Fill, Decode or Prime; ``in_prime``: Prime), not from a decoder of
        # the state, so that the fetch registers' enables are the retirement or'd with one
        # flag.
        # (Named explicitly: stop() closes over them, see ``rows_left``.)
        filling, in_prime = Signal(name="filling"), Signal(name="in_prime")

        def stop(state):
            m.d.sync += [self.state.eq(state), *(flag.eq(0) for flag in armed.values())]
            if fast:
                m.d.sync += [filling.eq(0), in_prime.eq(0)]
            m.next = "Idle"

        # With ``fast``, each armed flag with no abort under way.
        live = {kind: ~self.abort_run & flag for kind, flag in armed.items()}

        def issue(live):
            """The handshakes, CONFIG's writes and the retirement of the instruction under
            way. ``is_op`` is one-hot, so each opcode has its own branch, guarded only by one
            flag (``live``): short paths to the handshakes."""
            with m.If(live["config"]):
                with m.If(~self.activate_busy):
                    with m.Switch(param):
                        for p, lanes in config_lanes.items():
                            with m.Case(int(p)):
                                if cfg.activation_steps and p != ConfigParam.SHIFT:
                                    # The lane-serial unit keeps these itself.
                                    m.d.comb += self.param_write.en.eq(1)
                                    continue
                                m.d[config_domain] += lanes.eq(Cat(
                                    (lane == ALL_LANES) | (lane == index)
                                    for index in range(cfg.cols)))
                        with m.Case(int(ConfigParam.ZERO_POINT)):
                            m.d[config_domain] += config_zero_point.eq(1)
                        with m.Case(int(ConfigParam.RELU)):
                            m.d[config_domain] += config_relu.eq(1)
            with m.If(live["dma"]):
                # Handed to the host DMA engine, which moves the rows while the
                # sequencer goes on; instructions that touch those rows wait for it.
                m.d.comb += self.dma_pending.eq(1)
                with m.If(dma_free):
                    m.d.comb += self.dma_request.valid.eq(1)
            with m.If(live["weights"]):
                m.d.comb += self.weight_request.valid.eq(1)
                with m.If(self.weight_request.ready):
                    m.d.sync += tiles.eq(tiles + n)
            with m.If(live["matmul"]):
                m.d.comb += self.matmul_pending.eq(1)
                with m.If(matmul_free):
                    m.d.comb += self.matmul.valid.eq(1)
                    with m.If(self.matmul.ready):
                        m.d.sync += [ub_row.eq(ub_row + 1), acc_row.eq(acc_row + 1),
                                     rows_left.eq(rows_left - 1), first_row.eq(0)]
                        with m.If(switch & first_row):
                            m.d.sync += tiles.eq(tiles - 1)
                        with m.If(~last_step):   # (retiring loads the next one's)
                            m.d.sync += last_step.eq(rows_left == 2)
            with m.If(live["activate"]):
                with m.If(activate_free):
                    m.d.comb += self.activate_request.valid.eq(1)
            # Whether the instruction retires this cycle, as one flat expression of the
            # checks above and the handshakes, so that the fetch it starts is not at
            # the end of a chain of decisions.
            retire_now = Signal()
            if fast:
                # Each flag already says the instruction's kind and that it may go.
                handed_over = {
                    "dma": dma_free & self.dma_request.ready,
                    "weights": self.weight_request.ready,
                    "matmul": matmul_free & self.matmul.ready & last_step,
                    "activate": activate_free & self.activate_request.ready}
                retire_now_expr = ~self.abort_run & (
                    armed["quick"] | (armed["sync"] & all_idle) |
                    (armed["config"] & ~self.activate_busy) |
                    any_of(armed[kind] & handed for kind, handed in handed_over.items()))
            else:
                counted = dma_op | is_op[Opcode.READ_WEIGHTS] | is_op[Opcode.MATMUL] | \
                    is_op[Opcode.ACTIVATE]
                done_now = (is_op[Opcode.NOP] |
                            (is_op[Opcode.SYNC] & all_idle) |
                            (count_zero & counted) |   # a zero count does nothing
                            #                            (CONFIG's count is a lane)
                            (is_op[Opcode.CONFIG] & ~self.activate_busy))
                opcode_handed = [
                    dma_op & dma_free & self.dma_request.ready,
                    is_op[Opcode.READ_WEIGHTS] & self.weight_request.ready,
                    is_op[Opcode.MATMUL] & matmul_free & self.matmul.ready & last_step,
                    is_op[Opcode.ACTIVATE] & activate_free & self.activate_request.ready]
                retire_now_expr = go & (
                    done_now | (~count_zero & functools.reduce(operator.or_, opcode_handed)))
            m.d.comb += retire_now.eq(retire_now_expr)
            with m.If(retire_now):
                retire()

        with m.FSM(name="sequencer"):
            with m.State("Idle"):
                with m.If(self.start):
                    m.d.sync += [pc.eq(self.start_pc), first_row.eq(1),
                                 beyond_end.eq(above(self.start_pc, cfg.program_depth - 1)),
                                 self.state.eq(CoreState.RUNNING),
                                 self.error.eq(ErrorCode.NONE), self.error_pc.eq(0),
                                 *(register.eq(0) for register in counter_registers)]
                    m.d.comb += [program.read_addr.eq(self.start_pc), program.read_en.eq(1)]
                    if fast:
                        m.d.sync += [fetch_addr.eq(self.start_pc + 1), filling.eq(1),
                                     fresh.eq(1)]
                    m.next = "Fill"

            # :func:`fetch_fill_cycles` cycles fill the fetch stage. With ``fast``: the first
            # instruction into ``following``; then into ``upcoming``, decoded, while the
            # second goes into ``following``; then into ``instr`` while the second goes
            # into ``upcoming``, the third into ``following`` and the fourth onto the
            # memory's output. Without it, the first waits on the memory's output in the
            # first cycle, then goes into ``instr`` while the second comes out.
            fill_states = ["Fill", "Decode", "Prime"] if fast else ["Fill", "Prime"]
            assert len(fill_states) == fetch_fill_cycles(cfg)
            for k, state in enumerate(fill_states):
                with m.State(state):
                    offset = ahead - (len(fill_states) - 1) + k
                    # (With ``fast``, fetch_addr is pc + offset, and ``filling`` reads.)
                    if not fast and offset:
                        m.d.comb += [program.read_addr.eq(pc + offset), program.read_en.eq(1)]
                    if state == "Decode":
                        m.d.sync += fill_upcoming
                        if fast:
                            m.d.sync += in_prime.eq(1)      # (stop() clears it on an abort)
                    elif state == "Prime":
                        if fast:
                            m.d.sync += [filling.eq(0), in_prime.eq(0)]
                        else:
                            m.d.comb += [load.eq(1), priming.eq(1)]
                    with m.If(self.abort_run):
                        m.d.comb += self.dma_cancel.eq(1)
                        stop(CoreState.IDLE)
                    with m.Else():
                        m.next = (fill_states + ["Run"])[k + 1]

            with m.State("Drain"):
                # Earlier instructions finish (host transfers included) before the error
                # shows, so that the host's view matches the golden model's.
                with m.If(self.abort_run):
                    m.d.comb += self.dma_cancel.eq(1)
                    stop(CoreState.ERROR)
                with m.Elif(all_idle):
                    stop(CoreState.ERROR)

            with m.State("Run"):
                if not fast:
                    go = Signal()
                    moves = Signal()         # go, for an instruction whose count is not 0
                    m.d.comb += [go.eq(~self.abort_run & ~beyond_end & ~has_error),
                                 moves.eq(go & ~count_zero)]
                    live = {"halt": go & is_op[Opcode.HALT],
                            "config": go & is_op[Opcode.CONFIG],
                            "dma": moves & dma_op,
                            "weights": moves & is_op[Opcode.READ_WEIGHTS],
                            "matmul": moves & is_op[Opcode.MATMUL],
                            "activate": moves & is_op[Opcode.ACTIVATE]}
                with m.If(self.abort_run):
                    m.d.comb += self.dma_cancel.eq(1)
                    stop(CoreState.IDLE)
                with m.Elif(beyond_end):
                    m.d.sync += [self.error.eq(ErrorCode.PROGRAM_END), self.error_pc.eq(pc)]
                    m.next = "Drain"
                with m.Elif(has_error):
                    m.d.sync += [self.error.eq(error), self.error_pc.eq(pc)]
                    m.next = "Drain"
                with m.If(live["halt"]):
                    with m.If(all_idle):
                        m.d.comb += retiring.eq(1)
                        stop(CoreState.HALTED)
                if not fast:
                    issue(live)
        if fast:
            # The armed flags are clear in every state but Run (made so at the load, and
            # cleared as the core stops), so the issue needs no state decoder in front.
            issue(live)
            with m.If(filling):
                m.d.comb += program.read_en.eq(1)
                m.d.sync += fetch_addr.eq(fetch_addr + 1)
            with m.If(in_prime):
                m.d.comb += [load.eq(1), priming.eq(1)]

        with m.If(load):
            m.d.sync += [ub_row.eq(fetched.a), acc_row.eq(fetched.b),
                         rows_left.eq(fetched.count)]
            if fast:
                # (An abort as the first instruction is loaded stops the core: none armed.)
                clear = ~fails & ~Mux(priming, beyond_end, beyond_last) & ~self.abort_run
                moving = clear & (fetched.count != 0)
                is_next = decoded["is_op"]
                rows_op = (is_next[Opcode.READ_HOST] | is_next[Opcode.WRITE_HOST] |
                           is_next[Opcode.READ_WEIGHTS] | is_next[Opcode.MATMUL] |
                           is_next[Opcode.ACTIVATE])
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
                    acc_watch.eq(Cat(~above(fetched.a, half - 1),
                                     above(decoded["a_end"], half)) &
                                 (is_next[Opcode.ACTIVATE] |
                                  (is_next[Opcode.WRITE_HOST] & fetched.flags[0])).replicate(2))]
        return m
