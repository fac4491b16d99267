"""PostgreSQL closed at the engine (issue 35): a role that can write is refused at connect time, one
statement per call (extended protocol), only side-effect-free functions, the pooled session reset after
every query, and a fetch that stops at the row cap. Needs the server and roles .ci/run creates."""

from __future__ import annotations

import os
import time

import pytest

from tagql.db import open_database
from tagql.errors import QueryFailed, UnsafeQuery, UnsafeRole

pytestmark = pytest.mark.postgres


def _url(var: str) -> str:
    url = os.environ.get(var)
    if not url:
        pytest.skip(f"{var} is not set (see .ci/run)")
    return url


def _tables(owner_url: str) -> set[str]:
    import sqlalchemy as sa

    engine = sa.create_engine(owner_url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.connect() as conn:
        names = {r[0] for r in conn.execute(sa.text(
            "SELECT schemaname || '.' || tablename FROM pg_tables WHERE schemaname NOT IN "
            "('pg_catalog', 'information_schema')"))}
    engine.dispose()
    return names


def test_an_owner_role_is_refused_naming_its_privileges(postgres_url: str) -> None:
    with pytest.raises(UnsafeRole, match=r"can write: it has CREATE on the database.*owns"):
        open_database(_url("TAGQL_TEST_POSTGRES_OWNER_URL"))


def test_a_superuser_is_refused(postgres_url: str) -> None:
    with pytest.raises(UnsafeRole, match="it is a superuser"):
        open_database(_url("TAGQL_TEST_POSTGRES_SUPERUSER_URL"))


def test_the_select_only_role_is_accepted(postgres_url: str) -> None:
    db = open_database(postgres_url)
    assert db.execute("SELECT current_setting('default_transaction_read_only')").rows == [("on",)]


def test_one_statement_per_call_even_without_the_statement_count(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    owner = os.environ.get("TAGQL_TEST_POSTGRES_OWNER_URL")
    before = _tables(owner) if owner else None
    db = open_database(postgres_url)
    with pytest.raises(UnsafeQuery, match="only a single statement may run, got 3"):
        db.execute("SELECT 1; COMMIT; CREATE TABLE pwn (i int)")
    monkeypatch.setattr("tagql.db.connection.check_bounds", lambda sql, dialect: [])
    with pytest.raises(UnsafeQuery, match="single statement"):  # the server's extended protocol
        db.execute("SELECT 1; COMMIT; CREATE TABLE pwn (i int)")
    if owner:
        assert _tables(owner) == before


@pytest.mark.parametrize("sql", [
    "SELECT dblink_exec('dbname=tagql_demo', 'CREATE TABLE pwn (i int)')",
    "SELECT pg_read_file('/etc/passwd')",
    "SELECT \"pg_read_file\" /* gap */ ('/etc/passwd')",
    "SELECT pg_catalog.pg_ls_dir('.')",
    "SELECT lo_import('/etc/passwd')",
    "SELECT set_config('default_transaction_read_only', 'off', false)",
    "SELECT pg_advisory_lock(42)",
    "SELECT pg_terminate_backend(pg_backend_pid())",
    "SELECT query_to_xml('SELECT 1', true, true, '')",
    "SELECT nextval('superhero_id_seq')",
    "SELECT pg_sleep(10)",
    "SELECT * FROM superhero WHERE id = 1 AND U&\"\\0070g_sleep\"(1) IS NULL",
])
def test_functions_with_side_effects_are_refused(postgres_url: str, sql: str) -> None:
    db = open_database(postgres_url)
    with pytest.raises(UnsafeQuery, match="side-effect-free|Unicode-escaped"):
        db.execute(sql)


def test_side_effect_free_functions_run(postgres_url: str) -> None:
    db = open_database(postgres_url)
    rows = db.execute("SELECT upper(superhero_name), length(full_name), random() < 2, now() IS NOT NULL "
                      "FROM superhero WHERE superhero_name LIKE '%Man%' ORDER BY 1 LIMIT 1").rows
    assert rows[0][0] == "3-D MAN" and rows[0][2] is True


def test_the_pooled_session_is_reset_after_every_query(postgres_url: str) -> None:
    db = open_database(postgres_url)
    with pytest.raises((UnsafeQuery, QueryFailed)):
        db.execute("SET search_path = nowhere")  # runs, then DISCARD ALL undoes it
    assert db.execute("SELECT count(*) FROM superhero").rows == [(750,)]
    with pytest.raises((UnsafeQuery, QueryFailed)):
        db.execute("SET default_transaction_read_only = off")
    assert db.execute("SHOW default_transaction_read_only").rows == [("on",)]
    with pytest.raises(UnsafeQuery, match="read-only transaction"):
        db.execute("DELETE FROM colour")


def test_the_fetch_stops_at_the_row_cap(postgres_url: str) -> None:
    db = open_database(postgres_url)
    start = time.perf_counter()
    # 421M rows (750^3), streamed: the fetch stops after 101 and the rest of the query is cancelled
    result = db.execute("SELECT a.id, b.id, c.id, repeat('x', 200) FROM superhero a, superhero b, superhero c",
                        row_cap=100)
    assert len(result.rows) == 100 and result.truncated
    assert time.perf_counter() - start < 5  # not 421M rows fetched
    assert db.execute("SELECT 1").rows == [(1,)]
