"""The one public path (issue 32): ``tagql.connect(...)`` -> ``Session.ask`` for every method, routed or not."""

from __future__ import annotations

from pathlib import Path

import pytest

import tagql
from tagql.api import UsageError
from tagql.llm.scripted import ScriptedLLM


def test_ask_reports_stages_in_order_and_returns_the_typed_answer(demo_db_path: Path) -> None:
    llm = ScriptedLLM(["SELECT COUNT(*) FROM publisher"])  # one value: the answer says it without the model
    session = tagql.connect(demo_db_path, llm=llm)
    events: list[tuple[str, dict]] = []
    answer = session.ask("How many publishers are there?", on_event=lambda name, data: events.append((name, data)))
    assert [name for name, _ in events] == ["statements", "sql", "rows", "answer", "done"]
    assert dict(events)["sql"]["sql"] == answer.sql and dict(events)["rows"]["rows"] == [[25]]
    assert isinstance(answer, tagql.Answer) and answer.values == [25] and answer.method == "sql"
    assert answer.answer == "25" and dict(events)["answer"] == {"answer": "25", "values": [25]}
    assert dict(events)["done"] == answer.to_dict() and answer.to_dict()["attempts"][0]["error"] is None


def test_a_tag_method_runs_through_the_same_session(demo_db_path: Path) -> None:
    llm = ScriptedLLM(["SELECT COUNT(*) FROM publisher"])
    answer = tagql.connect(demo_db_path, llm=llm).ask("How many publishers are there?", method="text2sql")
    assert answer.method == "text2sql" and answer.values == [25] and answer.model == "scripted"


def test_every_method_works_on_a_collection(tmp_path: Path, demo_db_path: Path, shared_data: Path) -> None:
    from tagql.routing.collection import Collection

    coll = Collection.create("t", path=tmp_path / "coll")
    coll.add_database(str(demo_db_path))
    coll.add_database(str(shared_data / "spider" / "database" / "concert_singer" / "concert_singer.sqlite"))
    coll.save()
    session = tagql.connect(collection=coll, llm=ScriptedLLM(["SELECT COUNT(*) FROM singer"]), route_method="bm25")
    answer = session.ask("How many singers do we have?", method="text2sql")
    assert answer.database == "concert_singer" and answer.values == [6] and answer.routing[0].database == "concert_singer"
    assert "route_s" in answer.timings
    assert [c.database for c in session.route("How many singers do we have?", k=2)][0] == "concert_singer"
    with pytest.raises(UsageError, match="name a database"):
        session.sql("SELECT 1")
    assert session.sql("SELECT COUNT(*) FROM singer", database="concert_singer").rows == [[6]]


def test_options_that_do_not_exist_or_apply_are_errors(demo_db_path: Path) -> None:
    session = tagql.connect(demo_db_path, llm=ScriptedLLM([]))
    with pytest.raises(UsageError, match="unknown method 'bogus'"):
        session.ask("How many?", method="bogus")
    with pytest.raises(UsageError, match="collections only"):
        session.ask("How many?", force=True)
    with pytest.raises(UsageError, match="routing needs a collection"):
        session.route("How many?")
    with pytest.raises(UsageError, match="unknown knowledge method"):
        tagql.connect(demo_db_path, knowledge_method="bogus")
    with pytest.raises(UsageError, match="a database or a collection"):
        tagql.connect()
    with pytest.raises(tagql.TagqlError, match="empty"):
        session.check_options("   ")


def test_sql_and_schema_never_load_the_model(demo_db_path: Path, monkeypatch) -> None:
    def no_model(*args, **kwargs):
        raise AssertionError("no model for sql/schema")

    monkeypatch.setattr("tagql.api.make_llm", no_model)
    session = tagql.connect(demo_db_path)
    result = session.sql("SELECT publisher_name FROM publisher WHERE id = 1")
    assert result.columns == ["publisher_name"] and len(result.rows) == 1
    assert "superhero" in [t.name for t in session.schema().tables]
    with pytest.raises(tagql.TagqlError, match="only SELECT"):
        session.sql("DELETE FROM publisher")
