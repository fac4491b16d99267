"""The knowledge store: one SQLite file per database, holding its statements and their embeddings.

Why SQLite: a single file a DBA can copy, transactions, and WAL so that the CLI, the web service
and a batch import can write at the same time without losing statements (``BEGIN IMMEDIATE`` +
``busy_timeout``). Every row keeps its own embedding of the canonical text part, so an add, edit
or delete touches only that row; each write bumps a store revision, and a live retriever pulls only
the rows changed since the revision it last saw (incremental index, no full rebuild).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from tagql.embeddings import Embedder, EmbeddingUnavailable, Progress
from tagql.errors import TagqlError
from tagql.knowledge import ScoredStatement
from tagql.knowledge.canon import canonicalise
from tagql.knowledge.retrieval import DEFAULT_K, DEFAULT_METHOD, Corpus, IndexRetriever, Method, make_method
from tagql.knowledge.statements import StatementError, Structured, parse_structured
from tagql.knowledge.validate import data_problem, holds_back, snippet_problem

STATUSES = ("proposed", "approved", "rejected")
SCHEMA_VERSION = 1
MAX_STATEMENT_CHARS = 4000


class KnowledgeStoreError(TagqlError):
    """The store file is missing, not a knowledge store, or an operation on it is invalid."""


_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS statements (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    nl TEXT NOT NULL DEFAULT '',
    text TEXT NOT NULL,
    sql TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL CHECK (status IN ('proposed', 'approved', 'rejected')),
    reason TEXT NOT NULL DEFAULT '',
    author TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    rev INTEGER NOT NULL,
    embed_model TEXT NOT NULL DEFAULT '',
    embedding BLOB
);
CREATE INDEX IF NOT EXISTS statements_rev ON statements(rev);
CREATE INDEX IF NOT EXISTS statements_status ON statements(status);
CREATE TABLE IF NOT EXISTS deleted (id INTEGER NOT NULL, rev INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS deleted_rev ON deleted(rev);
"""


@dataclass
class Statement:
    """One stored statement: the expert's NL form next to its structured form."""

    id: int
    nl: str
    text: str
    sql: str
    status: str
    reason: str
    author: str
    created_at: float
    updated_at: float

    @property
    def structured(self) -> str:
        return Structured(self.text, self.sql).render()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"structured": self.structured}


_COLS = "id, nl, text, sql, status, reason, author, created_at, updated_at"


def _row(r: Sequence[Any]) -> Statement:
    return Statement(*r)


def schema_to_json(schema: Any) -> str:
    """Store only names/types/keys: enough to validate snippets and prompt structuring."""
    d = asdict(schema)
    for t in d["tables"]:
        for c in t["columns"]:
            c["samples"] = [str(v)[:40] for v in c.get("samples", [])[:3]]
    return json.dumps(d)


def schema_from_json(text: str) -> Any:
    from tagql.db.schema import Column, ForeignKey, Schema, Table

    d = json.loads(text)
    tables = [
        Table(t["name"], [Column(**c) for c in t["columns"]], [ForeignKey(**f) for f in t["foreign_keys"]],
              t.get("description", ""))
        for t in d["tables"]
    ]
    return Schema(d["name"], tables, d.get("dialect", "sqlite"))


