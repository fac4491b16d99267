"""Dynamic few-shot for plans: the solved plans whose questions are most like the asked one.

Why: the 1.5B model copies the shape of an example placed next to the question far more reliably than
one among the guide's fixed examples (session 12: "Of the 10 newest posts, list their titles from
shortest to longest" sat in the guide, and "Of the 5 heaviest superheroes, list their names from shortest
to longest" still came back without the length ordering). The bank (``data/plan_exemplars.json``) holds
plans on Spider databases only; each is validated against its database by the tests.

Similarity is lexical: TF-IDF over the question's words and word pairs, stop words kept, because the
shape of a question ("from most to least", "how many", "answer 'X' or 'Y'", "of the 5 ...") lives in
the small words a topic embedding ignores. No model is needed, so it works on every install.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from functools import cache
from importlib import resources
from itertools import pairwise
from typing import Any

from tagql.text import word_tokens


@dataclass(frozen=True)
class Exemplar:
    db: str
    question: str
    plan: dict[str, Any]

    def render(self) -> str:
        return f"Question: {self.question}\n{json.dumps(self.plan)}"


def _terms(text: str) -> list[str]:
    words = word_tokens(text.lower().replace("'s ", " "), r"[a-z]+|\d+|'")
    words = ["N" if w.isdigit() else w for w in words]
    return words + [f"{a} {b}" for a, b in pairwise(words)]


@cache
def load_exemplars() -> tuple[Exemplar, ...]:
    text = resources.files("tagql.tag").joinpath("data/plan_exemplars.json").read_text(encoding="utf-8")
    return tuple(Exemplar(e["db"], e["question"], e["plan"]) for e in json.loads(text)["exemplars"])


class ExemplarIndex:
    """TF-IDF vectors of the bank's questions; :meth:`nearest` ranks them for a new question."""

    def __init__(self, exemplars: tuple[Exemplar, ...] | None = None) -> None:
        self.exemplars = exemplars if exemplars is not None else load_exemplars()
        docs = [Counter(_terms(e.question)) for e in self.exemplars]
        df = Counter(t for d in docs for t in d)
        n = len(docs)
        self.idf = {t: math.log((1 + n) / (1 + c)) + 1.0 for t, c in df.items()}
        self.vectors = [self._vector(d) for d in docs]

    def _vector(self, counts: Counter[str]) -> dict[str, float]:
        v = {t: (1 + math.log(c)) * self.idf.get(t, 0.0) for t, c in counts.items()}
        norm = math.sqrt(sum(x * x for x in v.values())) or 1.0
        return {t: x / norm for t, x in v.items()}

    def nearest(self, question: str, k: int = 2, *, exclude_db: str | None = None) -> list[Exemplar]:
        """The ``k`` most similar exemplars, most similar first (never one on ``exclude_db``: an example
        on the asked database would hand the model an answer instead of a shape)."""
        q = self._vector(Counter(_terms(question)))
        scored = [(sum(w * vec.get(t, 0.0) for t, w in q.items()), i) for i, vec in enumerate(self.vectors)
                  if self.exemplars[i].db != exclude_db]
        scored.sort(key=lambda s: (-s[0], s[1]))
        return [self.exemplars[i] for score, i in scored[:k] if score > 0]


@cache
def exemplar_index() -> ExemplarIndex:
    """The shipped bank's index, built once per process (a few milliseconds)."""
    return ExemplarIndex()
