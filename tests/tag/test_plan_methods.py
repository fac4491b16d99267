"""Hybrid plans (validation before running) and the five methods, scripted LM, real SQLite DB."""

from __future__ import annotations

import json
import re

import pytest

from tagql.config import load_settings
from tagql.db.connection import open_database
from tagql.llm.scripted import ScriptedLLM
from tagql.pipeline import TagQL
from tagql.tag.methods import METHODS, answer, is_aggregation, parse_list
from tagql.tag.operators import SemEngine
from tagql.tag.plan import Plan, PlanError, Planner, run_plan, validate_plan

PEOPLE = {"George Lucas", "J. K. Rowling", "J. R. R. Tolkien"}


@pytest.fixture
def superhero(shared_data):
    return open_database(shared_data / "bird" / "dev_databases" / "superhero" / "superhero.sqlite")


def judge(messages):
    m = re.search(r"<statement>(.*?)</statement>", messages[-1].content)
    return "yes" if m and m.group(1).split(" is ")[0] in PEOPLE else "no"


HYBRID = {
    "sql": "SELECT p.publisher_name, COUNT(*) AS heroes FROM superhero s JOIN publisher p "
           "ON s.publisher_id = p.id GROUP BY p.publisher_name ORDER BY heroes DESC",
    "operators": [{"op": "filter", "instruction": "{publisher_name} is a person, not a company"},
                  {"op": "limit", "n": 1}, {"op": "columns", "columns": ["publisher_name"]}],
}


def test_run_hybrid_plan(superhero):
    eng = SemEngine(ScriptedLLM(judge))
    run = run_plan(Plan.from_obj(json.loads(json.dumps(HYBRID))), superhero, eng)
    assert run.result.columns == ["publisher_name"]
    assert run.result.rows[0][0] in PEOPLE
    assert [t["step"] for t in run.trace] == ["sql", "filter", "limit", "columns"]


@pytest.mark.parametrize("bad, msg", [
    ({"sql": "SELECT nope FROM superhero", "operators": []}, "SQL is invalid"),
    ({"sql": "DELETE FROM superhero", "operators": []}, "SQL is invalid"),
    ({"sql": "SELECT superhero_name FROM superhero", "operators": [{"op": "explode"}]}, "unknown operator"),
    ({"sql": "SELECT superhero_name FROM superhero",
      "operators": [{"op": "filter", "instruction": "{full_name} is a woman"}]}, "references column 'full_name'"),
    ({"sql": "SELECT superhero_name FROM superhero",
      "operators": [{"op": "count"}, {"op": "filter", "instruction": "{superhero_name} is cool"}]},
     "references column 'superhero_name'"),
    ({"sql": "SELECT superhero_name FROM superhero",
      "operators": [{"op": "agg", "instruction": "Summarize"}, {"op": "count"}]}, "must be the last"),
    ({"sql": "SELECT superhero_name FROM superhero", "operators": [{"op": "topk", "instruction": "{superhero_name}"}]},
     "k >= 1"),
])
def test_invalid_plans_rejected_before_any_lm_call(superhero, bad, msg):
    llm = ScriptedLLM([])
    with pytest.raises(PlanError, match=msg):
        validate_plan(Plan.from_obj(bad), superhero, SemEngine(llm))
    assert llm.usage.calls == 0


def test_planner_repairs_an_invalid_plan(superhero):
    bad = json.dumps({"sql": "SELECT superhero_name FROM superhero",
                      "operators": [{"op": "filter", "instruction": "{name} is a woman"}]})
    llm = ScriptedLLM(["yes", bad, json.dumps(HYBRID)])
    plan, attempts = Planner(superhero, llm, SemEngine(llm)).make("Which person publisher has most heroes?")
    assert plan.operators[0]["op"] == "filter"
    assert attempts[0] == {"needs_lm_operators": True}
    assert attempts[1]["error"] and "name" in attempts[1]["error"] and attempts[2]["error"] is None
    assert "at least one language-model operator" in llm.prompts[1][-1].content
    assert llm.prompts[0][0] == llm.prompts[1][0]  # the yes/no question shares the plan's system prefix
    assert "invalid" in llm.prompts[2][-1].content


def session(db, fn):
    return TagQL(db, ScriptedLLM(fn), settings=load_settings(cache_dir="/nonexistent-unused"))


def test_tag_method_end_to_end(superhero, tmp_path):
    def fn(messages):
        if "Does answering" in messages[-1].content:
            return "yes"
        if "Question:" in messages[-1].content and "plan" in messages[0].content:
            return json.dumps(HYBRID)
        return judge(messages)

    s = TagQL(superhero, ScriptedLLM(fn), settings=load_settings(cache_dir=str(tmp_path)))
    a = answer(s, "Which publisher that is a person has the most heroes?", "tag")
    assert a.method == "tag" and a.values and a.values[0] in PEOPLE
    assert a.plan["operators"][0]["op"] == "filter" and not a.plan["relational"]
    # plan + filter calls in heroes-count order until the first person passes (filter + limit 1 stops early)
    assert 2 < a.lm_calls < 2 + 25
    d = a.to_dict()
    assert d["plan"]["sql"].startswith("SELECT") and d["lm_calls"] == a.lm_calls
    assert json.loads(json.dumps(d))["method"] == "tag"  # the --json output is serialisable
    # a second run hits the persistent operator cache: only the plan call
    a2 = answer(s, "Which publisher that is a person has the most heroes?", "tag")
    assert a2.lm_calls == 2 and a2.values == a.values  # classify + plan


