"""Read a live database's schema through SQLAlchemy's inspector (any dialect), plus a few
distinct sample values per text column (they show the LLM how values are spelled)."""

from __future__ import annotations

import re

from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from tagql.db.descriptions import apply_descriptions
from tagql.db.schema import Column, ForeignKey, Schema, Table, holds_text
from tagql.errors import NotADatabase

if TYPE_CHECKING:
    from tagql.db.connection import Database



def introspect(db: Database, *, sample_values: int = 3) -> Schema:
    own = db.backend.tables(db)  # the engine's own catalog (DuckDB), else SQLAlchemy's inspector
    if own is not None:
        return _finish(db, Schema(db.name, own, db.dialect), sample_values)
    try:
        insp = sa.inspect(db.engine)
        names = sorted(n for n in insp.get_table_names() if not n.startswith("sqlite_"))
        names += sorted(insp.get_view_names())
        internal = db.backend.internal_tables(db)  # e.g. an FTS/R*Tree table's storage on SQLite
        names = [n for n in names if n not in internal]
    except Exception as exc:  # a corrupt file fails here first
        if isinstance(exc, DBAPIError) or "file is not a database" in str(exc):
            raise NotADatabase(f"cannot read the schema of {db.name}: {exc}".splitlines()[0]) from exc
        raise
    tables = []
    for name in names:
        pk = set((insp.get_pk_constraint(name) or {}).get("constrained_columns") or [])
        cols = [
            Column(c["name"], _type_name(c["type"]), primary_key=c["name"] in pk)
            for c in insp.get_columns(name)
        ]
        fks = [
            ForeignKey(list(fk["constrained_columns"]), fk["referred_table"], list(fk["referred_columns"] or []))
            for fk in insp.get_foreign_keys(name)
            if fk.get("referred_table")
        ]
        tables.append(Table(name, cols, fks))
    return _finish(db, Schema(db.name, tables, db.dialect), sample_values)


def _finish(db: Database, schema: Schema, sample_values: int) -> Schema:
    if db.descriptions_dir is not None and db.descriptions_dir.is_dir():
        apply_descriptions(schema, db.descriptions_dir)
    if sample_values > 0:
        _add_samples(db, schema, sample_values)
    return schema


def _type_name(t: Any) -> str:
    try:
        return str(t).upper()
    except Exception:  # some dialect types cannot compile without a dialect
        return t.__class__.__name__.upper()


def _add_samples(db: Database, schema: Schema, k: int) -> None:
    """Fill ``Column.samples`` with up to ``k`` distinct non-empty values of each text column."""
    for t in schema.tables:
        for c in t.columns:
            if not holds_text(c):
                continue
            col, tab = schema.quote(c.name), schema.quote(t.name)
            if not db.backend.sample_values:
                return
            cond = f"{col} IS NOT NULL AND {col} <> ''" if c.type else f"{col} IS NOT NULL"
            sql = f"SELECT DISTINCT {col} FROM {tab} WHERE {cond} LIMIT {4 * k}"
            try:
                result = db.execute(sql, timeout_s=2.0, row_cap=4 * k)
            except Exception:  # sampling is a nicety: never fail introspection on it
                continue
            values = [r[0] for r in result.rows if isinstance(r[0], (str, int, float))]
            c.samples = [v for v in values if not looks_like_instructions(v)][:k]


# Sample values reach every prompt that shows the schema (SQL, TAG plans): a stored value that reads like an
# instruction or a statement is not shown (another value of the column is), so row text cannot steer a plan
# through the schema. The rows a query returns are still data the answer step and LM operators read.
_INSTRUCTION_LIKE = re.compile(
    r"[;<>{}\n`]|\b(?:ignore|instructions?|system|assistant|prompt|tool|select|insert|update|delete|drop|alter|"
    r"create|attach|pragma|exec(?:ute)?|answer|sql)\b", re.IGNORECASE)


def looks_like_instructions(value: object) -> bool:
    """A sample value that is long (over 60 characters) or holds instruction or SQL words or markup."""
    return isinstance(value, str) and (len(value) > 60 or _INSTRUCTION_LIKE.search(value) is not None)
