"""DuckDB: a read-only database for tagql, and the LM functions as DuckDB UDFs (scripted LM).

The DuckDB file is built in the test from the bundled demo database (BIRD superhero)."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import sys
from pathlib import Path

import pytest

from tagql.db import open_database
from tagql.db.duck import copy_sqlite_to_duckdb, is_duckdb_file
from tagql.errors import InvalidQuery, QueryFailed, QueryTimeout, UnsafeQuery
from tagql.llm.scripted import ScriptedLLM
from tagql.tag.cache import OpCache
from tagql.tag.operators import LMCallLimitExceeded, OperatorError, SemEngine, SemTable
from tagql.text2sql.query import prepare_sql
from tagql.tag.udf import execute_with_lm, register_lm_functions

DC = {"DC Comics", "Wildstorm"}
FILTER = "{publisher} is DC Comics or one of its imprints"
PER_HERO = (  # evaluated per joined hero row (a projection): the same publisher repeats
    "SELECT s.superhero_name, LM_FILTER('" + FILTER + "', p.publisher_name) AS dc "
    "FROM superhero s JOIN publisher p ON s.publisher_id = p.id ORDER BY s.id"
)


def judge(messages):
    """Scripted judge: yes iff the claim's publisher is in DC (single or numbered batch prompts)."""
    text = messages[-1].content
    verdict = lambda claim: "yes" if claim.split(" is DC Comics")[0] in DC else "no"
    if "N: yes" in text:
        return "\n".join(f"{n}: {verdict(c)}" for n, c in re.findall(r"(\d+)\. <statement>(.*?)</statement>", text))
    return verdict(re.search(r"<statement>(.*?)</statement>", text).group(1))


@pytest.fixture(scope="module")
def duck_path(tmp_path_factory, demo_db_path) -> Path:
    path = tmp_path_factory.mktemp("duck") / "superhero.duckdb"
    copy_sqlite_to_duckdb(demo_db_path, path)
    return path


@pytest.fixture(scope="module")
def expected(demo_db_path):
    """What the same query gives on the SQLite original (the labels are the publisher names)."""
    con = sqlite3.connect(f"file:{demo_db_path}?mode=ro", uri=True)
    rows = con.execute("SELECT s.superhero_name, p.publisher_name FROM superhero s JOIN publisher p "
                       "ON s.publisher_id = p.id ORDER BY s.id").fetchall()
    con.close()
    return [(name, int(pub in DC)) for name, pub in rows], len({pub for _, pub in rows})


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_open_path_and_url_read_schema_and_rows(duck_path, demo_db_path):
    assert is_duckdb_file(duck_path) and not is_duckdb_file(demo_db_path)
    for target in (duck_path, f"duckdb:///{duck_path}"):
        db = open_database(target)
        assert db.dialect == "duckdb" and db.name == "superhero"
        hero = db.schema.table("superhero")
        assert hero.column("id").primary_key
        assert {"publisher", "colour", "race"} <= {fk.ref_table for fk in hero.foreign_keys}
        assert len(db.schema.table("publisher").column("publisher_name").samples) == 3
        r = db.execute("SELECT superhero_name, height_cm FROM superhero WHERE id <= 2 ORDER BY id")
        assert r.columns == ["superhero_name", "height_cm"] and r.rows == [("3-D Man", 188), ("A-Bomb", 203)]
        capped = db.execute("SELECT id FROM superhero", row_cap=10)
        assert len(capped.rows) == 10 and capped.truncated
        db.close()


@pytest.mark.parametrize("sql", [
    "DELETE FROM superhero",
    "INSERT INTO publisher VALUES (999, 'x')",
    "UPDATE superhero SET height_cm = 0",
    "DROP TABLE superhero",
    "CREATE TEMP TABLE t AS SELECT 1 AS x",  # read-only mode alone would allow this
    "ATTACH '/tmp/tagql_other.duckdb' AS other",
    "COPY superhero TO '/tmp/tagql_dump.csv'",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SET enable_external_access = true",
    "INSTALL httpfs",
    "SELECT 1; DELETE FROM superhero",
])
def test_writes_and_outside_access_are_refused(duck_path, sql):
    before = sha256(duck_path)
    db = open_database(duck_path)
    with pytest.raises(UnsafeQuery):
        db.execute(sql)
    assert db.execute("SELECT COUNT(*) FROM superhero").rows == [(750,)]
    db.close()
    assert sha256(duck_path) == before
    assert not Path("/tmp/tagql_dump.csv").exists() and not Path("/tmp/tagql_other.duckdb").exists()


