"""The service's state store: answers, conversations, feedback, verified examples and token hashes in one
database.

SQLite (WAL) by default, PostgreSQL (or any SQLAlchemy URL) via ``service.state_url`` so several replicas
share one state. The schema is versioned: ``schema_version`` holds one row per applied migration, a newer
schema than this code knows is refused, and every migration applied is logged (never silent)."""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from tagql.errors import TagqlError

log = logging.getLogger("tagql.service")

ROLES = ("reader", "expert", "reviewer", "admin")
"""Each role may do what the roles before it may: ``reader`` asks and runs SQL, ``expert`` adds
statements, ``reviewer`` approves them, ``admin`` manages tokens."""

TOKEN_PREFIX = "tq_"


class StateError(TagqlError):
    """The state database cannot be opened or has a schema this tagql does not know."""


class TokenError(TagqlError):
    """A token name or role is not valid."""


metadata = sa.MetaData()

schema_version = sa.Table(
    "schema_version", metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("applied_at", sa.Text, nullable=False),
)
tokens = sa.Table(
    "tokens", metadata,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("role", sa.String(20), nullable=False),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("created_at", sa.Text, nullable=False),
)
answers = sa.Table(
    "answers", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("created_at", sa.Text, nullable=False),
    sa.Column("token_name", sa.String(200)),
    sa.Column("target", sa.String(200), nullable=False),  # the registered database or collection asked
    sa.Column("database", sa.String(200), nullable=False),  # the database that answered
    sa.Column("question", sa.Text, nullable=False),
    sa.Column("method", sa.String(40), nullable=False),
    sa.Column("body", sa.Text, nullable=False),  # the Answer's JSON
)
feedback = sa.Table(
    "feedback", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("answer_id", sa.String(32), sa.ForeignKey("answers.id"), nullable=False),
    sa.Column("created_at", sa.Text, nullable=False),
    sa.Column("token_name", sa.String(200)),
    sa.Column("correct", sa.Boolean, nullable=False),
    sa.Column("sql", sa.Text),
    sa.Column("note", sa.Text),
)
verified_examples = sa.Table(
    "verified_examples", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("database", sa.String(200), nullable=False, index=True),
    sa.Column("question", sa.Text, nullable=False),
    sa.Column("sql", sa.Text, nullable=False),
    sa.Column("answer_id", sa.String(32), sa.ForeignKey("answers.id")),
    sa.Column("token_name", sa.String(200)),
    sa.Column("created_at", sa.Text, nullable=False),
)
reviews = sa.Table(
    "reviews", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("database", sa.String(200), nullable=False, index=True),
    sa.Column("statement_id", sa.Integer, nullable=False),
    sa.Column("action", sa.String(20), nullable=False),  # propose, approve, reject, edit
    sa.Column("note", sa.Text),
    sa.Column("token_name", sa.String(200)),
    sa.Column("created_at", sa.Text, nullable=False),
)
conversation_turns = sa.Table(
    "conversation_turns", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("conversation_id", sa.String(32), nullable=False, index=True),
    sa.Column("answer_id", sa.String(32), sa.ForeignKey("answers.id"), nullable=False),
    sa.Column("token_name", sa.String(200)),  # who holds the conversation (only they may continue it)
    sa.Column("created_at", sa.Text, nullable=False),
)
unresolved = sa.Table(
    "unresolved", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("target", sa.String(200), nullable=False),  # the registered database or collection asked
    sa.Column("database", sa.String(200), nullable=False, index=True),  # the database that answered
    sa.Column("phrase", sa.String(400), nullable=False),  # as asked, lower-cased: "tall heroes"
    sa.Column("phrase_key", sa.String(400), nullable=False, index=True),  # stemmed: "tall hero"
    sa.Column("question", sa.Text, nullable=False),
    sa.Column("outcome", sa.String(20), nullable=False),  # failed, empty, wrong
    sa.Column("error", sa.Text),
    sa.Column("answer_id", sa.String(32)),
    sa.Column("token_name", sa.String(200)),
    sa.Column("created_at", sa.Text, nullable=False),
    sa.Column("dismissed", sa.Boolean, nullable=False, default=False),
)