def test_relational_question_is_plain_sql(superhero, tmp_path):
    plan = {"sql": "SELECT COUNT(*) FROM superhero", "operators": []}
    s = TagQL(superhero, ScriptedLLM(["no", json.dumps(plan)]), settings=load_settings(cache_dir=str(tmp_path)))
    a = answer(s, "How many superheroes are there?", "tag")
    assert a.values == [750] and a.plan["relational"] and a.lm_calls == 2


def test_baselines(superhero, tmp_path):
    st = load_settings(cache_dir=str(tmp_path))
    sql = "SELECT superhero_name FROM superhero WHERE height_cm > 250 ORDER BY superhero_name"
    a = answer(TagQL(superhero, ScriptedLLM([sql]), settings=st), "Which heroes are taller than 250 cm?", "text2sql")
    assert a.values and a.lm_calls == 1
    llm = ScriptedLLM([sql, '["Galactus", "Ymir"]'])
    a = answer(TagQL(superhero, llm, settings=st), "Which heroes are taller than 250 cm?", "text2sql_lm")
    assert a.values == ["Galactus", "Ymir"] and a.lm_calls == 2
    assert "evaluatable in Python" in llm.prompts[1][0].content


def test_rag_and_retrieval_rank(superhero, tmp_path, monkeypatch):
    import numpy as np

    import tagql.tag.methods as m

    texts = [f"Table publisher:\n- publisher_name: P{i}" for i in range(40)]
    monkeypatch.setitem(m._ROW_INDEX, str(superhero.path), (texts, np.eye(40)))

    class FakeEmb:
        def embed(self, t):
            return np.eye(40)[:1]

    monkeypatch.setattr("tagql.embeddings.default_embedder", lambda: FakeEmb())
    st = load_settings(cache_dir=str(tmp_path))
    llm = ScriptedLLM(['["P0"]'])
    a = answer(TagQL(superhero, llm, settings=st), "Which publisher is first?", "rag")
    assert a.values == ["P0"] and a.lm_calls == 1 and len(a.rows) == 10
    llm = ScriptedLLM(lambda msgs: "5" if "Score" in msgs[-1].content else '["P3"]')
    a = answer(TagQL(superhero, llm, settings=st), "Which publisher is first?", "retrieval_rank")
    assert a.values == ["P3"] and a.lm_calls == 31  # 30 re-scores + answer


def test_helpers():
    assert parse_list('["a", 2]') == ["a", 2] and parse_list("[]") == [] and parse_list("[a, b]") == ["a", "b"]
    assert is_aggregation("Summarize the comments on the post") and not is_aggregation("How many heroes?")
    assert set(METHODS) == {"tag", "text2sql", "rag", "retrieval_rank", "text2sql_lm"}


def test_tag_falls_back_to_text2sql_lm_without_a_valid_plan(superhero, tmp_path):
    sql = "SELECT superhero_name FROM superhero WHERE height_cm > 250"
    llm = ScriptedLLM(["no", "not json", "still not json", sql, '["Galactus"]'])
    s = TagQL(superhero, llm, settings=load_settings(cache_dir=str(tmp_path)))
    a = answer(s, "Which heroes are taller than 250 cm?", "tag")
    assert a.values == ["Galactus"] and a.plan["fallback"] == "text2sql_lm" and "no valid plan" in a.notes[0]


def test_summary_question_without_agg_operator_is_summarised(superhero, tmp_path):
    plan = {"sql": "SELECT superhero_name FROM superhero WHERE height_cm > 900", "operators": []}
    llm = ScriptedLLM(["no", json.dumps(plan), "Two giants: Godzilla and Galactus."])
    s = TagQL(superhero, llm, settings=load_settings(cache_dir=str(tmp_path)))
    a = answer(s, "Summarize the heroes taller than 9 m.", "tag")
    assert a.answer.startswith("Two giants") and "Data Point 1" in llm.prompts[2][-1].content


def test_guessed_value_lists_on_judged_columns_are_dropped(superhero):
    from tagql.tag.plan import relax_guessed_values

    plan = Plan.from_obj({"sql": "SELECT element FROM atom WHERE element IN ('Na', 'K') AND molecule_id = 'TR1'",
                          "operators": [{"op": "filter", "instruction": "{element} is an alkali metal"}]})
    removed = relax_guessed_values(plan)
    assert removed == ["element IN ('Na', 'K')"]
    assert "IN" not in plan.sql and "molecule_id = 'TR1'" in plan.sql
    keep = Plan.from_obj({"sql": "SELECT element FROM atom WHERE element IN ('Na', 'K')", "operators": []})
    assert relax_guessed_values(keep) == [] and "IN" in keep.sql
