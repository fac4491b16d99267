"""One query over two databases: their tables copied side by side into one DuckDB file.

The decomposition of :mod:`tagql.cross.run` (one LLM-written sub-question per database) failed with the
1.5B model on the dev questions: its plans named columns that do not exist ("driver_id") or the wrong
databases. Writing one query over a schema is what the model does well, so this strategy gives it both
schemas at once:

1. **Pair** (:func:`joinable_pairs`): pairs of the routed databases whose text columns share values (a
   country name in both), each pair checked by data, not by the model; the LLM picks one of them, or one
   database alone, with its reply constrained to those options.
2. **Merge** (:func:`merge`): both databases' tables copied into one DuckDB file (each SQLite file copied
   once per process into ``workdir``, keys kept, a clashing table name prefixed with its database's name).
3. **Query**: the text-to-SQL stage writes and checks one query over the merged schema, whose
   :func:`value_links` (columns of the two databases sharing most of their values) are declared as keys;
   a query that reads one database only (:func:`one_sided`) or joins a number to a text across them
   (:func:`mismatched_types`) goes back to the model.
4. **Join values**: a comparison of a linked column with its partner table's primary key moves onto the
   link (:func:`joins_on_links`); every equality the query makes between a column of one database and a
   column of the other is found with sqlglot; where the two columns write the entity differently
   ("Spanish" vs "Spain"), the LM operator of :mod:`tagql.cross.join` matches the values and a copy of the
   merged file gets the matched side's values rewritten to the other side's (and in the columns its own
   database joins to it by keys); the query then runs read-only on that copy.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

from tagql.cross.join import MAX_OPTIONS, load_table, match_values, norm, require_duckdb, similar_values
from tagql.cross.plan import schema_line
from tagql.db.connection import Database
from tagql.db.schema import ForeignKey, Schema, Table, holds_number, holds_text, key_links
from tagql.errors import TagqlError
from tagql.llm.base import LLM, system, user

MIN_SHARED = 2  # distinct values two columns must share for their databases to count as joinable
# of the smaller column's distinct values, for two columns to be linked as one entity: circuits.country shares
# 0.84 of its values with country.Name, singer.Citizenship 1.0; drivers.nationality 0.41 with
# countrylanguage.Language ("German" is both), a link that led the model to join nationalities to languages
MIN_LINK_SHARE = 0.6
VALUE_CAP = 300  # distinct values read per column when checking joinability

CHOOSE_SYSTEM = """\
You pick the databases a question needs. Each option is one database, or two databases that share \
values (e.g. country names) and can be joined. Pick two when the question needs facts from both.
Reply with the option only."""


class MergeFailed(TagqlError):
    """The databases could not be merged for one query."""


@dataclass
class Merged:
    """A DuckDB file holding the tables of several databases, and where each table came from."""

    path: Path
    origin: dict[str, tuple[str, str]]  # merged table name (lower) -> (database, its own table name)
    schema: Schema

    def database_of(self, table: str) -> str | None:
        o = self.origin.get(table.lower())
        return o[0] if o else None


@dataclass
class ValueJoin:
    """One equality between columns of two databases, and the values the LM matched for it."""

    left: tuple[str, str]  # (merged table, column)
    right: tuple[str, str]
    exact: int = 0
    matched: dict[str, str] = field(default_factory=dict)  # value -> the other side's value
    side: str = ""  # the table whose values were rewritten

    def to_dict(self) -> dict[str, Any]:
        return {"left": ".".join(self.left), "right": ".".join(self.right), "exact_matches": self.exact,
                "lm_matched": dict(self.matched), "rewritten": self.side}


def text_values(db: Database, cap: int = VALUE_CAP) -> dict[tuple[str, str], set[str]]:
    """Distinct values (normalised) of each text column of ``db``, at most ``cap`` per column."""
    out: dict[tuple[str, str], set[str]] = {}
    s = db.schema
    for t in s.tables:
        for c in t.columns:
            if not holds_text(c):
                continue
            try:
                rows = db.execute(f"SELECT DISTINCT {s.quote(c.name)} FROM {s.quote(t.name)} "
                                  f"WHERE {s.quote(c.name)} IS NOT NULL LIMIT {cap}", row_cap=cap).rows
            except TagqlError:
                continue
            vals = {norm(r[0]) for r in rows if isinstance(r[0], str) and any(ch.isalpha() for ch in r[0])}
            if vals:
                out[(t.name, c.name)] = vals
    return out


def shared_values(a: dict[tuple[str, str], set[str]], b: dict[tuple[str, str], set[str]]) -> int:
    """The most distinct values any text column of one database shares with any of the other."""
    best = 0
    for va in a.values():
        for vb in b.values():
            if len(va) > best and len(vb) > best:
                best = max(best, len(va & vb))
    return best


def joinable_pairs(values: dict[str, dict[tuple[str, str], set[str]]], names: Sequence[str],
                   ) -> list[tuple[str, str, int]]:
    """Pairs of ``names`` (in routed order) whose text columns (``values``: :func:`text_values` of each)
    share at least :data:`MIN_SHARED` values."""
    pairs = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = shared_values(values[a], values[b])
            if shared >= MIN_SHARED:
                pairs.append((a, b, shared))
    return pairs


def choose_databases(question: str, names: Sequence[str], pairs: Sequence[tuple[str, str, int]],
                     dbs: dict[str, Database], llm: LLM) -> list[str]:
    """The LLM's pick (reply constrained to the options): the router's best database with each database it
    can be joined to, or alone (or, when it joins none, every joinable pair and every database alone)."""
    first = [p for p in pairs if names[0] in p[:2]]
    if first:
        options = [f"{names[0]} + {b if a == names[0] else a}" for a, b, _ in first] + [names[0]]
    else:
        options = [f"{a} + {b}" for a, b, _ in pairs] + list(names)
    if len(options) == 1:
        return options[0].split(" + ")
    shown = dict.fromkeys(n for o in options for n in o.split(" + "))
    listed = "\n".join(schema_line(n, dbs[n].schema, max_columns=8) for n in shown)
    text = llm.complete(
        [system(CHOOSE_SYSTEM),
         user(f"Databases (tables and columns):\n{listed}\n\nQuestion: {question}\n\nOptions:\n"
              + "\n".join(f"- {o}" for o in options))],
        max_tokens=24, json_schema={"enum": options}).text.strip()
    try:
        picked = json.loads(text)
    except ValueError:
        picked = text.strip('"')
    by_set = {frozenset(o.split(" + ")): o for o in options}
    picked = by_set.get(frozenset(str(picked).split(" + ")), options[0])  # either order of a pair
    return picked.split(" + ")


def value_links(values: dict[str, dict[tuple[str, str], set[str]]], merged: Merged,
                ) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """Columns of two merged databases that hold the same entity, found in the data: ``((table, column),
    (table, column))`` in merged names, the column with fewer distinct values first (it refers to the other,
    like ``circuits.country`` to ``country.Name``). Each column of the first side keeps its best partner,
    with at least :data:`MIN_SHARED` shared values and :data:`MIN_LINK_SHARE` of its own, and each pair of
    tables keeps its best link (hr_1's ``countries.COUNTRY_ID`` and ``COUNTRY_NAME`` both match world_1's
    ``country``, as codes and as names; two links between one pair of tables would leave the join repairs
    two paths where the data holds one relation)."""
    actual = {t.name.lower(): t.name for t in merged.schema.tables}
    merged_name = {origin: actual.get(lower, lower) for lower, origin in merged.origin.items()}
    by_db = list(dict.fromkeys(db for db, _ in merged.origin.values()))
    best: dict[tuple[str, str], tuple[float, tuple[str, str]]] = {}
    for i, a in enumerate(by_db):
        for b in by_db[i + 1:]:
            for (ta, ca), va in values.get(a, {}).items():
                for (tb, cb), vb in values.get(b, {}).items():
                    shared = len(va & vb)
                    if shared < MIN_SHARED:
                        continue
                    small, big = (a, ta, ca, va), (b, tb, cb, vb)
                    if len(va) > len(vb):
                        small, big = big, small
                    share = shared / len(small[3])
                    left = (merged_name[(small[0], small[1])], small[2])
                    if share >= MIN_LINK_SHARE and share > best.get(left, (0.0, None))[0]:
                        best[left] = (share, (merged_name[(big[0], big[1])], big[2]))
    per_pair: dict[tuple[str, str], tuple[float, tuple[str, str], tuple[str, str]]] = {}
    for left, (share, right) in best.items():
        pair = (left[0].lower(), right[0].lower())
        if share > per_pair.get(pair, (0.0,))[0]:
            per_pair[pair] = (share, left, right)
    return [(left, right) for _, left, right in per_pair.values()]


def with_links(schema: Schema, links: Sequence[tuple[tuple[str, str], tuple[str, str]]]) -> Schema:
    """``schema`` with each link declared as a foreign key of its first table (shown in the SQL prompt, and
    followed by the join repairs of :mod:`tagql.db.repair` like any key)."""
    extra: dict[str, list[ForeignKey]] = {}
    for (ta, ca), (tb, cb) in links:
        extra.setdefault(ta.lower(), []).append(ForeignKey([ca], tb, [cb]))
    return Schema(schema.name, [Table(t.name, t.columns, [*t.foreign_keys, *extra.get(t.name.lower(), [])],
                                      t.description) for t in schema.tables], schema.dialect)


def _is_sqlite_file(path: Path) -> bool:
    """A SQLite database file (its 16-byte header), whatever the connection's dialect object."""
    try:
        with path.open("rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def merge(dbs: Sequence[Database], workdir: Path) -> Merged:
    """One DuckDB file with the tables of ``dbs`` (SQLite files; each copied once into ``workdir``)."""
    duckdb = require_duckdb()

    from tagql.db.duck import copy_sqlite_to_duckdb

    workdir.mkdir(parents=True, exist_ok=True)
    copies = []
    for db in dbs:
        if db.path is None or not _is_sqlite_file(Path(db.path)):
            raise MergeFailed(f"database '{db.name}' is not a SQLite file; merging needs its tables copied",
                              "ask each database separately")
        stat = Path(db.path).stat()
        tag = hashlib.sha256(f"{Path(db.path).resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
        copy = workdir / f"{db.name}-{tag}.duckdb"
        if not copy.exists():
            tmp = workdir / f".{copy.name}.tmp"
            tmp.unlink(missing_ok=True)
            try:
                copy_sqlite_to_duckdb(db.path, tmp)
            except duckdb.Error:  # a key DuckDB refuses (car_1: a TEXT column referencing an INTEGER key)
                tmp.unlink(missing_ok=True)
                _copy_without_keys(Path(db.path), tmp, duckdb)
            tmp.replace(copy)
        copies.append(copy)
    key = hashlib.sha256("|".join(c.name for c in copies).encode()).hexdigest()[:12]
    path = workdir / f"merged-{key}.duckdb"
    origin: dict[str, tuple[str, str]] = {}
    tables: list[Table] = []
    renames: list[dict[str, str]] = []
    for db in dbs:
        own = {}
        for t in db.schema.tables:
            name = t.name if t.name.lower() not in origin else f"{db.name}_{t.name}"
            origin[name.lower()] = (db.name, t.name)
            own[t.name.lower()] = name
        renames.append(own)
    for db, own in zip(dbs, renames):
        for t in db.schema.tables:
            fks = [ForeignKey(list(f.columns), own.get(f.ref_table.lower(), f.ref_table), list(f.ref_columns))
                   for f in t.foreign_keys]
            tables.append(Table(own[t.name.lower()], list(t.columns), fks))
    if not path.exists():
        tmp = workdir / f".{path.name}.tmp"
        tmp.unlink(missing_ok=True)
        con = duckdb.connect(str(tmp))
        try:
            for i, (db, copy, own) in enumerate(zip(dbs, copies, renames)):
                con.execute(f"ATTACH '{copy}' AS src{i} (READ_ONLY)")
                for t in db.schema.tables:
                    con.execute(f'CREATE TABLE "{own[t.name.lower()]}" AS SELECT * FROM src{i}."{t.name}"')
                con.execute(f"DETACH src{i}")
        finally:
            con.close()
        tmp.replace(path)
    return Merged(path, origin, Schema(" + ".join(d.name for d in dbs), tables, "duckdb"))


def _copy_without_keys(source: Path, target: Path, duckdb: Any) -> None:
    """Every table of a SQLite file into a new DuckDB file, column types from the values, no keys (the
    merged schema the model reads keeps them, from the SQLite schema)."""
    import sqlite3

    src = sqlite3.connect(f"file:{source.resolve()}?mode=ro", uri=True)
    con = duckdb.connect(str(target))
    try:
        names = [r[0] for r in src.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        for n in names:
            cur = src.execute(f'SELECT * FROM "{n}"')
            load_table(con, n, [d[0] for d in cur.description], cur.fetchall())
    finally:
        con.close()
        src.close()


def _column_pairs(tree: exp.Expression, merged: Merged) -> list[tuple[exp.Column, str, exp.Column, str]]:
    """Each comparison of a column of one database with one of the other, as the two column nodes and
    their (merged) tables: ``a.x = b.y`` and ``a.x IN (SELECT b.y ...)``."""
    pairs: list[tuple[exp.Column, exp.Column]] = []
    for eq in tree.find_all(exp.EQ):
        if isinstance(eq.this, exp.Column) and isinstance(eq.expression, exp.Column):
            pairs.append((eq.this, eq.expression))
    for node in tree.find_all(exp.In):
        query = node.args.get("query")
        inner = query.this if isinstance(query, exp.Subquery) else query
        if isinstance(node.this, exp.Column) and isinstance(inner, exp.Select) and len(inner.expressions) == 1:
            picked = inner.expressions[0]
            picked = picked.this if isinstance(picked, exp.Alias) else picked
            if isinstance(picked, exp.Column):
                pairs.append((node.this, picked))
    out = []
    for left, right in pairs:
        a, b = _column_table(left, merged), _column_table(right, merged)
        if a and b and merged.database_of(a) != merged.database_of(b):
            out.append((left, a, right, b))
    return out


def cross_equalities(sql: str, merged: Merged) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """The column pairs of ``sql`` that compare a column of one database with one of the other: ``a.x = b.y``
    and ``a.x IN (SELECT b.y ...)``. Aliases resolve in their own SELECT (then the enclosing ones)."""
    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
    except sqlglot.errors.ParseError:
        return []
    out = []
    for left, a, right, b in _column_pairs(tree, merged):
        pair = ((a, left.name), (b, right.name))
        if pair not in out:
            out.append(pair)
    return out


def joins_on_links(sql: str, merged: Merged, links: Sequence[tuple[tuple[str, str], tuple[str, str]]],
                   ) -> tuple[str, list[str]]:
    """``sql`` with each comparison across the two databases moved onto the value link of its table: the
    model wrote ``competition.Country = country.Code`` (names against three-letter codes, cross dev x30;
    ``circuits.country = country.Code``, x36) where the data links ``competition.Country`` to
    ``country.Name``. When one side of a comparison is a linked column and the other side is the primary
    key of the table that holds its link partner, that side becomes the partner: the key and the partner
    name the same rows, and equal values join exactly (no LM matching of names to codes). A column that is
    not its table's key is left alone (``lang.CountryCode`` is a country, its table's linked
    ``lang.Language`` a language). Returns the SQL (unchanged when nothing moved) and one note per move."""
    if not links:
        return sql, []
    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
    except sqlglot.errors.ParseError:
        return sql, []
    partner: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for (ta, ca), (tb, cb) in links:
        partner.setdefault((ta.lower(), ca.lower()), set()).add((tb.lower(), cb.lower()))
        partner.setdefault((tb.lower(), cb.lower()), set()).add((ta.lower(), ca.lower()))
    notes = []
    for left, a, right, b in _column_pairs(tree, merged):
        here = {(a.lower(), left.name.lower()), (b.lower(), right.name.lower())}
        if any(here & partner.get(side, set()) for side in here):
            continue  # already on a link
        for col, table, other, other_table in ((left, a, right, b), (right, b, left, a)):
            meant = [c for t, c in partner.get((table.lower(), col.name.lower()), set()) if t == other_table.lower()]
            found = merged.schema.table(other_table)
            written = found.column(other.name) if found is not None else None
            keys = [c for c in found.columns if c.primary_key] if found is not None else []
            if (len(meant) == 1 and written is not None and keys == [written]
                    and found.column(meant[0]) is not None):
                name = found.column(meant[0]).name
                notes.append(f"{other_table}.{other.name} -> {other_table}.{name} (the data links "
                             f"{table}.{col.name} to {other_table}.{name})")
                other.set("this", exp.to_identifier(name))
                break
    return (tree.sql(dialect="duckdb"), notes) if notes else (sql, [])


def one_sided(sql: str, merged: Merged, links: Sequence[tuple[tuple[str, str], tuple[str, str]]] = ()) -> str | None:
    """Why ``sql`` cannot answer a question across the merged databases when it reads the tables of only one
    of them (the model wrote ``SELECT Continent FROM country GROUP BY ...`` for "Which continent do the most
    Formula 1 drivers come from?": cross dev x11), naming the value links to join on; None when it reads both."""
    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
    except sqlglot.errors.ParseError:
        return None
    read = {merged.database_of(t.name) for t in tree.find_all(exp.Table)} - {None}
    databases = list(dict.fromkeys(db for db, _ in merged.origin.values()))
    if len(read) != 1 or len(databases) < 2:
        return None
    (only,) = read
    others = [d for d in databases if d != only]
    how = "; ".join(f"{a}.{b} = {c}.{d}" for (a, b), (c, d) in links)
    return (f"the query reads only tables of {only}, but the question needs {only} and {' and '.join(others)}: "
            f"join a table of {others[0]}" + (f" (they join on {how})" if how else ""))


def _kind(merged: Merged, table: str, column: str) -> str:
    """``number`` or ``text`` for a column of the merged schema by its declared type; '' when unknown."""
    t = merged.schema.table(table)
    c = t.column(column) if t is not None else None
    if c is None or not c.type:
        return ""
    return "text" if holds_text(c) else "number" if holds_number(c) else ""


def mismatched_types(sql: str, merged: Merged, links: Sequence[tuple[tuple[str, str], tuple[str, str]]] = (),
                     ) -> str | None:
    """Why ``sql`` joins the two databases on columns that cannot hold the same values, a number against a
    text (``party_host.Host_ID = country.Name``, cross dev x31: DuckDB stops with a conversion error that
    says nothing of the join), naming the value links to join on; None when no such comparison."""
    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
    except sqlglot.errors.ParseError:
        return None
    for left, a, right, b in _column_pairs(tree, merged):
        kinds = {_kind(merged, a, left.name), _kind(merged, b, right.name)}
        if kinds == {"number", "text"}:
            how = "; ".join(f"{ta}.{ca} = {tb}.{cb}" for (ta, ca), (tb, cb) in links)
            return (f"{a}.{left.name} holds numbers and {b}.{right.name} text: joined, they never match"
                    + (f"; the two databases join on {how}" if how else ""))
    return None


def _scope(select: exp.Select) -> dict[str, str]:
    """alias (or name) -> table, for the tables in this SELECT's own FROM and JOINs."""
    found = {}
    for part in [select.args.get("from_") or select.args.get("from"), *(select.args.get("joins") or [])]:
        if part is None:
            continue
        table = part.this if isinstance(part, (exp.From, exp.Join)) else part
        if isinstance(table, exp.Table):
            found[table.alias_or_name.lower()] = table.name
    return found


def _column_table(col: exp.Column, merged: Merged) -> str | None:
    select = col.find_ancestor(exp.Select)
    while select is not None:
        scope = _scope(select)
        if col.table:
            if col.table.lower() in scope:
                return scope[col.table.lower()]
        else:
            owners = [t for t in scope.values() if (tab := merged.schema.table(t)) and tab.column(col.name)]
            if len(owners) == 1:
                return owners[0]
        select = select.find_ancestor(exp.Select)
    return None


def entity_of(*columns: str) -> str:
    """What two compared columns name, for the matching prompt: ``nationality`` / ``Name`` -> country."""
    words = " ".join(columns).lower()
    for entity, hints in (("country", ("country", "nation", "citizenship")), ("city", ("city", "town")),
                          ("language", ("language",)), ("person", ("person", "people"))):
        if any(h in words for h in hints):
            return entity
    return "entity"


def code_labels(db: Database, table: str, column: str, schema: Schema | None = None) -> dict[str, str]:
    """What the values of a code column stand for (``country.Code`` ``ESP`` -> ``Spain``): the name-like
    text column of its table, or of the table its foreign key points to (``countrylanguage.CountryCode``
    -> ``country.Name``; keys from ``schema``, default the database's). Empty when the column is no code
    (its values are names already)."""
    s = schema or db.schema
    t = s.table(table)
    if t is None or t.column(column) is None:
        return {}
    sample = db.execute(f"SELECT DISTINCT CAST({s.quote(column)} AS VARCHAR) FROM {s.quote(table)} LIMIT 50").rows
    vals = [r[0] for r in sample if isinstance(r[0], str)]
    if not vals or sum(len(v) <= 4 or not any(ch.islower() for ch in v) for v in vals) < 0.8 * len(vals):
        return {}  # mostly long, mixed-case values: names, not codes
    source, key = t, column
    for fk in t.foreign_keys:
        if [c.lower() for c in fk.columns] == [column.lower()] and s.table(fk.ref_table) is not None:
            source, key = s.table(fk.ref_table), fk.ref_columns[0] if fk.ref_columns else column
    names = [c.name for c in source.columns if "name" in c.name.lower() and c.name.lower() != key.lower()]
    if not names:
        return {}
    rows = db.execute(f"SELECT DISTINCT CAST({s.quote(key)} AS VARCHAR), CAST({s.quote(names[0])} AS VARCHAR) "
                      f"FROM {s.quote(source.name)}").rows
    return {str(k): str(v) for k, v in rows if k is not None and v is not None}


def match_joins(merged_db: Database, joins: Sequence[tuple[tuple[str, str], tuple[str, str]]], key: str,
                engine: Any, schema: Schema | None = None) -> list[ValueJoin]:
    """For each cross-database equality, the values of one side the LM matches to the other side's
    (``key``: what they name; empty: guessed from the column names, :func:`entity_of`)."""
    out = []
    s = merged_db.schema
    for (lt, lc), (rt, rc) in joins:
        def distinct(t: str, c: str) -> list[str]:
            rows = merged_db.execute(f"SELECT DISTINCT CAST({s.quote(c)} AS VARCHAR) FROM {s.quote(t)} "
                                     f"WHERE {s.quote(c)} IS NOT NULL").rows
            return [r[0] for r in rows if isinstance(r[0], str) and r[0].strip()]
        lv, rv = distinct(lt, lc), distinct(rt, rc)
        ln, rn = {norm(v) for v in lv}, {norm(v) for v in rv}
        vj = ValueJoin((lt, lc), (rt, rc), exact=len(ln & rn))
        l_un = [v for v in lv if norm(v) not in rn and any(ch.isalpha() for ch in v)]
        r_un = [v for v in rv if norm(v) not in ln and any(ch.isalpha() for ch in v)]
        if l_un and r_un:
            # a side of codes is matched into (by what its codes stand for), whatever its size: the names of
            # the other side are what the LM reads well (x28: codes matched into names gave CHE -> Chad)
            labels = {side: code_labels(merged_db, *side, schema=schema) for side in ((lt, lc), (rt, rc))}
            if bool(labels[(lt, lc)]) != bool(labels[(rt, rc)]):
                from_left = bool(labels[(rt, rc)])
            else:
                from_left = len(l_un) <= len(r_un)
            values, options = (l_un, rv) if from_left else (r_un, lv)
            into = (rt, rc) if from_left else (lt, lc)
            if engine is not None and len(options) <= MAX_OPTIONS:
                vj.matched = match_values(values, options, key or entity_of(lc, rc, lt, rt), engine,
                                          labels=labels[into])
            else:
                vj.matched = similar_values(values, options)
            vj.side = lt if from_left else rt
            vj.right, vj.left = ((rt, rc), (lt, lc)) if from_left else ((lt, lc), (rt, rc))
        out.append(vj)
    return out


def _keyed_with(schema: Schema, table: str, column: str) -> list[tuple[str, str]]:
    """``(table, column)`` and every column of the same database joined to it by a one-column key, declared
    or implied, transitively (hr_1: ``countries.COUNTRY_ID`` and ``locations.COUNTRY_ID``, which references
    it). The value links across the two databases are not followed: they join the other database."""
    links = key_links(schema)
    seen = [(table, column)]
    for t, c in seen:
        for link in links.get(t.lower(), []):
            if [a.lower() for a in link.a_cols] == [c.lower()]:  # key_links: b_cols as long as a_cols
                there = (link.b, link.b_cols[0])
                if there not in seen:
                    seen.append(there)
    return seen


def rewritten_copy(merged: Merged, joins: Sequence[ValueJoin], target: Path) -> Path:
    """A copy of the merged file with each matched side's values rewritten to the other side's, in the
    matched column and in the columns its own database joins to it by keys (rewriting ``countries``'
    'UK' to world_1's 'GB' alone would cut it off from the ``locations`` rows that say 'UK', cross dev x35)."""
    duckdb = require_duckdb()

    shutil.copyfile(merged.path, target)
    database = {t.name.lower(): merged.database_of(t.name) for t in merged.schema.tables}
    con = duckdb.connect(str(target))
    try:
        for vj in joins:
            if not vj.matched:
                continue
            con.execute("CREATE TEMP TABLE m (v VARCHAR, w VARCHAR)")
            con.executemany("INSERT INTO m VALUES (?, ?)", list(vj.matched.items()))
            own = database.get(vj.left[0].lower())
            for table, column in _keyed_with(merged.schema, *vj.left):
                if database.get(table.lower()) != own:
                    continue
                col_type = con.execute(f'SELECT typeof("{column}") FROM "{table}" LIMIT 1').fetchone()
                if col_type is None or col_type[0] != "VARCHAR":
                    continue
                con.execute(f'UPDATE "{table}" SET "{column}" = m.w FROM m WHERE "{table}"."{column}" = m.v')
            con.execute("DROP TABLE m")
    finally:
        con.close()
    return target
