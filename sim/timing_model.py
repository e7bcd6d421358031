"""Cycle model of the TPU core: predicts the counters that depend on timing (``cycles``,
``weight_stall_cycles``) for a program the ISA model has executed.

The model holds only what decides *when* things happen, never data: for each block, the
few registers that gate its handshakes, stepped once per clock exactly as the RTL steps
them. It is driven by the trace of instructions the ISA model
(:class:`~tpuer.sim.isa_model.CoreModel`) executed, so the two models together give every
number the hardware reports, and it assumes the host that the driver is: every READ_HOST
row is offered as soon as the DMA engine can take it, and every row sent to the host is
taken at once.

What each block contributes (see the RTL for the reasons):

* sequencer: :func:`~tpuer.hw.sequencer.fetch_fill_cycles` (2, or 3 with
  ``control_registers``) to fill its fetch stage when a run starts, then one cycle per
  instruction, one per MATMUL or ACTIVATE row; waits as listed
  in :class:`~tpuer.hw.sequencer.Sequencer`; an error first drains earlier work;
* weight reader: a request is taken when the previous one has issued its last read; one
  row per cycle, 1 cycle after the request;
* Weight FIFO (block RAM whose output is the head row): 2 cycles from write to read,
  ``weight_fifo_depth`` rows;
* weight loader: a row into the shadow weights per cycle until a whole tile waits there;
  a vector flagged ``new_tile`` waits for it (a weight-stall cycle);
* datapath: the UB read (``memory_read_latency`` cycles) and a feed queue that keeps at
  most :func:`~tpuer.hw.matmul_feed.feed_slots` rows in flight;
  a row that adds to the accumulator row of a row that entered the matrix unit fewer
  than :func:`~tpuer.hw.accumulators.add_spacing` cycles before waits;
  :func:`~tpuer.hw.matrix_unit.matrix_unit_latency` (``rows + cols + multiply_latency``)
  cycles through the matrix unit; ``add_spacing`` more to commit into the accumulators;
  the activation unit's latency (:func:`~tpuer.hw.activation_units.activation_latency`: 8, 11
  with ``multiply_latency`` 2, 12 with 3, or ``cols * (activation_steps + 44) + 1`` for the
  lane-serial unit, which takes a row only when it is empty);
* activation issuer: takes an ACTIVATE when idle, issues its rows from the next cycle on,
  one per cycle;
* host DMA engine and the host read server (an answer queue of
  :func:`~tpuer.hw.read_ports.host_answer_slots` rows for reads of either memory, a row
  taken in the cycle counted as room with ``memory_read_latency`` 1), which yields
  the memory ports to the datapath (with ``memory_read_latency`` 2 the UB's for as long
  as a MATMUL is under way, even while its rows wait on a hazard).
"""

import functools
from collections import OrderedDict, deque
from dataclasses import dataclass

from ..hw.accumulators import add_spacing
from ..hw.activation_units import activation_latency
from ..hw.matmul_feed import feed_slots
from ..hw.read_ports import host_answer_slots
from ..hw.matrix_unit import matrix_unit_latency
from ..hw.sequencer import fetch_fill_cycles
from .trace import Activity, StallCause
from ..isa import (DMA_HAZARDS, DMAKind, Instruction, MatmulFlag, Opcode, WriteHostFlag,
                   dma_kind)

__all__ = ["CoreTiming", "Timing", "WorkUnderWay", "may_go", "RUNS_REMEMBERED", "timing_key"]

#: How many runs' timings :meth:`CoreTiming.run` remembers (the least recently used go).
RUNS_REMEMBERED = 4096
_runs = OrderedDict()


@functools.lru_cache(maxsize=1 << 16)
def _timing_word(word):
    """What of an instruction word the timing depends on: all of it, but for a CONFIG's
    parameter, lane and value."""
    return Opcode.CONFIG.value if Instruction.decode(word).op is Opcode.CONFIG else word


def timing_key(words):
    """What of a run's words its timing depends on (:func:`_timing_word` of each)."""
    return tuple(map(_timing_word, words))


class Timing(dict):
    """The counters of one run: ``cycles``, ``mxu_busy_cycles``, ``weight_stall_cycles``,
    ``instructions``."""


