"""The RTL's arithmetic helpers (``tpuer.hw.arith``) against Python's integers, on every
value of small signed and unsigned signals."""

import pytest
from amaranth.hdl import Module, Signal, signed
from amaranth.sim import Simulator

from tpuer.hw.arith import above, outside, saturate

WIDTH = 6
ABOVE_CONSTANTS = [-1, 0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 31, 32, 33, 62, 63, 64, 100]
RANGES = [(-32, 31), (-8, 7), (-1, 0), (0, 15), (0, 1), (0, 31), (0, 63), (-3, 5),
          (-40, 40), (1, 10), (5, 5)]


def _evaluate(build):
    """Drive an unsigned and a signed WIDTH-bit signal through every value; ``build(m, u,
    s)`` returns ``[(name, signal, expected(u_value, s_value))]``; returns the mismatches."""
    m = Module()
    u, s = Signal(WIDTH), Signal(signed(WIDTH))
    checks = build(m, u, s)
    bad = []

    async def bench(ctx):
        for value in range(1 << WIDTH):
            signed_value = value - (1 << WIDTH) if value >> (WIDTH - 1) else value
            ctx.set(u, value)
            ctx.set(s, signed_value)
            for name, out, expected in checks:
                want = expected(value, signed_value)
                if ctx.get(out) != want:
                    bad.append((name, value, signed_value, ctx.get(out), want))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    return bad


def test_above_is_greater_than_for_every_constant_and_value():
    def build(m, u, s):
        checks = []
        for c in ABOVE_CONSTANTS:
            out = Signal(name=f"above_{c + 1}")
            m.d.comb += out.eq(above(u, c))
            checks.append((f"above {c}", out, lambda v, sv, c=c: int(v > c)))
        return checks
    assert _evaluate(build) == []


def test_outside_is_out_of_range_for_signed_and_unsigned_values():
    def build(m, u, s):
        checks = []
        for low, high in RANGES:
            for kind, sig in (("u", u), ("s", s)):
                out = Signal(name=f"outside_{kind}_{low + 64}_{high + 64}")
                m.d.comb += out.eq(outside(sig, low, high))
                pick = (lambda v, sv: v) if kind == "u" else (lambda v, sv: sv)
                checks.append((f"outside {kind} [{low}, {high}]", out,
                               lambda v, sv, pick=pick, low=low, high=high:
                               int(not low <= pick(v, sv) <= high)))
        return checks
    assert _evaluate(build) == []


@pytest.mark.parametrize("bits", [1, 3, 4, 5, 6, 8])
def test_saturate_clamps_signed_and_unsigned_values(bits):
    def build(m, u, s):
        checks = []
        low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        for kind, sig in (("u", u), ("s", s)):
            value, clipped = saturate(sig, signed(bits))
            out, flag = Signal(signed(bits), name=f"sat_{kind}"), Signal(name=f"clip_{kind}")
            m.d.comb += [out.eq(value), flag.eq(clipped)]
            pick = (lambda v, sv: v) if kind == "u" else (lambda v, sv: sv)
            checks.append((f"saturate {kind}", out,
                           lambda v, sv, pick=pick: min(max(pick(v, sv), low), high)))
            checks.append((f"clipped {kind}", flag,
                           lambda v, sv, pick=pick: int(not low <= pick(v, sv) <= high)))
        return checks
    assert _evaluate(build) == []