def test_statement_timeout(duck_path):
    db = open_database(duck_path)
    with pytest.raises(QueryTimeout, match="statement timeout"):
        db.execute("SELECT SUM(HASH(i)) FROM range(1000000000000) t(i)", timeout_s=0.5)
    assert db.execute("SELECT 1").rows == [(1,)]  # the connection is usable afterwards


def test_lm_filter_dedupes_and_matches_sqlite(duck_path, expected):
    rows, n_publishers = expected
    llm = ScriptedLLM(judge)
    eng = SemEngine(llm)
    db = open_database(duck_path)
    funcs = register_lm_functions(db, eng)
    r = execute_with_lm(db, prepare_sql(PER_HERO, db), eng)
    assert r.rows == rows
    assert llm.usage.calls == n_publishers  # one call per distinct publisher, not per hero
    assert eng.stats.deduped + eng.stats.cache_hits == len(rows) - n_publishers
    rec = eng.stats.per_operator[0]
    assert rec["op"] == "lm_filter" and rec["rows"] == len(rows) and rec["distinct_inputs"] == n_publishers
    assert funcs.engine is eng


def test_lm_filter_in_where_pushes_down(duck_path):
    llm = ScriptedLLM(judge)
    eng = SemEngine(llm)
    db = open_database(duck_path)
    register_lm_functions(db, eng)
    r = execute_with_lm(db, "SELECT publisher_name FROM publisher WHERE LM_FILTER('" + FILTER
                        + "', publisher_name) ORDER BY publisher_name", eng)
    assert [x[0] for x in r.rows] == sorted(DC)


