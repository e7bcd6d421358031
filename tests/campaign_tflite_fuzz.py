"""Damaged TFLite files against LiteRT (``tpuer.tflite_fuzz``), with a fresh printed seed:
tpuer never fails inside (an exception other than ``TFLiteError``, a crash, a hang, a
runaway allocation); where both run, its outputs are LiteRT's; where LiteRT refuses, it
refuses. A campaign, not yet part of the suite (the contract does not hold everywhere yet:
see docs/verification.md): ``make fuzz-tflite MUTANTS=N`` runs it (the file's name keeps it
out of ``make test``)."""

import collections
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import seed as suite_seed

pytest.importorskip("ai_edge_litert")

MODELS = [Path(__file__).parents[1] / "tpuer" / "data" / "digits_cnn.tflite",
          *sorted((Path(__file__).parent / "data" / "tflite").glob("*.tflite"))]
#: Mutants per model (``make fuzz-tflite MUTANTS=N``).
MUTANTS = int(os.environ.get("TPUER_TFLITE_MUTANTS", "1000"))


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_damaged_models_get_litert_answer_or_a_clear_refusal(path):
    from tpuer.tflite_fuzz import Workers, judge, mutants, verdicts
    rng = np.random.default_rng([suite_seed(), MODELS.index(path)])
    workers = Workers()
    outcomes, broken = collections.Counter(), []
    try:
        for mutant in mutants(path.read_bytes(), rng, MUTANTS):
            litert, mine = verdicts(workers, mutant.data)
            reason = judge(litert, mine)
            outcomes[("LiteRT ran" if litert.ran else "LiteRT refused",
                      "tpuer ran" if mine.ran else "tpuer refused")] += 1
            if reason is not None:
                broken.append(f"{mutant.what}: {reason}")
    finally:
        workers.close()
    print(f"{path.name}: {dict(outcomes)}")
    assert not broken, "\n".join(broken)
