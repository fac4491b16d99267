"""The SQL attack suite (issue 35): statements generated from attack payloads x disguises, run through the
same path as ``tagql sql`` (the parser's check, then the engine) and through the engine alone.

A statement is *harmful* when, after it, the database's bytes / table checksums / object lists differ, a
file appears or is read outside the database, a PostgreSQL session is killed or a lock or setting is left
behind. Every refusal must be a one-line ``TagqlError``. Run as a script for the table and JSON::

    python tests/security/attack_suite.py [--dialects sqlite,duckdb,postgres] [--out FILE]

PostgreSQL needs ``TAGQL_TEST_POSTGRES_URL`` (a SELECT-only role); ``TAGQL_TEST_POSTGRES_OWNER_URL`` and
``TAGQL_TEST_POSTGRES_SUPERUSER_URL`` add the misconfigured runs (refused at connect time is a pass).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tagql.db import open_database, parse_read_only
from tagql.errors import TagqlError

SECRET = "tagql-secret-7f3a9c"  # written to a file outside the database; must never come back in a row
TABLES = ("colour", "superhero", "publisher")


# -- payloads ---------------------------------------------------------------------------------------------
def _writes(t: str) -> list[tuple[str, str]]:
    return [
        ("write", f"INSERT INTO {t} (id) VALUES (99999)"),
        ("write", f"INSERT INTO {t} SELECT * FROM {t}"),
        ("write", f"UPDATE {t} SET id = id + 100000"),
        ("write", f"DELETE FROM {t}"),
        ("write", f"DELETE FROM {t} WHERE id > 1"),
        ("ddl", f"DROP TABLE {t}"),
        ("ddl", f"ALTER TABLE {t} ADD COLUMN pwn INT"),
        ("ddl", f"ALTER TABLE {t} RENAME TO pwned"),
        ("ddl", f"CREATE INDEX pwn_idx ON {t} (id)"),
        ("ddl", f"CREATE VIEW pwn_view AS SELECT * FROM {t}"),
        ("ddl", f"CREATE TABLE pwn AS SELECT * FROM {t}"),
    ]


_COMMON = [
    ("ddl", "CREATE TABLE pwn (x INT)"),
    ("ddl", "CREATE TEMP TABLE pwn (x INT)"),
    ("ddl", "DROP VIEW IF EXISTS nothing"),
    ("maintenance", "VACUUM"),
    ("maintenance", "ANALYZE"),
    ("transaction", "BEGIN"),
    ("transaction", "COMMIT"),
    ("transaction", "ROLLBACK"),
    ("transaction", "SAVEPOINT s"),
    ("cte-write", "WITH x AS (SELECT 1) DELETE FROM colour"),
    ("cte-write", "WITH x AS (SELECT 1) INSERT INTO colour (id) VALUES (99998)"),
    ("cte-write", "WITH x AS (SELECT 1) UPDATE colour SET id = id + 1"),
]

_SQLITE = [
    ("attach", "ATTACH DATABASE '{dir}/evil.db' AS evil"),
    ("attach", "ATTACH '{dir}/evil.db' AS evil"),
    ("attach", "ATTACH 'file:{dir}/evil.db?mode=rwc' AS evil"),
    ("attach", "DETACH DATABASE main"),
    ("pragma", "PRAGMA writable_schema = ON"),
    ("pragma", "PRAGMA journal_mode = WAL"),
    ("pragma", "PRAGMA user_version = 5"),
    ("pragma", "PRAGMA foreign_keys = OFF"),
    ("pragma", "PRAGMA query_only = 0"),
    ("pragma", "PRAGMA locking_mode = EXCLUSIVE"),
    ("pragma", "PRAGMA main.page_size = 512"),
    ("pragma", "PRAGMA temp_store_directory = '{dir}'"),
    ("extension", "SELECT load_extension('{dir}/evil.so')"),
    ("extension", "SELECT load_extension('/usr/lib/x86_64-linux-gnu/libsqlite3.so.0', 'sqlite3_extension_init')"),
    ("file", "VACUUM INTO '{dir}/copy.db'"),
    ("file", "SELECT readfile('{dir}/secret.txt')"),
    ("file", "SELECT writefile('{dir}/out.txt', 'x')"),
    ("file", "SELECT edit('x')"),
    ("ddl", "CREATE TRIGGER pwn AFTER INSERT ON colour BEGIN DELETE FROM colour; END"),
    ("ddl", "CREATE TEMP TRIGGER pwn AFTER INSERT ON colour BEGIN SELECT 1; END"),
    ("ddl", "CREATE VIRTUAL TABLE pwn USING fts5(x)"),
    ("write", "REPLACE INTO colour (id, colour) VALUES (1, 'x')"),
    ("write", "INSERT OR REPLACE INTO colour (id, colour) VALUES (1, 'x')"),
    ("write", "INSERT INTO colour (id, colour) VALUES (1, 'x') ON CONFLICT (id) DO UPDATE SET colour = 'y'"),
    ("write", "UPDATE sqlite_master SET sql = ''"),
    ("maintenance", "REINDEX"),
    ("transaction", "BEGIN IMMEDIATE"),
    ("transaction", "BEGIN EXCLUSIVE"),
    ("transaction", "RELEASE s"),
    ("resource", "SELECT length(randomblob(1000000000))"),
    ("resource", "SELECT zeroblob(2000000000)"),
]

_DUCKDB = [
    ("file", "COPY colour TO '{dir}/out.csv'"),
    ("file", "COPY (SELECT 1) TO '{dir}/out.parquet' (FORMAT parquet)"),
    ("file", "COPY colour FROM '{dir}/secret.txt'"),
    ("file", "SELECT * FROM read_csv('{dir}/secret.txt')"),
    ("file", "SELECT * FROM read_csv_auto('{dir}/secret.txt')"),
    ("file", "SELECT * FROM read_text('{dir}/secret.txt')"),
    ("file", "SELECT * FROM read_blob('{dir}/secret.txt')"),
    ("file", "SELECT * FROM read_json_auto('{dir}/secret.txt')"),
    ("file", "SELECT * FROM read_parquet('{dir}/secret.txt')"),
    ("file", "SELECT * FROM '{dir}/secret.txt'"),
    ("file", "SELECT * FROM glob('{dir}/*')"),
    ("file", "EXPORT DATABASE '{dir}/export'"),
    ("file", "IMPORT DATABASE '{dir}'"),
    ("extension", "INSTALL httpfs"),
    ("extension", "LOAD httpfs"),
    ("extension", "INSTALL sqlite; LOAD sqlite"),
    ("extension", "FORCE INSTALL json"),
    ("attach", "ATTACH '{dir}/evil.duckdb' AS evil"),
    ("attach", "ATTACH '{dir}/evil.db' AS evil (TYPE sqlite)"),
    ("attach", "DETACH main"),
    ("setting", "SET enable_external_access = true"),
    ("setting", "SET lock_configuration = false"),
    ("setting", "RESET enable_external_access"),
    ("setting", "SET threads = 1"),
    ("setting", "PRAGMA enable_profiling"),
    ("setting", "PRAGMA memory_limit = '1TB'"),
    ("setting", "SELECT * FROM duckdb_settings() WHERE name = 'enable_external_access'"),
    ("ddl", "CREATE MACRO pwn(x) AS x + 1"),
    ("ddl", "CREATE TEMP MACRO pwn(x) AS x + 1"),
    ("ddl", "CREATE SEQUENCE pwn_seq"),
    ("ddl", "CREATE SECRET pwn (TYPE s3, KEY_ID 'x', SECRET 'y')"),
    ("ddl", "CREATE TYPE pwn AS ENUM ('a')"),
    ("maintenance", "CHECKPOINT"),
    ("maintenance", "FORCE CHECKPOINT"),
    ("write", "INSERT OR REPLACE INTO colour (id, colour) VALUES (1, 'x')"),
    ("show", "SHOW ALL"),
    ("show", "SUMMARIZE colour"),
    ("show", "CALL pragma_version()"),
    ("resource", "SELECT getenv('HOME')"),
]

_POSTGRES = [
    ("copy", "COPY colour TO PROGRAM 'touch {dir}/canary'"),
    ("copy", "COPY (SELECT 1) TO PROGRAM 'touch {dir}/canary'"),
    ("copy", "COPY colour FROM PROGRAM 'echo 99997'"),
    ("copy", "COPY colour TO '{dir}/out.csv'"),
    ("copy", "COPY colour FROM '{dir}/secret.txt'"),
    ("file", "SELECT pg_read_file('{dir}/secret.txt')"),
    ("file", "SELECT pg_read_binary_file('{dir}/secret.txt')"),
    ("file", "SELECT pg_catalog.pg_read_file('{dir}/secret.txt', 0, 100)"),
    ("file", "SELECT * FROM pg_ls_dir('{dir}')"),
    ("file", "SELECT pg_stat_file('{dir}/secret.txt')"),
    ("file", "SELECT query_to_xml('SELECT pg_read_file(''{dir}/secret.txt'')', true, true, '')"),
    ("file", "SELECT \"pg_read_file\" /* x */ ('{dir}/secret.txt')"),
    ("file", "SELECT U&\"\\0070g_read_file\"('{dir}/secret.txt')"),
    ("lo", "SELECT lo_import('{dir}/secret.txt')"),
    ("lo", "SELECT lo_export(1, '{dir}/out.bin')"),
    ("lo", "SELECT lo_creat(-1)"),
    ("lo", "SELECT lo_from_bytea(0, 'x')"),
    ("dblink", "SELECT dblink_exec('{owner}', 'CREATE TABLE pwn (x int)')"),
    ("dblink", "SELECT dblink_exec('{owner}', 'DELETE FROM colour')"),
    ("dblink", "SELECT * FROM dblink('{owner}', 'SELECT pg_read_file(''{dir}/secret.txt'')') AS t(x text)"),
    ("dblink", "SELECT dblink_connect('c', '{owner}')"),
    ("dblink", "SELECT public.dblink_exec('{owner}', 'COPY (SELECT 1) TO PROGRAM ''touch {dir}/canary''')"),
    ("setting", "SELECT set_config('default_transaction_read_only', 'off', false)"),
    ("setting", "SELECT set_config('search_path', 'nowhere', false)"),
    ("setting", "SET default_transaction_read_only = off"),
    ("setting", "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE"),
    ("setting", "SET search_path = nowhere"),
    ("setting", "RESET ALL"),
    ("setting", "ALTER SYSTEM SET work_mem = '1GB'"),
    ("setting", "ALTER ROLE CURRENT_USER SET default_transaction_read_only = off"),
    ("setting", "ALTER DATABASE tagql_demo SET default_transaction_read_only = off"),
    ("transaction", "SET TRANSACTION READ WRITE"),
    ("transaction", "START TRANSACTION READ WRITE"),
    ("transaction", "COMMIT AND CHAIN"),
    ("transaction", "PREPARE TRANSACTION 'x'"),
    ("do", "DO $$ BEGIN DELETE FROM colour; END $$"),
    ("do", "DO $$ BEGIN EXECUTE 'CREATE TABLE pwn (x int)'; END $$"),
    ("do", "DO LANGUAGE plpgsql 'BEGIN PERFORM pg_sleep(0); END'"),
    ("lock", "SELECT * FROM colour FOR UPDATE"),
    ("lock", "SELECT * FROM colour FOR SHARE"),
    ("lock", "SELECT * FROM colour FOR NO KEY UPDATE SKIP LOCKED"),
    ("lock", "LOCK TABLE colour IN ACCESS EXCLUSIVE MODE"),
    ("lock", "SELECT pg_advisory_lock(4242)"),
    ("lock", "SELECT pg_try_advisory_lock(4242)"),
    ("sequence", "SELECT nextval('colour_id_seq')"),
    ("sequence", "SELECT setval('colour_id_seq', 1)"),
    ("sequence", "SELECT currval('colour_id_seq')"),
    ("signal", "SELECT pg_terminate_backend({sentinel})"),
    ("signal", "SELECT pg_cancel_backend({sentinel})"),
    ("signal", "SELECT pg_reload_conf()"),
    ("signal", "SELECT pg_stat_reset()"),
    ("signal", "SELECT pg_create_physical_replication_slot('pwn')"),
    ("signal", "SELECT pg_notify('c', 'x')"),
    ("signal", "NOTIFY c"),
    ("signal", "LISTEN c"),
    ("volatile", "SELECT txid_current()"),
    ("volatile", "SELECT pg_sleep(0)"),
    ("volatile", "SELECT pg_switch_wal()"),
    ("volatile", "SELECT pg_export_snapshot()"),
    ("ddl", "CREATE FUNCTION pwn() RETURNS int LANGUAGE sql AS 'SELECT 1'"),
    ("ddl", "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"),
    ("ddl", "CREATE ROLE pwn SUPERUSER LOGIN"),
    ("ddl", "GRANT ALL ON colour TO PUBLIC"),
    ("ddl", "REVOKE SELECT ON colour FROM CURRENT_USER"),
    ("ddl", "COMMENT ON TABLE colour IS 'pwn'"),
    ("ddl", "SELECT * INTO pwn FROM colour"),
    ("ddl", "PREPARE p AS DELETE FROM colour"),
    ("ddl", "DECLARE c CURSOR WITH HOLD FOR SELECT * FROM colour"),
    ("maintenance", "TRUNCATE colour CASCADE"),
    ("maintenance", "CLUSTER colour"),
    ("maintenance", "REINDEX TABLE colour"),
    ("explain", "EXPLAIN ANALYZE DELETE FROM colour"),
    ("explain", "EXPLAIN ANALYZE SELECT pg_read_file('{dir}/secret.txt')"),
    ("cte-write", "WITH d AS (DELETE FROM colour RETURNING *) SELECT * FROM d"),
    ("cte-write", "WITH u AS (UPDATE colour SET id = id RETURNING *) SELECT count(*) FROM u"),
    ("cte-write", "WITH i AS (INSERT INTO colour (id) VALUES (99996) RETURNING id) SELECT id FROM i"),
    ("write", "INSERT INTO colour (id, colour) VALUES (1, 'x') ON CONFLICT (id) DO UPDATE SET colour = 'y'"),
    ("write", "MERGE INTO colour c USING colour s ON c.id = s.id WHEN MATCHED THEN DELETE"),
]

# disguises: how an attacker wraps a payload (prefixes, comments, case, unicode, statement smuggling)
DISGUISES: list[tuple[str, Callable[[str], str]]] = [
    ("plain", lambda p: p),
    ("semicolon", lambda p: p + ";"),
    ("after-select", lambda p: "SELECT 1; " + p),
    ("after-select-newline", lambda p: "SELECT 1\n;\n" + p + ";"),
    ("block-comment", lambda p: "/* read only */ " + p),
    ("line-comment", lambda p: "-- a question\n" + p),
    ("comment-hides-semicolon", lambda p: "SELECT 1 /* ; */; " + p),
    ("lower-case", lambda p: p.lower() if "{" not in p and "'" not in p else p.replace("SELECT", "select")),
    ("commit-escape", lambda p: "COMMIT; " + p),
    ("rollback-escape", lambda p: "ROLLBACK; " + p),
    ("begin-commit", lambda p: "BEGIN; " + p + "; COMMIT"),
    ("union", lambda p: "SELECT 1 UNION ALL SELECT 2; " + p),
    ("fullwidth-semicolon", lambda p: "SELECT 1\uff1b " + p),
    ("zero-width", lambda p: "\u200b" + p),
    ("bom-nbsp", lambda p: "\ufeffSELECT 1;\u00a0" + p),
    ("newlines-tabs", lambda p: p.replace(" ", "\n\t", 3)),
    ("subquery", lambda p: "SELECT * FROM (" + p + ") AS s"),
    ("cte-wrap", lambda p: "WITH w AS (" + p + ") SELECT * FROM w"),
    ("homoglyph", lambda p: p.replace("E", "\u0415", 1)),  # Cyrillic Ie
]


def statements(dialect: str, **fill: Any) -> list[tuple[str, str, str]]:
    """(category, disguise, sql) for one dialect: every payload in every disguise."""
    payloads = list(_COMMON) + [w for t in TABLES for w in _writes(t)]
    payloads += {"sqlite": _SQLITE, "duckdb": _DUCKDB, "postgres": _POSTGRES}[dialect]
    out = []
    for category, template in payloads:
        sql = template.format(**fill) if fill else template
        for name, disguise in DISGUISES:
            out.append((category, name, disguise(sql)))
    return out


# -- harm detection -----------------------------------------------------------------------------------------
def _file_state(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "missing"


def _dir_state(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


@dataclass
class Outcome:
    dialect: str
    role: str = "select-only"
    tried: int = 0
    refused_by_parser: int = 0
    refused_by_engine: int = 0
    executed_harmlessly: int = 0
    harmful: int = 0
    engine_alone: Counter = field(default_factory=Counter)  # refused / executed / harmful
    multiline_refusals: int = 0
    crashes: int = 0  # exceptions that are not a one-line TagqlError (tracebacks)
    refused_at_connect: str = ""
    seconds: float = 0.0
    examples: dict[str, list[str]] = field(default_factory=dict)

    def note(self, kind: str, sql: str, detail: str = "") -> None:
        bucket = self.examples.setdefault(kind, [])
        if len(bucket) < 5:
            bucket.append(f"{sql[:160]!r} -> {detail[:200]}")

    def row(self) -> dict[str, Any]:
        d = asdict(self)
        d["engine_alone"] = dict(self.engine_alone)
        return d


def _try(fn: Callable[[], Any], out: Outcome, sql: str) -> tuple[bool, Any]:
    """(refused?, result or reason). A refusal must be a one-line TagqlError."""
    try:
        return False, fn()
    except TagqlError as exc:
        text = exc.one_line()
        if "\n" in text or not text.strip():
            out.multiline_refusals += 1
            out.note("multiline refusal", sql, text)
        return True, text
    except Exception as exc:  # noqa: BLE001 -- a traceback is what this suite looks for
        out.crashes += 1
        out.note("crash", sql, f"{exc.__class__.__name__}: {exc}")
        return True, str(exc)


def _leaks(result: Any) -> bool:
    rows = getattr(result, "rows", None) or []
    return any(SECRET in str(v) for r in rows for v in r)


def run_statements(
    out: Outcome, db: Any, items: list[tuple[str, str, str]], state: Callable[[], Any], *, every: int = 1,
) -> None:
    """Each statement through the parser then the engine, and through the engine alone; the state is
    compared every ``every`` statements (a change counts each statement of that chunk as harmful)."""
    start = time.perf_counter()
    before = state()
    chunk: list[str] = []
    for i, (category, disguise, sql) in enumerate(items, 1):
        out.tried += 1
        chunk.append(sql)
        refused, result = _try(lambda: parse_read_only(sql, db.dialect), out, sql)
        if refused:
            out.refused_by_parser += 1
        else:
            refused, result = _try(lambda: db.execute(sql, timeout_s=5, row_cap=50), out, sql)
            if refused:
                out.refused_by_engine += 1
            elif _leaks(result):
                out.harmful += 1
                out.note("harmful", sql, "read the secret file")
            else:
                out.executed_harmlessly += 1
                out.note(f"executed ({category})", sql, "")
        refused, result = _try(lambda: db.execute(sql, timeout_s=5, row_cap=50), out, sql)
        out.engine_alone["refused" if refused else "executed"] += 1
        if not refused and _leaks(result):
            out.engine_alone["harmful"] += 1
            out.note("harmful (engine alone)", sql, "read the secret file")
        if i % every == 0 or i == len(items):
            after = state()
            if after != before:
                out.harmful += len(chunk)
                out.note("harmful", " | ".join(chunk[:3]), f"state changed: {_diff(before, after)}")
                before = after
            chunk = []
    out.seconds = round(time.perf_counter() - start, 2)


def _diff(a: Any, b: Any) -> str:
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return "changed"
    parts = []
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if x == y:
            continue
        if isinstance(x, str) and isinstance(y, str) and "," in x + y:
            sx, sy = set(x.split(",")), set(y.split(","))
            parts.append(f"{k}: +{sorted(sy - sx)[:3]} -{sorted(sx - sy)[:3]}")
        else:
            parts.append(f"{k}: {str(x)[:40]} -> {str(y)[:40]}")
    return "; ".join(parts)


# -- per dialect ---------------------------------------------------------------------------------------------
def _workdir() -> Path:
    d = Path(tempfile.mkdtemp(prefix="tagql-attack-"))
    d.chmod(0o777)  # PostgreSQL's server process (another OS user) could write here if it were allowed to
    (d / "secret.txt").write_text(SECRET + "\n")
    (d / "secret.txt").chmod(0o644)
    return d


def run_sqlite(demo: Path, limit: int | None = None) -> Outcome:
    work = _workdir()
    path = work / "superhero.sqlite"
    shutil.copy(demo, path)
    out = Outcome("sqlite")
    db = open_database(path)
    items = statements("sqlite", dir=work)[:limit]
    run_statements(out, db, items, lambda: (_file_state(path), _dir_state(work)))
    db.close()
    shutil.rmtree(work, ignore_errors=True)
    return out


def run_duckdb(demo: Path, limit: int | None = None) -> Outcome:
    from tagql.db.duck import copy_sqlite_to_duckdb

    work = _workdir()
    path = work / "superhero.duckdb"
    copy_sqlite_to_duckdb(demo, path)
    out = Outcome("duckdb")
    db = open_database(path)
    items = statements("duckdb", dir=work)[:limit]
    run_statements(out, db, items, lambda: (_file_state(path), _dir_state(work)), every=25)
    db.close()
    shutil.rmtree(work, ignore_errors=True)
    return out


_PG_STATE = {
    "tables": """SELECT string_agg(format('%s.%s', schemaname, tablename), ',' ORDER BY 1, 2)
                 FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')""",
    "objects": """SELECT string_agg(format('%s.%s:%s', n.nspname, c.relname, c.relkind), ',' ORDER BY 1)
                  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%'""",
    "functions": "SELECT count(*) FROM pg_proc WHERE pronamespace <> 'pg_catalog'::regnamespace",
    "roles": "SELECT string_agg(rolname || rolsuper::text, ',' ORDER BY rolname) FROM pg_roles",
    "role_settings": "SELECT count(*) FROM pg_db_role_setting",
    "databases": "SELECT string_agg(datname, ',' ORDER BY datname) FROM pg_database",
    "extensions": "SELECT string_agg(extname, ',' ORDER BY extname) FROM pg_extension",
    "large_objects": "SELECT count(*) FROM pg_largeobject_metadata",
    "advisory_locks": "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'",
    "slots": "SELECT count(*) FROM pg_replication_slots",
    "prepared_xacts": "SELECT count(*) FROM pg_prepared_xacts",
    "comments": "SELECT count(*) FROM pg_description WHERE objoid = 'colour'::regclass",
    "auto_conf": "SELECT count(*) FROM pg_file_settings WHERE sourcefile LIKE '%auto.conf'",
}