def test_batching_packs_a_vector_into_few_calls(duck_path, expected):
    rows, n_publishers = expected
    llm = ScriptedLLM(judge)
    eng = SemEngine(llm, batch_size=8)
    db = open_database(duck_path)
    register_lm_functions(db, eng)
    r = execute_with_lm(db, PER_HERO, eng)
    assert r.rows == rows
    batches = eng.stats.per_operator[0]["batches"]
    assert llm.usage.calls <= batches * -(-n_publishers // 8) and llm.usage.calls < n_publishers
    assert all("N: yes" in p[-1].content for p in llm.prompts)  # every call was a numbered batch


def test_persistent_cache_makes_a_rerun_free(duck_path, expected, tmp_path):
    rows, n_publishers = expected
    cache_file = tmp_path / "ops.sqlite"
    db = open_database(duck_path)
    llm = ScriptedLLM(judge)
    eng = SemEngine(llm, cache=OpCache(cache_file))
    register_lm_functions(db, eng)
    assert execute_with_lm(db, PER_HERO, eng).rows == rows
    llm2 = ScriptedLLM(judge)
    eng2 = SemEngine(llm2, cache=OpCache(cache_file))
    register_lm_functions(db, eng2)  # replaces the functions on already-open connections
    again = execute_with_lm(db, PER_HERO, eng2)
    assert again.rows == rows
    assert llm.usage.calls == n_publishers and llm2.usage.calls == 0
    assert eng2.stats.cache_hits >= n_publishers


def test_map_and_score_and_several_arguments(duck_path):
    llm = ScriptedLLM(lambda m: "7" if "Score" in m[-1].content else m[-1].content.split("<record>")[1][:5])
    eng = SemEngine(llm)
    db = open_database(duck_path)
    register_lm_functions(db, eng)
    r = execute_with_lm(db, "SELECT LM_SCORE('{x} is famous', superhero_name), "
                        "LM_MAP('{a} is {b} cm tall', superhero_name, height_cm) FROM superhero WHERE id = 1", eng)
    assert r.rows == [(7, "3-D M")]
    assert "3-D Man is 188 cm tall" in llm.prompts[-1][-1].content  # the integer argument arrived as text


def test_lm_number_orders_rows_on_duckdb(duck_path):
    llm = ScriptedLLM(lambda m: str(len(m[-1].content.split("<record>")[1].split("</record>")[0])))
    eng = SemEngine(llm)
    db = open_database(duck_path)
    register_lm_functions(db, eng)
    r = execute_with_lm(db, "SELECT publisher_name FROM publisher WHERE id IN (4, 13, 10) "
                        "ORDER BY LM_NUMBER('the length of {p}', publisher_name) DESC", eng)
    names = [row[0] for row in r.rows]
    assert names == sorted(names, key=len, reverse=True) and len(names) == 3


def test_errors_surface(duck_path):
    db = open_database(duck_path)
    eng = SemEngine(ScriptedLLM(judge), max_calls=3)
    register_lm_functions(db, eng)
    with pytest.raises(LMCallLimitExceeded, match="stopped after 3 LM calls"):
        execute_with_lm(db, PER_HERO, eng)
    with pytest.raises(OperatorError, match="1 \\{field\\}"):
        execute_with_lm(db, "SELECT LM_MAP('{a} x', 1, 2)", eng)


def test_instruction_on_a_missing_column_is_a_clear_error(duck_path):
    llm = ScriptedLLM(judge)
    eng = SemEngine(llm)
    db = open_database(duck_path)
    register_lm_functions(db, eng)
    # in SQL: the argument column does not exist -> schema validation names the real one
    sql = "SELECT id FROM publisher WHERE LM_FILTER('" + FILTER + "', publisher_nam)"
    with pytest.raises(InvalidQuery, match="publisher_nam.*did you mean publisher.publisher_name"):
        prepare_sql(sql, db)
    with pytest.raises(QueryFailed, match="publisher_nam"):  # unvalidated SQL: DuckDB's binder says it
        execute_with_lm(db, sql, eng)
    # on a DuckDB result: the operator names the columns that exist, before any LM call
    t = SemTable.from_result(db.execute("SELECT id, publisher_name FROM publisher"), eng)
    with pytest.raises(OperatorError, match="references column 'publisher'.*id, publisher_name"):
        t.sem_filter(FILTER)
    assert llm.usage.calls == 0


def test_row_at_a_time_without_pyarrow(duck_path, expected, monkeypatch):
    rows, n_publishers = expected
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ImportError
    llm = ScriptedLLM(judge)
    eng = SemEngine(llm)
    db = open_database(duck_path)  # new connections: the functions are created without Arrow
    register_lm_functions(db, eng)
    r = execute_with_lm(db, PER_HERO, eng)
    assert r.rows == rows and llm.usage.calls == n_publishers
    assert eng.stats.per_operator[0]["batches"] == len(rows)  # one row per call


def test_a_damaged_or_locked_file_is_a_clear_error(duck_path, tmp_path):
    import shutil
    import subprocess

    from tagql.errors import NotADatabase

    bad = tmp_path / "bad.duckdb"
    data = bytearray(duck_path.read_bytes()[:1_000_000])
    data[5000:] = bytes(len(data) - 5000)  # header kept, blocks zeroed
    bad.write_bytes(bytes(data))
    with pytest.raises(NotADatabase, match="cannot open the DuckDB database"):
        open_database(bad)
    locked = tmp_path / "locked.duckdb"
    shutil.copy(duck_path, locked)
    script = f"import duckdb, time; c = duckdb.connect({str(locked)!r}); print('open', flush=True); time.sleep(60)"
    writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)  # holds the lock
    try:
        assert writer.stdout.readline().strip() == "open"
        with pytest.raises(NotADatabase, match="lock"):
            open_database(locked)
    finally:
        writer.kill()
        writer.wait()


def test_a_hybrid_plan_runs_on_duckdb(duck_path, expected):
    """A plan whose SQL calls LM_FILTER, then a relational operator: validated (schema, LIMIT 0 probe)
    and run on DuckDB like on SQLite."""
    from tagql.tag.plan import Plan, PlanError, run_plan

    rows, n_publishers = expected
    llm = ScriptedLLM(judge)
    eng = SemEngine(llm)
    db = open_database(duck_path)
    plan = Plan("SELECT s.superhero_name FROM superhero s JOIN publisher p ON s.publisher_id = p.id "
                "WHERE LM_FILTER('" + FILTER + "', p.publisher_name)", [{"op": "count"}])
    run = run_plan(plan, db, eng)
    assert run.result.rows == [(sum(dc for _, dc in rows),)]
    # one call per publisher: all 25 when DuckDB pushes the filter below the join, else those with heroes
    assert llm.usage.calls in (25, n_publishers)
    with pytest.raises(PlanError, match="publisher_nam"):
        run_plan(Plan("SELECT id FROM publisher WHERE LM_FILTER('" + FILTER + "', publisher_nam)"), db, eng)
