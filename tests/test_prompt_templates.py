"""Prompts are package data beside their stage (``prompts.toml``), read once; the operator cache keys on them."""

from __future__ import annotations

import hashlib
import re
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from tagql.knowledge import ScoredStatement
from tagql.llm.scripted import ScriptedLLM
from tagql.tag import cache, tag_prompts
from tagql.tag import operators as ops
from tagql.tag.operators import base
from tagql.templates import Templates, load_templates
from tagql.text2sql import prompts

SRC = Path(__file__).resolve().parents[1] / "src" / "tagql"
# each prompt file and the code that fills it
FILES = {
    ("tagql.text2sql", "prompts.toml"): [SRC / "text2sql" / "prompts.py"],
    ("tagql.tag", "prompts.toml"): [SRC / "tag" / "tag_prompts.py"],
    ("tagql.tag.operators", "prompts.toml"): sorted((SRC / "tag" / "operators").glob("*.py")),
}


@pytest.mark.parametrize("package,filename", list(FILES))
def test_every_template_is_package_data_read_once_and_used(package, filename):
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    t = load_templates(package, filename)
    assert load_templates(package, filename) is t  # read once
    assert t.texts == tomllib.loads(text) and t.digest == hashlib.sha256(text.encode()).hexdigest()
    code = "\n".join(p.read_text(encoding="utf-8") for p in FILES[(package, filename)])
    unused = [name for name in t.texts if not re.search(rf"[\"']{name}[\"']", code)]
    assert unused == []


def test_render_fills_placeholders_and_leaves_values_alone():
    t = Templates({"x": "Question: $question\n{Col} costs $$5 ${unit}"}, "d")
    assert t.render("x", question="Is $a {b}?", unit="each") == "Question: Is $a {b}?\n{Col} costs $5 each"
    with pytest.raises(KeyError):
        t.render("x", question="q")


def test_rendered_prompts_read_as_before():
    """A few whole prompts, spelt out: the move to template files changed no byte of what the LLM reads."""
    st = [ScoredStatement("tall", "height_cm > 200")]
    assert prompts.sql_user_prompt("How many?", st, dialect="postgres") == (
        "-- External Knowledge: 'tall' refers to height_cm > 200\n-- Using valid PostgreSQL and understanding "
        "External Knowledge, answer the following question for the tables provided above.\nQuery: How many?\nSQL:")
    assert prompts.system_prompt("superhero", "CREATE TABLE t (a INT)") == (
        "You are a database administrator. You have designed the following database for superhero whose schema "
        "is represented as:\nCREATE TABLE t (a INT)\n\nFor each query, generate a single SQL in SQLite format. "
        "Do not include any extra text, tag or information other than the SQL query itself.")
    assert prompts.repair_prompt("no such column: x", "duckdb") == (
        "That SQL failed: no such column: x\nWrite a corrected single DuckDB SQL query for the same question, "
        "using only tables and columns from the schema. Output only the SQL.\nSQL:")
    assert tag_prompts.plan_user_prompt("Which?", st) == (
        "Domain knowledge from the database's experts: 'tall' refers to height_cm > 200\nQuestion: Which?\n")
    assert tag_prompts.PLAN_GUIDE.startswith("Answer questions by writing a plan: one SQLite query plus")
    assert tag_prompts.PLAN_GUIDE.endswith('{"sql": "SELECT COUNT(*) FROM schools WHERE County = \'Fresno\'", '
                                           '"operators": []}\n')
    assert ops.judge_messages("Paris is in France")[1].content == (
        "Statement: <statement>Paris is in France</statement>\nIs the statement true? Answer yes or no.")
    assert ops.YES_NO_GRAMMAR == 'root ::= "yes" | "no" | "Yes" | "No"'


def test_the_operator_cache_keys_on_the_prompt_text(monkeypatch):
    """No hand-bumped version: another wording of the operator prompts is another key."""
    engine = ops.SemEngine(ScriptedLLM([]))
    key = engine._key("filter", "{x} is big", "x is big")
    assert key == cache.cache_key("scripted", "filter", "{x} is big", "x is big", prompts=ops.PROMPTS.digest)
    edited = dict(ops.PROMPTS.texts, judge_system=ops.PROMPTS["judge_system"] + " Be brief.")
    changed = Templates(edited, hashlib.sha256(repr(edited).encode()).hexdigest())
    monkeypatch.setattr(base, "PROMPTS", changed)
    assert engine._key("filter", "{x} is big", "x is big") != key
