"""The schema model every stage shares: tables, columns, keys, descriptions and sample values,
rendered for prompts as ``CREATE TABLE`` text with ``--`` comments (as in the papers' prompts)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

_SAFE_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class Column:
    name: str
    type: str = ""
    primary_key: bool = False
    description: str = ""  # what the column means (e.g. from BIRD's database_description)
    value_description: str = ""  # how values are coded/formatted
    samples: list[Any] = field(default_factory=list)


TEXT_TYPES = ("CHAR", "TEXT", "CLOB", "STRING")  # any declared type naming one of these holds text (VARCHAR too)


def holds_text(column: Column) -> bool:
    """A text column, or one without a declared type (SQLite)."""
    kind = (column.type or "").upper()
    return not kind or any(t in kind for t in TEXT_TYPES)


def holds_number(column: Column) -> bool:
    """A column declared as a number (integer, real, float, double, numeric, decimal)."""
    kind = (column.type or "").upper()
    return any(k in kind for k in ("INT", "REAL", "FLOA", "DOUB", "NUM", "DEC"))


@dataclass
class ForeignKey:
    columns: list[str]
    ref_table: str
    ref_columns: list[str]


@dataclass
class Table:
    name: str
    columns: list[Column] = field(default_factory=list)
    foreign_keys: list[ForeignKey] = field(default_factory=list)
    description: str = ""

    def column(self, name: str) -> Column | None:
        low = name.lower()
        return next((c for c in self.columns if c.name.lower() == low), None)


@dataclass
class Schema:
    """A database's schema. ``dialect`` is a sqlglot dialect name (``sqlite``, ``postgres``, ...)."""

    name: str
    tables: list[Table] = field(default_factory=list)
    dialect: str = "sqlite"

    def table(self, name: str) -> Table | None:
        low = name.lower()
        return next((t for t in self.tables if t.name.lower() == low), None)

    @property
    def table_names(self) -> list[str]:
        return [t.name for t in self.tables]

    def mapping(self) -> dict[str, dict[str, str]]:
        """``{table: {column: type}}`` as sqlglot's optimizer wants it."""
        return {t.name: {c.name: (c.type or "TEXT") for c in t.columns} for t in self.tables}

    def subset(self, tables: Iterable[str]) -> Schema:
        wanted = {t.lower() for t in tables}
        return Schema(self.name, [t for t in self.tables if t.name.lower() in wanted], self.dialect)

    def quote(self, name: str) -> str:
        if _SAFE_IDENT.match(name):
            return name
        return exp.to_identifier(name, quoted=True).sql(dialect=self.dialect)

    def to_prompt(self, *, descriptions: bool = True, samples: bool = True, max_comment: int = 160) -> str:
        """Render as CREATE TABLE statements with ``--`` comments carrying meaning and examples."""
        blocks = []
        for t in self.tables:
            lines = []
            pk_cols = [c for c in t.columns if c.primary_key]
            key_cols = {c.name.lower() for c in pk_cols} | {n.lower() for fk in t.foreign_keys for n in fk.columns}
            for c in t.columns:
                decl = f"  {self.quote(c.name)} {c.type or 'TEXT'}".rstrip()
                if c.primary_key and len(pk_cols) == 1:
                    decl += " PRIMARY KEY"
                notes = []
                if descriptions:
                    desc = _one_line(c.description)
                    if desc and desc.lower().replace(" ", "_") != c.name.lower():
                        notes.append(desc)
                # key values are join plumbing ('rec2N69DMcrqN9PJC'): many tokens, nothing a question names
                if samples and c.samples and c.name.lower() not in key_cols:
                    notes.append("e.g. " + ", ".join(_sample(v) for v in c.samples))
                if descriptions:
                    vdesc = _one_line(c.value_description)
                    vdesc = re.sub(r"\bcommonsense (evidence|reasoning)\s*:\s*", "", vdesc, flags=re.IGNORECASE)
                    if vdesc:
                        notes.append(vdesc)
                comment = "; ".join(notes)
                if len(comment) > max_comment:
                    comment = comment[: max_comment - 3].rstrip() + "..."
                lines.append((decl, comment))
            if len(pk_cols) > 1:
                lines.append((f"  PRIMARY KEY ({', '.join(self.quote(c.name) for c in pk_cols)})", ""))
            for fk in t.foreign_keys:
                cols = ", ".join(self.quote(c) for c in fk.columns)
                refs = ", ".join(self.quote(c) for c in fk.ref_columns)
                lines.append((f"  FOREIGN KEY ({cols}) REFERENCES {self.quote(fk.ref_table)}({refs})", ""))
            body = []
            for i, (decl, comment) in enumerate(lines):
                sep = "," if i < len(lines) - 1 else ""
                body.append(f"{decl}{sep} -- {comment}" if comment else f"{decl}{sep}")
            head = f"CREATE TABLE {self.quote(t.name)} ("
            if t.description:
                head = f"-- {_one_line(t.description)}\n{head}"
            blocks.append(head + "\n" + "\n".join(body) + "\n);")
        return "\n\n".join(blocks)

    @classmethod
    def from_spider(cls, entry: dict[str, Any], dialect: str = "sqlite") -> Schema:
        """Build from one entry of a Spider/BIRD ``tables.json`` (schema only, no data)."""
        names = entry.get("table_names_original") or entry["table_names"]
        cols = entry.get("column_names_original") or entry["column_names"]
        readable = entry.get("column_names") or cols
        types = entry.get("column_types") or []
        tables = [Table(n) for n in names]
        index: dict[int, tuple[Table, Column]] = {}
        for i, (t_idx, cname) in enumerate(cols):
            if t_idx < 0:
                continue
            ctype = (types[i] if i < len(types) else "").upper()
            nice = readable[i][1] if i < len(readable) else ""
            col = Column(cname, ctype, description=nice if nice.replace(" ", "_").lower() != cname.lower() else "")
            tables[t_idx].columns.append(col)
            index[i] = (tables[t_idx], col)
        for pk in entry.get("primary_keys", []):
            for i in pk if isinstance(pk, list) else [pk]:
                if i in index:
                    index[i][1].primary_key = True
        for a, b in entry.get("foreign_keys", []):
            if a in index and b in index:
                (ta, ca), (tb, cb) = index[a], index[b]
                ta.foreign_keys.append(ForeignKey([ca.name], tb.name, [cb.name]))
        return cls(entry["db_id"], tables, dialect)


