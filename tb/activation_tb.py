"""Testbenches of the activation / requantisation unit against
:func:`tpuer.sim.activation_model.requantize`."""

import random

import numpy as np

from ..hw.activation import PARAM_WRITE_LAYOUT
from ..hw.activation_units import activation_unit
from ..isa import MAX_LEFT_SHIFT, Rounding
from ..sim.activation_model import ActivationParams, requantize, shift_places
from .harness import StreamSink, StreamSource, TestbenchError, reference_instance, run_cycles
from .packing import Codec

__all__ = ["BENCHES", "random_params", "load_params", "idle_param_writes"]


def random_params(cfg, rng):
    """Random but meaningful requantisation parameters: mostly gemmlowp-normalised
    multipliers in [2**30, 2**31), sometimes any int32; right shifts, some left shifts;
    either rounding; the clamp bounds the operand range, a random pair, or crossed."""
    cols = cfg.cols
    if rng.random() < 0.7:
        multiplier = rng.integers(1 << 30, 1 << 31, cols)
    else:
        multiplier = rng.integers(-(1 << 31), 1 << 31, cols)
    bias_span = min(cfg.acc_max, 1 << 20)
    shift = rng.integers(0, cfg.max_shift + 1, cols)
    if rng.random() < 0.3:
        shift = np.where(rng.random(cols) < 0.5, -rng.integers(1, MAX_LEFT_SHIFT + 1, cols),
                         shift)
    bounds = np.sort(rng.integers(cfg.operand_min, cfg.operand_max + 1, 2))
    kind = rng.random()
    clamp = (None, None) if kind < 0.4 else tuple(int(b) for b in (
        bounds if kind < 0.9 else bounds[::-1]))
    return ActivationParams(
        cfg, bias=rng.integers(-bias_span, bias_span + 1, cols), multiplier=multiplier,
        shift=shift, zero_point=int(rng.integers(cfg.operand_min, cfg.operand_max + 1)),
        relu=bool(rng.random() < 0.5), rounding=Rounding(int(rng.integers(2))),
        clamp_min=clamp[0], clamp_max=clamp[1])


def _encode_params(dut, params):
    right, left = shift_places(params.shift)
    return Codec(dut.params_layout).encode({
        "bias": params.bias, "multiplier": params.multiplier, "shift": right,
        "left_shift": left, "zero_point": params.zero_point, "relu": int(params.relu),
        "rounding": int(params.rounding), "clamp_min": params.clamp_min,
        "clamp_max": params.clamp_max})


def idle_param_writes(io, cfg):
    """Drive ``param_write`` idle (a lane-serial unit's input; undriven it is X in Icarus)."""
    if cfg.activation_steps:
        io.set("param_write", 0)


async def load_params(io, cfg, dut, params, rng, *, lane_writes=True):
    """Give the unit (or the datapath) ``dut`` the parameters ``params``: on ``params``, and
    for a lane-serial unit its biases and multipliers written on ``param_write`` as CONFIG
    writes them, in a random mix: every lane at once and then the lanes that differ (some
    again), every lane on its own, or first stale values in some lanes that a write of
    every lane must then override."""
    io.set("params", _encode_params(dut, params))
    if not cfg.activation_steps or not lane_writes:
        return
    codec = Codec(PARAM_WRITE_LAYOUT)

    def write(kind, lane, value):
        return {"en": 1, "multiplier": kind, "all_lanes": int(lane is None),
                "lane": 0xFFFF if lane is None else lane, "value": int(value) & 0xFFFFFFFF}

    writes = []
    for kind, values in ((0, params.bias), (1, params.multiplier)):
        mode = rng.random()
        if mode < 0.3:
            writes += [write(kind, lane, rng.integers(-(1 << 31), 1 << 31))
                       for lane in range(cfg.cols) if rng.random() < 0.5]
        if mode < 0.3 or mode >= 0.6:
            base = values[int(rng.integers(cfg.cols))]
            writes.append(write(kind, None, base))
            writes += [write(kind, lane, values[lane]) for lane in range(cfg.cols)
                       if values[lane] != base or rng.random() < 0.2]
        else:
            writes += [write(kind, lane, values[lane]) for lane in rng.permutation(cfg.cols)]
    for item in writes:
        io.set("param_write", codec.encode(item))
        await io.tick()
    io.set("param_write", 0)