class KnowledgeBase:
    """Statements of one database. Thread-safe; several processes may write the same file."""

    def __init__(self, path: Path, embedder: Embedder | Callable[[], Embedder] | None = None,
                 static_dir: Path | None = None) -> None:
        self.path = Path(path)
        self._embedder = embedder
        self.static_dir = static_dir  # where retrievers cache the static token table (None: the user cache)
        self._local = threading.local()
        self.read_only = False  # set when the file can only be read (a read-only folder): writes are refused

    # -- opening ---------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path, *, create: bool = False, db_id: str | None = None, schema: Any = None,
             embedder: Embedder | Callable[[], Embedder] | None = None,
             static_dir: Path | None = None) -> KnowledgeBase:
        """Open a store; ``create=True`` makes it (and binds ``db_id``/``schema``) if missing. ``embedder``
        embeds added statements (a zero-argument callable: loaded on the first add or question)."""
        p = Path(path).expanduser()
        if p.is_dir():
            raise KnowledgeStoreError(f"knowledge store '{p}' is a directory", "pass a file path, e.g. store.kb")
        if not p.exists() and not create:
            raise KnowledgeStoreError(f"knowledge store '{p}' does not exist",
                                      "add a statement first: tagql knowledge add --db DB ...")
        if p.exists() and p.stat().st_size:
            with p.open("rb") as f:
                if f.read(16) != b"SQLite format 3\x00":
                    raise KnowledgeStoreError(f"'{p}' is not a knowledge store (not a SQLite file)")
        p.parent.mkdir(parents=True, exist_ok=True)
        kb = cls(p, embedder, static_dir)
        kb._init(db_id, schema)
        return kb

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None and self.read_only:
            uri = f"file:{quote(str(self.path.resolve()))}?mode=ro&immutable=1"
            conn = self._local.conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 60000")
            try:  # recorded in the file: set once (switching while another process writes can fail with I/O)
                if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    conn.execute("PRAGMA journal_mode = WAL")
            except sqlite3.OperationalError:
                pass  # a read-only file or folder: reading works, a write says why (_store_error)
            conn.execute("PRAGMA synchronous = NORMAL")
            self._local.conn = conn
        return conn

    def _write(self):
        if self.read_only:
            raise KnowledgeStoreError(f"cannot write knowledge store '{self.path}': its folder is read-only "
                                      "(opened for reading only); nothing was stored",
                                      "check the permissions of the folder and the file")
        try:
            return _WriteTxn(self._conn(), self.path)
        except sqlite3.OperationalError as exc:
            raise _store_error(self.path, exc) from None

    def _init(self, db_id: str | None, schema: Any) -> None:
        try:
            if schema is None and self._ready(db_id):
                return  # nothing to write: a store on a read-only disk or folder still opens for reading
            with self._write() as c:
                c.executescript_in_txn(_DDL)
                meta = dict(c.execute("SELECT key, value FROM meta").fetchall())
                if "version" not in meta:
                    c.execute("INSERT INTO meta VALUES ('version', ?), ('revision', '0')", (str(SCHEMA_VERSION),))
                if db_id and meta.get("db_id") not in (None, db_id):
                    raise KnowledgeStoreError(
                        f"store '{self.path}' belongs to database {meta['db_id']!r}, not {db_id!r}",
                        "use another --store path")
                if db_id and "db_id" not in meta:
                    c.execute("INSERT INTO meta VALUES ('db_id', ?)", (db_id,))
                if schema is not None:
                    c.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (schema_to_json(schema),))
        except sqlite3.DatabaseError as exc:
            raise KnowledgeStoreError(f"'{self.path}' is not a usable knowledge store: {exc}") from None

    def _ready(self, db_id: str | None) -> bool:
        """The file already holds a store of this version bound to ``db_id`` (or to none asked)."""
        try:
            meta = dict(self._conn().execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return False
            if "readonly" not in str(exc):
                raise
            # a WAL file in a folder we may not write: SQLite cannot make its shared-memory file, so no
            # writer can be active there either; read the file as it is, and refuse writes with the reason
            self.close()
            self.read_only = True
            meta = dict(self._conn().execute("SELECT key, value FROM meta").fetchall())
        return meta.get("version") == str(SCHEMA_VERSION) and (db_id is None or meta.get("db_id") == db_id)

    # -- properties ------------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        r = self._conn().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return r[0] if r else None

    @property
    def db_id(self) -> str | None:
        return self.meta("db_id")

    @property
    def schema(self) -> Any:
        text = self.meta("schema")
        return schema_from_json(text) if text else None

    @property
    def revision(self) -> int:
        return int(self.meta("revision") or 0)

    @property
    def has_embedder(self) -> bool:
        return self._embedder is not None

    @property
    def embedder(self) -> Embedder:
        """The embedder passed to :meth:`open` (statements are embedded when added)."""
        if self._embedder is None:
            raise EmbeddingUnavailable(f"knowledge store '{self.path}' was opened without an embedder",
                                       "pass embedder= (tagql.embeddings.make_embedder)")
        if callable(self._embedder) and not isinstance(self._embedder, Embedder):
            self._embedder = self._embedder()
        return self._embedder

    # -- writing ---------------------------------------------------------------------------------
    def add(self, text: str, sql: str, *, nl: str = "", status: str = "proposed", reason: str = "",
            author: str = "") -> int:
        """Add one structured statement; returns its id."""
        return self.add_many([(text, sql, nl, status, reason)], author=author)[0]

    def add_many(self, rows: Iterable[tuple[str, str, str, str, str]], *, author: str = "") -> list[int]:
        """Add (text, sql, nl, status, reason) rows in one transaction, embedded in one batch."""
        rows = [self._checked(*r) for r in rows]
        if not rows:
            return []
        emb = self.embedder.embed([canonicalise(r[0]) for r in rows])
        now = time.time()
        return self._insert([{"nl": nl, "text": text, "sql": sql, "status": status, "reason": reason,
                              "author": author, "created_at": now, "updated_at": now,
                              "embed_model": self.embedder.name,
                              "embedding": np.asarray(e, dtype=np.float32).tobytes()}
                             for (text, sql, nl, status, reason), e in zip(rows, emb)])

    def add_structured(self, statements: Iterable[str], *, status: str = "approved", author: str = "",
                       validate: bool = True) -> list[int]:
        """Add statements already in "'x' refers to y" form. With ``validate`` an invalid SQL snippet
        is recorded as the reason and, unless the caller marks the batch approved, stays proposed."""
        schema = self.schema if validate else None
        rows = []
        for s in statements:
            p = parse_structured(s)
            reason = (snippet_problem(p.sql, schema) or "") if schema is not None else ""
            st = status if (status == "approved" or not reason) else "proposed"
            rows.append((p.text, p.sql, s.strip(), st, reason))
        return self.add_many(rows, author=author)

    def add_nl(self, statements: Iterable[str], structurer: Any, *, author: str = "",
               approve_valid: bool = False) -> list[int]:
        """Structure NL statements with the LLM and store them with their NL original. A statement
        whose snippet fails validation stays ``proposed`` with the reason, whatever was asked."""
        rows = []
        for nl in statements:
            r = structurer.structure(nl)
            status = "approved" if (approve_valid and r.valid) else "proposed"
            rows.append((r.text, r.sql, r.nl, status, r.problem))
        return self.add_many(rows, author=author)

    def set_exemplars(self, exemplars: Sequence[Any]) -> None:
        """Per-database few-shot exemplars for structuring (objects with .nl and .structured)."""
        self._set_meta("exemplars", json.dumps([{"nl": e.nl, "structured": e.structured} for e in exemplars]))

    def exemplars(self) -> list[Any]:
        from tagql.knowledge.structuring import DEFAULT_EXEMPLARS, exemplars_from_json

        text = self.meta("exemplars")
        return exemplars_from_json(text) if text else list(DEFAULT_EXEMPLARS)

    def _checked(self, text: str, sql: str, nl: str, status: str, reason: str) -> tuple[str, str, str, str, str]:
        text, sql, nl = " ".join((text or "").split()), (sql or "").strip(), (nl or "").strip()
        if not text:
            raise StatementError("a statement needs a non-empty text part")
        if len(text) + len(sql) + len(nl) > MAX_STATEMENT_CHARS:
            raise StatementError(f"statement longer than {MAX_STATEMENT_CHARS} characters")
        if status not in STATUSES:
            raise StatementError(f"unknown status {status!r}", "use proposed, approved or rejected")
        return text, sql, nl, status, reason

    def edit(self, sid: int, *, text: str | None = None, sql: str | None = None, nl: str | None = None,
             status: str | None = None, reason: str | None = None, revalidate: bool = True) -> Statement:
        """Change fields of a statement; a changed text part is re-embedded (that row only)."""
        old = self.get(sid)
        new_text = " ".join(text.split()) if text is not None else old.text
        new_sql = sql.strip() if sql is not None else old.sql
        if reason is None and revalidate and (sql is not None or text is not None):
            reason = snippet_problem(new_sql, self.schema) or ""
        vals = self._checked(new_text, new_sql, nl if nl is not None else old.nl,
                             status or old.status, reason if reason is not None else old.reason)
        emb = self.embedder.embed([canonicalise(new_text)])[0] if new_text != old.text else None
        fields: dict[str, Any] = dict(zip(("text", "sql", "nl", "status", "reason"), vals))
        if emb is not None:
            fields |= {"embedding": np.asarray(emb, dtype=np.float32).tobytes(), "embed_model": self.embedder.name}
        self._update([(sid, fields)])
        return self.get(sid)

    def check(self, database: Any = None, progress: Any = None,
              only: Sequence[int] | None = None) -> list[tuple[Statement, str]]:
        """Validate every statement again (or those with the ids in ``only``): against the stored schema,
        and with ``database`` (a connected :class:`~tagql.db.Database`) against its current schema and
        data too. Statuses stay as they are; each changed reason is written in one transaction (a
        retriever picks the changes up). Returns (statement as it was, new reason) for each statement
        whose reason changed. ``progress(done, total)`` is called as statements are checked (a data
        check looks values up)."""
        changed: list[tuple[Statement, str]] = []
        schema = self.schema if database is None else None  # data_problem validates against database.schema
        live = self.list(("proposed", "approved"))  # a rejected statement keeps the reviewer's reason
        if only is not None:
            wanted = set(only)
            live = [st for st in live if st.id in wanted]
        for n, st in enumerate(live, 1):
            if progress is not None:
                progress(n, len(live))
            if not st.sql:
                continue  # prose without a snippet: nothing to validate (the importer keeps it as is)
            reason = (data_problem(st.sql, database) if database is not None else snippet_problem(st.sql, schema)) or ""
            if _reason_key(reason) != _reason_key(st.reason):
                changed.append((st, reason))
        if changed:
            self._update([(st.id, {"reason": reason}) for st, reason in changed])
        return changed

    def set_status(self, sid: int, status: str, reason: str | None = None) -> Statement:
        return self.edit(sid, status=status, reason=reason, revalidate=False)

    def approve(self, sid: int) -> Statement:
        return self.set_status(sid, "approved", "")

    def reject(self, sid: int, reason: str = "") -> Statement:
        return self.set_status(sid, "rejected", reason)

    def delete(self, sid: int) -> None:
        self.get(sid)
        self._delete(sid)

    # -- reading ---------------------------------------------------------------------------------
    def get(self, sid: int) -> Statement:
        rows = self._select(sid=sid)
        if not rows:
            raise KnowledgeStoreError(f"no statement with id {sid} in {self.path}")
        return _row(rows[0])

    def list(self, status: str | Sequence[str] | None = None) -> list[Statement]:
        statuses = None if status is None else [status] if isinstance(status, str) else list(status)
        return [_row(r) for r in self._select(statuses=statuses)]

    def count(self) -> dict[str, int]:
        rows = self._conn().execute("SELECT status, COUNT(*) FROM statements GROUP BY status").fetchall()
        return {s: 0 for s in STATUSES} | dict(rows)

    def changes_since(self, rev: int) -> tuple[int, list[tuple], list[int]]:
        """(current revision, changed rows (id, text, sql, status, reason, embed_model, embedding), deleted ids)."""
        c = self._conn()
        c.execute("BEGIN")
        try:
            cur = int(c.execute("SELECT value FROM meta WHERE key='revision'").fetchone()[0])
            rows = c.execute("SELECT id, text, sql, status, reason, embed_model, embedding FROM statements WHERE rev > ?"
                             " ORDER BY id", (rev,)).fetchall()
            gone = [r[0] for r in c.execute("SELECT id FROM deleted WHERE rev > ?", (rev,)).fetchall()]
        finally:
            c.execute("COMMIT")
        return cur, rows, gone

    # -- storage: the few primitives above use (a store in other tables overrides exactly these) -----
    def _insert(self, rows: list[dict[str, Any]]) -> list[int]:
        """Insert statement rows (every column but id and rev) at one new revision; their ids."""
        with self._write() as c:
            rev = c.bump()
            cols = [*rows[0], "rev"]
            sql = f"INSERT INTO statements ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
            return [int(c.execute(sql, (*row.values(), rev)).lastrowid) for row in rows]

    def _update(self, changes: list[tuple[int, dict[str, Any]]]) -> None:
        """Set columns of statements (``updated_at`` too), all at one new revision."""
        now = time.time()
        with self._write() as c:
            rev = c.bump()
            for sid, fields in changes:
                sets = ", ".join(f"{name}=?" for name in fields)  # column names from this module only
                c.execute(f"UPDATE statements SET {sets}, updated_at=?, rev=? WHERE id=?",
                          (*fields.values(), now, rev, sid))

    def _delete(self, sid: int) -> None:
        with self._write() as c:
            rev = c.bump()
            c.execute("DELETE FROM statements WHERE id = ?", (sid,))
            c.execute("INSERT INTO deleted VALUES (?, ?)", (sid, rev))

    def _set_meta(self, key: str, value: str) -> None:
        with self._write() as c:
            c.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def _select(self, *, sid: int | None = None, statuses: Sequence[str] | None = None) -> list[Sequence[Any]]:
        """Rows of ``_COLS`` by id order: one statement, those with a status in ``statuses``, or all."""
        if sid is not None:
            return self._conn().execute(f"SELECT {_COLS} FROM statements WHERE id = ?", (sid,)).fetchall()
        if statuses is None:
            return self._conn().execute(f"SELECT {_COLS} FROM statements ORDER BY id").fetchall()
        q = f"SELECT {_COLS} FROM statements WHERE status IN ({','.join('?' * len(statuses))}) ORDER BY id"
        return self._conn().execute(q, list(statuses)).fetchall()

    def retriever(self, method: str | Method = DEFAULT_METHOD, *, statuses: Sequence[str] = ("approved",),
                  k: int = DEFAULT_K, auto_k: bool = False, cache_dir: Path | None = None,
                  progress: Progress | None = None) -> StoreRetriever:
        """A live :class:`tagql.knowledge.Retriever` over this store (sees later edits). A method with
        its own model (``hybrid-static``) derives it from the store's embedder on the first question,
        caching it in ``cache_dir`` and announcing a long first build through ``progress``."""
        return StoreRetriever(self, method, statuses=statuses, k=k, auto_k=auto_k,
                              cache_dir=cache_dir or self.static_dir, progress=progress)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


class _WriteTxn:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (rollback on error): writers queue, none is lost. A failed write
    (disk full, read-only file or folder, a lock held past the busy timeout) rolls back and becomes one
    :class:`KnowledgeStoreError` line; what was stored before stays as it was."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path

    def __enter__(self) -> _WriteTxn:
        for wait_s in (0.05, 0.2, 0.5, None):
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                return self
            except sqlite3.OperationalError as exc:
                # another process setting up the shared WAL index can make BEGIN fail with a transient I/O
                # error (seen once in CI, two service replicas writing one store); nothing was written yet
                if wait_s is None or "disk i/o" not in str(exc).lower():
                    raise _store_error(self.path, exc) from None
                time.sleep(wait_s)
        raise AssertionError("unreachable")

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            try:
                self.conn.execute("COMMIT")
                return
            except sqlite3.OperationalError as failed:
                exc = failed
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.OperationalError:
                pass  # SQLite rolled back by itself (an I/O error ends the transaction)
        if isinstance(exc, sqlite3.OperationalError):
            raise _store_error(self.path, exc) from None

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)

    def executescript_in_txn(self, script: str) -> None:
        for stmt in filter(str.strip, script.split(";")):
            self.conn.execute(stmt)

    def bump(self) -> int:
        self.conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'revision'")
        return int(self.conn.execute("SELECT value FROM meta WHERE key = 'revision'").fetchone()[0])


