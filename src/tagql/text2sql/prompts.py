"""Prompt texts of text-to-SQL, from the templates in ``prompts.toml`` beside this module (read once).

The schema goes first and is identical for SQL and answer generation, so llama.cpp reuses its processed
prefix across both calls and across questions on one database."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from tagql.knowledge import ScoredStatement
from tagql.templates import load_templates
from tagql.text2sql.context import Example, Turn
from tagql.text2sql.values import ValueMatch, render_values

TEMPLATES = load_templates("tagql.text2sql")

DIALECT_NAMES = {
    "sqlite": "SQLite", "postgres": "PostgreSQL", "mysql": "MySQL", "tsql": "SQL Server", "oracle": "Oracle",
    "duckdb": "DuckDB", "snowflake": "Snowflake", "bigquery": "BigQuery",
}


def dialect_name(dialect: str) -> str:
    return DIALECT_NAMES.get(dialect, dialect)


def system_prompt(db_name: str, schema_text: str, dialect: str = "sqlite") -> str:
    """The domain-knowledge paper's SQL-generation prompt (DBA persona + schema + instruction).

    The paper puts the instruction after the question; here it ends the system message, which
    llama.cpp keeps evaluated per database, so its ~35 tokens are not re-read for every question."""
    return TEMPLATES.render("sql_system", db_name=db_name, schema_text=schema_text, dialect=dialect_name(dialect))


StatementStyle = Literal["external", "paper"]


def sql_user_prompt(
    question: str, statements: list[ScoredStatement], *, style: StatementStyle = "external", dialect: str = "sqlite",
    examples: Sequence[Example] = (), history: Sequence[Turn] = (), values: Sequence[ValueMatch] = (),
    note: str = "",
) -> str:
    """The question, preceded by its domain statements (each rendered "'text' refers to sql").

    ``external`` (default) frames the statements as BIRD's "External Knowledge" comment lines, the
    layout Qwen2.5-Coder answers best with: on 90 BIRD IN questions it lifted execution accuracy with
    retrieved statements from 48.9 to 56.7 % and with the gold statements from 55.6 to 60.0 %
    (docs/benchmarks.md). ``paper`` is the domain-knowledge paper's wording. Without statements both
    are the same prompt.

    ``examples`` (verified question -> SQL pairs, most similar last) come first as few-shot pairs;
    ``history`` (the conversation's earlier turns, oldest first) comes right before the question with
    the instruction to resolve a follow-up against the last SQL. ``values`` (stored values the question
    names, :func:`tagql.text2sql.values.match_values`) come right before the question as one line of
    ``table.column = 'value'``; ``note`` (the error of a query the model repeated word for word) comes right
    before the question too. Without any of them, the prompt is the plain one, byte for byte (its cached
    prefix and every measured figure stay valid)."""
    parts = []
    if examples:
        parts.append(TEMPLATES["examples_header"])
        parts.extend(TEMPLATES.render("example", question=e.question, sql=_one_line(e.sql)) for e in examples)
        parts.append("")
    if history:
        parts.append(TEMPLATES["history_header"])
        for turn in history:
            parts.append(TEMPLATES.render("history_turn", question=turn.question, sql=_one_line(turn.sql) or "-"))
            if turn.answer:
                parts.append(TEMPLATES.render("history_answer", answer=_one_line(turn.answer)[:300]))
        parts.append(TEMPLATES["follow_up_instruction"])
    if statements and style == "external":
        parts.append(TEMPLATES.render("external_knowledge", statements="; ".join(s.render() for s in statements)))
        parts.append(TEMPLATES.render("external_instruction", dialect=dialect_name(dialect)))
    if values:
        parts.append(TEMPLATES.render("value_hints", values=render_values(values)))
    if note:
        parts.append(TEMPLATES.render("retry_note", error=_one_line(note)))
    parts.append(TEMPLATES.render("question", question=question))
    if statements and style == "paper":
        listed = "\n".join(f"- {s.render()}" for s in statements)
        parts.append(TEMPLATES.render("paper_statements", statements=listed))
    parts.append(TEMPLATES["sql_cue"])
    return "\n".join(parts)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def repair_prompt(error: str, dialect: str) -> str:
    return TEMPLATES.render("repair", error=error, dialect=dialect_name(dialect))


# The fixed instructions live in the system message: it is the cached prefix, so each answer call
# only processes its own SQL, rows and question.
ANSWER_SYSTEM: str = TEMPLATES["answer_system"]


def answer_user_prompt(question: str, data: str) -> str:
    """The TAG paper's answer-generation prompt (appendix B.2): data points, then the question.

    Like the paper, no SQL: the data points name their columns, and the ~40 SQL tokens cost about
    0.3 s of prompt processing per question on 2 cores."""
    return TEMPLATES.render("answer_user", data=data, question=question)


def answerable_prompt(question: str, variant: str = "answerable") -> str:
    """Honest abstention's yes/no (``text2sql/abstain.py``): can the tables in the system message answer it?
    ``variant`` "answerable_missing" asks the other way round (yes = something is missing)."""
    if variant not in ("answerable", "answerable_missing"):
        raise ValueError(f"unknown answerable prompt {variant!r}")
    return TEMPLATES.render(variant, question=question)
