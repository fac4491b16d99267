"""LM operators over a PostgreSQL result of 200,000 rows: distinct inputs counted by the server (GROUP BY), rows
fetched from a server-side cursor in chunks (FETCH FORWARD n), client memory bounded by a chunk; the same
operators over SQLite give the same rows."""

from __future__ import annotations

import tracemalloc
import uuid

import pytest
import sqlalchemy as sa

from bench.tag import operator_scale
from tagql.db import open_database
from tagql.tag.cache import OpCache
from tagql.tag.operators import SemEngine
from tagql.tag.stream import stream_filter, stream_map

N = 200_000
EUROPE = {c for c, cont in operator_scale.COUNTRIES.items() if cont == "Europe"}
FILTER = "{country} is a country in Europe"


@pytest.fixture(scope="module")
def pg_orders(postgres_url, postgres_owner_url):
    """A table ``orders_<random>`` with N rows over the 50 countries (as operator_scale builds them), readable by
    the SELECT-only role; dropped afterwards."""
    table = "orders_" + uuid.uuid4().hex[:8]
    owner = sa.create_engine(sa.engine.make_url(postgres_owner_url).set(drivername="postgresql+psycopg"))
    names = ", ".join("'" + c + "'" for c in operator_scale.NAMES)
    reader = sa.engine.make_url(postgres_url).username
    with owner.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE {table} AS SELECT i AS id, (ARRAY[{names}])[1 + (i * 7919) % 50] "
                             f"AS country, i % 100 AS amount FROM generate_series(0, {N - 1}) AS i"))
        conn.execute(sa.text(f"GRANT SELECT ON {table} TO {reader}"))
    yield table
    with owner.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE {table}"))
    owner.dispose()


def _engine():
    return SemEngine(operator_scale.scripted_llm(), cache=OpCache(None), cascade="off")


def test_rows_come_from_a_server_side_cursor_in_chunks(postgres_url, pg_orders):
    db = open_database(postgres_url)
    with db.stream(f"SELECT id, country FROM {pg_orders} ORDER BY id", chunk_rows=10_000) as rows:
        sizes = [len(chunk) for chunk in rows]
    assert sizes == [10_000] * 20  # FETCH FORWARD 10000, twenty times
    assert rows.fetches == 21 and rows.rows == N and rows.columns == ["id", "country"]  # + the empty last fetch


def test_a_filter_over_200k_postgresql_rows_holds_one_chunk(postgres_url, pg_orders):
    db = open_database(postgres_url)
    sql = f"SELECT id, country, amount FROM {pg_orders}"
    expected = sum(operator_scale.country_of(i) in EUROPE for i in range(N))
    engine = _engine()
    tracemalloc.start()
    try:
        kept = 0
        for chunk in stream_filter(db, sql, FILTER, engine, chunk_rows=5_000):
            kept += len(chunk)
        _, streamed_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        whole = db.execute(sql, row_cap=N)  # the same rows held at once, for comparison
        _, whole_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kept == expected and len(whole.rows) == N
    assert engine.stats.lm_calls == 50  # one per distinct country
    assert engine.stats.per_operator[-1]["rows"] == N and engine.stats.per_operator[-1]["distinct_inputs"] == 50
    assert streamed_peak < 8e6, streamed_peak  # one chunk of 5,000 rows and the 50 verdicts
    assert whole_peak > 4 * streamed_peak, (whole_peak, streamed_peak)


def test_streamed_operators_match_on_sqlite(tmp_path):
    path = tmp_path / "orders.sqlite"
    operator_scale.build_sqlite(path, 5_000)
    db = open_database(path)
    kept = [r for chunk in stream_filter(db, "SELECT id, country FROM orders", FILTER, _engine(), chunk_rows=700)
            for r in chunk]
    assert [r[0] for r in kept] == [i for i in range(5_000) if operator_scale.country_of(i) in EUROPE]
    mapped = [r for chunk in stream_map(db, "SELECT id, country FROM orders WHERE id < 100",
                                        "the continent of {country}", _engine()) for r in chunk]
    assert [r[2] for r in mapped] == [operator_scale.COUNTRIES[operator_scale.country_of(i)] for i in range(100)]


def _plan(sql, *ops):
    from tagql.tag.plan import Plan

    return Plan.from_obj({"sql": sql, "operators": list(ops)})


FILTER_OP = {"op": "filter", "instruction": FILTER}


def test_a_plan_over_more_rows_than_the_row_cap_streams_its_first_operator(tmp_path):
    from tagql.config import DatabaseSettings
    from tagql.tag.plan import run_plan

    path = tmp_path / "orders.sqlite"
    operator_scale.build_sqlite(path, 5_000)
    db = open_database(path, settings=DatabaseSettings(row_cap=150))
    europe = [i for i in range(5_000) if operator_scale.country_of(i) in EUROPE]
    run = run_plan(_plan("SELECT id, country FROM orders", FILTER_OP, {"op": "count"}), db, _engine())
    assert run.result.rows == [(len(europe),)] and not run.result.truncated  # exact, over all 5,000 rows
    assert run.trace[1]["step"] == "filter (streamed over all 5000 rows)"
    run = run_plan(_plan("SELECT id, country FROM orders", FILTER_OP), db, _engine())
    assert [r[0] for r in run.result.rows] == europe[:150] and run.result.truncated  # more passed than the cap
    few = "SELECT id, country FROM orders WHERE country IN ('France', 'Japan', 'Kenya')"  # 300 rows, 100 in Europe
    run = run_plan(_plan(few, FILTER_OP), db, _engine())
    assert len(run.result.rows) == 100 and not run.result.truncated and not run.result.notes
    small = open_database(path)  # under the cap: the plan runs on the fetched rows as before
    run = run_plan(_plan(few, FILTER_OP), small, _engine())
    assert len(run.result.rows) == 100 and run.trace[1]["step"] == "filter"


def test_a_plan_counts_200k_postgresql_rows_exactly(postgres_url, pg_orders):
    from tagql.tag.plan import run_plan

    db = open_database(postgres_url)  # row cap 10,000
    engine = _engine()
    run = run_plan(_plan(f"SELECT id, country FROM {pg_orders}", FILTER_OP, {"op": "count"}), db, engine)
    assert run.result.rows == [(sum(operator_scale.country_of(i) in EUROPE for i in range(N)),)]
    assert not run.result.truncated and engine.stats.lm_calls == 50


def test_an_empty_postgresql_result_still_names_its_columns(postgres_url, pg_orders):
    """(TAG plans check their operators' columns on ``SELECT * FROM (sql) LIMIT 0``; psycopg's stream of no rows
    left no description, so every plan on PostgreSQL failed with 'the columns are: '.)"""
    db = open_database(postgres_url)
    assert db.execute(f"SELECT id, country FROM {pg_orders} WHERE false").columns == ["id", "country"]
