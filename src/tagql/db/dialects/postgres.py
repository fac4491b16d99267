"""PostgreSQL (``tagql[postgres]``, psycopg 3). The guarantees come from the server first:

* **read-only session**: every connection starts with ``default_transaction_read_only=on`` and each query
  runs in a ``READ ONLY`` transaction that is rolled back, then ``DISCARD ALL`` resets the pooled session
  (settings, prepared statements, advisory locks, temporary state);
* **one statement per call**: queries go through the extended protocol (``Cursor.stream``), which the
  server refuses to run with more than one statement;
* **a role that cannot write**: at connect time a superuser, a role that can write to any table or
  sequence, create in any schema or the database, or that holds a predefined role reaching files,
  programs or other sessions is refused, naming what it holds (see docs/security.md for the role to create);
* **side-effect-free functions only**: every word of a statement that names a function which PostgreSQL
  marks volatile (``pg_proc.provolatile = 'v'``: ``dblink_exec``, ``pg_read_file``, ``lo_import``,
  ``set_config``, ``pg_advisory_lock``, ``pg_terminate_backend``, ``nextval`` ...) is refused unless it is in
  a small known-safe list (``random``, ``clock_timestamp`` ...). Words are read from the raw text, strings and
  comments included, so no tokenizer disagreement can hide a call;
* bounded work: a statement timeout on the session and on each transaction; rows are streamed and the
  fetch stops at the row cap, so client memory does not grow with the result.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tagql.db.dialects.base import Dialect, Rows
from tagql.errors import QueryTimeout, UnsafeQuery, UnsafeRole

if TYPE_CHECKING:
    from tagql.db.connection import Database

# volatile, but without side effects: allowed
SAFE_VOLATILE = frozenset({"random", "random_normal", "clock_timestamp", "timeofday", "gen_random_uuid",
                           "uuid_generate_v4", "current_query"})
# functions that run SQL given as text (the statement inside cannot be checked): refused even if
# a release marks them stable
RUNS_TEXT = frozenset({"query_to_xml", "query_to_xmlschema", "query_to_xml_and_xmlschema", "cursor_to_xml",
                       "cursor_to_xmlschema", "ts_stat", "database_to_xml", "database_to_xmlschema",
                       "database_to_xml_and_xmlschema", "schema_to_xml", "schema_to_xmlschema",
                       "schema_to_xml_and_xmlschema", "table_to_xml", "table_to_xmlschema",
                       "table_to_xml_and_xmlschema"})
# callable from SQL: not a type's, trigger's, access method's or language's internal function
_VOLATILE_SQL = """
SELECT DISTINCT lower(proname) FROM pg_proc
WHERE provolatile = 'v'
  AND prorettype NOT IN ('internal'::regtype, 'trigger'::regtype, 'event_trigger'::regtype,
                         'language_handler'::regtype, 'fdw_handler'::regtype, 'index_am_handler'::regtype,
                         'table_am_handler'::regtype, 'tsm_handler'::regtype)
  AND NOT ('internal'::regtype = ANY (proargtypes::oid[]))
"""
# predefined roles that reach outside the database or into other sessions
_DANGEROUS_ROLES = ("pg_read_server_files", "pg_write_server_files", "pg_execute_server_program",
                    "pg_signal_backend", "pg_write_all_data", "pg_checkpoint", "pg_create_subscription")
_ROLE_SQL = """
SELECT r.rolsuper, r.rolreplication, r.rolbypassrls,
  has_database_privilege(current_database(), 'CREATE'),
  ARRAY(SELECT d.rolname FROM pg_roles d WHERE d.rolname = ANY (%(dangerous)s)
        AND pg_has_role(current_user, d.oid, 'USAGE')),
  ARRAY(SELECT quote_ident(n.nspname) FROM pg_namespace n
        WHERE has_schema_privilege(n.oid, 'CREATE') AND n.nspname NOT LIKE 'pg\\_%%'
          AND n.nspname <> 'information_schema'
          ORDER BY 1 LIMIT 5),
  ARRAY(SELECT format('%%s on %%s', p.priv, c.oid::regclass) FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        CROSS JOIN unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'TRIGGER']) AS p(priv)
        WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
          AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%%'
          AND has_table_privilege(c.oid, p.priv) ORDER BY 1 LIMIT 5),
  ARRAY(SELECT format('UPDATE on sequence %%s', c.oid::regclass) FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind = 'S' AND n.nspname NOT IN ('pg_catalog', 'information_schema')
          AND CASE WHEN c.relkind = 'S' THEN has_sequence_privilege(c.oid, 'UPDATE') END ORDER BY 1 LIMIT 5),
  ARRAY(SELECT format('owns %%s', c.oid::regclass) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
          AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%%'
          AND pg_has_role(current_user, c.relowner, 'USAGE') ORDER BY 1 LIMIT 5)
