"""bench.ask.bird's summary: every run reports EX per part of the fixed split beside the whole."""

from __future__ import annotations

from bench.ask.bird import summarize


def _rec(qid: int, db: str, correct: bool, wall: float) -> dict:
    return {"model": "m", "condition": "none", "db": db, "question_id": qid, "correct": correct, "wall_s": wall}


def test_summary_has_each_split_beside_all():
    part_of = {1: "train", 2: "dev", 3: "test", 4: "test"}
    records = [_rec(1, "a", True, 1.0), _rec(2, "a", False, 2.0), _rec(3, "b", True, 3.0), _rec(4, "b", False, 4.0)]
    summary, _ = summarize(records, ["m"], ["none"], ["a", "b"], part_of=part_of)
    assert summary["m/none/all"]["n"] == 4 and summary["m/none/all"]["ex"] == 0.5
    assert summary["m/none/split:train"] == {**summary["m/none/split:train"], "n": 1, "ex": 1.0}
    assert summary["m/none/split:dev"]["ex"] == 0.0
    assert summary["m/none/split:test"]["n"] == 2 and summary["m/none/split:test"]["ex"] == 0.5
    assert summary["m/none/split:test"]["warm_p50_s"] in (3.0, 4.0)


def test_a_question_outside_the_split_counts_only_in_all():
    summary, _ = summarize([_rec(9, "a", True, 1.0)], ["m"], ["none"], ["a"], part_of={})
    assert summary["m/none/all"]["n"] == 1
    assert not any(k.startswith("m/none/split:") for k in summary)
