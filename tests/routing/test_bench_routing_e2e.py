"""bench/routing/e2e.py on three Spider questions with a scripted model: records, scoring, resuming."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tagql.config import load_settings
from tagql.llm.scripted import ScriptedLLM

from bench.routing import e2e

# dev.json 0, 2 and 46; the scripted model answers the first right, the second in the wrong order
# (right as a set, wrong for Spider: the gold query orders), the third wrong
SQL = {
    "How many singers do we have?": "SELECT count(*) FROM singer",
    "Show name, country, age for all singers ordered by age from the oldest to the youngest.":
        "SELECT name, country, age FROM singer ORDER BY age ASC",
    "How many pets have a greater weight than 10?": "SELECT count(*) FROM pets",
}


def scripted() -> ScriptedLLM:
    def reply(messages) -> str:
        if "CREATE TABLE" not in messages[0].content:
            return "The answer."
        return next(sql for q, sql in SQL.items() if q in messages[-1].content)

    return ScriptedLLM(reply)


def test_subset_is_fixed_and_in_dev_order(spider_dir: Path) -> None:
    dev = json.loads((spider_dir / "dev.json").read_text())
    usable = lambda db: (spider_dir / "database" / db / f"{db}.sqlite").exists()
    a = e2e.subset(dev, usable=usable)
    assert a == e2e.subset(dev, usable=usable) and len(a) == 200 and a == sorted(set(a))
    assert a[:5] == [1, 14, 16, 27, 33]  # random.Random(0).sample over the usable questions: stated in the JSON
    assert all(usable(dev[i]["db_id"]) for i in a) and not usable("wta_1")


def test_match_rules() -> None:
    assert e2e.results_match([(1,), (2,)], [(2,), (1,)], in_order=False)
    assert not e2e.results_match([(1,), (2,)], [(2,), (1,)], in_order=True)
    assert not e2e.results_match([(1,), (1,)], [(1,)], in_order=False)  # a multiset: duplicates count
    assert e2e.ordered("SELECT name FROM singer ORDER BY age DESC")
    assert not e2e.ordered("SELECT count(*) FROM concert WHERE stadium_id = "
                             "(SELECT stadium_id FROM stadium ORDER BY capacity DESC LIMIT 1)")


def test_run_scores_conditions_and_resumes(small_collection, spider_dir: Path,
                                           tmp_path: Path) -> None:
    dev = json.loads((spider_dir / "dev.json").read_text())
    dev = [dev[0], dev[2], dev[46]]
    partial = tmp_path / "e2e.json.partial.jsonl"
    llm = scripted()
    records, reused, _ = e2e.run(small_collection, llm, load_settings(), dev, [0, 1, 2], e2e.CONDITIONS,
                                   partial, model="scripted", routed_method="bm25")
    assert reused == 0 and len(records) == 9 and len(partial.read_text().splitlines()) == 9
    by = {(r["i"], r["condition"]): r for r in records}
    for cond in e2e.CONDITIONS:
        assert [by[i, cond]["correct"] for i in range(3)] == [True, False, False], cond
        assert [by[i, cond]["correct_set"] for i in range(3)] == [True, True, False], cond
        assert all(by[i, cond]["db_ok"] for i in range(3)), cond
    assert by[0, "routed"]["routed_db"] == "concert_singer" and "singer" in by[0, "routed"]["prompt_tables"]
    assert by[0, "gold_db"]["prompt_tables"] is None

    summary, _ = e2e.summarise(records, e2e.CONDITIONS)
    assert summary["gold_db"]["ex_pct"] == 33.3 and summary["gold_db"]["ex_set_pct"] == 66.7
    assert summary["bm25"]["db_routed_pct"] == 100.0 and summary["routed"]["n"] == 3

    # a second run resumes: nothing is asked again
    again = scripted()
    records2, reused2, _ = e2e.run(small_collection, again, load_settings(), dev, [0, 1, 2], e2e.CONDITIONS,
                                     partial, model="scripted", routed_method="bm25")
    assert reused2 == 9 and not again.prompts and records2 == records


def test_conditions_refuse_an_unknown_name_and_keep_the_candidates_of_a_failed_ask(small_collection) -> None:
    with pytest.raises(SystemExit, match="unknown condition 'nope'"):
        e2e.Conditions(small_collection, scripted(), load_settings(), ["nope"])
    settings = load_settings()
    settings.answer.abstain = False
    conds = e2e.Conditions(small_collection, ScriptedLLM(lambda m: "SELECT nothing FROM nowhere"), settings,
                           ["bm25", "gold_db"])
    answer, cands, err = conds.ask("bm25", "How many singers do we have?", "concert_singer")
    assert answer is None and err is not None  # the query never runs...
    assert cands and cands[0]["database"] == "concert_singer"  # ...yet where it was routed is recorded
    answer, cands, err = conds.ask("gold_db", "How many singers do we have?", "concert_singer")
    assert answer is None and err is not None and cands == []  # the gold database is not routed