@dataclass(frozen=True)
class WorkUnderWay:
    """What the sequencer's hazard checks look at: the host transfer under way (its kind
    and rows ``[low, high)``), whether an activation's rows are still on their way
    (``activate_busy``), the ACTIVATE in the activation issuer (its accumulator rows still
    to read; the UB rows of every activation still on its way), and whether matrix rows
    are still bound for each half of the accumulator memory (``banks_busy``)."""
    dma_busy: bool
    dma_kind: DMAKind
    dma_rows: tuple
    activate_busy: bool
    issuer_busy: bool
    issuer_acc: tuple
    issuer_ub: tuple
    banks_busy: tuple


def may_go(cfg, instr, work):
    """Whether ``instr`` (a MATMUL, ACTIVATE, READ_HOST or WRITE_HOST with rows) is free of
    the hazards of ``work`` (:class:`WorkUnderWay`), as the RTL's
    :class:`~tpuer.hw.hazard_tracker.HazardTracker` decides: a MATMUL waits while the host
    transfer moves rows it must not touch (:data:`~tpuer.isa.DMA_HAZARDS`), while an
    activation still writes UB rows it reads, or the issuer still reads accumulator rows
    it writes; an ACTIVATE waits for the transfer's rows likewise and while matrix rows
    are bound for the halves of the accumulator memory it reads; a host transfer waits
    while an activation is under way, and one from the accumulators like an ACTIVATE."""
    op, a, b, n = instr.op, instr.a, instr.b, instr.count
    half = cfg.acc_depth // 2

    def touches(start, span):
        """Rows ``[start, start + n)`` meet rows ``[span[0], span[1])``."""
        return span[0] < start + n and start < span[1]

    def dma_blocks():
        rows = {"a": a, "b": b}
        return work.dma_busy and any(work.dma_kind in kinds and touches(rows[field],
                                                                        work.dma_rows)
                                     for field, kinds in DMA_HAZARDS[op].items())

    acc_rows_pending = ((work.banks_busy[0] and a < half) or
                        (work.banks_busy[1] and a + n > half))
    if op is Opcode.MATMUL:
        return not (dma_blocks() or (work.activate_busy and touches(a, work.issuer_ub)) or
                    (work.issuer_busy and touches(b, work.issuer_acc)))
    if op is Opcode.ACTIVATE:
        return not (dma_blocks() or acc_rows_pending)
    from_acc = op is Opcode.WRITE_HOST and instr.flags & WriteHostFlag.FROM_ACC
    return not (work.activate_busy or (from_acc and acc_rows_pending))