FROM pg_roles r WHERE r.rolname = current_user
"""
_WORD = re.compile(r"[^\W\d][\w$]*")
_UNICODE_ESCAPE = re.compile(r"[uU]&\s*[\"']")
_READER_HINT = "connect as a SELECT-only role (docs/security.md shows the grants)"


def role_problems(raw: Any) -> list[str]:
    """What the connected role may do beyond reading (empty: a SELECT-only role)."""
    with raw.cursor() as cur:
        cur.execute(_ROLE_SQL, {"dangerous": list(_DANGEROUS_ROLES)})
        row = cur.fetchone()
    raw.rollback()
    if row is None:
        return ["its role is not in pg_roles"]
    superuser, replication, bypassrls, create_db, roles, schemas, tables, sequences, owned = row
    problems = []
    if superuser:
        problems.append("is a superuser")
    if replication:
        problems.append("has REPLICATION")
    if bypassrls:
        problems.append("has BYPASSRLS")
    if create_db:
        problems.append("has CREATE on the database")
    problems += [f"is a member of {r}" for r in roles]
    problems += [f"has CREATE on schema {s}" for s in schemas]
    problems += list(owned) + list(tables) + list(sequences)
    return problems


class PostgreSQL(Dialect):
    name = "postgres"
    sample_values = True

    def __init__(self, name: str = "") -> None:
        super().__init__(name)
        self._volatile: frozenset[str] | None = None

    def engine_options(self, timeout_s: float) -> dict[str, Any]:
        ms = max(1, int(timeout_s * 1000))
        options = (f"-c default_transaction_read_only=on -c statement_timeout={ms} "
                   f"-c idle_in_transaction_session_timeout={max(ms * 2, 10_000)} -c lock_timeout={ms}")
        return {"connect_args": {"options": options, "prepare_threshold": None}}

    def check_connection(self, raw: Any) -> None:
        """Refuse a role that could write; load the names of the volatile functions."""
        problems = role_problems(raw)
        if problems:
            shown = ", ".join(problems[:6]) + (f" and {len(problems) - 6} more" if len(problems) > 6 else "")
            raise UnsafeRole(f"refusing to run queries as a role that can write: it {shown}", _READER_HINT)
        self._load_volatile(raw)

    def _load_volatile(self, raw: Any) -> frozenset[str]:
        if self._volatile is None:
            with raw.cursor() as cur:
                cur.execute(_VOLATILE_SQL)
                names = {r[0] for r in cur.fetchall()}
            raw.rollback()
            self._volatile = frozenset((names - SAFE_VOLATILE) | RUNS_TEXT)
        return self._volatile

    def check_statement(self, sql: str) -> None:
        """Refuse a statement naming a function with side effects (see the module's docstring)."""
        if _UNICODE_ESCAPE.search(sql):
            raise UnsafeQuery("Unicode-escaped names or strings (U&'...') are not allowed",
                              "write the characters themselves")
        if self._volatile is None:  # loaded by check_connection; a Database built by hand loads it in run
            return
        unsafe = self._volatile
        words = {w.lower() for w in _WORD.findall(sql)}
        bad = sorted(words & unsafe)
        if bad:
            raise UnsafeQuery(f"only side-effect-free functions may run; {bad[0]}() is volatile in PostgreSQL")

    def run(self, db: Database, raw: Any, sql: str, timeout: float, cap: int) -> Rows:
        if self._volatile is None:
            self._load_volatile(raw)
            self.check_statement(sql)
        ms = max(1, int(timeout * 1000))
        try:
            with raw.cursor() as cur:
                # the session default already, said again (our own two statements: one round trip)
                cur.execute(f"SET TRANSACTION READ ONLY; SET LOCAL statement_timeout = {ms}")
                rows: list[tuple[Any, ...]] = []
                # extended protocol (one statement only), rows streamed: memory stops at the cap
                stream = cur.stream(sql, size=_chunk(cap))
                try:
                    for row in stream:
                        rows.append(tuple(row))
                        if len(rows) > cap:
                            break
                finally:
                    stream.close()  # cancels the rest of the query
                columns = [d[0] for d in (cur.description or [])]
                if not columns and not rows:  # psycopg leaves no description after a stream of no rows
                    try:
                        cur.execute(f"SELECT * FROM ({sql.strip().rstrip(';')}) AS tagql_describe LIMIT 0")
                        columns = [d[0] for d in (cur.description or [])]
                    except Exception:  # noqa: BLE001 - the rows (none) stand; only their names are missing
                        pass
        finally:
            reset_or_close(raw)
        return columns, rows[:cap], len(rows) > cap


    def stream(self, db: Database, raw: Any, sql: str, timeout: float, chunk_rows: int,
               on_fetch: Any) -> Iterator[tuple[list[str], list[tuple[Any, ...]]]]:
        """A server-side cursor (``DECLARE ... CURSOR`` in a READ ONLY transaction, then ``FETCH FORWARD
        chunk_rows`` per chunk): client memory holds one chunk, whatever the result's size. Each fetch runs
        under the statement timeout; the whole stream under ``timeout`` too (checked between fetches)."""
        if self._volatile is None:
            self._load_volatile(raw)
            self.check_statement(sql)
        ms = max(1, int(timeout * 1000))
        deadline = time.monotonic() + timeout
        try:
            with raw.cursor() as cur:
                cur.execute(f"SET TRANSACTION READ ONLY; SET LOCAL statement_timeout = {ms}")
            with raw.cursor(name=f"tagql_stream_{id(raw):x}", withhold=False) as cur:
                cur.itersize = chunk_rows
                cur.execute(sql)
                columns = [d[0] for d in (cur.description or [])]
                while True:
                    if time.monotonic() > deadline:
                        raise QueryTimeout(f"query stopped after the {timeout:g} s statement timeout",
                                           "simplify the question or raise TAGQL_DB__STATEMENT_TIMEOUT_S")
                    rows = cur.fetchmany(chunk_rows)
                    on_fetch(len(rows))
                    if not rows:
                        yield columns, []  # the columns of an empty result
                        break
                    yield columns, [tuple(r) for r in rows]
                    if len(rows) < chunk_rows:
                        break
        finally:
            reset_or_close(raw)


def _chunk(cap: int) -> int:
    try:
        from psycopg import capabilities

        if capabilities.has_stream_chunked():
            return max(1, min(cap + 1, 500))
    except ImportError:  # psycopg < 3.2
        pass
    return 1


def reset_or_close(raw: Any) -> None:
    """:func:`reset`, or close a connection too broken for it (the pool replaces it: pool_pre_ping)."""
    try:
        reset(raw)
    except Exception:  # noqa: BLE001 - whatever broke the connection, it goes
        raw.close()


def reset(raw: Any) -> None:
    """Roll back, then ``DISCARD ALL``: the pooled session keeps nothing of the query."""
    try:
        raw.rollback()
    finally:
        autocommit = raw.autocommit
        raw.autocommit = True
        try:
            raw.execute("DISCARD ALL")
        finally:
            raw.autocommit = autocommit
