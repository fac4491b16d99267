"""Okapi BM25 over token lists (the one implementation knowledge retrieval and routing share).

The index keeps, per term, the documents that contain it and their precomputed term weights
``idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avglen))`` with
``idf = log(1 + (N - df + 0.5) / (df + 0.5))`` (never negative); a query costs one gather per distinct
query term and one bincount, so it does not loop over documents; the index is built vectorised too.
``bench/text/bm25.py`` measures it beside the ``bm25s`` package (the same scores up to the constant
factor k1 + 1; ours builds and queries faster on our corpora, and only ours scores a weighted bag of
terms), so ours stays.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import numpy as np


class BM25:
    """Okapi BM25 (default k1 = 1.2, b = 0.75) over a fixed list of tokenised documents."""

    def __init__(self, docs: Sequence[Sequence[str]], k1: float = 1.2, b: float = 0.75) -> None:
        self.n = n = len(docs)
        self.k1, self.b = k1, b
        vocab: dict[str, int] = {}
        terms: list[int] = []  # one entry per (document, distinct term): term id, document, count
        owners: list[int] = []
        counts: list[int] = []
        for i, d in enumerate(docs):
            for w, c in Counter(d).items():
                terms.append(vocab.setdefault(w, len(vocab)))
                owners.append(i)
                counts.append(c)
        dl = np.array([len(d) for d in docs], dtype=np.float32)
        avg = float(dl.mean()) if n and dl.mean() > 0 else 1.0
        norm = k1 * (1 - b + b * dl / avg)
        term = np.array(terms, dtype=np.int64)
        ix = np.array(owners, dtype=np.int64)
        tf = np.array(counts, dtype=np.float32)
        df = np.bincount(term, minlength=len(vocab)).astype(np.float64)
        idf = np.log((n - df + 0.5) / (df + 0.5) + 1.0).astype(np.float32)
        weight = (idf[term] * tf * np.float32(k1 + 1) / (tf + norm[ix])).astype(np.float32)
        # postings grouped by term (a stable sort keeps each term's documents in order)
        order = np.argsort(term, kind="stable")
        bounds = np.cumsum(np.bincount(term, minlength=len(vocab)))
        ix, weight = ix[order], weight[order]
        self.postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        start = 0
        for w, j in vocab.items():
            end = int(bounds[j])
            self.postings[w] = (ix[start:end], weight[start:end])
            start = end

    def __len__(self) -> int:
        return self.n

    def __contains__(self, term: str) -> bool:
        return term in self.postings

    def scores(self, query: Iterable[str]) -> np.ndarray:
        """BM25 of the query terms for every document (a term that occurs twice counts twice)."""
        return self.scores_weighted(Counter(query))

    def scores_weighted(self, weights: Mapping[str, float]) -> np.ndarray:
        """BM25 of a weighted bag of terms (term -> weight), e.g. exact words 1 and soft matches their
        similarity (:meth:`tagql.routing.lexicon.SoftLexicon.weights`)."""
        hits = [(self.postings[w], x) for w, x in weights.items() if w in self.postings]
        if not hits:
            return np.zeros(self.n, dtype=np.float32)
        ix = np.concatenate([p[0] for p, _ in hits])
        wt = np.concatenate([p[1] * np.float32(x) for p, x in hits])
        return np.bincount(ix, weights=wt, minlength=self.n).astype(np.float32)
