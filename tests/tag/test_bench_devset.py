"""The dev and held-out set files match their reference pipelines; the accuracy scorer's rules."""

from __future__ import annotations

import csv
import json
from collections import Counter

from bench.tag import accuracy, devset, heldout


def test_devset_shape_and_answers_match_reference_pipelines(shared_data):
    rows = list(csv.DictReader(devset.OUT.open()))
    assert len(rows) >= 40
    types = Counter(r["Query type"] for r in rows)
    assert all(types[t] >= 10 for t in ("Match", "Comparison", "Ranking", "Aggregation"))
    kinds = Counter((r["Query type"], r["Knowledge/Reasoning Type"]) for r in rows)
    assert all(v == 5 for v in kinds.values())
    fresh = {r["Query ID"]: r["Answer"] for r in devset.build()}
    for r in rows:
        assert json.loads(r["Answer"]) == json.loads(fresh[r["Query ID"]]), r["Query"]
        assert json.loads(r["Answer"]), f"empty reference for {r['Query']}"


def test_heldout_set_shape_and_answers_match_reference_pipelines(shared_data):
    rows = list(csv.DictReader(heldout.OUT.open()))
    assert Counter(r["Query type"] for r in rows) == {"Match": 5, "Comparison": 5, "Ranking": 5}
    dev_questions = {r["Query"] for r in csv.DictReader(devset.OUT.open())}
    assert not dev_questions & {r["Query"] for r in rows}
    fresh = {r["Query ID"]: r["Answer"] for r in devset.build(heldout.QUESTIONS)}
    for r in rows:
        assert json.loads(r["Answer"]) == json.loads(fresh[r["Query ID"]]), r["Query"]


def test_scorer_rules():
    assert accuracy.correct("Match", [1], ["1"], "")
    assert accuracy.correct("Match", ["a", "b"], ["B", "a"], "")
    assert accuracy.correct("Match", ["Angela Sanders"], [["Angela", "Sanders"]], "")
    assert not accuracy.correct("Match", ["a", "b"], ["a"], "")
    assert accuracy.correct("Ranking", ["x", "y"], ["X", "y"], "") and not accuracy.correct("Ranking", ["x", "y"], ["y", "x"], "")
    assert accuracy.correct("Aggregation", ["Pizza", 15], [], "They bought pizza; 15 heroes.")
    assert not accuracy.correct("Aggregation", ["Pizza", "Parking"], [], "pizza only")
