"""Structuring: an expert's NL statement -> "'<text>' refers to <SQL snippet>" by few-shot prompting.

Why: the paper shows structured statements retrieve and prompt better than raw NL ones; the text
part is what questions are matched against, the SQL snippet is the hint for SQL generation. The
prompt is the paper's (Table "LLM Prompt for Domain Statements translation"): the DBA role, the
schema, and ~2 exemplars per category. Constants in the text part are canonicalised exactly as
questions are (numbers/dates -> one placeholder). The snippet is validated against the schema;
an invalid one is returned with the reason so the statement stays ``proposed`` for review.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from tagql.knowledge.canon import PLACEHOLDER, canonicalise
from tagql.knowledge.statements import StatementError, Structured, parse_structured
from tagql.knowledge.validate import snippet_problem
from tagql.templates import load_templates

NOT_APPLICABLE = "NOT APPLICABLE"


@dataclass(frozen=True)
class Exemplar:
    nl: str
    structured: str


# The paper's prompt and its default exemplars (four categories, two each): prompts.toml beside this module.
_PROMPTS = load_templates("tagql.knowledge")
DEFAULT_EXEMPLARS: tuple[Exemplar, ...] = tuple(Exemplar(e["nl"], e["structured"]) for e in _PROMPTS["exemplars"])


def system_prompt(db_name: str, schema_prompt: str) -> str:
    return _PROMPTS.render("system", db=db_name, schema=schema_prompt, placeholder=PLACEHOLDER,
                           not_applicable=NOT_APPLICABLE)


def user_prompt(nl: str) -> str:
    return _PROMPTS.render("user", nl=nl)


def exemplars_from_json(text: str) -> list[Exemplar]:
    """Per-database exemplars: a JSON list of {"nl": ..., "structured": ...}."""
    try:
        data = json.loads(text)
        out = [Exemplar(str(d["nl"]), str(d["structured"])) for d in data]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise StatementError(f"exemplars must be a JSON list of {{nl, structured}} objects: {exc}") from None
    for e in out:
        parse_structured(e.structured)  # each must itself be well formed
    return out


@dataclass(frozen=True)
class StructuringResult:
    nl: str
    text: str
    sql: str
    problem: str  # "" when the snippet is valid against the schema

    @property
    def valid(self) -> bool:
        return not self.problem


def build_messages(nl: str, schema_prompt: str, db_name: str, exemplars: tuple[Exemplar, ...] | list[Exemplar]):
    """The paper's prompt, with the exemplars as chat turns (a small chat model then answers with
    one statement instead of continuing the list of examples)."""
    from tagql.llm.base import Message, system, user

    msgs = [system(system_prompt(db_name, schema_prompt))]
    for e in exemplars:
        msgs += [user(user_prompt(e.nl)), Message("assistant", e.structured)]
    return msgs + [user(user_prompt(nl))]


_NUM = re.compile(r"\d+(?:[.:/\-]\d+)*")


def canonicalise_structured(s: Structured) -> Structured:
    """Placeholder the text part's numbers/dates, and the same constants where the snippet repeats
    them (the snippet then stays a template of the text, as in the paper's data)."""
    nums = sorted(set(_NUM.findall(s.text)), key=len, reverse=True)
    sql = s.sql
    for n in nums:
        sql = re.sub(rf"(?<![\w.]){re.escape(n)}(?![\w.])", PLACEHOLDER, sql)
    return Structured(canonicalise(s.text), sql)


class Structurer:
    """Turns NL statements into structured ones with an LLM (temperature as configured, 0 by default)."""

    def __init__(self, llm, schema, exemplars: list[Exemplar] | tuple[Exemplar, ...] | None = None,
                 max_tokens: int = 160) -> None:
        self.llm, self.schema = llm, schema
        self.exemplars = tuple(exemplars or DEFAULT_EXEMPLARS)
        self.max_tokens = max_tokens
        self._schema_prompt = schema.to_prompt(samples=False, max_comment=80) if schema is not None else "(unknown)"

    def structure(self, nl: str) -> StructuringResult:
        nl = " ".join((nl or "").split())
        if not nl:
            raise StatementError("empty statement")
        msgs = build_messages(nl, self._schema_prompt, getattr(self.schema, "name", "database"), self.exemplars)
        out = self.llm.complete(msgs, max_tokens=self.max_tokens, stop=["\nDomain Statement", "\n\n"])
        return self.parse(nl, out.text)

    def parse(self, nl: str, reply: str) -> StructuringResult:
        lines = [ln.strip() for ln in (reply or "").splitlines() if ln.strip()]
        line = next((ln for ln in lines if re.search(r"\brefers\b", ln, re.IGNORECASE)), lines[0] if lines else "")
        line = re.sub(r"^(Templatized Domain Statement:|Answer:)\s*", "", line, flags=re.IGNORECASE).strip().strip("`")
        if not line or NOT_APPLICABLE.lower() in line.lower():
            return StructuringResult(nl, nl, "", "the model judged the statement not about this database")
        try:
            s = canonicalise_structured(parse_structured(line))
        except StatementError as exc:
            return StructuringResult(nl, nl, "", f"could not structure: {exc.message}")
        return StructuringResult(nl, s.text, s.sql, snippet_problem(s.sql, self.schema) or "")
