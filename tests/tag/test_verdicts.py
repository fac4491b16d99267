"""A filter's verdicts from P(yes) over all its inputs (tagql.tag.verdicts), and the engine using them."""

from __future__ import annotations

import re

import pytest

from tagql.llm.scripted import ScriptedLLM
from tagql.tag.operators import SemEngine, SemTable
from tagql.tag.verdicts import DEFAULT, cut, split_verdicts

# P(yes) the local 1.5B model gave (bench/tag/judge.py, this repository's measurements)
NEW_ENGLAND = {"Massachusetts": 0.359, "New York": 0.035, "Texas": 0.010, "Illinois": 0.020, "Utah": 0.012}
SOUTH_AMERICA = {"South America": 0.296, "Caribbean": 0.259, "Central America": 0.174, "Melanesia": 0.130,
                 "North America": 0.026, "Western Europe": 0.010}


def test_the_cut_goes_into_the_widest_gap_where_the_model_is_unsure():
    assert split_verdicts(list(NEW_ENGLAND.values())) == [True, False, False, False, False]
    assert 0.035 < cut(list(NEW_ENGLAND.values())) < 0.359


def test_without_a_wide_enough_gap_the_cut_stays_at_one_half():
    even = [0.05 + 0.9 * i / 40 for i in range(41)]  # evenly spread: no gap says anything
    assert cut(even) == DEFAULT
    assert split_verdicts([0.01, 0.02, 0.03, 0.04]) == [False] * 4  # all sure no: nothing to cut
    assert split_verdicts([0.95, 0.97, 0.99]) == [True] * 3  # all sure yes


def test_a_gap_among_sure_answers_moves_nothing():
    # 0.12 -> 0.001 is the widest gap in log-odds, but both are sure no's: the cut goes above 0.12
    p = [0.6, 0.12, 0.001, 0.0001]
    assert 0.12 < cut(p) < 0.6 and split_verdicts(p) == [True, False, False, False]


def test_too_few_inputs_keep_the_fixed_cut():
    assert split_verdicts([0.3, 0.2]) == [False, False]
    assert split_verdicts([0.7]) == [True]


def test_the_cut_can_also_rise_above_one_half():
    assert split_verdicts([0.89, 0.87, 0.55, 0.52]) == [True, True, False, False]


def _probs(table: dict[str, float]):
    def choice_probs(messages, choices):
        claim = re.search(r"<statement>(.*?)</statement>", messages[-1].content).group(1)
        p = next(v for k, v in table.items() if claim.startswith(k + " "))
        return [p, 0.0, 1 - p, 0.0]
    return choice_probs


def test_the_engine_filters_with_the_split_verdicts_when_the_lm_gives_probabilities():
    llm = ScriptedLLM([], choice_probs=_probs(SOUTH_AMERICA))
    table = SemTable(["region"], [(r,) for r in SOUTH_AMERICA], SemEngine(llm, cascade="off"))
    kept = table.sem_filter("{region} is a region of South America")
    # the widest unsure gap is 0.259 -> 0.174: one false positive, where the fixed cut found nothing
    assert [r[0] for r in kept.rows] == ["South America", "Caribbean"]
    assert llm.usage.calls == len(SOUTH_AMERICA)


def test_split_off_or_no_probabilities_reads_the_generated_answers():
    llm = ScriptedLLM(["no"] * 6, choice_probs=_probs(SOUTH_AMERICA))
    table = SemTable(["region"], [(r,) for r in SOUTH_AMERICA], SemEngine(llm, cascade="off", split=False))
    assert table.sem_filter("{region} is a region of South America").rows == []
    assert all(c is not None for c in llm.constraints)  # every call was the grammar-forced yes/no


def test_probabilities_are_cached_per_claim():
    from tagql.tag.cache import OpCache

    cache = OpCache(None)
    rows = [(r,) for r in NEW_ENGLAND]
    for expected_calls in (len(rows), 0):
        llm = ScriptedLLM([], choice_probs=_probs(NEW_ENGLAND))
        kept = SemTable(["state"], rows, SemEngine(llm, cache=cache, cascade="off")).sem_filter(
            "{state} is a New England state")
        assert [r[0] for r in kept.rows] == ["Massachusetts"] and llm.usage.calls == expected_calls


@pytest.mark.parametrize("setting, split", [({}, True), ({"split_verdicts": False}, False)])
def test_the_setting_reaches_the_engine(tmp_path, shared_data, setting, split):
    from tagql.config import load_settings
    from tagql.db.connection import open_database
    from tagql.pipeline import TagQL
    from tagql.methods import make_engine

    db = open_database(shared_data / "bird" / "dev_databases" / "superhero" / "superhero.sqlite")
    session = TagQL(db, ScriptedLLM([]), settings=load_settings(cache_dir=str(tmp_path), tag=setting))
    assert make_engine(session).split is split


EXPENSES = ["Post Cards, Posters", "Water, Cookies", "Pizza", "Posters", "Parking", "Water, chips, cookies",
            "Club shirts", "Travel Mug", "Alumni Glass", "Water, Veggie tray, supplies", "Water, cookies, chips",
            "Bakery - Donuts, muffins"]  # student_club's expense descriptions
FOOD = {"Water, Cookies", "Pizza", "Water, chips, cookies", "Water, Veggie tray, supplies", "Water, cookies, chips",
        "Bakery - Donuts, muffins"}


@pytest.mark.model
def test_split_verdicts_with_the_real_model():
    """The 1.5B judge says "no" to most food on its own (1 of 6, bench/results/tag/judge_variants.json); its
    P(yes) still sets the food apart, and the split finds it."""
    from tagql.llm import make_llm

    llm = make_llm(backend="local")
    engine = SemEngine(llm, cascade="off")
    p = engine._yes_probs("{expense_description} is food or drink",
                          [f"{e} is food or drink" for e in EXPENSES], "filter")
    assert p is not None and all(0.0 <= x <= 1.0 for x in p)
    kept = {r[0] for r in SemTable(["expense_description"], [(e,) for e in EXPENSES], engine)
            .sem_filter("{expense_description} is food or drink").rows}
    assert len(kept & FOOD) >= 5 and len(kept - FOOD) <= 1
