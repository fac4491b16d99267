"""Table documents and the paper's two retrieval baselines over them: BM25 and dense.

A table document is the normalised table name and column names (DBCopilot's baseline setup). BM25
uses stop-word removal and Snowball stemming (without both it stays well under the paper's numbers).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np

from tagql.db.schema import Schema, Table
from tagql.routing.text import human, tokens


def table_doc(schema: Schema, table: Table, *, with_db: bool = False) -> str:
    cols = []
    for c in table.columns:
        name = human(c.name)
        nice = human(c.description) if c.description and len(c.description) < 40 else ""
        cols.append(nice if nice and nice != name else name)
    head = f"{human(schema.name)}: " if with_db else ""
    return f"{head}{human(table.name)}: " + ", ".join(dict.fromkeys(cols))


class BM25:
    """Okapi BM25 (k1=1.2, b=0.75) over a fixed list of documents."""

    def __init__(self, docs: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        toks = [tokens(d) for d in docs]
        self.n = len(docs)
        lens = np.array([len(t) for t in toks], dtype=np.float32)
        avg = float(lens.mean()) if self.n else 1.0
        df: Counter[str] = Counter(w for t in toks for w in set(t))
        self.postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        rows: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for i, t in enumerate(toks):
            for w, tf in Counter(t).items():
                idf = math.log(1 + (self.n - df[w] + 0.5) / (df[w] + 0.5))
                rows[w].append((i, idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lens[i] / avg))))
        for w, r in rows.items():
            self.postings[w] = (np.array([i for i, _ in r]), np.array([s for _, s in r], dtype=np.float32))

    def scores(self, query: str) -> np.ndarray:
        out = np.zeros(self.n, dtype=np.float32)
        for w in tokens(query):
            p = self.postings.get(w)
            if p is not None:
                out[p[0]] += p[1]
        return out

    def scores_weighted(self, weights: dict[str, float]) -> np.ndarray:
        """BM25 of a weighted bag of (stemmed) query terms, e.g. :meth:`SoftLexicon.weights`."""
        out = np.zeros(self.n, dtype=np.float32)
        for w, x in weights.items():
            p = self.postings.get(w)
            if p is not None:
                out[p[0]] += x * p[1]
        return out
