"""SQL generation on routed schemas (DBCopilot 3.6): best-schema, multiple-schema and
multiple-schema chain-of-thought prompting. Each builder returns chat messages for any
:class:`tagql.llm.base.LLM`; :func:`parse_routed_sql` reads back which database the SQL is for.

    msgs = best_schema_messages(question, coll, cands[0])
    db, sql = parse_routed_sql(llm.complete(msgs, max_tokens=384).text, cands)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tagql.llm.base import Message, system, user
from tagql.routing.candidate import Candidate
from tagql.templates import load_templates

if TYPE_CHECKING:
    from tagql.routing.collection import Collection

_PROMPTS = load_templates("tagql.routing")  # prompts.toml beside this module


def schema_block(collection: Collection, cand: Candidate, *, samples: bool = True) -> str:
    s = collection.schema(cand.database, cand.tables)
    return f"-- database: {cand.database}\n" + s.to_prompt(samples=samples)


def best_schema_messages(question: str, collection: Collection, cand: Candidate) -> list[Message]:
    """The basic prompt (paper Figure 5) on the router's top schema."""
    return [system(_PROMPTS["system"]),
            user(_PROMPTS.render("best_schema", schema=schema_block(collection, cand), question=question))]


def multi_schema_messages(question: str, collection: Collection, cands: Sequence[Candidate], n: int = 3
                          ) -> list[Message]:
    """Several candidate schemas concatenated; the SQL must use one database, named on the first line."""
    blocks = "\n\n".join(schema_block(collection, c, samples=False) for c in cands[:n])
    return [system(_PROMPTS["system"]),
            user(_PROMPTS.render("multi_schema", schemas=blocks, n=min(n, len(cands)), question=question))]


def multi_schema_cot_messages(question: str, collection: Collection, cands: Sequence[Candidate], n: int = 3
                              ) -> list[Message]:
    """Paper Figure 6: first pick the most relevant candidate schema, then write the SQL."""
    blocks = "\n\n".join(f"# Schema {i}\n{schema_block(collection, c, samples=False)}"
                         for i, c in enumerate(cands[:n], 1))
    return [system(_PROMPTS["cot_system"]),
            user(_PROMPTS.render("multi_schema_cot", schemas=blocks, question=question))]


def parse_routed_sql(text: str, cands: Sequence[Candidate]) -> tuple[str | None, str]:
    """(database, sql) from any of the three prompt styles' replies; database None if not stated."""
    db = None
    m = re.search(r"Schema:\s*#?\s*(\d+)", text)
    if m and 1 <= int(m.group(1)) <= len(cands):
        db = cands[int(m.group(1)) - 1].database
    m = re.search(r"database:\s*([A-Za-z0-9_.-]+)", text)
    if db is None and m:
        names = {c.database.lower(): c.database for c in cands}
        db = names.get(m.group(1).lower())
    body = text.split("SQL:", 1)[1] if "SQL:" in text else text
    body = re.sub(r"```(?:sql)?", "", body)
    body = "\n".join(line for line in body.splitlines() if not line.strip().startswith("--")).strip()
    if body and not re.match(r"(?is)^\s*(select|with)\b", body):
        body = "SELECT " + body  # the best-schema prompt ends with "SELECT"
    return db, body.rstrip(";").strip()
