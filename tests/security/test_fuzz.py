"""Property-based tests (issue 35 item 7), Hypothesis with ``derandomize=True`` (the same examples on every run)
and bounded example counts:

* SELECTs generated from the demo schema keep their meaning through the checks and repairs (``prepare_sql``):
  the prepared query returns the same rows, or is refused with a one-line ``TagqlError``; with a question,
  grounding may change the query only with a repair note saying so; never a crash;
* token soup built from SQL keywords, names and punctuation: ``parse_read_only`` / ``prepare_sql`` either accept a
  single read-only SELECT or refuse with a ``TagqlError``, never another exception, and nothing accepted writes;
* the statement parser: any text is a ``Structured`` or a ``StatementError``, and parsing is stable
  (parse(render(parse(s))) == parse(s));
* the config loader: any TOML file or environment value is a ``Settings`` or a one-line ``ConfigError``.
"""

from __future__ import annotations

import os
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tagql.db.connection import Database, open_database
from tagql.db.safety import parse_read_only
from tagql.errors import ConfigError, TagqlError
from tagql.knowledge.statements import StatementError, Structured, parse_structured
from tagql.text2sql.query import prepare_sql

FUZZ = settings(derandomize=True, deadline=None, max_examples=int(os.environ.get("TAGQL_FUZZ_EXAMPLES", "150")),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large], database=None)


@pytest.fixture(scope="module")
def db(demo_db_path: Path) -> Database:
    return open_database(demo_db_path)


def _one_line(exc: BaseException) -> None:
    assert isinstance(exc, TagqlError), f"{exc.__class__.__name__}: {exc}"
    assert "\n" not in str(exc), str(exc)


def _rows(db: Database, sql: str) -> list[str]:
    return sorted(map(repr, db.execute(sql, row_cap=100_000).rows))


# -- SELECTs generated from the schema -----------------------------------------------------------------


@st.composite
def selects(draw: Any, db: Database) -> str:
    """A valid SQLite SELECT over the demo schema: a table, maybe one foreign-key join, a projection (plain
    columns, or aggregates only, or grouped), filters on typed literals (sampled stored values included),
    DISTINCT, ORDER BY. No LIMIT: results compare as multisets."""
    schema = db.schema
    base = draw(st.sampled_from([t for t in schema.tables if t.columns]))
    sources = [("T1", base)]
    joins = ""
    if base.foreign_keys and draw(st.booleans()):
        fk = draw(st.sampled_from(base.foreign_keys))
        ref = schema.table(fk.ref_table)
        if ref is not None and ref.name != base.name:
            kind = draw(st.sampled_from(["JOIN", "INNER JOIN", "LEFT JOIN"]))
            joins = f" {kind} {ref.name} AS T2 ON T1.{fk.columns[0]} = T2.{fk.ref_columns[0]}"
            sources.append(("T2", ref))
    cols = [(alias, c) for alias, t in sources for c in t.columns]
    numeric = [(a, c) for a, c in cols if "INT" in c.type.upper() or "REAL" in c.type.upper()]

    def ref(ac: tuple[str, Any]) -> str:
        return f"{ac[0]}.{ac[1].name}"

    shape = draw(st.sampled_from(["plain", "aggregate", "grouped"]))
    group = ""
    if shape == "plain":
        proj = [ref(c) for c in draw(st.lists(st.sampled_from(cols), min_size=1, max_size=3, unique_by=ref))]
        distinct = "DISTINCT " if draw(st.booleans()) else ""
    else:
        aggs = ["COUNT(*)"]
        if numeric:
            fn = draw(st.sampled_from(["MIN", "MAX", "SUM", "AVG", "COUNT"]))
            aggs.append(f"{fn}({ref(draw(st.sampled_from(numeric)))})")
        aggs.append(f"COUNT(DISTINCT {ref(draw(st.sampled_from(cols)))})")
        proj = draw(st.lists(st.sampled_from(aggs), min_size=1, max_size=2, unique=True))
        distinct = ""
        if shape == "grouped":
            key = ref(draw(st.sampled_from(cols)))
            proj = [key, *proj]
            group = f" GROUP BY {key}"
    conds = []
    for _ in range(draw(st.integers(0, 2))):
        alias, col = draw(st.sampled_from(cols))
        name = f"{alias}.{col.name}"
        if (alias, col) in numeric:
            op = draw(st.sampled_from(["=", "<", ">", "<=", ">=", "<>"]))
            conds.append(f"{name} {op} {draw(st.integers(-5, 300))}")
        else:
            samples = [str(s) for s in col.samples if s is not None] or ["x"]
            value = draw(st.sampled_from(samples)).replace("'", "''")
            form = draw(st.sampled_from(["eq", "like", "in", "null"]))
            conds.append({"eq": f"{name} = '{value}'", "like": f"{name} LIKE '%{value[:2]}%'",
                          "in": f"{name} IN ('{value}', 'zz')", "null": f"{name} IS NOT NULL"}[form])
    where = f" WHERE {' AND '.join(conds)}" if conds else ""
    order = f" ORDER BY {proj[0]}" if draw(st.booleans()) and "DISTINCT" not in proj[0] else ""
    return f"SELECT {distinct}{', '.join(proj)} FROM {base.name} AS T1{joins}{where}{group}{order}"


