"""The real local model on a handful of rows: grammar-constrained filter and score (few LM calls)."""

from __future__ import annotations

import pytest

from tagql.llm import make_llm
from tagql.tag.operators import SemEngine, SemTable

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def llm():
    return make_llm(backend="local")


def test_filter_with_real_model_dedupes_and_answers_booleans(llm):
    rows = [("Palo Alto",), ("Fresno",), ("Palo Alto",), ("Cupertino",), ("Fresno",)]
    eng = SemEngine(llm)
    before = llm.usage.calls
    out = SemTable(["City"], rows, eng).sem_filter("{City} is a city in the Silicon Valley region of California")
    assert llm.usage.calls - before == 3  # three distinct cities
    kept = {r[0] for r in out.rows}
    assert "Fresno" not in kept and "Palo Alto" in kept


def test_score_with_real_model_returns_digits(llm):
    eng = SemEngine(llm)
    scores = eng.score_many("{element} is a halogen", ["chlorine is a halogen", "carbon is a halogen"])
    assert all(0 <= s <= 10 for s in scores) and scores[0] > scores[1]