def _store_error(path: Path, exc: sqlite3.Error) -> KnowledgeStoreError:
    """One line for a write the store's file refused; nothing of it was stored."""
    text = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]
    low = text.lower()
    code = getattr(exc, "sqlite_errorname", "")
    if code and code not in text:
        text = f"{text}, {code}"  # SQLITE_IOERR_SHORT_READ or _FSYNC tells a full disk from a race
    if "disk is full" in low or "disk i/o" in low:
        return KnowledgeStoreError(f"cannot write knowledge store '{path}': the disk is full or the file is at "
                                   f"its size limit ({text}); nothing was stored", "free space and add it again")
    if "readonly" in low or "read-only" in low or "unable to open" in low:
        return KnowledgeStoreError(f"cannot write knowledge store '{path}': the file or its folder is read-only "
                                   f"({text}); nothing was stored", "check the permissions of both")
    if "locked" in low or "busy" in low:
        return KnowledgeStoreError(f"knowledge store '{path}' stayed locked by another writer; nothing was stored",
                                   "add it again")
    return KnowledgeStoreError(f"cannot write knowledge store '{path}': {text}; nothing was stored")


def _reason_key(reason: str) -> tuple[str, frozenset[str]]:
    """A reason up to the order of the table list it may end with (a tables.json and the live
    database list the same tables in different orders: that is no change)."""
    head, sep, tables = reason.partition("; the tables are: ")
    return head, frozenset(tables.split(", ")) if sep else frozenset()


