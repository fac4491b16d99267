"""bench/tag/operator_lotus.py: data, labels, metrics and exact LM-call counts (scripted LM, no model);
the LOTUS worker's message adapter (runs without LOTUS installed)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from bench.tag import operator_lotus, operator_lotus_worker


def test_rows_and_labels_come_from_world_1(shared_data):
    rows, population = operator_lotus.load(1000)
    assert len(rows) == 1000 and len({r[0] for r in rows}) == 1000
    small, _ = operator_lotus.load(50)
    assert small == rows[:50]  # a smoke run is a prefix of the full run
    labels = operator_lotus.filter_labels([r[0] for r in rows], list(operator_lotus.FILTERS))
    con = sqlite3.connect(f"file:{shared_data / 'spider/database/world_1/world_1.sqlite'}?mode=ro", uri=True)
    for rid, city, country in rows[:40]:
        name, cont, pop, english = con.execute(
            "SELECT co.Name, co.Continent, ci.Population, EXISTS (SELECT 1 FROM countrylanguage cl "
            "WHERE cl.CountryCode = co.Code AND cl.Language = 'English' AND cl.IsOfficial = 'T') FROM city ci "
            "JOIN country co ON ci.CountryCode = co.Code WHERE ci.ID = ?", (rid,)).fetchone()
        assert (name, pop) == (country, population[rid])
        assert (labels["europe"][rid], labels["africa"][rid], labels["asia"][rid], labels["english"][rid]) == (
            cont == "Europe", cont == "Africa", cont == "Asia", bool(english))
    assert 100 < sum(labels["europe"].values()) < 400
    assert all(50 < sum(v.values()) < 500 for v in labels.values())  # no filter keeps (almost) nothing or all


def test_metrics():
    europe = {1: True, 2: False, 3: True, 4: False}
    m = operator_lotus.filter_metrics({1, 2}, europe)
    assert (m["accuracy"], m["precision"], m["recall"]) == (0.5, 0.5, 0.5)
    pop = {i: 100 - i for i in range(1, 61)}  # id 1 is the most populous
    t = operator_lotus.topk_metrics([1, 2, 55], pop, 3)
    assert t["precision_at_k"] == round(2 / 3, 3) and t["hit_top50"] == round(2 / 3, 3)


def test_scripted_run_counts_calls_exactly(shared_data, tmp_path):
    out = tmp_path / "r.json"
    assert operator_lotus.main(["--scripted", "--rows", "60", "--k", "5", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    rows, _ = operator_lotus.load(60)
    countries = len({r[2] for r in rows})
    r = res["results"]
    nf = len(operator_lotus.FILTERS)
    assert res["distinct_countries"] == countries and "lotus" not in r and list(res["filters"]) == list(operator_lotus.FILTERS)
    for name in operator_lotus.FILTERS:  # dedupe on {country}, per filter
        assert r["tagql"]["filters"][name]["lm_calls"] == countries
        assert r["tagql_batch8"]["filters"][name]["lm_calls"] == -(-countries // 8)
        assert r["naive"]["filters"][name]["lm_calls"] == 60
    assert r["tagql"]["filter"]["lm_calls"] == nf * countries  # the summary adds the filters up
    assert r["naive"]["topk"]["lm_calls"] == 60
    assert r["tagql_warm"]["filter"]["lm_calls"] == 0 and r["tagql_warm"]["topk"]["lm_calls"] == 0
    # one expected score (digit probabilities) per distinct row, no tie-break calls
    assert r["tagql"]["topk"]["lm_calls"] == 60 and r["tagql_batch8"]["topk"]["lm_calls"] == 8
    for m in ("tagql", "tagql_batch8", "tagql_warm", "naive"):  # the scripted LM knows the labels
        assert r[m]["filter"]["accuracy"] == 1.0
        assert all(f["accuracy"] == 1.0 for f in r[m]["filters"].values())
    assert r["tagql"]["topk"]["precision_at_k"] == r["tagql_batch8"]["topk"]["precision_at_k"] == 1.0
    assert r["naive"]["topk"]["precision_at_k"] < 1.0  # integer scores tie: row order decides
    one = tmp_path / "one.json"  # a single filter
    assert operator_lotus.main(["--scripted", "--rows", "60", "--ops", "filter", "--filters", "asia",
                       "--methods", "tagql", "--out", str(one)]) == 0
    assert json.loads(one.read_text())["results"]["tagql"]["filter"]["filters"] == ["asia"]


def test_filter_target_is_judged_on_the_mean_accuracy_over_filters():
    truth = {"europe": {1: True, 2: False}, "asia": {1: False, 2: True}}
    results = {
        "tagql": {"filters": {"europe": {"lm_calls": 10, "seconds": 2.0, "ids": [1, 2]},
                              "asia": {"lm_calls": 10, "seconds": 2.0, "ids": [2]}}},
        "lotus": {"filters": {"europe": {"lm_calls": 100, "seconds": 20.0, "ids": [1]},
                              "asia": {"lm_calls": 100, "seconds": 20.0, "ids": [1]}}},
    }
    operator_lotus.summarize(results, truth, {}, 1)
    assert results["tagql"]["filter"] == {"filters": ["europe", "asia"], "lm_calls": 20, "seconds": 4.0,
                                          "accuracy": 0.75}
    assert results["lotus"]["filter"]["accuracy"] == 0.5
    t = operator_lotus.targets(results)["filter"]
    assert (t["calls_ratio"], t["speedup"], t["met"]) == (10.0, 10.0, True)
    assert t["filters_at_least_lotus"] == {"europe": False, "asia": True}  # europe alone would miss it
    assert "asia" in operator_lotus.table(results, 2, 1)


def test_lotus_worker_flattens_text_parts_only():
    msg = {"role": "user", "content": [{"type": "text", "text": "Question: a\n"}, {"type": "text", "text": "Doc"}]}
    assert operator_lotus_worker.flatten(msg) == {"role": "user", "content": "Question: a\nDoc"}
    assert operator_lotus_worker.flatten({"role": "system", "content": "x"}) == {"role": "system", "content": "x"}
    with pytest.raises(SystemExit):
        operator_lotus_worker.flatten({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]})


def test_a_lotus_operator_stopped_by_its_budget_counts_as_unanswered():
    """LOTUS's sem_topk can need ~n^2/2 comparisons; stopped by --lotus-budget-s it has no answer, its
    calls and time are lower bounds, and the target is judged against accuracy 0 for it."""
    results = {
        "tagql": {"topk": {"lm_calls": 100, "seconds": 20.0, "ids": [1, 2]}},
        "lotus": {"topk": {"lm_calls": 400, "seconds": 90.0, "ids": None, "finished": False}},
    }
    operator_lotus.summarize(results, {}, {1: 10, 2: 5, 3: 1}, 2)
    assert "precision_at_k" not in results["lotus"]["topk"] and results["tagql"]["topk"]["precision_at_k"] == 1.0
    t = operator_lotus.targets(results)["topk"]
    assert (t["calls_ratio"], t["speedup"], t["lotus_finished"], t["met"]) == (4.0, 4.5, False, True)
    assert ">400" in operator_lotus.table(results, 3, 2)
