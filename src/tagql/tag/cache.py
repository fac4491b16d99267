"""Persistent cache for LM operator outputs, keyed by prompt texts + model + operator + instruction + input.

A small SQLite file (``<cache_dir>/tag_cache.sqlite``). Re-running a question, or another question that
filters the same column with the same instruction, costs no LM calls. ``OpCache(None)`` is in-memory.

Writes are cheap: the file is in WAL mode with ``synchronous=NORMAL`` (a commit appends to the log and
does not wait for the disk; a power cut can lose the last commits, never corrupt the file - for a cache
that is only a few repeated LM calls), and inside :meth:`OpCache.batch` (one per operator call) the
entries are buffered and written in one transaction when the batch ends (or every
``flush_every_s`` during a long one). Several processes may share
the file: SQLite serialises their write transactions (each waits up to 30 s for the lock), and
``INSERT OR REPLACE`` of a key by two writers keeps one of two equal answers, so nothing is lost.

Across hosts (service replicas, re-runs elsewhere) the same cache lives in the ``tag_ops`` table of a shared
database, the service's state store on SQLite or PostgreSQL (:class:`SharedOpCache`; ``tag.cache_url``, or
``service.tag_cache = "state"``; the table is the state store's migration 6). :func:`open_op_cache` picks one.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

from tagql.errors import TagqlError

log = logging.getLogger("tagql.tag")


def cache_key(model: str, kind: str, instruction: str, payload: str, *, prompts: str) -> str:
    """The key of one LM output. ``prompts`` is a digest of the prompt texts that produced it (the operator
    engine passes the hash of its prompt file), so a changed prompt never reuses an old wording's outputs."""
    blob = json.dumps([prompts, model, kind, instruction, payload], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


class OpCache:
    """Key -> text. Thread-safe; a file path persists across processes, ``None`` keeps it in memory."""

    flush_every_s = 2.0  # a long batch still writes at least this often (a killed process loses little)

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path).expanduser() if path else None
        self._mem: dict[str, str] = {}
        self._pending: dict[str, str] = {}  # written inside a batch, not yet in the file
        self._depth = 0  # open batch() blocks (any thread)
        self._last_flush = time.monotonic()
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._engine: sa.Engine | None = None
        self.problem = ""  # why the file is not used (read-only folder, disk full): the cache runs in memory
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
                self._conn.execute("PRAGMA journal_mode=WAL")  # persistent: recorded in the file
                self._conn.execute("PRAGMA synchronous=NORMAL")  # per connection
                self._conn.execute("CREATE TABLE IF NOT EXISTS ops (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                self._conn.commit()
            except (OSError, sqlite3.Error) as exc:
                self._give_up(exc)

    def get(self, key: str) -> str | None:
        with self._lock:
            if key in self._mem:
                return self._mem[key]
            if not self._stored():
                return None
            value = self._read(key)
            if value is not None:
                self._mem[key] = value
            return value

    def put(self, key: str, value: str) -> None:
        """Store ``key``; written at once, or when the enclosing :meth:`batch` ends."""
        with self._lock:
            self._mem[key] = value
            if not self._stored():
                return
            self._pending[key] = value
            if self._depth == 0 or time.monotonic() - self._last_flush > self.flush_every_s:
                self._flush_locked()

    @contextmanager
    def batch(self) -> Iterator[OpCache]:
        """Buffer the ``put``\\ s of this block and write them in one transaction at its end (also when the
        block raises: answers already paid for are kept). Blocks nest; the outermost one writes."""
        with self._lock:
            self._depth += 1
        try:
            yield self
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    self._flush_locked()

    def flush(self) -> None:
        """Write buffered entries now."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        self._last_flush = time.monotonic()
        if not self._stored() or not self._pending:
            return
        items = list(self._pending.items())
        self._pending.clear()
        self._write(items)

    # -- storage (a SQLite file here; SharedOpCache: tables of a shared database) --------------------------
    def _stored(self) -> bool:
        return self._conn is not None

    def _read(self, key: str) -> str | None:
        assert self._conn is not None
        row = self._conn.execute("SELECT value FROM ops WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def _write(self, items: list[tuple[str, str]]) -> None:
        assert self._conn is not None
        try:
            with self._conn:  # one transaction; commits, or rolls back and raises
                self._conn.executemany("INSERT OR REPLACE INTO ops (key, value) VALUES (?, ?)", items)
        except sqlite3.OperationalError as exc:  # disk full, read-only, locked past 30 s: a cache may forget
            self._give_up(exc)

    def _count(self) -> int:
        assert self._conn is not None
        return int(self._conn.execute("SELECT COUNT(*) FROM ops").fetchone()[0])

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _give_up(self, exc: BaseException) -> None:
        """Stop using the file (what it holds stays as it was) and keep caching in memory: a cache that
        cannot write costs repeated LM calls, never a failed question. Said once, in the log."""
        self.problem = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]
        log.warning("operator cache %s is not written any more (%s); caching in memory", self.where, self.problem)
        try:
            self._close()
        except Exception:  # noqa: BLE001 - closing a broken store
            pass
        self._conn = None
        self._engine = None

    @property
    def where(self) -> str:
        return str(self.path)

    def __len__(self) -> int:
        with self._lock:
            if not self._stored():
                return len(self._mem)
            self._flush_locked()
            return self._count() if self._stored() else len(self._mem)

    def close(self) -> None:
        with self._lock:
            if self._stored():
                self._flush_locked()
                self._close()


metadata = sa.MetaData()
tag_ops = sa.Table(
    "tag_ops", metadata,
    sa.Column("key", sa.String(64), primary_key=True),  # cache_key(): a SHA-256 hex digest
    sa.Column("value", sa.Text, nullable=False),
)


def create_tables(conn: sa.Connection) -> None:
    """Create the shared operator-cache table (a migration of the database that holds it: the service's
    state store)."""
    tag_ops.create(conn)


class SharedOpCache(OpCache):
    """:class:`OpCache` in the ``tag_ops`` table of a shared database (any SQLAlchemy engine: the service's
    state store on SQLite or PostgreSQL), so several processes - service replicas, re-runs on other hosts -
    reuse each other's LM outputs. The table is created by the store's owner (its migrations); opening a
    cache never creates it. Reads go through the same in-memory layer, writes are batched the same way; two
    writers of one key keep the first (``ON CONFLICT DO NOTHING``: both wrote the same answer of the same
    prompt). A store that fails (down, full) is reported once in the log and the cache goes on in memory."""

    def __init__(self, engine: sa.Engine) -> None:
        super().__init__(None)
        self._engine: sa.Engine | None = engine
        self._url = engine.url.render_as_string(hide_password=True)
        try:
            with engine.connect() as conn:
                if not sa.inspect(conn).has_table("tag_ops"):
                    raise CacheStoreError(
                        f"the database {self._url} has no operator cache table (tag_ops)",
                        "point tag.cache_url at the service's state store (service.state_url), whose migrations "
                        "create it: run `tagql serve` with that state_url once")
        except sa.exc.SQLAlchemyError as exc:
            raise CacheStoreError(f"cannot open the operator cache store {self._url}: {_first_line(exc)}",
                                  "check tag.cache_url") from exc
        if engine.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            self._insert = pg_insert(tag_ops).on_conflict_do_nothing(index_elements=["key"])
        elif engine.dialect.name == "sqlite":
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert

            self._insert = sqlite_insert(tag_ops).on_conflict_do_nothing(index_elements=["key"])
        else:
            self._insert = tag_ops.insert().prefix_with("IGNORE")  # MySQL

    @property
    def where(self) -> str:
        return self._url

    def _stored(self) -> bool:
        return self._engine is not None

    def _read(self, key: str) -> str | None:
        assert self._engine is not None
        try:
            with self._engine.connect() as conn:
                return conn.execute(sa.select(tag_ops.c.value).where(tag_ops.c.key == key)).scalar()
        except sa.exc.SQLAlchemyError as exc:
            self._give_up(exc)
            return None

    def _write(self, items: list[tuple[str, str]]) -> None:
        assert self._engine is not None
        try:
            with self._engine.begin() as conn:
                conn.execute(self._insert, [{"key": k, "value": v} for k, v in items])
        except sa.exc.SQLAlchemyError as exc:
            self._give_up(exc)

    def _count(self) -> int:
        assert self._engine is not None
        with self._engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(tag_ops)).scalar() or 0)

    def _close(self) -> None:
        self._engine = None  # the engine belongs to whoever passed it


class CacheStoreError(TagqlError):
    """The configured shared operator cache cannot be used."""


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else exc.__class__.__name__


@functools.lru_cache(maxsize=8)
def _shared_engine(url: str) -> sa.Engine:
    """One pooled engine per cache URL for the process (operator engines are made per question)."""
    parsed = sa.engine.make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername.startswith("sqlite"):
        return sa.create_engine(parsed, connect_args={"check_same_thread": False, "timeout": 30})
    return sa.create_engine(parsed, pool_pre_ping=True)


def open_op_cache(url: str, path: str | Path | None) -> OpCache:
    """The operator cache a question uses: the ``tag_ops`` table of the database at ``url`` (a SQLAlchemy URL;
    ``tag.cache_url``) when given, else the SQLite file ``path`` (None: in memory)."""
    if url:
        try:
            engine = _shared_engine(url)
        except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError) as exc:
            raise CacheStoreError(f"invalid tag.cache_url: {_first_line(exc)}",
                                  "use the service's state_url, e.g. postgresql://user:pw@host/tagql_state") from exc
        return SharedOpCache(engine)
    return OpCache(path)