class StoreRetriever:
    """Retriever that keeps an in-memory corpus in sync with the store, pulling only changed rows."""

    def __init__(self, kb: KnowledgeBase, method: str | Method, *, statuses: Sequence[str], k: int,
                 auto_k: bool, cache_dir: Path | None = None, progress: Progress | None = None) -> None:
        self.kb = kb
        self.cache_dir, self.progress = cache_dir, progress
        self.method = make_method(method) if isinstance(method, str) else method
        self.statuses = set(statuses)
        self.k, self.auto_k = k, auto_k
        self._rev = 0
        # id -> (text, sql, embedding, held back: validate.holds_back(reason))
        self._rows: dict[int, tuple[str, str, np.ndarray, bool]] = {}
        self._inner: IndexRetriever | None = None
        self.reindexed_rows = 0  # rows (re)loaded so far: lets tests check the index is incremental
        self._memo: dict = {}  # the method's per-statement index (e.g. static vectors), kept across refreshes
        self.prepared = 0  # items the method computed for its index so far (incremental too)

    def refresh(self) -> None:
        rev, rows, gone = self.kb.changes_since(self._rev)
        if rev == self._rev and self._inner is not None:
            return
        emb_name = self.kb.embedder.name if self.method.needs_embedder else None
        stale = []
        for sid, text, sql, status, reason, model, blob in rows:
            self._rows.pop(sid, None)
            if status in self.statuses:
                held = holds_back(reason)
                if blob is None or (emb_name and model != emb_name):
                    stale.append((sid, text, sql, held))
                else:
                    self._rows[sid] = (text, sql, np.frombuffer(blob, dtype=np.float32), held)
        if stale:  # written by another embedding model: embed here, in memory
            for (sid, text, sql, held), e in zip(stale, self.kb.embedder.embed([canonicalise(r[1]) for r in stale])):
                self._rows[sid] = (text, sql, e, held)
        for sid in gone:
            self._rows.pop(sid, None)
        self.reindexed_rows += len(rows)
        ids = sorted(self._rows)
        dim = self.kb.embedder.dim if self.method.needs_embedder else 1
        emb = np.stack([self._rows[i][2] for i in ids]) if ids else np.zeros((0, dim), dtype=np.float32)
        corpus = Corpus([self._rows[i][0] for i in ids], [self._rows[i][1] for i in ids], emb, ids=ids,
                        held_back=frozenset(j for j, i in enumerate(ids) if self._rows[i][3]))
        if self.kb.has_embedder:
            self.method.bind(self.kb.embedder, cache_dir=self.cache_dir, progress=self.progress)
        self.prepared += self.method.prepare(corpus, self._memo)
        embedder = self.kb.embedder if self.method.needs_embedder else None
        self._inner = IndexRetriever(corpus, self.method, embedder=embedder, default_k=self.k, auto_k=self.auto_k)
        self._rev = rev

    def retrieve(self, question: str, k: int | None = None) -> list[ScoredStatement]:
        self.refresh()
        assert self._inner is not None
        return self._inner.retrieve(question, k)


