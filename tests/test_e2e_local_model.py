"""End to end with the real embedded model (Qwen2.5-Coder-1.5B via llama.cpp) on the demo database.

Rows are checked against gold SQL, not against the model's own text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import tagql
from tagql.db import open_database

pytestmark = pytest.mark.model

CASES = [
    ("How many superheroes are published by Marvel Comics?",
     "SELECT COUNT(*) FROM superhero s JOIN publisher p ON s.publisher_id = p.id WHERE p.publisher_name = 'Marvel Comics'"),
    ("What is the full name of the superhero named Spider-Man?",
     "SELECT full_name FROM superhero WHERE superhero_name = 'Spider-Man'"),
    ("How many superheroes have blue eyes?",
     "SELECT COUNT(*) FROM superhero s JOIN colour c ON s.eye_colour_id = c.id WHERE c.colour = 'Blue'"),
]


@pytest.fixture(scope="module")
def session(demo_db_path: Path) -> tagql.Session:
    return tagql.connect(demo_db_path, llm="local")


def same_rows(a: list, b: list) -> bool:
    return Counter(map(tuple, a)) == Counter(map(tuple, b))


@pytest.mark.parametrize(("question", "gold"), CASES)
def test_local_model_answers_match_gold_sql(session: tagql.Session, question: str, gold: str) -> None:
    answer = session.ask(question)
    expected = open_database(session.database().path).execute(gold).rows
    assert same_rows(answer.rows, [list(r) for r in expected]), answer.sql
    assert answer.answer and answer.answer != "(the model gave no answer; see the rows)"
    # the number the database returned is the one the answer states
    assert str(expected[0][0]) in answer.answer
    assert answer.tokens["calls"] >= 1 and answer.timings["total_s"] > 0  # one column: no sentence call


def test_cli_ask_json(demo_db_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tagql.cli", "ask", "How many superheroes are there?", "--db", str(demo_db_path), "--json"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "TAGQL_LLM__BACKEND": "local"},
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert {"question", "sql", "columns", "rows", "answer", "values", "timings"} <= set(data)
    assert data["values"] == [750]


def test_local_json_schema_output_is_constrained(session: tagql.Session) -> None:
    from tagql.llm import user

    schema = {"type": "object", "properties": {"is_city": {"type": "boolean"}}, "required": ["is_city"]}
    reply = session.llm().complete([user("Is Paris a city? Answer in JSON.")], json_schema=schema, max_tokens=20)
    assert json.loads(reply.text) == {"is_city": True}
