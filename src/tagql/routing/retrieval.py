"""Table documents, the text the paper's two retrieval baselines (BM25 and dense) compare a question with.

A table document is the normalised table name and column names (DBCopilot's baseline setup). BM25
(:class:`tagql.text.BM25`) reads its :func:`tagql.text.terms`: stop words removed and Snowball stems
(without both it stays well under the paper's numbers).
"""

from __future__ import annotations

from tagql.db.schema import Schema, Table
from tagql.text import split_identifier


def table_doc(schema: Schema, table: Table, *, with_db: bool = False) -> str:
    cols = []
    for c in table.columns:
        name = split_identifier(c.name)
        nice = split_identifier(c.description) if c.description and len(c.description) < 40 else ""
        cols.append(nice if nice and nice != name else name)
    head = f"{split_identifier(schema.name)}: " if with_db else ""
    return f"{head}{split_identifier(table.name)}: " + ", ".join(dict.fromkeys(cols))