def open_store(path: str | Path, **kw: Any) -> KnowledgeBase:
    return KnowledgeBase.open(path, **kw)


def default_store_path(db_name: str, settings: Any = None) -> Path:
    """Where ``tagql knowledge add --db X`` keeps X's statements by default."""
    if settings is None:
        from tagql.config import default_settings

        settings = default_settings()
    return Path(settings.knowledge_dir) / f"{db_name}.kb"


def retriever_for(db_name: str, *, store: str | Path | None = None, settings: Any = None,
                  method: str = DEFAULT_METHOD, k: int = DEFAULT_K,
                  embedder: Embedder | Callable[[], Embedder] | None = None,
                  progress: Progress | None = None) -> StoreRetriever | None:
    """The retriever ``tagql ask`` should use for a database: its store's approved statements, or
    None when the database has no store yet (then the pipeline runs without domain knowledge)."""
    path = Path(store) if store is not None else default_store_path(db_name, settings)
    if not path.exists():
        if store is not None:
            raise KnowledgeStoreError(f"knowledge store '{path}' does not exist")
        return None
    cache_dir = Path(settings.cache_dir) / "static" if settings is not None else None
    return KnowledgeBase.open(path, embedder=embedder).retriever(method, k=k, cache_dir=cache_dir,
                                                                 progress=progress)


__all__ = [
    "STATUSES",
    "KnowledgeBase",
    "KnowledgeStoreError",
    "Statement",
    "StatementError",
    "StoreRetriever",
    "default_store_path",
    "retriever_for",
]
