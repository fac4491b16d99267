"""Prompt texts for hybrid plans and the TAG-Bench-style answer formats (paper appendix B.2), from the
templates in ``prompts.toml`` beside this module (read once)."""

from __future__ import annotations

from collections.abc import Sequence

from tagql.knowledge import ScoredStatement
from tagql.tag.exemplars import Exemplar
from tagql.templates import load_templates

TEMPLATES = load_templates("tagql.tag")

PLAN_GUIDE: str = TEMPLATES["plan_guide"]


def plan_system_prompt(db_name: str, schema_text: str) -> str:
    return TEMPLATES.render("plan_system", db_name=db_name, schema_text=schema_text, guide=PLAN_GUIDE)


def knowledge_lines(statements: Sequence[ScoredStatement]) -> str:
    """The question's retrieved domain statements, one line before it ("'text' refers to sql"; empty
    without statements, so the prompt is unchanged when a database has no knowledge store)."""
    if not statements:
        return ""
    return TEMPLATES.render("knowledge_lines", statements="; ".join(s.render() for s in statements))


def similar_plans(exemplars: Sequence[Exemplar]) -> str:
    """Solved plans of questions shaped like the asked one (on other databases), right before it."""
    if not exemplars:
        return ""
    return TEMPLATES.render("similar_plans", shown="\n".join(e.render() for e in exemplars))


def plan_user_prompt(question: str, statements: Sequence[ScoredStatement] = ()) -> str:
    return TEMPLATES.render("plan_user", knowledge=knowledge_lines(statements), question=question)


def needs_lm_prompt(question: str, statements: Sequence[ScoredStatement] = ()) -> str:
    return TEMPLATES.render("needs_lm", knowledge=knowledge_lines(statements), question=question)


HYBRID_HINT: str = TEMPLATES["hybrid_hint"]


# Worked examples for criterion_prompt (none from the benchmarks): the statement is about the value
# itself, names the question's whole condition ("fruit or vegetables", not "a category in the table"),
# and leaves out what the table's rows are ("a German-speaking country", not "... performer").
CRITERION_EXAMPLES: tuple[tuple[str, str, str, str], ...] = tuple(
    (q, c, v, st) for q, c, v, st in TEMPLATES["criterion_examples"])


def criterion_prompt(question: str, column: str, table: str, examples: str) -> str:
    shots = "".join(TEMPLATES.render("criterion_shot", question=q, column=c, values=v, statement=st)
                    for q, c, v, st in CRITERION_EXAMPLES)
    return TEMPLATES.render("criterion", shots=shots, question=question, table=table, column=column,
                            examples=examples)


def fact_column_prompt(question: str, statement: str, column: str, options: list[str]) -> str:
    return TEMPLATES.render("fact_column", question=question, statement=statement, column=column,
                            options="\n".join(options))


def plan_repair_prompt(error: str) -> str:
    return TEMPLATES.render("plan_repair", error=error)


def plan_note_prompt(prompt: str, hint: str) -> str:
    """The first plan prompt again with what went wrong (``hint`` completes "a plan that ...")."""
    return TEMPLATES.render("plan_note", prompt=prompt, hint=hint)


def plan_retry_note_prompt(prompt: str, error: str) -> str:
    """The first plan prompt again with the error of a plan the model repeated word for word."""
    return TEMPLATES.render("plan_retry_note", prompt=prompt, error=error)


LIST_ANSWER: str = TEMPLATES["list_answer"]
CHOICE_ANSWER: str = TEMPLATES["choice_answer"]
AGG_ANSWER: str = TEMPLATES["agg_answer"]


def answer_prompt(data: str, question: str) -> str:
    return TEMPLATES.render("answer", data=data, question=question)
