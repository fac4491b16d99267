"""What a question is answered with besides the schema and the domain statements: the earlier turns of its
conversation (a follow-up such as "and for DC Comics?" means nothing without them) and verified examples,
question -> SQL pairs users confirmed or corrected on the same database, of which the few most similar to
the question go into the SQL prompt as few-shot pairs (Vanna's "training" loop, done with our retrieval).

Both are optional: without them the SQL prompt is byte for byte the plain one (``prompts.sql_user_prompt``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tagql.embeddings import Embedder
from tagql.text import BM25, terms


@dataclass(frozen=True)
class Turn:
    """One earlier turn of a conversation: the question, the SQL that answered it, and (optionally) the
    short answer that was given."""

    question: str
    sql: str = ""
    answer: str = ""

    @classmethod
    def of(cls, item: Any) -> Turn:
        """From a Turn, an object with ``question``/``sql``/``answer`` attributes (e.g. a
        :class:`tagql.Answer`) or a mapping with those keys."""
        if isinstance(item, Turn):
            return item
        get = item.get if isinstance(item, Mapping) else (lambda k, d="": getattr(item, k, d))
        question = str(get("question", "") or "").strip()
        if not question:
            raise ValueError("a conversation turn needs its question")
        return cls(question, str(get("sql", "") or "").strip(), str(get("answer", "") or "").strip())


@dataclass(frozen=True)
class Example:
    """A verified question -> SQL pair of one database."""

    question: str
    sql: str

    @classmethod
    def of(cls, item: Any) -> Example:
        """From an Example, a ``(question, sql)`` pair, or a mapping / object with ``question`` and ``sql``."""
        if isinstance(item, Example):
            return item
        if isinstance(item, (tuple, list)) and len(item) == 2:
            question, sql = item
        elif isinstance(item, Mapping):
            question, sql = item.get("question"), item.get("sql")
        else:
            question, sql = getattr(item, "question", None), getattr(item, "sql", None)
        if not question or not sql:
            raise ValueError("a verified example needs a question and its SQL")
        return cls(str(question).strip(), str(sql).strip())


def follow_up_text(question: str, history: Sequence[Turn]) -> str:
    """The words a follow-up is about: the earlier questions and the new one (what the question-driven
    repairs read, so a filter stated only in the first question is not taken for an invented one)."""
    return " ".join([*(t.question for t in history), question])


class ExampleIndex:
    """Verified examples of one database, searchable by question.

    BM25 over the questions' terms (stemmed, stop words dropped: :func:`tagql.text.terms`); given an
    ``embedder`` (any :class:`tagql.embeddings.Embedder`) the BM25 ranking and the embedding ranking are
    fused by reciprocal rank. An example sharing no term with the question is never chosen by BM25 alone."""

    def __init__(self, examples: Iterable[Any], *, embedder: Embedder | None = None) -> None:
        unique: dict[tuple[str, str], Example] = {}
        for item in examples:
            ex = Example.of(item)
            unique.setdefault((ex.question.lower(), ex.sql), ex)  # a pair confirmed twice counts once
        self.examples = list(unique.values())
        self.key = tuple(unique)  # what the index was built from (callers compare it to rebuild)
        self._bm25 = BM25([terms(e.question) for e in self.examples]) if self.examples else None
        self.embedder = embedder
        self._vectors: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.examples)

    def similar(self, question: str, k: int = 3) -> list[Example]:
        """Up to ``k`` examples most similar to ``question``, the most similar last (nearest the question
        in the prompt)."""
        if k <= 0 or self._bm25 is None:
            return []
        lexical = self._bm25.scores(terms(question))
        if self.embedder is None:
            order = [int(i) for i in np.argsort(-lexical, kind="stable") if lexical[i] > 0][:k]
        else:
            if self._vectors is None:
                self._vectors = self.embedder.embed([e.question for e in self.examples])
            dense = self._vectors @ self.embedder.embed([question])[0]
            fused = np.zeros(len(self.examples))
            for scores in (lexical, dense):
                ranks = np.empty(len(scores), dtype=np.int64)
                ranks[np.argsort(-scores, kind="stable")] = np.arange(len(scores))
                fused += 1.0 / (60 + ranks)
            order = [int(i) for i in np.argsort(-fused, kind="stable")][:k]
        return [self.examples[i] for i in reversed(order)]
