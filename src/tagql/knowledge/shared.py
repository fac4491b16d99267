"""A knowledge store in shared SQL tables: the statements of many databases in one SQLite or PostgreSQL
database (any SQLAlchemy engine), so several service replicas read and write the same statements.

:class:`SharedKnowledgeBase` is a :class:`~tagql.knowledge.store.KnowledgeBase` whose storage primitives
(insert, update, delete, select, meta, revision) run on three tables instead of one file: ``kb_meta``,
``kb_statements`` and ``kb_deleted``, each keyed by the store's name (``kb``, the database's name). All the
rest -- validation, embedding on add, review statuses, the live incremental retriever -- is the file
store's own code, so both behave alike. Revisions work as in the file: each write bumps the store's
revision in the same transaction (on PostgreSQL the row lock on the revision orders concurrent writers), and a
retriever pulls the rows changed since the revision it last saw, whichever replica wrote them.

The tables are created by whoever owns the database's schema (the service's versioned state store:
:func:`create_tables` is one of its migrations); opening a store never creates tables itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from tagql.embeddings import Embedder
from tagql.knowledge.store import SCHEMA_VERSION, KnowledgeBase, KnowledgeStoreError, schema_to_json

metadata = sa.MetaData()

kb_meta = sa.Table(
    "kb_meta", metadata,
    sa.Column("kb", sa.String(200), primary_key=True),
    sa.Column("key", sa.String(40), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)
kb_statements = sa.Table(
    "kb_statements", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("kb", sa.String(200), nullable=False, index=True),
    sa.Column("nl", sa.Text, nullable=False, default=""),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("sql", sa.Text, nullable=False, default=""),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("reason", sa.Text, nullable=False, default=""),
    sa.Column("author", sa.String(200), nullable=False, default=""),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Column("rev", sa.Integer, nullable=False),
    sa.Column("embed_model", sa.String(200), nullable=False, default=""),
    sa.Column("embedding", sa.LargeBinary),
    sa.CheckConstraint("status IN ('proposed', 'approved', 'rejected')", name="kb_statements_status"),
    sa.Index("kb_statements_kb_rev", "kb", "rev"),
)
kb_deleted = sa.Table(
    "kb_deleted", metadata,
    sa.Column("kb", sa.String(200), nullable=False),
    sa.Column("id", sa.Integer, nullable=False),
    sa.Column("rev", sa.Integer, nullable=False),
    sa.Index("kb_deleted_kb_rev", "kb", "rev"),
)

_COLS = ("id", "nl", "text", "sql", "status", "reason", "author", "created_at", "updated_at")


def create_tables(conn: sa.Connection) -> None:
    """Create the shared knowledge tables (a migration of the database that holds them)."""
    for table in (kb_meta, kb_statements, kb_deleted):
        table.create(conn)


class SharedKnowledgeBase(KnowledgeBase):
    """The statements of database ``name`` in the shared tables of ``engine``. Thread-safe (a pooled
    engine); any number of processes may read and write."""

    def __init__(self, engine: sa.Engine, name: str, embedder: Embedder | Callable[[], Embedder] | None = None,
                 static_dir: Path | None = None) -> None:
        super().__init__(Path(f"{engine.url.render_as_string(hide_password=True)}#{name}"), embedder, static_dir)
        self.engine = engine
        self.name = name

    @classmethod
    def open_shared(cls, engine: sa.Engine, name: str, *, schema: Any = None,
                    embedder: Embedder | Callable[[], Embedder] | None = None,
                    static_dir: Path | None = None) -> SharedKnowledgeBase:
        """Open (and, the first time, start) the store of ``name``; ``schema`` is stored for validation."""
        if not sa.inspect(engine).has_table("kb_statements"):
            raise KnowledgeStoreError(f"{engine.url.render_as_string(hide_password=True)} has no shared "
                                      "knowledge tables", "open it through the service's state store first")
        kb = cls(engine, name, embedder, static_dir)
        kb._init(name, schema)
        return kb

    # -- the storage primitives of KnowledgeBase, on the shared tables -------------------------------

    def _init(self, db_id: str | None, schema: Any) -> None:
        with self.engine.connect() as conn:
            have = {r.key for r in conn.execute(sa.select(kb_meta.c.key).where(kb_meta.c.kb == self.name))}
        rows = [{"kb": self.name, "key": k, "value": v}
                for k, v in (("version", str(SCHEMA_VERSION)), ("revision", "0"), ("db_id", db_id or self.name))
                if k not in have]
        if rows:
            try:
                with self.engine.begin() as conn:
                    conn.execute(kb_meta.insert(), rows)
            except sa.exc.IntegrityError:
                pass  # two replicas starting at once: the other one made them
        if schema is not None:
            self._set_meta("schema", schema_to_json(schema))

    def meta(self, key: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(sa.select(kb_meta.c.value).where(kb_meta.c.kb == self.name,
                                                                 kb_meta.c.key == key)).scalar()

    def _set_meta(self, key: str, value: str) -> None:
        update = kb_meta.update().where(kb_meta.c.kb == self.name, kb_meta.c.key == key).values(value=value)
        with self.engine.begin() as conn:
            if conn.execute(update).rowcount:
                return
        try:
            with self.engine.begin() as conn:
                conn.execute(kb_meta.insert().values(kb=self.name, key=key, value=value))
        except sa.exc.IntegrityError:  # another writer made it meanwhile: ours is the later value
            with self.engine.begin() as conn:
                conn.execute(update)

    def _bump(self, conn: sa.Connection) -> int:
        """The next revision, in the caller's transaction (PostgreSQL: the row stays locked until it ends,
        so concurrent writers take revisions in commit order)."""
        where = (kb_meta.c.kb == self.name, kb_meta.c.key == "revision")
        conn.execute(kb_meta.update().where(*where).values(
            value=sa.cast(sa.cast(kb_meta.c.value, sa.Integer) + 1, sa.String)))
        return int(conn.execute(sa.select(kb_meta.c.value).where(*where)).scalar_one())

    def _insert(self, rows: list[dict[str, Any]]) -> list[int]:
        with self.engine.begin() as conn:
            rev = self._bump(conn)
            return [int(conn.execute(kb_statements.insert().values(kb=self.name, rev=rev, **row))
                        .inserted_primary_key[0]) for row in rows]

    def _update(self, changes: list[tuple[int, dict[str, Any]]]) -> None:
        import time

        now = time.time()
        with self.engine.begin() as conn:
            rev = self._bump(conn)
            for sid, fields in changes:
                conn.execute(kb_statements.update()
                             .where(kb_statements.c.kb == self.name, kb_statements.c.id == sid)
                             .values(**fields, updated_at=now, rev=rev))

    def _delete(self, sid: int) -> None:
        with self.engine.begin() as conn:
            rev = self._bump(conn)
            conn.execute(kb_statements.delete().where(kb_statements.c.kb == self.name, kb_statements.c.id == sid))
            conn.execute(kb_deleted.insert().values(kb=self.name, id=sid, rev=rev))

    def _select(self, *, sid: int | None = None, statuses: Sequence[str] | None = None) -> list[Sequence[Any]]:
        query = (sa.select(*(kb_statements.c[c] for c in _COLS)).where(kb_statements.c.kb == self.name)
                 .order_by(kb_statements.c.id))
        if sid is not None:
            query = query.where(kb_statements.c.id == sid)
        elif statuses is not None:
            query = query.where(kb_statements.c.status.in_(list(statuses)))
        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(query)]

    def count(self) -> dict[str, int]:
        query = (sa.select(kb_statements.c.status, sa.func.count()).where(kb_statements.c.kb == self.name)
                 .group_by(kb_statements.c.status))
        with self.engine.connect() as conn:
            return {"proposed": 0, "approved": 0, "rejected": 0} | {s: int(n) for s, n in conn.execute(query)}

    def changes_since(self, rev: int) -> tuple[int, list[tuple], list[int]]:
        """As the file store's: the revision is read first, so every row at or below it is in the rows read
        after it (a row written meanwhile comes too, and again next time: applying it twice is harmless)."""
        cols = ("id", "text", "sql", "status", "reason", "embed_model", "embedding")
        with self.engine.connect() as conn:
            current = int(conn.execute(sa.select(kb_meta.c.value).where(
                kb_meta.c.kb == self.name, kb_meta.c.key == "revision")).scalar_one())
            rows = [tuple(r) for r in conn.execute(
                sa.select(*(kb_statements.c[c] for c in cols))
                .where(kb_statements.c.kb == self.name, kb_statements.c.rev > rev).order_by(kb_statements.c.id))]
            gone = [r[0] for r in conn.execute(sa.select(kb_deleted.c.id).where(
                kb_deleted.c.kb == self.name, kb_deleted.c.rev > rev))]
        return current, [(*r[:6], bytes(r[6]) if r[6] is not None else None) for r in rows], gone

    def seed_from(self, source: KnowledgeBase) -> int:
        """:meth:`import_rows` once per shared store: the first opener to claim it copies, later ones (or a
        replica starting at the same moment) copy nothing. The number copied."""
        try:
            with self.engine.begin() as conn:
                conn.execute(kb_meta.insert().values(kb=self.name, key="seeded_from", value=str(source.path)))
        except sa.exc.IntegrityError:
            return 0
        return self.import_rows(source)

    def import_rows(self, source: KnowledgeBase) -> int:
        """Copy every statement of ``source`` (a file store) with its embedding, status and reason, at one
        revision; the number copied. For seeding a shared store from the ``.kb`` file of the same database."""
        _, stored, _ = source.changes_since(0)
        vectors = {r[0]: (r[5] or "", r[6]) for r in stored}
        rows = [{"nl": st.nl, "text": st.text, "sql": st.sql, "status": st.status, "reason": st.reason,
                 "author": st.author, "created_at": st.created_at, "updated_at": st.updated_at,
                 "embed_model": vectors.get(st.id, ("", None))[0], "embedding": vectors.get(st.id, ("", None))[1]}
                for st in source.list()]
        return len(self._insert(rows)) if rows else 0

    def close(self) -> None:
        pass  # the engine belongs to its owner


__all__ = ["SharedKnowledgeBase", "create_tables", "kb_deleted", "kb_meta", "kb_statements"]
