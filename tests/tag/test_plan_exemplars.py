"""The bank of solved plans shown next to similar questions: every plan is valid on its database (checked
before any LM call), and the nearest ones share the question's shape."""

from __future__ import annotations

import pytest

from tagql.db.connection import open_database
from tagql.llm.scripted import ScriptedLLM
from tagql.tag.exemplars import ExemplarIndex, load_exemplars
from tagql.tag.operators import SemEngine
from tagql.tag.plan import Plan, validate_plan

TAG_BENCH_DBS = {"superhero", "student_club", "toxicology"}  # the dev and held-out sets' databases


@pytest.mark.parametrize("ex", load_exemplars(), ids=lambda e: e.question[:40])
def test_every_exemplar_plan_is_valid_on_its_spider_database(ex, shared_data):
    assert ex.db not in TAG_BENCH_DBS  # examples never come from the databases we measure on
    db = open_database(shared_data / "spider" / "database" / ex.db / f"{ex.db}.sqlite")
    plan = Plan.from_obj(ex.plan)
    llm = ScriptedLLM([])  # validation must not call the LM: an unexpected call fails here
    sql, columns = validate_plan(plan, db, SemEngine(llm))
    assert sql and len(columns) == len(plan.operators)
    assert llm.prompts == []


def test_nearest_exemplars_share_the_questions_shape():
    ix = ExemplarIndex()
    first = ix.nearest("Of the 4 tallest players, list their names from shortest to longest name.", 1)[0]
    assert first.question.startswith("Of the 3 oldest teachers")
    offered = ix.nearest("Do more trains leave from northern or southern stations? Answer 'north' or 'south'.", 2)
    assert all("Answer '" in e.question for e in offered)
    assert ix.nearest("Summarize the reviews of the hotel 'Ritz'.", 1)[0].plan["operators"][-1]["op"] == "agg"
    # never an example on the database asked about, and nothing for a question sharing no word
    assert all(e.db != "tvshow" for e in ix.nearest("Which cartoons have long titles?", 5, exclude_db="tvshow"))
    assert ix.nearest("zzz qqq", 3) == []


def test_no_exemplars_when_turned_off(shared_data):
    from tagql.tag.plan import Planner

    db = open_database(shared_data / "bird" / "dev_databases" / "superhero" / "superhero.sqlite")
    llm = ScriptedLLM(["no", '{"sql": "SELECT COUNT(*) FROM superhero", "operators": []}'])
    _, attempts = Planner(db, llm, SemEngine(llm), exemplars=0).make("How many superheroes are there?")
    assert "similar_questions" not in attempts[0] and "Solved questions" not in llm.prompts[1][-1].content
