"""The naive baseline of the operator benchmarks: one unconstrained LM call per row, the whole prompt in
one user message - no dedupe, cache, grammar, shared system prefix or batching (what
:mod:`tagql.tag.operators` improves on). Used by ``bench/tag/operator_efficiency.py`` and
``bench/tag/operator_lotus.py``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tagql.llm.base import LLM, user
from tagql.tag.operators import Progress, fill, resolve_columns


def _ask_each_row(
    llm: LLM, columns: Sequence[str], rows: Sequence[Sequence[Any]], instruction: str, label: str, ask: str, *,
    max_tokens: int, op: str, progress: Progress | None,
) -> list[str]:
    """One call per row, the reply text per row. The prompt: ``Row: col = value, ...``, then
    ``{label}: <the instruction filled from the row>``, then ``ask``."""
    cols = resolve_columns(instruction, columns, op="naive")
    replies: list[str] = []
    for n, r in enumerate(rows, 1):
        row = ", ".join(f"{c} = {v}" for c, v in zip(columns, r))
        filled = fill(instruction, {name: r[i] for name, i in cols.items()})
        replies.append(llm.complete([user(f"Row: {row}\n{label}: {filled}\n{ask}")], max_tokens=max_tokens).text)
        if progress is not None:
            progress(op, n, len(rows))
    return replies


def naive_filter(
    llm: LLM, columns: Sequence[str], rows: Sequence[Sequence[Any]], instruction: str, *,
    progress: Progress | None = None,
) -> list[bool]:
    """Per row: is the filled-in condition true (a reply starting with "yes")?"""
    replies = _ask_each_row(llm, columns, rows, instruction,
                            "Condition", "Is the condition true for this row? Answer yes or no.",
                            max_tokens=8, op="naive filter", progress=progress)
    return [t.strip().lower().startswith("yes") for t in replies]


def naive_scores(
    llm: LLM, columns: Sequence[str], rows: Sequence[Sequence[Any]], instruction: str, *,
    progress: Progress | None = None,
) -> list[int]:
    """Per row: a 0-10 score for the filled-in criterion (the first number of the reply; 0 without one)."""
    replies = _ask_each_row(llm, columns, rows, instruction,
                            "Criterion", "Rate from 0 to 10 how well the row satisfies the criterion. Answer with a number.",
                            max_tokens=4, op="naive topk", progress=progress)
    return [min(10, int(m.group())) if (m := re.search(r"\d+", t)) else 0 for t in replies]


def naive_topk(
    llm: LLM, columns: Sequence[str], rows: Sequence[Sequence[Any]], instruction: str, k: int, *,
    progress: Progress | None = None,
) -> list[int]:
    """Indices of the ``k`` best rows by :func:`naive_scores` (a stable sort: ties keep row order)."""
    scores = naive_scores(llm, columns, rows, instruction, progress=progress)
    return sorted(range(len(rows)), key=lambda i: -scores[i])[:k]
