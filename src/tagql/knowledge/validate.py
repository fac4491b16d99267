"""Validate a statement's SQL snippet against the schema (sqlglot, no database needed) and, where
the database is connected, against its data.

Why wrap: a snippet is a fragment (a predicate, an expression, an ORDER BY ... LIMIT tail, a column
list). We embed it in the smallest query that gives it meaning, FROM the tables it names, and run
the project's own read-only + schema checks on that. Returns a one-line reason, or None if valid.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tagql.db.safety import parse_read_only, validate_against_schema
from tagql.db.schema import Schema
from tagql.errors import InvalidQuery, UnsafeQuery
from tagql.knowledge.canon import canonicalise

if TYPE_CHECKING:
    from tagql.db.connection import Database

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


def _checked_tree(sql: str, schema: Schema):
    """(the wrapped snippet's tree, None) when it parses and names only known objects, else (None, reason)."""
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
            return None, exc.message
        return tree, None
    return None, first_error or "the SQL snippet does not parse"


def snippet_problem(sql: str, schema: Schema | None) -> str | None:
    """None if the snippet parses and names only known tables/columns, else why not (one line)."""
    sql = (sql or "").strip().rstrip(";")
    if not sql:
        return "no SQL snippet"
    if schema is None:
        return None  # nothing to check against
    return _checked_tree(sql, schema)[1]


_NO_VALUE = "the data holds no "


def _template_constant(value: str) -> bool:
    # canonical numbers and dates ('1000-100-100') and one-letter stand-ins ('X') are templates the
    # question fills in, not values the column must hold
    return len(value.strip()) <= 1 or canonicalise(value) != value


def data_problem(sql: str, db: Database) -> str | None:
    """Schema problems first (:func:`snippet_problem`); then, for a valid snippet, a string constant it
    compares with a column (``=``, ``IN``) that the column does not hold even up to case and spaces
    (``publisher_name = 'Marvel'`` where the data says 'Marvel Comics'). One line, or None."""
    sql = (sql or "").strip().rstrip(";")
    if not sql:
        return "no SQL snippet"
    tree, reason = _checked_tree(sql, db.schema)
    if tree is None:
        return reason
    from tagql.db.repair import similar_values, string_comparisons

    for comparison in string_comparisons(tree, db):
        for value, stored in zip(comparison.values, comparison.stored):
            if not stored and not _template_constant(value):
                where = f"{comparison.table}.{comparison.column.name}"
                near = similar_values(db, comparison.table, comparison.column.name, value)
                hint = f" (it holds {', '.join(repr(v) for v in near)})" if near else ""
                return f"{_NO_VALUE}'{value}' in {where}{hint}"
    return None


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


def holds_back(reason: str) -> bool:
    """Whether a statement with this validation reason stays out of prompts when the retriever picks K:
    its snippet names a missing table/column, or compares a column with a value the data lacks. Shown
    to the SQL model, either is copied into a query that fails or finds nothing."""
    return names_missing_schema_object(reason) or (reason or "").startswith(_NO_VALUE)
