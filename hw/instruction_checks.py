"""The checks an instruction takes from its word alone, before it does anything."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..isa import (DEFINED_FLAGS, INSTRUCTION_LAYOUT, RANGE_CHECKS, ErrorCode,
                   Opcode, WriteHostFlag, config_lane_bad, config_ranges, memory_depths,
                   tiles_held)
from .arith import above, any_of, outside

__all__ = ["InstructionChecks", "OPCODE_LAYOUT", "VERDICTS_LAYOUT", "CHECKS", "judge",
           "opcode_bits"]

#: A bit per :class:`~tpuer.isa.Opcode`, named after it: the decoded opcode, one-hot (or
#: no bit at all for an undefined one).
OPCODE_LAYOUT = data.StructLayout({code.name.lower(): 1 for code in Opcode})

#: The range and value checks, one outcome bit each, in the order they are made: each
#: opcode's :data:`~tpuer.isa.RANGE_CHECKS`, then CONFIG's ``BAD_CONFIG``.
CHECKS = (*((code, check.error) for code, checks in RANGE_CHECKS.items() for check in checks),
          (Opcode.CONFIG, ErrorCode.BAD_CONFIG))

#: What the checks found: a READ_WEIGHTS of more tiles than the core holds
#: (``many_tiles``; whether they fit beside those waiting is a check of the core's state),
#: an undefined opcode, a reserved bit or undefined flag set (``bad_field``), and whether
#: each of :data:`CHECKS` fails. This is what the registered sequencer stores beside each
#: instruction as it is written.
VERDICTS_LAYOUT = data.StructLayout({"many_tiles": 1, "no_opcode": 1, "bad_field": 1,
                                     "fails": data.ArrayLayout(1, len(CHECKS))})


def opcode_bits(is_op):
    """The bits of an :data:`OPCODE_LAYOUT` view, by :class:`~tpuer.isa.Opcode`."""
    return {code: is_op[code.name.lower()] for code in Opcode}


def judge(is_op, verdicts):
    """The error of an instruction from its one-hot opcode ``is_op`` (by
    :class:`~tpuer.isa.Opcode`) and its ``verdicts`` (:data:`VERDICTS_LAYOUT`): the first
    failing check's :class:`~tpuer.isa.ErrorCode`, and ``bad``, two flags of which one is
    set when any fails: the instruction's form, and its ranges and values. ``bad`` is an OR
    of the conditions, so no chain of multiplexers sits between the range checks' carry
    chains and an issue decision made from it."""
    opcode_error = 0
    for code in dict.fromkeys(code for code, _ in CHECKS):
        first_failing = ErrorCode.NONE
        for index in reversed(range(len(CHECKS))):
            if CHECKS[index][0] is code:
                first_failing = Mux(verdicts.fails[index], CHECKS[index][1], first_failing)
        opcode_error = opcode_error | Mux(is_op[code], first_failing, ErrorCode.NONE)
    error = Mux(verdicts.no_opcode, ErrorCode.BAD_OPCODE,
                Mux(verdicts.bad_field, ErrorCode.BAD_FIELD, opcode_error))
    bad = Cat(verdicts.no_opcode | verdicts.bad_field,
              any_of(is_op[code] & verdicts.fails[index]
                     for index, (code, _) in enumerate(CHECKS)))
    return error, bad


class InstructionChecks(wiring.Component):
    """What can be told from an instruction word alone, combinationally: its one-hot
    opcode, the ends of its row ranges, and the checks of :data:`~tpuer.isa.RANGE_CHECKS`'s
    description that do not depend on the core's state, in their order. The ISA model's
    :meth:`~tpuer.sim.isa_model.CoreModel.static_check` is the same rule in Python.

    Members
    -------
    instruction : In(INSTRUCTION_LAYOUT)
    is_op : Out(OPCODE_LAYOUT)
        A bit per opcode, none for an undefined one.
    a_end, b_end : Out(17)
        ``a + count`` and ``b + count``.
    verdicts : Out(VERDICTS_LAYOUT)
        Each check's outcome.
    error : Out(ErrorCode)
        The first failing check's code (``NONE`` when all pass).
    bad : Out(2)
        Not 0 when a check fails (see :func:`judge`).
    """

    def __init__(self, cfg):
        self._cfg = cfg
        super().__init__({"instruction": In(INSTRUCTION_LAYOUT), "is_op": Out(OPCODE_LAYOUT),
                          "a_end": Out(17), "b_end": Out(17),
                          "verdicts": Out(VERDICTS_LAYOUT), "error": Out(ErrorCode),
                          "bad": Out(2)})

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        instr = self.instruction
        op, flags, a, b, n = instr.opcode, instr.flags, instr.a, instr.b, instr.count
        is_op = opcode_bits(self.is_op)
        m.d.comb += [is_op[code].eq(op == code.value) for code in Opcode]
        defined_flags = Signal(4)     # as wide as the field, so ~ covers every bit
        defined = 0                   # CONFIG's flags name a parameter: checked apart
        for code, code_flags in reversed(DEFINED_FLAGS.items()):
            if code is not Opcode.CONFIG:
                defined = Mux(is_op[code], code_flags, defined)
        m.d.comb += defined_flags.eq(defined)
        m.d.comb += [self.a_end.eq(a + n), self.b_end.eq(b + n)]
        ends, depths = {"a": self.a_end, "b": self.b_end}, memory_depths(cfg)
        from_acc = flags[WriteHostFlag.FROM_ACC.bit_length() - 1]
        applies = {None: None, True: from_acc, False: ~from_acc}

        def range_check(check):
            over = above(ends[check.field], depths[check.memory])
            condition = applies[check.from_acc]
            return over if condition is None else condition & over

        # Each parameter's range against constants (cheap: mostly sign-extension checks),
        # then the one the flags name.
        value = Cat(a, b).as_signed()
        config_out_of_range = Signal()
        with m.Switch(flags):
            for p, (low, high) in config_ranges(cfg).items():
                with m.Case(int(p)):
                    m.d.comb += config_out_of_range.eq(outside(value, low, high))
        fails = [range_check(check) for checks in RANGE_CHECKS.values() for check in checks]
        fails.append(config_lane_bad(n, cfg, greater=above) | config_out_of_range)
        bad_flags = ((is_op[Opcode.CONFIG] & (flags > DEFINED_FLAGS[Opcode.CONFIG])) |
                     (~is_op[Opcode.CONFIG] & ((flags & ~defined_flags) != 0)))
        m.d.comb += [
            self.verdicts.many_tiles.eq(above(n, tiles_held(cfg))),
            self.verdicts.no_opcode.eq(~self.is_op.as_value().any()),
            self.verdicts.bad_field.eq((instr.reserved != 0) | bad_flags),
            *(self.verdicts.fails[index].eq(fail) for index, fail in enumerate(fails)),
        ]
        error, bad = judge(is_op, self.verdicts)
        m.d.comb += [self.error.eq(error), self.bad.eq(bad)]
        return m