class CoreTiming:
    """The timing state of one core, kept from run to run as the hardware keeps it (a tile
    left in the Weight FIFO by one program is still there for the next).

    :meth:`run` executes a trace; between runs the core idles until nothing moves, as it
    does while the host loads the next program and its weights.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        self.reset()

    def reset(self):
        """The state after the core's reset."""
        cfg = self.cfg
        # weight reader, Weight FIFO, loader
        self.remaining, self.have_row = 0, False
        self.fifo_inner, self.fifo_out = 0, False
        self.tile_ready, self.load_index = False, 0
        # datapath: UB read in flight, feed queue, matrix unit pipeline, commit, activation
        # (new_tile, acc half, acc row, accumulate) of the UB reads issued 1, 2, ... cycles ago
        self.reading = [None] * cfg.memory_read_latency
        self.feed = deque()
        # acc rows of the vectors that entered 1, 2, ... add_spacing - 1 cycles ago
        self.entered = [None] * (add_spacing(cfg) - 1)
        self.pipe = [None] * matrix_unit_latency(cfg)
        self.committing = [None] * add_spacing(cfg)  # accumulator halves of writes in flight
        self.banks = [0, 0]
        self.activating = [False] * cfg.memory_read_latency  # acc reads 1, 2, ... ago
        self.act_stages = [False] * activation_latency(cfg)   # rows taken 1, 2, ... ago
        # activation issuer: rows left to issue, next rows, the ranges under way
        self.issuer_left = 0
        self.issuer_next = (0, 0)
        self.issuer_acc = (0, 0)
        self.issuer_ub = (0, 0)
        # host read server: a read issued last cycle, answers queued
        self.server_fresh = [False] * cfg.memory_read_latency   # reads 1, 2, ... ago
        self.server_level = 0
        # host DMA engine
        self.dma_busy, self.dma_kind, self.dma_base, self.dma_count = False, DMAKind.READ_HOST, 0, 0
        self.dma_requested = self.dma_answered = 0
        # the state's attributes, and the type of each that is a sequence (see state())
        if not hasattr(self, "_kinds"):
            names = sorted(name for name in vars(self) if name != "cfg" and name[0] != "_")
            self._kinds = [(name, type(getattr(self, name))
                            if isinstance(getattr(self, name), (list, deque)) else None)
                           for name in names]
            self._names = names
        self._state = None

    # --- one clock ----------------------------------------------------------------------

    def _snapshot(self):
        return (self.remaining, self.have_row, self.fifo_inner, self.fifo_out, self.tile_ready,
                self.load_index, tuple(self.reading), tuple(self.feed), tuple(self.entered),
                tuple(self.pipe),
                tuple(self.committing), tuple(self.banks), tuple(self.activating),
                tuple(self.act_stages), tuple(self.server_fresh), self.server_level,
                self.issuer_left,
                self.dma_busy, self.dma_requested, self.dma_answered)

    def _work_under_way(self, activate_busy):
        """What the hazard checks look at in this cycle (:class:`WorkUnderWay`)."""
        return WorkUnderWay(
            dma_busy=self.dma_busy, dma_kind=self.dma_kind,
            dma_rows=(self.dma_base, self.dma_base + self.dma_count),
            activate_busy=activate_busy, issuer_busy=self.issuer_left != 0,
            issuer_acc=self.issuer_acc, issuer_ub=self.issuer_ub,
            banks_busy=tuple(count != 0 for count in self.banks))

    def _status(self):
        """The datapath's status seen by the sequencer in this cycle."""
        matmul_busy = (any(r is not None for r in self.reading) or bool(self.feed) or
                       any(p is not None for p in self.pipe) or
                       any(c is not None for c in self.committing))
        activate_busy = (any(self.activating) or any(self.act_stages) or
                         self.issuer_left != 0)
        reader_busy = self.remaining != 0 or self.have_row
        return matmul_busy, activate_busy, reader_busy

    def _step(self, command, host_rows_left):
        """Advance one clock. ``command`` is what the sequencer offers this cycle: a dict
        with at most one of ``matmul`` (new_tile, acc_addr, accumulate), ``activate_request`` (acc
        row, UB row, count), ``dma`` (kind, addr, count), ``weights`` (tiles), and
        ``matmul_pending`` while a MATMUL is under way (offered or waiting on a hazard).
        Returns the handshakes that happened."""
        self._state = None
        cfg = self.cfg
        half = cfg.acc_depth // 2
        done = {}

        # matrix unit input: the head of the feed queue (new_tile, acc half, acc row,
        # accumulate) enters unless it waits for a tile, or adds to the accumulator row of
        # a row that entered in the add_spacing - 1 cycles before
        head = self.feed[0] if self.feed else None
        offered = head is not None and not (head[3] and head[2] in self.entered)
        accepted = offered and (not head[0] or self.tile_ready)
        switch = accepted and head[0]
        done["vector"] = accepted
        done["weight_stall"] = offered and head[0] and not self.tile_ready

        reads = sum(r is not None for r in self.reading)
        matmul_ready = len(self.feed) + reads < feed_slots(cfg)
        matmul = command.get("matmul")
        issue = matmul is not None and matmul_ready
        done["matmul"] = issue
        if cfg.activation_steps:   # the lane-serial unit takes a row when it is empty
            act_ready = not any(self.activating) and not any(self.act_stages[:-1])
        else:
            act_ready = True
        activate_valid = self.issuer_left != 0   # the issuer offers a row this cycle
        activate = activate_valid and act_ready
        request = command.get("activate_request")
        done["activate_request"] = request is not None and self.issuer_left == 0
        act_out = self.act_stages[-1]

        # weight reader and the sequencer's request
        weights = command.get("weights")
        request_taken = weights is not None and self.remaining == 0
        done["weights"] = request_taken
        fifo_w_ready = self.fifo_inner != cfg.weight_fifo_depth
        fifo_write = self.have_row and fifo_w_ready
        advance = not self.have_row or fifo_w_ready

        # Weight FIFO read side and the loader
        may_load = not self.tile_ready or switch
        loading = self.fifo_out and may_load
        inner_read = self.fifo_inner != 0 and (not self.fifo_out or may_load)

        # host DMA engine and the read servers
        dma = command.get("dma")
        dma_taken = dma is not None and not self.dma_busy
        done["dma"] = dma_taken
        server_issue = server_take = False
        dma_busy = self.dma_busy
        dma_requested, dma_answered = self.dma_requested, self.dma_answered
        host_taken = 0
        if self.dma_busy and self.dma_kind is DMAKind.READ_HOST:
            if host_rows_left > 0 and not act_out:
                host_taken = 1
                dma_requested += 1
                if dma_requested == self.dma_count:
                    dma_busy = False
        elif self.dma_busy:
            fresh, level = sum(self.server_fresh), self.server_level
            # With slow reads (fast clocks) a MATMUL under way keeps the UB's port even
            # while its row waits on a hazard.
            ub_kept = (command.get("matmul_pending", False) if cfg.memory_read_latency > 1
                       else matmul is not None)
            blocked = activate_valid if self.dma_kind is DMAKind.WRITE_ACC else ub_kept
            taken = level > 0              # the host takes every answer at once
            # less what is taken this cycle, with memory_read_latency 1 (see host_answer_slots)
            counted = taken if cfg.memory_read_latency == 1 else 0
            if (self.dma_requested != self.dma_count and not blocked and
                    level + fresh - counted < host_answer_slots(cfg)):
                server_issue = True
                dma_requested += 1
            if taken:
                server_take = True
                dma_answered += 1
                if dma_answered == self.dma_count:
                    dma_busy = False
        done["host_rows"] = host_taken
        done["host_out"] = server_take
        done["loading"] = loading
        done["spacing"] = head is not None and not offered

        # --- registers --------------------------------------------------------------
        if advance:
            self.have_row = self.remaining != 0
            if self.remaining:
                self.remaining -= 1
        if request_taken:
            self.remaining = weights * cfg.rows
        self.fifo_inner += int(fifo_write) - int(inner_read)
        self.fifo_out = True if inner_read else (False if may_load else self.fifo_out)
        last_row = loading and self.load_index == cfg.rows - 1
        if loading:
            self.load_index = 0 if last_row else self.load_index + 1
        self.tile_ready = last_row or (self.tile_ready and not switch)

        result = self.pipe[-1]
        committing = self.committing[-1]
        done["commit"] = committing is not None
        self.committing = [result] + self.committing[:-1]
        self.pipe = [head[1] if accepted else None] + self.pipe[:-1]
        self.entered = [head[2] if accepted else None] + self.entered[:-1]
        if accepted:
            self.feed.popleft()
        if self.reading[-1] is not None:
            self.feed.append(self.reading[-1])
        read = None
        if issue:
            issue_half = int(matmul[1] >= half)
            self.banks[issue_half] += 1
            read = (matmul[0], issue_half, matmul[1], matmul[2])
        self.reading = [read] + self.reading[:-1]
        if committing is not None:
            self.banks[committing] -= 1

        draining = any(self.activating) or any(self.act_stages)
        self.act_stages = [self.activating[-1]] + self.act_stages[:-1]
        self.activating = [activate] + self.activating[:-1]
        if activate:
            self.issuer_left -= 1
        if done["activate_request"]:
            acc, ub, count = request
            self.issuer_left = count
            self.issuer_acc = (acc, acc + count)
            if draining:                 # rows of the ACTIVATE before are on their way
                self.issuer_ub = (min(ub, self.issuer_ub[0]), max(ub + count, self.issuer_ub[1]))
            else:
                self.issuer_ub = (ub, ub + count)

        self.server_level += int(self.server_fresh[-1]) - int(server_take)
        self.server_fresh = [server_issue] + self.server_fresh[:-1]

        self.dma_busy, self.dma_requested, self.dma_answered = dma_busy, dma_requested, dma_answered
        if dma_taken:
            kind, addr, count = dma
            self.dma_busy, self.dma_kind = count != 0, kind
            self.dma_base, self.dma_count = addr, count
            self.dma_requested = self.dma_answered = 0
        return done

    def state(self):
        """Everything that decides what the core does next, as a hashable value (made again
        only after a clock)."""
        if self._state is None:
            self._state = tuple(
                tuple(value) if kind is not None else value
                for value, (_, kind) in zip(map(self.__dict__.__getitem__, self._names),
                                            self._kinds))
        return self._state

    def restore(self, state):
        """Go back to a :meth:`state`."""
        for (name, kind), value in zip(self._kinds, state):
            setattr(self, name, kind(value) if kind is not None else value)
        self._state = state

    def settle(self, limit=100_000):
        """Idle (no instruction running) until nothing moves."""
        for _ in range(limit):
            before = self._snapshot()
            self._step({}, 0)
            if self._snapshot() == before:
                return
        raise RuntimeError("the timing model did not come to rest")

    # --- a run --------------------------------------------------------------------------

    def run(self, trace, *, error=False, host_rows=0, max_cycles=10_000_000, recorder=None,
            key=None):
        """Time a run that executed ``trace`` (the words of the instructions the ISA model
        retired, a final HALT included) and then, if ``error``, stopped at a bad
        instruction. ``host_rows`` rows are offered for READ_HOST. Returns :class:`Timing`;
        raises :class:`~tpuer.device.CycleBudgetError` once the run passes ``max_cycles``.
        ``recorder`` (:class:`~tpuer.sim.trace.Recorder`) is told every cycle.

        The timing of a run depends on nothing but the state it starts from and these
        arguments, so a run seen before is not stepped again: its counters and the state
        it ends in are remembered (:data:`RUNS_REMEMBERED` of them), which is what makes
        the golden back end fast on the driver's repeated programs. ``key``: the trace's
        :func:`timing_key`, if the caller has it."""
        if recorder is not None:
            return self._step_run(trace, error, host_rows, max_cycles, recorder)
        start = self.state()
        key = (self.cfg, start, timing_key(trace) if key is None else key, error, host_rows)
        known = _runs.get(key)
        if known is None:
            counters = self._step_run(trace, error, host_rows, max_cycles, None)
            known = _runs[key] = (Timing(counters), self.state())
            if len(_runs) > RUNS_REMEMBERED:
                del _runs[next(iter(_runs))]
        else:
            _runs.move_to_end(key)
        counters, end = known
        if counters["cycles"] > max_cycles:
            from ..device import CycleBudgetError
            raise CycleBudgetError(f"the program ran past its cycle budget of "
                                   f"{max_cycles:,} cycles (max_cycles)")
        if end != start:
            self.restore(end)
        return Timing(counters)

    def _step_run(self, trace, error, host_rows, max_cycles, recorder):
        """:meth:`run`, one clock after another."""
        cfg = self.cfg
        trace = [Instruction.decode(word) for word in trace]
        self._step({}, 0)                     # the cycle in which the host starts the core
        counters = Timing(cycles=0, mxu_busy_cycles=0, weight_stall_cycles=0, instructions=0)
        index, step, draining = 0, 0, False
        rows_left = host_rows
        for _ in range(fetch_fill_cycles(self.cfg)):   # the sequencer fills its fetch stage
            reader_busy = self._status()[2]
            done = self._step({}, rows_left)
            rows_left -= done["host_rows"]
            counters["cycles"] += 1
            if recorder is not None:
                recorder.cycle(self._activity(done, None, False, reader_busy, False,
                                              StallCause.FETCH))
        while True:
            if counters["cycles"] >= max_cycles:
                from ..device import CycleBudgetError
                raise CycleBudgetError(f"the program ran past its cycle budget of "
                                       f"{max_cycles:,} cycles (max_cycles)")
            matmul_busy, activate_busy, reader_busy = self._status()
            all_idle = not (matmul_busy or activate_busy or reader_busy or self.dma_busy)
            command, finished, retire, halted = {}, False, False, False
            if draining:
                finished = all_idle
            elif index == len(trace):
                draining = True                # the bad instruction: drain, then stop
                finished = False
            else:
                instr = trace[index]
                op, a, b, n = instr.op, instr.a, instr.b, instr.count

                free = may_go(self.cfg, instr, self._work_under_way(activate_busy))
                if op is Opcode.NOP:
                    retire = True
                elif op is Opcode.HALT:
                    halted = finished = all_idle
                elif op is Opcode.SYNC:
                    retire = all_idle
                elif n == 0 and op is not Opcode.CONFIG:
                    retire = True
                elif op is Opcode.CONFIG:
                    retire = not activate_busy
                elif op in (Opcode.READ_HOST, Opcode.WRITE_HOST):
                    from_acc = op is Opcode.WRITE_HOST and instr.flags & WriteHostFlag.FROM_ACC
                    if free:
                        command["dma"] = (dma_kind(op is Opcode.READ_HOST, from_acc), a, n)
                elif op is Opcode.READ_WEIGHTS:
                    command["weights"] = n
                elif op is Opcode.MATMUL:
                    command["matmul_pending"] = True
                    if free:
                        new_tile = bool(instr.flags & MatmulFlag.SWITCH) and step == 0
                        accumulate = bool(instr.flags & MatmulFlag.ACCUMULATE)
                        command["matmul"] = (new_tile, b + step, accumulate)
                elif op is Opcode.ACTIVATE:
                    if free:
                        command["activate_request"] = (a, b, n)
            if recorder is not None:
                held = None if draining or index == len(trace) else index
                before = (self.dma_busy, self.dma_kind,
                          bool(self.feed) or any(r is not None for r in self.reading))
            done = self._step(command, rows_left)
            rows_left -= done["host_rows"]
            counters["cycles"] += 1
            counters["mxu_busy_cycles"] += int(done["vector"])
            counters["weight_stall_cycles"] += int(done["weight_stall"])
            if done["dma"] or done["weights"] or done["activate_request"]:
                retire = True
            if done["matmul"]:
                step += 1
                retire = step == n
            if halted:
                counters["instructions"] += 1
            if retire:
                index, step = index + 1, 0
                counters["instructions"] += 1
            if recorder is not None:
                recorder.cycle(self._activity(
                    done, held, retire or halted, reader_busy, activate_busy,
                    None if done["vector"] else self._idle_cause(
                        done, None if held is None else trace[held], retire, command, before)))
            if finished:
                break
        self.settle()
        return counters

    def _activity(self, done, index, retired, reader_busy, activate_busy, cause):
        """The :class:`~tpuer.sim.trace.Activity` of the cycle just stepped (``index``:
        of the instruction the sequencer held, in the run's trace)."""
        return Activity(index, retired, done["vector"], done["weight_stall"],
                        self.fifo_inner + int(self.fifo_out), reader_busy, done["loading"],
                        done["commit"], activate_busy, done["host_rows"], done["host_out"],
                        cause)

    @staticmethod
    def _idle_cause(done, instr, retired, command, before):
        """Why no vector entered the matrix unit in the cycle just stepped
        (:class:`~tpuer.sim.trace.StallCause`), the first that holds of:

        * a vector waits for its weight tile (weight tile), or to add to a row still being
          written (accumulator spacing); a MATMUL's rows are on their way from the Unified
          Buffer (start-up);
        * the sequencer holds no instruction or HALT (drain);
        * it holds another instruction than a MATMUL: one that retires in this cycle
          (sequencer), else what that one waits for: READ_HOST the host's rows (host
          input), WRITE_HOST the host taking rows (result path), READ_WEIGHTS the weight
          reader (weight tile), ACTIVATE and CONFIG an activation (hazard), SYNC everything
          (sequencer);
        * it holds a MATMUL that may not go on while a host transfer moves rows into its
          UB rows (host input) or out of its accumulator rows (result path), or while the
          feed queue is full (result path), or for an activation (hazard).

        ``before``: the DMA engine's busy flag and kind, and whether rows were on their way
        to the matrix unit, at the start of the cycle."""
        dma_busy, dma_kind, in_flight = before
        if done["weight_stall"]:
            return StallCause.WEIGHT_TILE
        if done["spacing"]:
            return StallCause.ACC_SPACING
        if in_flight or done["matmul"]:
            return StallCause.START_UP
        op = None if instr is None else instr.op
        if op is None or op is Opcode.HALT:
            return StallCause.DRAIN
        if op is not Opcode.MATMUL:
            return StallCause.SEQUENCER if retired else _WAITS_FOR.get(op, StallCause.SEQUENCER)
        if "matmul" in command:
            return StallCause.RESULT_PATH        # offered, but the feed queue is full
        if dma_busy and dma_kind is DMAKind.READ_HOST:
            return StallCause.HOST_INPUT
        if dma_busy and dma_kind is DMAKind.WRITE_ACC:
            return StallCause.RESULT_PATH
        return StallCause.HAZARD


#: What an instruction other than MATMUL that the sequencer holds waits for.
_WAITS_FOR = {Opcode.READ_HOST: StallCause.HOST_INPUT, Opcode.WRITE_HOST: StallCause.RESULT_PATH,
              Opcode.READ_WEIGHTS: StallCause.WEIGHT_TILE, Opcode.ACTIVATE: StallCause.HAZARD,
              Opcode.CONFIG: StallCause.HAZARD}
