"""Value glosses from domain statements: what a stored code means, for the LM operators.

A statement such as "'Chlorine' refers to atom.element = 'cl'" tells the SQL writer which constant to
use; it also tells an LM filter what the constant *is*. The 1.5B model judges "cl is a halogen" false
and "cl (Chlorine) is a halogen" true, so operators fill ``{element}`` with ``cl (Chlorine)`` when the
database's approved statements gloss that value (see ``docs/tag.md``, value glosses).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tagql.text import stems

Glossary = Mapping[str, Mapping[str, str]]  # column name (lower case) -> stored value -> gloss

MAX_GLOSS_WORDS = 4  # longer texts are descriptions of a query, not names of a value


def _equality(sql: str) -> tuple[str, str] | None:
    """(column name, string constant) when ``sql`` is exactly ``[table.]column = 'constant'``."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, ValueError):
        return None
    if not isinstance(tree, exp.EQ):
        return None
    col, lit = tree.this, tree.expression
    if isinstance(col, exp.Literal):
        col, lit = lit, col
    if not (isinstance(col, exp.Column) and isinstance(lit, exp.Literal) and lit.is_string):
        return None
    value = lit.this
    return (col.name.lower(), value) if value.strip() else None


def value_glossary(statements: Iterable[tuple[str, str]]) -> dict[str, dict[str, str]]:
    """The glossary of ``(text, sql)`` statements: for each ``column = 'value'`` statement whose text
    names something other than the value itself, the shortest such text."""
    out: dict[str, dict[str, str]] = {}
    for text, sql in statements:
        found = _equality(sql)
        gloss = " ".join(text.split())
        if found is None or not gloss or len(gloss.split()) > MAX_GLOSS_WORDS:
            continue
        column, value = found
        v, g = stems(value), stems(gloss)  # "aliens" names the value 'Alien'
        if (v and v <= g) or g <= v:  # "molecule TR060" for 'TR060' adds nothing
            continue
        known = out.setdefault(column, {}).get(value)
        if known is None or len(gloss) < len(known):
            out[column][value] = gloss
    return {c: m for c, m in out.items() if m}


def glossary_of(knowledge: Any) -> dict[str, dict[str, str]]:
    """The glossary of a session's knowledge: a store retriever's approved statements, or a fixed list's
    statements (anything else: none)."""
    kb = getattr(knowledge, "kb", None)
    if kb is not None:
        statuses = sorted(getattr(knowledge, "statuses", ("approved",)))
        return value_glossary((s.text, s.sql) for s in kb.list(statuses))
    fixed = getattr(knowledge, "statements", None)
    if isinstance(fixed, list):
        return value_glossary((s.text, s.sql) for s in fixed)
    return {}


def code_columns(glossary: Glossary, db: Any, *, max_values: int = 200, min_share: float = 0.5) -> set[str]:
    """Glossary columns that hold codes: at most ``max_values`` distinct values, at least ``min_share`` of
    them glossed (toxicology's ``element``: 16 of 21 symbols). An operator may ask the LM what the
    others stand for (:meth:`tagql.tag.operators.SemEngine.fill`), with the known glosses as examples."""
    from tagql.errors import TagqlError

    out = set()
    schema = db.schema
    for column, known in glossary.items():
        values: set[Any] = set()
        for table in schema.tables:
            col = next((c.name for c in table.columns if c.name.lower() == column), None)
            if col is None:
                continue
            q, t = schema.quote(col), schema.quote(table.name)
            try:
                rows = db.execute(f"SELECT DISTINCT {q} FROM {t} WHERE {q} IS NOT NULL LIMIT {max_values + 1}",
                                  timeout_s=5.0).rows
            except TagqlError:
                continue
            values.update(r[0] for r in rows)
        if values and len(values) <= max_values and len(values & set(known)) >= min_share * len(values):
            out.add(column)
    return out


def gloss(glossary: Glossary | None, column: str, value: Any) -> str | None:
    """The gloss of ``value`` in ``column`` (a ``{field}`` name, possibly ``table.column``), if any."""
    if not glossary or not isinstance(value, str):
        return None
    return glossary.get(column.rsplit(".", 1)[-1].lower(), {}).get(value)


__all__ = ["Glossary", "code_columns", "gloss", "glossary_of", "value_glossary"]