def test_generated_selects_keep_their_meaning_through_the_checks_and_repairs(db: Database) -> None:
    seen = {"kept": 0, "refused": 0}

    @FUZZ
    @given(sql=selects(db))
    def check(sql: str) -> None:
        expected = _rows(db, sql)
        for repairs in (None, []):  # the checks alone, then with the repairs LLM-written SQL gets
            try:
                prepared = prepare_sql(sql, db, repairs=repairs)
            except TagqlError as exc:
                _one_line(exc)
                seen["refused"] += 1
                continue
            assert _rows(db, prepared) == expected, (sql, prepared, repairs)
            seen["kept"] += 1

    check()
    assert seen["kept"] > 10 * max(seen["refused"], 1)  # nearly all valid queries pass unchanged in meaning


QUESTION_WORDS = ["how", "many", "heroes", "superheroes", "which", "power", "powers", "publisher", "names",
                  "tallest", "blue", "eyes", "female", "male", "race", "alignment", "good", "bad", "average",
                  "weight", "height", "list", "the", "of", "with", "marvel", "comics", "count", "colour"]


def test_grounding_never_changes_a_query_silently(db: Database) -> None:
    """With a question, grounding may rewrite what the question contradicts; every rewrite is a repair note."""

    @FUZZ
    @given(sql=selects(db), words=st.lists(st.sampled_from(QUESTION_WORDS), min_size=2, max_size=10))
    def check(sql: str, words: list[str]) -> None:
        question = " ".join(words) + "?"
        repairs: list[str] = []
        try:
            prepared = prepare_sql(sql, db, repairs=repairs, question=question)
        except TagqlError as exc:
            _one_line(exc)
            return
        if _rows(db, prepared) != _rows(db, sql):
            assert repairs, (sql, prepared, question)

    check()


# -- token soup ----------------------------------------------------------------------------------------

TOKENS = ["SELECT", "FROM", "WHERE", "AND", "OR", "NOT", "JOIN", "ON", "AS", "GROUP", "BY", "ORDER", "HAVING",
          "LIMIT", "UNION", "WITH", "CASE", "WHEN", "THEN", "END", "IN", "IS", "NULL", "LIKE", "COUNT(*)",
          "DELETE", "INSERT", "INTO", "VALUES", "UPDATE", "SET", "DROP", "TABLE", "CREATE", "ATTACH", "PRAGMA",
          "COMMIT", "BEGIN", "RETURNING", "superhero", "T1", "T1.id", "superhero_name", "height_cm",
          "publisher", "*", ",", "(", ")", ";", "=", "<", "'x'", "\"y\"", "1", "2.5", "--", "/*", "*/", "\n",
          "`", "[", "]", "?", ":a", "$1", "\u037e", "\uff1b", "\u200b", "\ufeff", "||", "->>", "::int"]


@FUZZ
@given(parts=st.lists(st.sampled_from(TOKENS), min_size=1, max_size=25),
       dialect=st.sampled_from(["sqlite", "duckdb", "postgres"]))
def test_token_soup_is_accepted_as_a_select_or_refused_in_one_line(parts: list[str], dialect: str) -> None:
    sql = " ".join(parts)
    try:
        tree = parse_read_only(sql, dialect)
    except TagqlError as exc:
        _one_line(exc)
        return
    assert tree.key in ("select", "union", "intersect", "except")


def test_token_soup_through_prepare_and_the_engine(db: Database, demo_db_path: Path) -> None:
    before = demo_db_path.read_bytes()

    @FUZZ
    @given(parts=st.lists(st.sampled_from(TOKENS), min_size=1, max_size=25))
    def check(parts: list[str]) -> None:
        sql = " ".join(parts)
        try:
            prepared = prepare_sql(sql, db, repairs=[])
            db.execute(prepared, timeout_s=2)
        except TagqlError as exc:
            _one_line(exc)
        try:
            db.execute(sql, timeout_s=2)  # the engine alone, no parser in front
        except TagqlError as exc:
            _one_line(exc)

    check()
    assert demo_db_path.read_bytes() == before


