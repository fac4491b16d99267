"""Domain knowledge: expert statements, structured as "'<text>' refers to <SQL snippet>", retrieved
per question and put into the SQL prompt (see the domain-knowledge paper).

The pipeline depends only on :class:`Retriever`; stores, structuring and retrieval methods live in
this package's modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class ScoredStatement:
    """A structured domain statement chosen for a question."""

    text: str  # the natural-language part, e.g. "non-carcinogenic molecules"
    sql: str  # the SQL snippet it refers to, e.g. "molecule.label = '-'"
    score: float = 0.0

    def render(self) -> str:
        """The paper's prompt format."""
        return f"'{self.text}' refers to {self.sql}" if self.sql else self.text


@runtime_checkable
class Retriever(Protocol):
    def retrieve(self, question: str, k: int | None = None) -> list[ScoredStatement]: ...


class StaticStatements:
    """Fixed statements for every question (BIRD's per-question evidence, or a small hand list)."""

    def __init__(self, statements: list[ScoredStatement]) -> None:
        self.statements = statements

    def retrieve(self, question: str, k: int | None = None) -> list[ScoredStatement]:
        return self.statements[:k] if k else list(self.statements)


__all__ = ["Retriever", "ScoredStatement", "StaticStatements"]
