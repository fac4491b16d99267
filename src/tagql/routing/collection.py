"""Collections: a named, on-disk set of databases the router chooses from.

A collection mixes SQLite files / SQLAlchemy URLs (schema + data), Spider-style ``tables.json``
entries (schema, plus data when a ``database/<db>/<db>.sqlite`` sits beside it) and schema-only DDL.
Layout of ``<collections_dir>/<name>/``::

    collection.json      the collection's name and its databases, in order
    entries/<db>.json    one database: target, kind, schema, fingerprint, table-table edges
    values/<db>.json     distinct column values (joinability, synthetic questions, value matching)
    router/              the trained router's artifacts (see :mod:`tagql.routing.router`)

Everything is stored per database, so adding, changing or removing one database only touches its
own entries (see :meth:`Collection.add` / :meth:`Collection.remove`); :meth:`Collection.save` writes
only those files and the index (a collection of 10,000 databases is ~100 MB of entries). Format 1 (every
entry inside ``collection.json``) still loads, and is rewritten in format 2 on the next save.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from tagql.config import Settings, default_settings
from tagql.db import open_database
from tagql.db.schema import Schema
from tagql.errors import DatabaseNotFound, NotADatabase, TagqlError
from tagql.routing.ddl import schema_from_ddl_file
from tagql.routing.errors import BadSource, CollectionNotFound, DatabaseGone, EmptyCollection
from tagql.routing.graph import Edge, SchemaGraph, table_edges
from tagql.routing.router import make_router
from tagql.routing.serial import schema_from_dict, schema_to_dict

FORMAT = 2
MAX_VALUES = 200  # distinct values kept per column
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")

Progress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass
class DatabaseEntry:
    name: str
    kind: str  # sqlite | url | spider | ddl
    target: str | None  # file path or SQLAlchemy URL; None = schema only
    schema: Schema
    edges: list[Edge] = field(default_factory=list)
    fingerprint: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "kind": self.kind, "target": self.target, "fingerprint": self.fingerprint,
            "schema": schema_to_dict(self.schema), "edges": [e.__dict__ for e in self.edges],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DatabaseEntry:
        return cls(d["name"], d["kind"], d.get("target"), schema_from_dict(d["schema"]),
                   [Edge(**e) for e in d.get("edges", [])], d.get("fingerprint", ""))


def fingerprint(schema: Schema) -> str:
    """Hash of table/column names, types and keys: a changed database gets a new fingerprint."""
    parts = [(t.name, [(c.name, c.type, c.primary_key) for c in t.columns],
              [(f.columns, f.ref_table, f.ref_columns) for f in t.foreign_keys]) for t in schema.tables]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def collection_dir(name: str, settings: Settings | None = None) -> Path:
    if not _NAME.match(name):
        raise BadSource(f"invalid collection name '{name}'", "use letters, digits, '_', '-' and '.'")
    return (settings or default_settings()).collections_dir / name


class Collection:
    """A named set of databases plus their schema graph. Use :meth:`create` or :meth:`load`."""

    def __init__(self, name: str, path: Path, entries: dict[str, DatabaseEntry] | None = None,
                 settings: Settings | None = None) -> None:
        self.name = name
        self.path = path
        self.entries: dict[str, DatabaseEntry] = entries or {}
        self.settings = settings
        self._dirty: set[str] = set(self.entries)  # entries whose file save() must (re)write
        self._gone: set[str] = set()  # removed since the last save

    # ---- persistence -------------------------------------------------------------------------
    @classmethod
    def create(cls, name: str, settings: Settings | None = None, path: Path | None = None) -> Collection:
        """An empty collection (not written until :meth:`save`); an existing one is loaded instead."""
        p = path or collection_dir(name, settings)
        if (p / "collection.json").exists():
            return cls.load(name, settings, path=p)
        return cls(name, p, settings=settings)

    @classmethod
    def load(cls, name: str, settings: Settings | None = None, path: Path | None = None) -> Collection:
        p = path or collection_dir(name, settings)
        f = p / "collection.json"
        if not f.exists():
            raise CollectionNotFound(f"no collection named '{name}' (looked in {p})")
        data = json.loads(f.read_text())
        if data.get("format", 1) < 2:  # every entry inline: the next save writes them out one per file
            return cls(data["name"], p, {d["name"]: DatabaseEntry.from_dict(d) for d in data["databases"]}, settings)
        entries = {}
        for db in data["databases"]:
            try:
                entries[db] = DatabaseEntry.from_dict(json.loads((p / "entries" / f"{db}.json").read_text()))
            except (OSError, ValueError) as exc:
                raise BadSource(f"collection '{name}' is damaged: entry of database '{db}' unreadable ({exc})",
                                f"re-add it with tagql route index {name}, or delete {p} and index again") from exc
        c = cls(data["name"], p, entries, settings)
        c._dirty.clear()
        return c

    def save(self) -> None:
        """Write the entries added or changed since the last save, drop removed ones, then the index."""
        edir = self.path / "entries"
        edir.mkdir(parents=True, exist_ok=True)
        for db in sorted(self._dirty & set(self.entries)):
            _atomic_write(edir / f"{db}.json", json.dumps(self.entries[db].to_dict()))
        for db in self._gone - set(self.entries):
            (edir / f"{db}.json").unlink(missing_ok=True)
        data = {"format": FORMAT, "name": self.name, "databases": list(self.entries)}
        _atomic_write(self.path / "collection.json", json.dumps(data))
        self._dirty.clear()
        self._gone.clear()

    # ---- contents ----------------------------------------------------------------------------
    @property
    def databases(self) -> list[str]:
        return list(self.entries)

    def require_nonempty(self) -> None:
        if not self.entries:
            raise EmptyCollection(f"collection '{self.name}' has no databases")

    @cached_property
    def graph(self) -> SchemaGraph:
        g = SchemaGraph()
        for e in self.entries.values():
            g.add_database(e.name, e.schema.table_names, e.edges)
        return g

    def schema(self, db: str, tables: Iterable[str] | None = None) -> Schema:
        """The database's schema, or the routed subset of it."""
        s = self.entries[db].schema
        return s.subset(tables) if tables is not None else s

    def target(self, db: str) -> str | None:
        """Path or URL to open with :func:`tagql.db.open_database`; ``None`` for schema-only entries."""
        return self.entries[db].target

    def open(self, db: str, **kwargs: Any):
        """Open the database behind ``db`` (raises :class:`DatabaseGone` if it disappeared)."""
        entry = self.entries.get(db)
        if entry is None:
            raise DatabaseGone(f"database '{db}' is not in collection '{self.name}'")
        if entry.target is None:
            raise DatabaseGone(f"database '{db}' of collection '{self.name}' is schema-only (no data to query)",
                               "add it with --db PATH_OR_URL to answer questions on it")
        try:
            return open_database(entry.target, name=db, **kwargs)
        except (DatabaseNotFound, NotADatabase) as exc:
            raise DatabaseGone(f"database '{db}' disappeared since indexing: {exc.message}") from exc

    def values(self, db: str) -> dict[tuple[str, str], list[Any]]:
        f = self.path / "values" / f"{db}.json"
        if not f.exists():
            return {}
        return {(t, c): v for t, c, v in json.loads(f.read_text())}

    # ---- updates -----------------------------------------------------------------------------
    def add(self, schema: Schema, *, kind: str, target: str | None, name: str | None = None,
            values: dict[tuple[str, str], list[Any]] | None = None) -> DatabaseEntry:
        """Add or replace one database: read its values (if it has data; ``values`` gives them instead,
        as ``{(table, column): distinct values}``), compute its graph edges."""
        name = name or schema.name
        schema.name = name
        if values is None:
            values = read_values(target, schema) if target else {}
        self.path.mkdir(parents=True, exist_ok=True)
        vdir = self.path / "values"
        vdir.mkdir(exist_ok=True)
        _atomic_write(vdir / f"{name}.json", json.dumps([[t, c, v] for (t, c), v in values.items()], default=str))
        entry = DatabaseEntry(name, kind, target, schema, table_edges(schema, _text_values(values)), fingerprint(schema))
        self.entries[name] = entry
        self._dirty.add(name)
        self.__dict__.pop("graph", None)
        return entry

    def remove(self, db: str) -> None:
        if db not in self.entries:
            raise DatabaseGone(f"database '{db}' is not in collection '{self.name}'")
        del self.entries[db]
        self._gone.add(db)
        self._dirty.discard(db)
        (self.path / "values" / f"{db}.json").unlink(missing_ok=True)
        self.__dict__.pop("graph", None)

    def add_spider(self, tables_json: str | Path, database_dir: str | Path | None = None,
                   only: Iterable[str] | None = None, progress: Progress | None = None) -> list[str]:
        """Add the entries of a Spider/BIRD ``tables.json``; data from ``database_dir/<db>/<db>.sqlite``."""
        path = Path(tables_json)
        try:
            entries = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise BadSource(f"cannot read tables file '{path}': {exc}") from exc
        ddir = Path(database_dir) if database_dir else path.parent / "database"
        wanted = set(only) if only is not None else None
        entries = [e for e in entries if wanted is None or e["db_id"] in wanted]
        added = []
        for i, e in enumerate(entries):
            schema = Schema.from_spider(e)
            f = ddir / e["db_id"] / f"{e['db_id']}.sqlite"
            self.add(schema, kind="spider", target=str(f.resolve()) if f.exists() else None)
            added.append(e["db_id"])
            if progress:
                progress("reading schemas", i + 1, len(entries))
        return added

    def add_ddl(self, path: str | Path, dialect: str | None = None) -> str:
        schema = schema_from_ddl_file(path, dialect)
        return self.add(schema, kind="ddl", target=None).name

    def add_database(self, target: str, name: str | None = None) -> str:
        db = open_database(target, name=name)
        schema = db.schema
        t = str(Path(target).expanduser().resolve()) if "://" not in target else target
        return self.add(schema, kind="url" if "://" in target else "sqlite", target=t,
                        name=name or (Path(target).stem if "://" not in target else db.name)).name

    # ---- routing -----------------------------------------------------------------------------
    def router(self, method: str = "ours", **kwargs: Any):
        return make_router(self, method, **kwargs)

    def delete(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def read_values(target: str, schema: Schema, limit: int = MAX_VALUES) -> dict[tuple[str, str], list[Any]]:
    """Distinct values per column (text and key-like columns), read-only and capped."""

    try:
        db = open_database(target)
    except TagqlError:
        return {}
    out: dict[tuple[str, str], list[Any]] = {}
    try:
        for t in schema.tables:
            for c in t.columns:
                sql = (f"SELECT DISTINCT {schema.quote(c.name)} FROM {schema.quote(t.name)} "
                       f"WHERE {schema.quote(c.name)} IS NOT NULL LIMIT {limit}")
                try:
                    rows = db.execute(sql, timeout_s=5.0, row_cap=limit).rows
                except (TagqlError, Exception):  # noqa: BLE001 -- a broken column must not stop indexing
                    continue
                vals = [r[0] for r in rows if isinstance(r[0], (str, int, float)) and not isinstance(r[0], bool)]
                if vals:
                    out[(t.name, c.name)] = vals
    finally:
        db.close()
    return out


def _text_values(values: dict[tuple[str, str], list[Any]]) -> dict[tuple[str, str], list[str]]:
    return {k: [str(x) for x in v] for k, v in values.items()}


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