def _pg_checksums(cur: Any) -> dict[str, str]:
    cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")
    sums = {}
    for (t,) in cur.fetchall():
        try:
            cur.execute(f'SELECT md5(coalesce(string_agg(x::text, \'|\' ORDER BY x::text), \'\')) FROM "{t}" x')
            sums[f"rows:{t}"] = cur.fetchone()[0]
        except Exception as exc:  # noqa: BLE001 -- a table the observer cannot read
            sums[f"rows:{t}"] = exc.__class__.__name__
            cur.connection.rollback()
    return sums


def run_postgres(url: str, owner_url: str | None, *, role: str = "select-only", limit: int | None = None) -> Outcome:
    import psycopg

    work = _workdir()
    observer = psycopg.connect(_libpq(owner_url or url), autocommit=True)
    sentinel = psycopg.connect(_libpq(url), autocommit=True)
    sentinel_pid = sentinel.info.backend_pid

    def state() -> dict[str, Any]:
        with observer.cursor() as cur:
            snap = {}
            for key, sql in _PG_STATE.items():
                try:
                    cur.execute(sql)
                    snap[key] = cur.fetchone()[0]
                except Exception as exc:  # noqa: BLE001 -- e.g. pg_file_settings needs privileges
                    snap[key] = exc.__class__.__name__
            snap.update(_pg_checksums(cur))
        snap["files"] = _dir_state(work)
        try:
            sentinel.execute("SELECT 1")
            snap["sentinel"] = "alive"
        except Exception:  # noqa: BLE001
            snap["sentinel"] = "killed"
        return snap

    out = Outcome("postgres", role=role)
    try:
        db = open_database(url)
    except TagqlError as exc:
        out.refused_at_connect = exc.one_line()
        out.tried = len(statements("postgres", dir=work, owner=_libpq(owner_url or url), sentinel=sentinel_pid)[:limit])
        return out
    items = statements("postgres", dir=work, owner=_libpq(owner_url or url), sentinel=sentinel_pid)[:limit]
    run_statements(out, db, items, state, every=100)
    db.close()
    observer.close()
    sentinel.close()
    shutil.rmtree(work, ignore_errors=True)
    return out