@dataclass(frozen=True)
class KeyLink:
    """One foreign key, seen from ``a`` to ``b`` (``a_cols`` = ``b_cols``); ``up`` when ``a`` holds the key
    (many rows of ``a`` to one of ``b``). Joins are walked both ways, so every key gives two links.
    ``implied``: not declared, read from the names (:func:`implied_keys`)."""

    a: str
    a_cols: tuple[str, ...]
    b: str
    b_cols: tuple[str, ...]
    up: bool = True
    implied: bool = False


_KEY_NAME = re.compile(r"(?:id|code|key)$", re.IGNORECASE)


def implied_keys(schema: Schema) -> list[tuple[str, str, str, str]]:
    """Keys a schema uses without declaring them: ``(table, column, referenced table, its column)`` for a
    column named like a key (``..id``, ``..code``, ``..key``) that is the one-column primary key of exactly
    one other table, and neither a declared key nor the one-column primary key of its own table (Spider's
    hr_1: ``departments.LOCATION_ID`` is ``locations``' primary key, declared nowhere)."""
    owner: dict[str, list[tuple[str, str]]] = {}
    for t in schema.tables:
        pk = [c for c in t.columns if c.primary_key]
        if len(pk) == 1 and _KEY_NAME.search(pk[0].name):
            owner.setdefault(pk[0].name.lower(), []).append((t.name, pk[0].name))
    out = []
    for t in schema.tables:
        declared = {c.lower() for fk in t.foreign_keys for c in fk.columns}
        own = [c for c in t.columns if c.primary_key]
        for c in t.columns:
            if own == [c] or c.name.lower() in declared or len(owner.get(c.name.lower(), [])) != 1:
                continue  # its table's own key, a declared key, or a name several tables key by
            out.append((t.name, c.name, *owner[c.name.lower()][0]))  # another table's: ``t``'s would be ``c``
    return out


def key_links(schema: Schema) -> dict[str, list[KeyLink]]:
    """Foreign keys in both directions, by table (lower-case name): the declared ones, then the implied
    ones (:func:`implied_keys`); keys to a table the schema lacks, or whose column lists differ in length,
    are left out (nothing can be joined over them)."""
    out: dict[str, list[KeyLink]] = {}

    def add(fwd: KeyLink) -> None:
        out.setdefault(fwd.a.lower(), []).append(fwd)
        out.setdefault(fwd.b.lower(), []).append(
            KeyLink(fwd.b, fwd.b_cols, fwd.a, fwd.a_cols, up=False, implied=fwd.implied))

    by_name: dict[str, Table] = {}
    for t in schema.tables:  # one lookup table, not a scan per key (840 tables: 15 -> 7 ms a call)
        by_name.setdefault(t.name.lower(), t)
    for t in schema.tables:
        for fk in t.foreign_keys:
            ref = by_name.get(fk.ref_table.lower())
            if ref is None or not fk.columns or len(fk.columns) != len(fk.ref_columns):
                continue
            add(KeyLink(t.name, tuple(fk.columns), ref.name, tuple(fk.ref_columns)))
    for table, column, ref, ref_column in implied_keys(schema):
        add(KeyLink(table, (column,), ref, (ref_column,), implied=True))
    return out


def key_neighbours(schema: Schema) -> dict[str, set[str]]:
    """Undirected foreign-key adjacency by lower-cased table name (every table present, self-keys left out).
    Unlike :func:`key_links` a key whose referenced columns are implicit (``REFERENCES t``) still counts."""
    adj: dict[str, set[str]] = {t.name.lower(): set() for t in schema.tables}
    for t in schema.tables:
        for fk in t.foreign_keys:
            ref = fk.ref_table.lower()
            if ref in adj and ref != t.name.lower():
                adj[t.name.lower()].add(ref)
                adj[ref].add(t.name.lower())
    return adj


def _one_line(text: str) -> str:
    return " ".join(str(text or "").split())


def _sample(v: Any) -> str:
    if isinstance(v, str):
        v = v if len(v) <= 40 else v[:37] + "..."
        return "'" + v.replace("'", "''") + "'"
    return str(v)