async def check_batches(io, cfg, batches, *, rng, idle=0.0, stall=0.0, check_latency=False,
                        lane_writes=True):
    """Send each (params, accumulator rows) batch, waiting for the pipeline to drain before
    changing the parameters; compare every output row and tag with the golden model.
    Without ``lane_writes`` a lane-serial unit keeps the biases and multipliers it has."""
    dut = reference_instance(activation_unit(cfg))
    in_codec, out_codec = Codec(dut.in_layout), Codec(dut.out_layout)
    tag = waited = 0
    idle_param_writes(io, cfg)
    for params, rows in batches:
        expected = requantize(rows, params)
        await load_params(io, cfg, dut, params, rng, lane_writes=lane_writes)
        items = [{"data": row, "tag": (tag + k) % 65536} for k, row in enumerate(rows)]
        source = StreamSource("i", in_codec, items, idle=idle,
                              rng=random.Random(int(rng.integers(1 << 31))))
        sink = StreamSink("o", out_codec, stall=stall,
                          rng=random.Random(int(rng.integers(1 << 31))))
        await run_cycles(io, [source, sink], until=lambda: len(sink.items) == len(items),
                         max_cycles=100 + (20 + dut.latency) * len(items),
                         on_cycle=_busy_ahead_checker(cfg))
        for k, (item, want) in enumerate(zip(sink.items, expected)):
            if not np.array_equal(item["data"], want) or item["tag"] != items[k]["tag"]:
                raise TestbenchError(
                    f"[{io.simulator} activation {cfg.name}] row {k}: acc "
                    f"{rows[k].tolist()} gave {item['data'].tolist()}, expected "
                    f"{want.tolist()} (multiplier {params.multiplier.tolist()}, shift "
                    f"{params.shift.tolist()}, bias {params.bias.tolist()}, zero point "
                    f"{params.zero_point}, relu {params.relu}, {params.rounding.name} "
                    f"rounding, clamp {params.clamp_min}..{params.clamp_max})")
        if check_latency:
            latencies = set(np.array(sink.cycles) - np.array(source.sent_cycles))
            if latencies != {dut.latency}:
                raise TestbenchError(f"[{io.simulator} activation {cfg.name}] latency "
                                     f"{sorted(latencies)}, documented {dut.latency}")
        waited += source.waiting_cycles
        tag += len(items)
    # Over all batches: in one batch of 24 rows the output's stalls may all fall in cycles
    # without a row (about one seed in a thousand).
    if stall and waited == 0 and tag > 8:
        raise TestbenchError(f"[{io.simulator} activation {cfg.name}] back-pressure on "
                             f"the output never reached the input")


def _busy_ahead_checker(cfg):
    """A check for every cycle that ``busy_next`` said what ``busy`` is one cycle later."""
    said = {}

    def check(io):
        busy = io.get("busy")
        if said and busy != said["busy_next"]:
            raise TestbenchError(f"[{io.simulator} activation {cfg.name}] busy is {busy} in "
                                 f"cycle {io.cycle}, busy_next said {said['busy_next']}")
        said["busy_next"] = io.get("busy_next")
    return check


def _acc_rows(cfg, rng, count):
    kind = rng.random()
    if kind < 0.4:    # typical magnitudes of a layer's sums
        span = min(cfg.acc_max, 1 << 18)
        return rng.integers(-span, span + 1, (count, cfg.cols))
    return rng.integers(cfg.acc_min, cfg.acc_max + 1, (count, cfg.cols), dtype=np.int64)


async def bench_reset_values(io, cfg, rng):
    """Before any bias or multiplier is written, every lane uses bias 0 and multiplier
    2**31 - 1 (a lane-serial unit keeps them itself; shifts, zero point and ReLU random)."""
    params = ActivationParams(cfg, shift=rng.integers(0, 32, cfg.cols),
                              zero_point=int(rng.integers(cfg.operand_min, cfg.operand_max + 1)),
                              relu=bool(rng.random() < 0.5))
    await check_batches(io, cfg, [(params, _acc_rows(cfg, rng, 6))], rng=rng, lane_writes=False)


async def bench_random(io, cfg, rng):
    """Random parameters and accumulator rows, idle input and back-pressured output."""
    batches = [(random_params(cfg, rng), _acc_rows(cfg, rng, 24)) for _ in range(6)]
    await check_batches(io, cfg, batches, rng=rng, idle=0.2, stall=0.4)


