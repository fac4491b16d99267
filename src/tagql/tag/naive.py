"""The naive baseline of the operator benchmarks: one unconstrained LM call per row, the whole prompt in
one user message - no dedupe, cache, grammar, shared system prefix or batching (what
:mod:`tagql.tag.operators` improves on). Used by ``bench/tag_operator_efficiency.py`` and
``bench/tag_operator_lotus.py``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tagql.llm.base import LLM, user
from tagql.tag.operators import Progress, fill, resolve_columns


def _prompts(columns: Sequence[str], rows: Sequence[Sequence[Any]], instruction: str) -> list[tuple[str, str]]:
    """(the row as ``col = value, ...``, the instruction filled from the row) per row."""
    cols = resolve_columns(instruction, columns, op="naive")
    return [(", ".join(f"{c} = {v}" for c, v in zip(columns, r)), fill(instruction, {n: r[i] for n, i in cols.items()}))
            for r in rows]


def naive_filter(
    llm: LLM, columns: Sequence[str], rows: Sequence[Sequence[Any]], instruction: str, *,
    progress: Progress | None = None,
) -> list[bool]:
    """Per row: is the filled-in condition true (a reply starting with "yes")?"""
    out: list[bool] = []
    for n, (row, cond) in enumerate(_prompts(columns, rows, instruction), 1):
        prompt = f"Row: {row}\nCondition: {cond}\nIs the condition true for this row? Answer yes or no."
        out.append(llm.complete([user(prompt)], max_tokens=8).text.strip().lower().startswith("yes"))
        if progress is not None:
            progress("naive filter", n, len(rows))
    return out


def naive_scores(
    llm: LLM, columns: Sequence[str], rows: Sequence[Sequence[Any]], instruction: str, *,
    progress: Progress | None = None,
) -> list[int]:
    """Per row: a 0-10 score for the filled-in criterion (the first number of the reply; 0 without one)."""
    out: list[int] = []
    for n, (row, crit) in enumerate(_prompts(columns, rows, instruction), 1):
        prompt = (f"Row: {row}\nCriterion: {crit}\n"
                  "Rate from 0 to 10 how well the row satisfies the criterion. Answer with a number.")
        m = re.search(r"\d+", llm.complete([user(prompt)], max_tokens=4).text)
        out.append(min(10, int(m.group())) if m else 0)
        if progress is not None:
            progress("naive topk", n, len(rows))
    return out


def naive_topk(
    llm: LLM, columns: Sequence[str], rows: Sequence[Sequence[Any]], instruction: str, k: int, *,
    progress: Progress | None = None,
) -> list[int]:
    """Indices of the ``k`` best rows by :func:`naive_scores` (a stable sort: ties keep row order)."""
    scores = naive_scores(llm, columns, rows, instruction, progress=progress)
    return sorted(range(len(rows)), key=lambda i: -scores[i])[:k]
