"""The long campaign of damaged TFLite files against LiteRT (``tpuer.tflite_fuzz``): MUTANTS
mutants of each shipped and test model, a fresh printed seed (``TPUER_SEED=N`` repeats it),
every breach of the contract shrunk to the change that causes it. ``make fuzz-tflite
MUTANTS=N`` runs it over every core; its name keeps it out of ``make test``, which runs
a short one (``tests/test_tflite_files.py``)."""

import os

import numpy as np
import pytest

from conftest import seed as suite_seed
from test_tflite_files import ALL_MODELS

pytest.importorskip("ai_edge_litert")

#: Mutants per model (``make fuzz-tflite MUTANTS=N``).
MUTANTS = int(os.environ.get("TPUER_TFLITE_MUTANTS", "1000"))


@pytest.mark.parametrize("path", ALL_MODELS, ids=lambda p: p.stem)
def test_damaged_models_get_litert_answer_or_a_clear_refusal(path):
    from tpuer.tflite_fuzz import Workers, campaign
    workers = Workers()
    try:
        outcomes, breaches = campaign(
            path.read_bytes(), np.random.default_rng([suite_seed(), ALL_MODELS.index(path)]),
            MUTANTS, workers)
    finally:
        workers.close()
    print(f"\n{path.name}: {MUTANTS} mutants: " +
          ", ".join(f"{a} and {b}: {n}" for (a, b), n in sorted(outcomes.items())))
    assert not breaches, "\n".join(breaches)
