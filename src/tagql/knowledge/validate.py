"""Validate a statement's SQL snippet against the schema (sqlglot, no database needed).

Why wrap: a snippet is a fragment (a predicate, an expression, an ORDER BY ... LIMIT tail, a column
list). We embed it in the smallest query that gives it meaning, FROM the tables it names, and run
the project's own read-only + schema checks on that. Returns a one-line reason, or None if valid.
"""

from __future__ import annotations

import re

from tagql.db.safety import parse_read_only, validate_against_schema
from tagql.db.schema import Schema
from tagql.errors import InvalidQuery, UnsafeQuery

_QUALIFIED = re.compile(r"([A-Za-z_][\w]*|`[^`]+`|\"[^\"]+\")\s*\.\s*(?:[A-Za-z_`\"])")
_TAIL = re.compile(r"^\s*(ORDER\s+BY|GROUP\s+BY|LIMIT|HAVING)\b", re.IGNORECASE)
_WHERE = re.compile(r"\bWHERE\b", re.IGNORECASE)
_STRING = re.compile(r"'(?:[^']|'')*'")


def _tables_for(sql: str, schema: Schema) -> list[str]:
    body = _STRING.sub("''", sql)
    named = []
    for m in _QUALIFIED.finditer(body):
        name = m.group(1).strip('`"')
        if name not in named:
            named.append(name)
    if named:
        return named
    # unqualified: the tables owning the identifiers it mentions
    idents = {w.lower() for w in re.findall(r"[A-Za-z_]\w*", body)}
    owners = [t.name for t in schema.tables if any(c.name.lower() in idents for c in t.columns)]
    return owners[:1] or schema.table_names[:1]


def _candidates(sql: str, tables: list[str], schema: Schema) -> list[str]:
    src = ", ".join(schema.quote(t) if schema.table(t) else t for t in tables)
    if _TAIL.match(sql):
        return [f"SELECT * FROM {src} {sql}"]
    m = _WHERE.search(sql)
    if m:
        return [f"SELECT {sql[: m.start()]} FROM {src} WHERE {sql[m.end():]}"]
    return [f"SELECT * FROM {src} WHERE {sql}", f"SELECT {sql} FROM {src}"]


def snippet_problem(sql: str, schema: Schema | None) -> str | None:
    """None if the snippet parses and names only known tables/columns, else why not (one line)."""
    sql = (sql or "").strip().rstrip(";")
    if not sql:
        return "no SQL snippet"
    if schema is None:
        return None  # nothing to check against
    tables = _tables_for(sql, schema)
    first_error: str | None = None
    for query in _candidates(sql, tables, schema):
        try:
            tree = parse_read_only(query, schema.dialect)
        except (InvalidQuery, UnsafeQuery) as exc:
            first_error = first_error or exc.message
            continue
        try:
            validate_against_schema(tree, schema)
        except InvalidQuery as exc:
            return exc.message
        return None
    return first_error or "the SQL snippet does not parse"


_ALIAS = re.compile(r"^[A-Za-z]\d*$")  # T, T1, t2: a query alias the snippet borrowed, not a schema name
_UNKNOWN_TABLE = re.compile(r"^unknown table '([^']+)'")


def names_missing_schema_object(reason: str) -> bool:
    """True when a validation reason says the snippet names a table or column the schema lacks
    (``color.color``, ``hero_attribute.attribute_name``), as opposed to a borrowed alias (``T1.x``) or
    prose around the SQL: shown to the SQL model, such a snippet is copied into a query that fails."""
    m = _UNKNOWN_TABLE.match(reason or "")
    if m:
        return not _ALIAS.match(m.group(1))
    return " has no column " in (reason or "")