@FUZZ
@given(sql=st.text(alphabet=st.characters(codec="utf-8"), max_size=300))
def test_arbitrary_text_is_never_a_crash(sql: str) -> None:
    for dialect in ("sqlite", "postgres"):
        try:
            parse_read_only(sql, dialect)
        except TagqlError as exc:
            _one_line(exc)


# -- the statement parser ----------------------------------------------------------------------------

phrases = st.text(alphabet=string.ascii_letters + string.digits + " '-_\"`’", min_size=1, max_size=40)
snippets = st.text(alphabet=string.ascii_letters + string.digits + " .=<>'()%_\"", min_size=1, max_size=60)


@FUZZ
@given(text=st.text(max_size=200))
def test_statement_parser_never_crashes(text: str) -> None:
    try:
        parsed = parse_structured(text)
    except StatementError as exc:
        _one_line(exc)
        return
    assert isinstance(parsed, Structured) and parsed.text and parsed.sql


@FUZZ
@given(phrase=phrases, snippet=snippets, verb=st.sampled_from(["refers to", "refres to", "means", "refer to"]))
def test_statement_parsing_is_stable(phrase: str, snippet: str, verb: str) -> None:
    try:
        first = parse_structured(f"'{phrase}' {verb} {snippet}")
    except StatementError as exc:
        _one_line(exc)
        return
    assert parse_structured(first.render()) == first


# -- the config loader -------------------------------------------------------------------------------

SECTIONS = {"llm": ["backend", "model", "base_url", "temperature", "seed", "n_ctx", "request_timeout_s"],
            "db": ["statement_timeout_s", "row_cap", "sample_values"],
            "service": ["host", "port", "queue_size", "workers", "max_body_bytes", "databases", "state_url"],
            "tag": ["model"], "embed": ["backend"], "answer": ["max_tokens"], "": ["cache_dir", "knowledge_dir"]}
toml_values = st.one_of(st.integers(-10**12, 10**12), st.floats(allow_nan=True), st.booleans(),
                        st.text(max_size=20), st.lists(st.integers(), max_size=3),
                        st.dictionaries(st.text(string.ascii_letters, min_size=1, max_size=5),
                                        st.text(max_size=5), max_size=2))


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(repr(value), repr(value))
    if isinstance(value, str):
        return '"' + value.encode("unicode_escape").decode().replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return str(value)


def _load(tmp: Path, text: str | bytes, env: dict[str, str] | None = None) -> None:
    from tagql.config import load_settings

    path = tmp / "fuzz.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    old = {k: os.environ.get(k) for k in ["TAGQL_CONFIG", *(env or {})]}
    os.environ["TAGQL_CONFIG"] = str(path)
    os.environ.update(env or {})
    try:
        load_settings()
    except ConfigError as exc:
        _one_line(exc)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_config_files_load_or_fail_in_one_line(tmp_path: Path) -> None:
    @FUZZ
    @given(entries=st.lists(st.tuples(st.sampled_from(sorted(SECTIONS)), st.data()), max_size=6))
    def check(entries: list[tuple[str, Any]]) -> None:
        by_section: dict[str, dict[str, Any]] = {}
        for section, data in entries:
            key = data.draw(st.sampled_from(SECTIONS[section]))
            by_section.setdefault(section, {})[key] = data.draw(toml_values)
        lines = [f"{k} = {_toml(v)}" for k, v in by_section.pop("", {}).items()]
        for section, kv in by_section.items():
            lines += [f"[{section}]", *(f"{k} = {_toml(v)}" for k, v in kv.items())]
        _load(tmp_path, "\n".join(lines) + "\n")

    check()


def test_broken_config_files_and_environment_fail_in_one_line(tmp_path: Path) -> None:
    @FUZZ
    @given(raw=st.binary(max_size=200),
           env=st.dictionaries(st.sampled_from(["TAGQL_DB__ROW_CAP", "TAGQL_SERVICE__DATABASES", "TAGQL_LLM__SEED",
                                                "TAGQL_SERVICE__COLLECTIONS", "TAGQL_LLM__TEMPERATURE"]),
                               st.text(string.printable, max_size=12), max_size=2))
    def check(raw: bytes, env: dict[str, str]) -> None:
        _load(tmp_path, raw, env)

    check()
