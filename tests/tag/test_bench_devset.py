"""The dev and held-out set files match their reference pipelines; the accuracy scorer's rules."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_devset_shape_and_answers_match_reference_pipelines(shared_data, load_bench):
    dev = load_bench("tag_devset")
    rows = list(csv.DictReader((REPO / "bench" / "data" / "tag_dev.csv").open()))
    assert len(rows) >= 40
    types = Counter(r["Query type"] for r in rows)
    assert all(types[t] >= 10 for t in ("Match", "Comparison", "Ranking", "Aggregation"))
    kinds = Counter((r["Query type"], r["Knowledge/Reasoning Type"]) for r in rows)
    assert all(v == 5 for v in kinds.values())
    fresh = {r["Query ID"]: r["Answer"] for r in dev.build()}
    for r in rows:
        assert json.loads(r["Answer"]) == json.loads(fresh[r["Query ID"]]), r["Query"]
        assert json.loads(r["Answer"]), f"empty reference for {r['Query']}"


def test_heldout_set_shape_and_answers_match_reference_pipelines(shared_data, load_bench):
    held = load_bench("tag_heldout")
    rows = list(csv.DictReader((REPO / "bench" / "data" / "tag_heldout.csv").open()))
    assert Counter(r["Query type"] for r in rows) == {"Match": 5, "Comparison": 5, "Ranking": 5}
    dev_questions = {r["Query"] for r in csv.DictReader((REPO / "bench" / "data" / "tag_dev.csv").open())}
    assert not dev_questions & {r["Query"] for r in rows}
    fresh = {r["Query ID"]: r["Answer"] for r in held._devset.build(held.QUESTIONS)}
    for r in rows:
        assert json.loads(r["Answer"]) == json.loads(fresh[r["Query ID"]]), r["Query"]


def test_scorer_rules(load_bench):
    acc = load_bench("tag_accuracy")
    assert acc.correct("Match", [1], ["1"], "")
    assert acc.correct("Match", ["a", "b"], ["B", "a"], "")
    assert acc.correct("Match", ["Angela Sanders"], [["Angela", "Sanders"]], "")
    assert not acc.correct("Match", ["a", "b"], ["a"], "")
    assert acc.correct("Ranking", ["x", "y"], ["X", "y"], "") and not acc.correct("Ranking", ["x", "y"], ["y", "x"], "")
    assert acc.correct("Aggregation", ["Pizza", 15], [], "They bought pizza; 15 heroes.")
    assert not acc.correct("Aggregation", ["Pizza", "Parking"], [], "pizza only")