def _create(*tables: sa.Table) -> Callable[[sa.Connection], None]:
    def run(conn: sa.Connection) -> None:
        for table in tables:
            table.create(conn)
    return run


def _knowledge_tables(conn: sa.Connection) -> None:
    from tagql.knowledge.shared import create_tables

    create_tables(conn)


def _tag_cache_tables(conn: sa.Connection) -> None:
    from tagql.tag.cache import create_tables

    create_tables(conn)


MIGRATIONS: list[tuple[int, str, Callable[[sa.Connection], None]]] = [
    (1, "tokens, answers, feedback, verified examples", _create(tokens, answers, feedback, verified_examples)),
    (2, "review history of knowledge statements", _create(reviews)),
    (3, "conversations: the answers of each thread, in order", _create(conversation_turns)),
    (4, "unresolved expressions: domain phrases no statement matched, from failed, empty or wrong answers",
     _create(unresolved)),
    (5, "knowledge statements shared by replicas (service.knowledge = 'state')", _knowledge_tables),
    (6, "LM operator verdicts shared by replicas (service.tag_cache = 'state')", _tag_cache_tables),
]
"""(version, what it does, how). Append; never edit an applied one."""

SCHEMA_VERSION = MIGRATIONS[-1][0]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def hash_token(token: str) -> str:
    """Tokens are 256 random bits, so one SHA-256 is enough (no password stretching needed)."""
    return hashlib.sha256(token.encode()).hexdigest()


def default_state_url(config_dir: Path) -> str:
    return f"sqlite:///{config_dir / 'service.sqlite'}"