def _libpq(url: str) -> str:
    """A libpq connection string from a SQLAlchemy-style URL (psycopg and dblink read it)."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    parts = {"host": u.host, "port": u.port, "dbname": u.database, "user": u.username, "password": u.password}
    return " ".join(f"{k}={v}" for k, v in parts.items() if v)


# -- report -----------------------------------------------------------------------------------------------
def table(outcomes: list[Outcome]) -> str:
    head = ("| dialect | role | tried | refused by parser | refused by engine | executed harmlessly | harmful | "
            "engine alone: refused / executed / harmful | tracebacks | seconds |")
    lines = [head, "|" + "---|" * 10]
    for o in outcomes:
        if o.refused_at_connect:
            lines.append(f"| {o.dialect} | {o.role} | {o.tried} | - | refused at connect | - | **0** | - | 0 | - |")
            continue
        e = o.engine_alone
        lines.append(f"| {o.dialect} | {o.role} | {o.tried} | {o.refused_by_parser} | {o.refused_by_engine} | "
                     f"{o.executed_harmlessly} | **{o.harmful}** | {e['refused']} / {e['executed']} / "
                     f"{e['harmful']} | {o.crashes + o.multiline_refusals} | {o.seconds} |")
    return "\n".join(lines)


def run_all(dialects: list[str], demo: Path) -> list[Outcome]:
    outcomes = []
    if "sqlite" in dialects:
        outcomes.append(run_sqlite(demo))
    if "duckdb" in dialects:
        outcomes.append(run_duckdb(demo))
    if "postgres" in dialects and os.environ.get("TAGQL_TEST_POSTGRES_URL"):
        urls = postgres_urls(demo)
        outcomes.append(run_postgres(urls["select-only"], urls.get("owner")))
        for role in ("owner", "superuser"):
            if urls.get(role):
                outcomes.append(run_postgres(urls[role], urls.get("owner"), role=role))
    return outcomes


def postgres_urls(demo: Path) -> dict[str, str]:
    """The roles' URLs on the database the attacks run against: ``TAGQL_TEST_POSTGRES_ATTACK_DB`` (a
    database of its own, so nobody else's tables change under the checksums; .ci/run creates it) or
    the tests' database; the demo data is loaded into it as the owner."""
    from sqlalchemy.engine import make_url

    from tagql.db.transfer import copy_database

    name = os.environ.get("TAGQL_TEST_POSTGRES_ATTACK_DB")
    urls = {}
    for role, var in (("select-only", "TAGQL_TEST_POSTGRES_URL"), ("owner", "TAGQL_TEST_POSTGRES_OWNER_URL"),
                      ("superuser", "TAGQL_TEST_POSTGRES_SUPERUSER_URL")):
        if os.environ.get(var):
            url = make_url(os.environ[var])
            urls[role] = (url.set(database=name) if name else url).render_as_string(hide_password=False)
    copy_database(demo, urls.get("owner") or urls["select-only"], replace=True)
    return urls


def main(argv: list[str] | None = None) -> int:
    import argparse
    import logging

    from tagql.demo import demo_database_path

    logging.getLogger("sqlglot").setLevel(logging.ERROR)  # "falling back to parsing as a Command"

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dialects", default="sqlite,duckdb,postgres")
    ap.add_argument("--out", default="bench/results/security/attacks.json")
    args = ap.parse_args(argv)
    outcomes = run_all(args.dialects.split(","), demo_database_path())
    print(table(outcomes))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"command": " ".join(["python", *sys.argv]),
                                          "outcomes": [o.row() for o in outcomes]}, indent=1, default=str))
    print(f"wrote {args.out}")
    return 0 if all(o.harmful == 0 and o.crashes == 0 and o.multiline_refusals == 0 for o in outcomes) else 1


def iter_payload_counts() -> Iterator[tuple[str, int]]:
    for d in ("sqlite", "duckdb", "postgres"):
        yield d, len(statements(d, dir="/x", owner="x", sentinel=1))


if __name__ == "__main__":
    raise SystemExit(main())
