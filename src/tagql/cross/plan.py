"""Decompose a question over a collection: which databases it needs (one or two of the routed
candidates) and, per database, the part of the question that database can answer.

The LLM sees the question and each candidate's schema in one line per table, and replies with JSON
constrained to the candidates' names::

    {"key": "country",
     "parts": [{"database": "formula_1", "question": "List the id and nationality of every driver"},
               {"database": "world_1", "question": "List the names of countries whose official language is Spanish"}]}

``key`` names the entity the parts share (what their results are joined on).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tagql.db.schema import Schema
from tagql.errors import TagqlError
from tagql.llm.base import LLM, Message, system, user

PLAN_SYSTEM = """\
You split a question over several databases into one sub-question per database it needs.
A database can only answer about its own tables. When the question needs facts from two databases, \
name the entity both share (a country, a city, a person...) as "key", and write for each database \
a sub-question that lists that entity together with what the question needs from that database \
(its names or ids, and the values to count, filter or compare). Keep the conditions of a database \
in its own sub-question. Write sub-questions in plain words, as a person would ask them, not with \
column names. When one database answers everything, return one part with the question itself.
Reply with JSON only: {"key": "...", "parts": [{"database": "...", "question": "..."}]}"""

PLAN_EXAMPLE_USER = """\
Databases:
- shop: customer(id, name, city, joined); orders(id, customer_id, amount, day)
- geo: city(name, country, population, area); country(name, continent)
- zoo: animal(id, species, age)

Question: How many customers live in cities with more than 1 million inhabitants?"""

PLAN_EXAMPLE_REPLY = json.dumps({
    "key": "city",
    "parts": [{"database": "shop", "question": "List the id and city of every customer"},
              {"database": "geo", "question": "List the names of cities with a population above 1000000"}],
})


class CrossPlanError(TagqlError):
    """The model's decomposition could not be used."""

    hint = "rephrase the question naming what each database holds, or ask each database separately"


@dataclass
class Part:
    """One database's share of a question."""

    database: str
    question: str

    def to_dict(self) -> dict[str, Any]:
        return {"database": self.database, "question": self.question}


@dataclass
class CrossPlan:
    """The databases a question needs, each with its sub-question, and the entity they share."""

    parts: list[Part]
    key: str = ""
    raw: str = field(default="", repr=False)

    @property
    def databases(self) -> list[str]:
        return [p.database for p in self.parts]

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "parts": [p.to_dict() for p in self.parts]}


def schema_line(name: str, schema: Schema, max_columns: int = 12) -> str:
    """``name: table(col, col, ...); table(...)`` -- the compact schema the plan prompt shows."""
    tables = []
    for t in schema.tables:
        cols = [c.name for c in t.columns]
        more = f", ... {len(cols) - max_columns} more" if len(cols) > max_columns else ""
        tables.append(f"{t.name}({', '.join(cols[:max_columns])}{more})")
    return f"- {name}: " + "; ".join(tables)


def plan_schema(names: Sequence[str], max_parts: int = 2) -> dict[str, Any]:
    """The JSON schema of a plan: 1..``max_parts`` parts, each on one of ``names``."""
    return {
        "type": "object",
        "properties": {
            "key": {"type": "string"},
            "parts": {
                "type": "array", "minItems": 1, "maxItems": max_parts,
                "items": {"type": "object",
                          "properties": {"database": {"enum": list(names)}, "question": {"type": "string"}},
                          "required": ["database", "question"]},
            },
        },
        "required": ["key", "parts"],
    }


def plan_messages(question: str, schemas: Sequence[tuple[str, Schema]]) -> list[Any]:
    listed = "\n".join(schema_line(n, s) for n, s in schemas)
    return [system(PLAN_SYSTEM), user(PLAN_EXAMPLE_USER), _assistant(PLAN_EXAMPLE_REPLY),
            user(f"Databases:\n{listed}\n\nQuestion: {question}")]


def _assistant(text: str) -> Message:
    return Message("assistant", text)


def parse_plan(text: str, names: Sequence[str], question: str) -> CrossPlan:
    """The plan in the model's reply. Parts on databases that are not candidates are an error; two parts
    on one database merge into one; a part without a sub-question asks the question itself."""
    try:
        data = json.loads(_json_block(text))
    except ValueError:
        raise CrossPlanError(f"the model's plan is not JSON: {text[:80]!r}") from None
    if not isinstance(data, dict) or not isinstance(data.get("parts"), list) or not data["parts"]:
        raise CrossPlanError(f"the model's plan names no database: {text[:80]!r}")
    parts: list[Part] = []
    for item in data["parts"]:
        if not isinstance(item, dict):
            raise CrossPlanError(f"a part of the model's plan is not an object: {item!r}"[:120])
        db = str(item.get("database", "")).strip()
        if db not in names:
            raise CrossPlanError(f"the plan names database '{db}', which is not among the routed ones "
                                 f"({', '.join(names)})")
        sub = str(item.get("question", "")).strip() or question
        if any(p.database == db for p in parts):
            continue  # one query per database
        parts.append(Part(db, sub))
    if len(parts) == 1:
        parts[0].question = question  # one database answers it all: ask it as asked
    return CrossPlan(parts, str(data.get("key", "") or "").strip(), raw=text)


def _json_block(text: str) -> str:
    text = text.strip()
    if text.startswith("```"):
        text = text.strip("`")
        text = text[text.find("{"):]
    start, end = text.find("{"), text.rfind("}")
    return text[start:end + 1] if start >= 0 and end > start else text


def plan_question(question: str, schemas: Sequence[tuple[str, Schema]], llm: LLM, *, max_parts: int = 2,
                  max_tokens: int = 200) -> CrossPlan:
    """Ask ``llm`` which of the candidate databases (``(name, schema)``, best routed first) the question
    needs, and the sub-question for each."""
    if not schemas:
        raise CrossPlanError("no candidate database to plan over")
    names = [n for n, _ in schemas]
    reply = llm.complete(plan_messages(question, schemas), max_tokens=max_tokens,
                         json_schema=plan_schema(names, max_parts))
    return parse_plan(reply.text, names, question)
