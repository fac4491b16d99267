"""``tagql route`` end to end (index, --jsonl, --pick), prompt builders and the human-in-the-loop pick."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tagql.llm.scripted import ScriptedLLM
from tagql.cli.output import choose_candidate
from tagql.routing.hitl import confidence_note
from tagql.routing.prompts import (
    best_schema_messages,
    multi_schema_cot_messages,
    multi_schema_messages,
    parse_routed_sql,
)
from tagql.routing.router import Candidate


@pytest.fixture()
def runner_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TAGQL_COLLECTIONS_DIR", str(tmp_path / "collections"))
    return tmp_path


def test_cli_index_route_jsonl_and_update(runner_env: Path, spider_dir: Path) -> None:
    from tagql.cli import app

    tables = [e for e in json.loads((spider_dir / "tables.json").read_text())
              if e["db_id"] in ("concert_singer", "pets_1", "car_1")]
    tj = runner_env / "tables.json"
    tj.write_text(json.dumps(tables))
    ddl = runner_env / "shop.sql"
    ddl.write_text("CREATE TABLE customer (customer_id INT PRIMARY KEY, name TEXT, city TEXT);\n"
                   "CREATE TABLE orders (order_id INT PRIMARY KEY, customer_id INT REFERENCES customer(customer_id),"
                   " amount REAL, ordered_on DATE);")
    r = CliRunner().invoke(app, ["route", "index", "t", "--spider-tables", str(tj), "--spider-databases",
                                 str(spider_dir / "database"), "--ddl", str(ddl), "--questions-per-table", "6",
                                 "--no-finetune"])
    assert r.exit_code == 0, r.output
    lines = "\n".join(json.dumps({"question": q}) for q in [
        "How many singers are there?", "What is the total order amount of each customer?",
        "Which car maker produces the most models?"])
    for method in ("ours", "bm25", "dense"):
        r = CliRunner().invoke(app, ["route", "--collection", "t", "--method", method, "--k", "2", "--jsonl"],
                               input=lines + "\n")
        assert r.exit_code == 0, r.output
        out = [json.loads(x) for x in r.stdout.splitlines()]
        assert [o["question"] for o in out] == [json.loads(x)["question"] for x in lines.splitlines()]
        assert [o["candidates"][0]["database"] for o in out] == ["concert_singer", "shop", "car_1"], method
        assert all(set(c) >= {"database", "tables", "score"} for o in out for c in o["candidates"])
    # incremental: remove a database, the router follows without a rebuild
    r = CliRunner().invoke(app, ["route", "index", "t", "--remove", "pets_1"])
    assert r.exit_code == 0, r.output
    assert "removed" in r.stderr
    r = CliRunner().invoke(app, ["route", "--collection", "t", "--k", "5", "--jsonl"],
                           input=json.dumps({"question": "How many pets?"}) + "\n")
    assert "pets_1" not in r.stdout
    # human in the loop: pick the second schema
    r = CliRunner().invoke(app, ["route", "--collection", "t", "--question", "How many singers?", "--pick"],
                           input="2\n")
    assert r.exit_code == 0, r.output
    assert "1. concert_singer" in r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["database"] != "concert_singer"


def test_cli_errors_are_one_line(runner_env: Path) -> None:
    from tagql.cli import app

    r = CliRunner().invoke(app, ["route", "--collection", "missing", "--jsonl"], input="")
    assert r.exit_code == 2  # the output is JSON lines: so is the error
    assert json.loads(r.stdout) == {"ok": False, "error": json.loads(r.stdout)["error"]}
    assert "no collection named 'missing'" in json.loads(r.stdout)["error"]


def test_prompts_and_parsing(small_collection) -> None:
    cands = [Candidate("concert_singer", ["singer", "singer_in_concert", "concert"], 2.0, confidence=0.9),
             Candidate("pets_1", ["Student"], 1.0, confidence=0.2)]
    q = "Which singers sang in 2014?"
    best = best_schema_messages(q, small_collection, cands[0])
    assert "CREATE TABLE singer_in_concert" in best[-1].content and "Pets" not in best[-1].content
    multi = multi_schema_messages(q, small_collection, cands)
    assert "-- database: pets_1" in multi[-1].content and "-- database: concert_singer" in multi[-1].content
    cot = multi_schema_cot_messages(q, small_collection, cands)
    assert "# Schema 2" in cot[-1].content
    llm = ScriptedLLM(["Reasoning: singers are in schema 1.\nSchema: 1\nSQL: SELECT name FROM singer;"])
    assert parse_routed_sql(llm.complete(cot).text, cands) == ("concert_singer", "SELECT name FROM singer")
    assert parse_routed_sql("-- database: pets_1\nSELECT count(*) FROM Student", cands) == (
        "pets_1", "SELECT count(*) FROM Student")
    assert parse_routed_sql(" name FROM singer", cands) == (None, "SELECT name FROM singer")


def test_hitl_choice_and_low_confidence() -> None:
    cands = [Candidate(f"db{i}", ["t"], 1.0 - i, confidence=0.9 - i / 10) for i in range(6)]
    answers = iter(["9", "x", "3"])
    shown: list[str] = []
    assert choose_candidate(cands, lambda _p: next(answers), shown.append).database == "db2"
    assert shown[0].count("\n") == 4  # top-5 only
    assert confidence_note(cands) is None
    assert "none of the databases" in confidence_note([Candidate("x", ["t"], -3.0, confidence=0.05)])
    assert confidence_note([]) is not None