class StateStore:
    """The service's shared state. Thread-safe (a pooled SQLAlchemy engine)."""

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            parsed = make_url(url)
        except sa.exc.ArgumentError as exc:
            raise StateError(f"invalid service.state_url '{url}'", "use sqlite:///PATH or postgresql://...") from exc
        self.is_sqlite = parsed.drivername.startswith("sqlite")
        if self.is_sqlite:
            if not parsed.database or parsed.database == ":memory:":
                raise StateError("the state store needs a file", "use sqlite:///PATH")
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            self.engine = sa.create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        else:
            self.engine = sa.create_engine(url, pool_pre_ping=True)
        try:
            self._migrate_when_free()
        except sa.exc.OperationalError as exc:
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            raise StateError(f"cannot open the state store {parsed.render_as_string(hide_password=True)}: "
                             f"{reason}", "check service.state_url") from exc

    # -- schema ---------------------------------------------------------------------------------------

    def version(self) -> int:
        with self.engine.connect() as conn:
            if not sa.inspect(conn).has_table("schema_version"):
                return 0
            return int(conn.execute(sa.select(sa.func.max(schema_version.c.version))).scalar() or 0)

    open_patience_s = 30.0  # how long opening waits for other processes creating the same store

    def _migrate_when_free(self) -> list[int]:
        """:meth:`migrate`, retried while SQLite says the file is locked. Several processes opening a new store
        at once contend for its first write (and the switch to WAL); SQLite returns "database is locked" at
        once, without waiting on the busy timeout, when waiting could deadlock, so the wait is here."""
        deadline = time.monotonic() + self.open_patience_s
        delay = 0.05
        while True:
            try:
                return self.migrate()
            except sa.exc.OperationalError as exc:
                if not _is_lock_error(exc) or time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def migrate(self) -> list[int]:
        """Apply the migrations this database lacks, each in its own transaction; returns their versions."""
        try:
            with self.engine.begin() as conn:
                schema_version.create(conn, checkfirst=True)
        except sa.exc.DBAPIError:
            # two processes starting on a new store at once: both saw no table, the other one created it
            with self.engine.connect() as conn:
                if not sa.inspect(conn).has_table("schema_version"):
                    raise
        current = self.version()
        if current > SCHEMA_VERSION:
            raise StateError(f"the state store has schema version {current}, this tagql knows up to "
                             f"{SCHEMA_VERSION}", "upgrade tagql or point service.state_url elsewhere")
        applied = []
        for version, description, run in MIGRATIONS:
            if version <= current:
                continue
            try:
                with self.engine.begin() as conn:
                    # two replicas starting at once: the primary key makes the second one's insert fail
                    conn.execute(schema_version.insert().values(version=version, description=description,
                                                                applied_at=_now()))
                    run(conn)
            except sa.exc.IntegrityError:
                continue  # another replica applied it
            log.warning("state store %s: applied migration %d (%s)", self.engine.url.render_as_string(True),
                        version, description)
            applied.append(version)
        return applied

    @contextmanager
    def _begin(self) -> Iterator[sa.Connection]:
        """A write transaction; a write the database refuses (disk full, read-only file, locked) rolls back and
        is one :class:`StateError` line (nothing of it stored, what was stored before unchanged)."""
        try:
            with self.engine.begin() as conn:
                yield conn
        except sa.exc.OperationalError as exc:
            reason = (str(exc.orig or exc).strip().splitlines() or ["error"])[0]
            raise StateError(f"the state store could not be written: {reason}; nothing of this request was stored",
                             "free disk space or fix the file's permissions, then retry") from None

    # -- tokens ---------------------------------------------------------------------------------------

    def create_token(self, name: str, role: str) -> str:
        """A new token for ``name`` with ``role``; returned once, only its hash is kept."""
        if role not in ROLES:
            raise TokenError(f"unknown role '{role}'", f"use one of: {', '.join(ROLES)}")
        if not name or len(name) > 200:
            raise TokenError("a token needs a name of 1-200 characters")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self._begin() as conn:
            if conn.execute(sa.select(tokens.c.name).where(tokens.c.name == name)).first():
                raise TokenError(f"a token named '{name}' exists", "revoke it first or pick another name")
            conn.execute(tokens.insert().values(name=name, role=role, token_hash=hash_token(token),
                                                created_at=_now()))
        return token

    def revoke_token(self, name: str) -> bool:
        with self._begin() as conn:
            return conn.execute(tokens.delete().where(tokens.c.name == name)).rowcount > 0

    def list_tokens(self) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(tokens.c.name, tokens.c.role, tokens.c.created_at)
                                .order_by(tokens.c.name)).mappings()
            return [dict(r) for r in rows]

    def has_tokens(self) -> bool:
        with self.engine.connect() as conn:
            return conn.execute(sa.select(tokens.c.name).limit(1)).first() is not None

    def lookup_token(self, token: str) -> tuple[str, str] | None:
        """``(name, role)`` of a presented token, or None."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(tokens.c.name, tokens.c.role)
                               .where(tokens.c.token_hash == hash_token(token))).first()
        return (row.name, row.role) if row else None

    # -- answers and feedback -------------------------------------------------------------------------

    def save_answer(self, body: dict[str, Any], *, target: str, token_name: str | None) -> str:
        answer_id = uuid.uuid4().hex
        with self._begin() as conn:
            conn.execute(answers.insert().values(
                id=answer_id, created_at=_now(), token_name=token_name, target=target,
                database=body.get("database", ""), question=body.get("question", ""),
                method=body.get("method", "sql"), body=json.dumps(body)))
        return answer_id

    def answer(self, answer_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(answers).where(answers.c.id == answer_id)).mappings().first()
        if row is None:
            return None
        return {**json.loads(row["body"]), "id": row["id"], "target": row["target"],
                "created_at": row["created_at"]}

    def add_turn(self, conversation_id: str, answer_id: str, token_name: str | None) -> None:
        """Append an answer to a conversation (the first turn starts it)."""
        with self.engine.begin() as conn:
            conn.execute(conversation_turns.insert().values(conversation_id=conversation_id, answer_id=answer_id,
                                                            token_name=token_name, created_at=_now()))

    def conversation(self, conversation_id: str) -> list[dict[str, Any]] | None:
        """The turns of a conversation, oldest first: each stored answer (question, database, sql, answer,
        ...) with its ``id``, ``target`` and the ``token_name`` that asked; None for an unknown id."""
        query = (sa.select(answers.c.id, answers.c.target, answers.c.body, conversation_turns.c.token_name)
                 .join(answers, answers.c.id == conversation_turns.c.answer_id)
                 .where(conversation_turns.c.conversation_id == conversation_id)
                 .order_by(conversation_turns.c.id))
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        if not rows:
            return None
        return [{**json.loads(r["body"]), "id": r["id"], "target": r["target"], "token_name": r["token_name"]}
                for r in rows]

    def add_feedback(self, answer_id: str, *, correct: bool, sql: str | None, note: str | None,
                     token_name: str | None, verified: tuple[str, str, str] | None) -> dict[str, Any]:
        """Record feedback; ``verified`` = (database, question, sql) also becomes a verified example."""
        with self._begin() as conn:
            fid = conn.execute(feedback.insert().values(
                answer_id=answer_id, created_at=_now(), token_name=token_name, correct=correct, sql=sql,
                note=note)).inserted_primary_key[0]
            example_id = None
            if verified is not None:
                database, question, good_sql = verified
                example_id = conn.execute(verified_examples.insert().values(
                    database=database, question=question, sql=good_sql, answer_id=answer_id,
                    token_name=token_name, created_at=_now())).inserted_primary_key[0]
        return {"feedback_id": fid, "verified_example_id": example_id}

    def feedback_for(self, answer_id: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(feedback).where(feedback.c.answer_id == answer_id)
                                .order_by(feedback.c.id)).mappings()
            return [dict(r) for r in rows]

    def verified_examples(self, database: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(verified_examples.c.id, verified_examples.c.question,
                                          verified_examples.c.sql, verified_examples.c.answer_id,
                                          verified_examples.c.created_at)
                                .where(verified_examples.c.database == database)
                                .order_by(verified_examples.c.id)).mappings()
            return [dict(r) for r in rows]

    def add_review(self, database: str, statement_id: int, action: str, note: str | None,
                   token_name: str | None) -> None:
        with self._begin() as conn:
            conn.execute(reviews.insert().values(database=database, statement_id=statement_id, action=action,
                                                 note=note, token_name=token_name, created_at=_now()))

    def reviews(self, database: str, statement_id: int | None = None) -> list[dict[str, Any]]:
        query = sa.select(reviews).where(reviews.c.database == database).order_by(reviews.c.id)
        if statement_id is not None:
            query = query.where(reviews.c.statement_id == statement_id)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    # -- unresolved expressions ---------------------------------------------------------------------

    def add_unresolved(self, rows: list[dict[str, Any]]) -> None:
        """One row per (question, unmatched phrase): target, database, phrase, phrase_key, question,
        outcome, error, answer_id, token_name."""
        if rows:
            with self.engine.begin() as conn:
                conn.execute(unresolved.insert(), [{**r, "created_at": _now(), "dismissed": False} for r in rows])

    def unresolved_rows(self, database: str, *, dismissed: bool = False) -> list[dict[str, Any]]:
        query = (sa.select(unresolved).where(unresolved.c.database == database)
                 .order_by(unresolved.c.id.desc()))
        if not dismissed:
            query = query.where(unresolved.c.dismissed == sa.false())
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    def dismiss_unresolved(self, database: str, phrase_key: str) -> int:
        with self.engine.begin() as conn:
            return conn.execute(unresolved.update()
                                .where(unresolved.c.database == database, unresolved.c.phrase_key == phrase_key)
                                .values(dismissed=True)).rowcount

    def close(self) -> None:
        self.engine.dispose()


def _is_lock_error(exc: sa.exc.OperationalError) -> bool:
    text = str(exc.orig or exc).lower()
    return "locked" in text or "busy" in text


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA busy_timeout=30000")  # first: the switch to WAL below may have to wait for a writer
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at checkpoints, never corrupt; no fsync per answer
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()
