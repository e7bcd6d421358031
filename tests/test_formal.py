"""The formal proofs (``tpuer.sim.formal``): each holds on the design, and each fails on a
design with a bug put in on purpose, so that none of them passes for want of checking."""

import inspect
import types

import pytest

from tpuer.sim.formal import PROOFS, ProofFailed, prove

#: For each proof, a bug: (module, class, the line as it is, the line with the bug).
MUTATIONS = {
    "accumulator_saturates": ("accumulators", "AccumulatorMemory",
                              "Mux(sign, smallest, largest)", "Mux(sign, largest, smallest)"),
    "accumulator_saturates_registered": ("accumulators", "AccumulatorMemory",
                                         "lane_clipped = accumulate[lane] & (sign == word[-1])"
                                         " & (total[-1] != sign)",
                                         "lane_clipped = accumulate[lane] & (total[-1] != sign)"),
    "stream_buffer_skid": ("stream_buffer", "StreamBuffer",
                           "with m.If(~skid_valid):", "with m.If(1):"),
    "stream_buffer_half_rate": ("stream_buffer", "HalfRateStreamBuffer",
                                "self.i.ready.eq(~self.o.valid)",
                                "self.i.ready.eq(~self.o.valid | self.o.ready)"),
    "shift_queue": ("queues", "ShiftQueue",
                    "Mux(read, k + 1, k)", "Mux(read, k, k + 1)"),
    "ring_queue": ("queues", "RingQueue",
                   "m.d.sync += open_slot.eq(level_next != self._depth)",
                   "m.d.sync += open_slot.eq(1)"),
    "lookahead_ring_queue": ("queues", "LookaheadRingQueue",
                             "Cat((write_at_next == k) & (level_next != self._depth)",
                             "Cat((write_at_next == k)"),
    "link_command_queue": ("serial_link", "CommandQueue",
                           "m.d.sync += tail.eq(committed)", "pass"),
    "link_command_queue_registered": ("serial_link", "RegisteredSerialLink",
                                      "(queue.used + link.short_count <= queue.depth)",
                                      "(queue.used + link.short_count <= queue.depth + 1)"),
    "weight_fifo": ("weight_fifo", "WeightFIFO",
                    "read = (stored != 0) & (~head_valid | self.r.ready)",
                    "read = (stored != 0)"),
    "sequencer": ("instruction_checks", "InstructionChecks",
                  "over = above(ends[check.field], depths[check.memory])",
                  "over = above(ends[check.field], depths[check.memory] + 1)"),
    "sequencer_registered": ("sequencer", "RegisteredSequencer",
                             "finds_no_tile = r.fetched_takes_tile & (tiles_then == 0)",
                             "finds_no_tile = r.fetched_takes_tile & 0"),
}


def test_every_proof_has_a_mutation():
    assert set(MUTATIONS) == set(PROOFS)


@pytest.mark.parametrize("name", list(PROOFS))
def test_proof_holds(name):
    length, seconds = prove(PROOFS[name])
    print(f"{name}: proven by induction of length {length} in {seconds:.1f} s")


def mutated(module_name, old, new):
    """A copy of ``tpuer.hw.<module_name>`` whose source has ``old`` replaced by ``new``."""
    import importlib
    original = importlib.import_module(f"tpuer.hw.{module_name}")
    source = inspect.getsource(original)
    assert source.count(old) == 1, f"the mutation's line is not once in {module_name}: {old}"
    copy = types.ModuleType(original.__name__)
    copy.__package__ = original.__package__
    exec(compile(source.replace(old, new), original.__file__, "exec"), copy.__dict__)
    return original, copy


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_proof_fails_on_a_mutated_design(name, monkeypatch):
    module_name, cls, old, new = MUTATIONS[name]
    original, copy = mutated(module_name, old, new)
    part = getattr(original, cls)
    monkeypatch.setattr(original, cls, getattr(copy, cls))
    # A part is also named by the classes that use it (as Sequencer.Checks): those too.
    import tpuer.hw
    for module in vars(tpuer.hw).values():
        for user in vars(module).values() if isinstance(module, types.ModuleType) else ():
            if isinstance(user, type):
                for attribute, value in list(vars(user).items()):
                    if value is part:
                        monkeypatch.setattr(user, attribute, getattr(copy, cls))
    with pytest.raises(ProofFailed):
        prove(PROOFS[name])