async def bench_edges(io, cfg, rng):
    """The corners of every step: saturating bias, x = M = INT32_MIN, shifts 0 and 31,
    zero points -128 and 127, ReLU, ties in rounding."""
    lo, hi = cfg.acc_min, cfg.acc_max
    corners = np.array([lo, lo + 1, -1, 0, 1, hi - 1, hi, 1 << 30, -(1 << 30)], np.int64)
    corners = np.clip(corners, lo, hi)
    rows = np.array([np.roll(np.resize(corners, cfg.cols), k) for k in range(len(corners))])
    batches = []
    for multiplier in (-(1 << 31), (1 << 31) - 1, 1 << 30, 3 << 29):
        for shift in (0, 1, 31):
            for zero_point, relu in ((0, False), (cfg.operand_min, True), (cfg.operand_max, True),
                                     (-3, True)):
                for bias in (0, hi, lo):
                    params = ActivationParams(cfg, bias=bias, multiplier=multiplier, shift=shift,
                                              zero_point=zero_point, relu=relu)
                    batches.append((params, rows))
    # Ties: values exactly halfway, after the shift, in both signs.
    tie_rows = np.array([np.resize(np.array([6, -6, 2, -2, 10, -10]), cfg.cols)])
    batches.append((ActivationParams(cfg, multiplier=(1 << 31) - 1, shift=2), tie_rows))
    order = rng.permutation(len(batches))[:48]
    chosen = [batches[k] for k in order]
    # Ties in both roundings: a multiplier of exactly 1/2 halves the even values without
    # a remainder, and the right shift meets halves in both signs (6 -> 3 -> 1.5).
    for rounding in Rounding:
        chosen.append((ActivationParams(cfg, multiplier=1 << 30, shift=1, rounding=rounding),
                       tie_rows))
    # Single rounding rounds once: with a multiplier of 5/8 a product's high word is
    # 2.5 for 4 (then 1.25 after a shift of 1 is 1) and -7.5 for -12 (-3.75 is -4); a
    # nudge before the shift, a second rounding, would give 2 and -3.
    chosen.append((ActivationParams(cfg, multiplier=5 << 28, shift=1, rounding=Rounding.SINGLE),
                   np.array([np.resize(np.array([4, -12, 12, -4, 20, -20]), cfg.cols)])))
    # Left shifts that keep the value, and that wrap it within 32 bits; single rounding
    # with and without a right shift; bounds of RELU6 and RELU_N1_TO_1's kind, and crossed.
    for shift in (-1, -MAX_LEFT_SHIFT):
        for rounding in Rounding:
            for clamp in ((None, None), (-3, cfg.operand_max // 4), (2, -2)):
                chosen.append((ActivationParams(cfg, multiplier=1 << 30, shift=shift,
                                                zero_point=-3, rounding=rounding,
                                                clamp_min=clamp[0], clamp_max=clamp[1]),
                               rows))
    for shift in (0, 1, 31):
        chosen.append((ActivationParams(cfg, multiplier=3 << 29, shift=shift, bias=hi // 8,
                                        rounding=Rounding.SINGLE, relu=True,
                                        clamp_max=cfg.operand_max // 8 + 1), rows))
    # Rounded values about 2**operand_width, where the all-lanes unit stops adding the
    # high bits and takes the limit on their side, and about the operand range's ends
    # (multiplier ~1.0, shift 0: the rounded value is the accumulator word), against every
    # extreme zero point.
    edge = 1 << cfg.operand_width
    near = np.array([edge - 1, edge, edge + 1, -edge, -edge - 1, -edge + 1,
                     edge // 2 - 1, edge // 2, -edge // 2, -edge // 2 - 1, 3 * edge, -3 * edge])
    near_rows = np.clip(np.array([np.roll(np.resize(near, cfg.cols), k)
                                  for k in range(len(near))]), lo, hi)
    for zero_point in (cfg.operand_min, cfg.operand_max, 0):
        for relu in (False, True):
            chosen.append((ActivationParams(cfg, multiplier=(1 << 31) - 1, shift=0,
                                            zero_point=zero_point, relu=relu), near_rows))
    # The same about a shift (where the unit's masks move): each value scaled up by the
    # shift, plus offsets about half a step that round it up, down or away from zero;
    # -1 rounded up to 0 among them.
    for shift in (1, 3, 6):
        half = 1 << (shift - 1)
        offsets = np.array([0, half - 1, half, half + 1, -half - 1, -half, -half + 1])
        scaled = [value * (1 << shift) + offset for value in list(near) + [-1, 0, 1]
                  for offset in offsets]
        rows = np.clip(np.resize(np.array(scaled), (-(-len(scaled) // cfg.cols), cfg.cols)),
                       lo, hi)
        for zero_point, relu in ((cfg.operand_min, True), (cfg.operand_max, False), (0, True)):
            chosen.append((ActivationParams(cfg, multiplier=(1 << 31) - 1, shift=shift,
                                            zero_point=zero_point, relu=relu), rows))
    await check_batches(io, cfg, chosen, rng=rng, check_latency=True)


BENCHES = {"reset_values": bench_reset_values, "random": bench_random, "edges": bench_edges}
