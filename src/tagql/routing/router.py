"""Routers: question -> candidate query schemas ``(database, tables, score)``, best first.

* ``bm25`` / ``dense``: the paper's baselines. Retrieve the top-100 table documents, group them by
  database, score a database by the mean (paper) or max of its retrieved tables.
* ``ours``: :class:`tagql.routing.ours.GraphRouter` -- a table scorer trained on synthetic questions
  plus graph-constrained beam search, so every candidate is a trail of the schema graph.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from tagql.routing.candidate import Candidate
from tagql.routing.errors import BadSource
from tagql.routing.ours import GraphRouter
from tagql.routing.retrieval import table_doc
from tagql.text import BM25, terms

if TYPE_CHECKING:
    from tagql.routing.collection import Collection

METHODS = ("ours", "bm25", "dense")


class Router(Protocol):
    method: str

    def route(self, question: str, k: int = 5) -> list[Candidate]: ...

    def route_many(self, questions: Sequence[str], k: int = 5) -> list[list[Candidate]]: ...


class TableIndex:
    """The flat list of (database, table) keys of a collection, with their documents."""

    def __init__(self, collection: Collection, *, with_db: bool = False) -> None:
        self.keys: list[tuple[str, str]] = []
        self.docs: list[str] = []
        for e in collection.entries.values():
            for t in e.schema.tables:
                self.keys.append((e.name, t.name))
                self.docs.append(table_doc(e.schema, t, with_db=with_db))
        self.db_of = np.array([k[0] for k in self.keys], dtype=object)


class TableRetrievalRouter:
    """The paper's retrieval baselines (``bm25`` or ``dense``) over table documents."""

    def __init__(self, collection: Collection, method: str = "bm25", *, db_agg: str = "mean",
                 top_tables: int = 100, embedder: Any = None) -> None:
        collection.require_nonempty()
        self.method = method
        self.db_agg = db_agg
        self.top_tables = top_tables
        self.index = TableIndex(collection)
        if method == "bm25":
            self._bm25 = BM25([terms(d) for d in self.index.docs])
        elif method == "dense":
            if embedder is None:
                from tagql.embeddings import EmbeddingUnavailable

                raise EmbeddingUnavailable("dense routing needs an embedder",
                                           "pass embedder= (tagql.embeddings.make_embedder)")
            self._emb = embedder
            self._doc_vecs = self._emb.embed(self.index.docs)
        else:
            raise ValueError(method)

    def table_scores(self, questions: Sequence[str]) -> np.ndarray:
        if self.method == "bm25":
            return np.stack([self._bm25.scores(terms(q)) for q in questions]) if questions else np.zeros((0, 0))
        return self._emb.embed(list(questions)) @ self._doc_vecs.T

    def route_many(self, questions: Sequence[str], k: int = 5) -> list[list[Candidate]]:
        scores = self.table_scores(questions)
        return [self._group(row, k) for row in scores]

    def route(self, question: str, k: int = 5) -> list[Candidate]:
        return self.route_many([question], k)[0]

    def _group(self, row: np.ndarray, k: int) -> list[Candidate]:
        top = np.argsort(-row, kind="stable")[: self.top_tables]
        by_db: dict[str, list[tuple[str, float]]] = defaultdict(list)
        for i in top:
            db, t = self.index.keys[i]
            by_db[db].append((t, float(row[i])))
        cands = []
        for db, ts in by_db.items():
            vals = [s for _, s in ts]
            score = max(vals) if self.db_agg == "max" else float(np.mean(vals))
            cands.append(Candidate(db, [t for t, _ in ts], score))
        cands.sort(key=lambda c: -c.score)
        return cands[:k]


def make_router(collection: Collection, method: str = "ours", **kwargs: Any) -> Router:
    """``Collection.router(method)``: ``ours`` (needs a built index), ``bm25`` or ``dense``."""
    collection.require_nonempty()
    if method in ("bm25", "dense"):
        return TableRetrievalRouter(collection, method, **kwargs)
    if method == "ours":
        return GraphRouter.load(collection, **kwargs)
    raise BadSource(f"unknown routing method '{method}'", f"use one of: {', '.join(METHODS)}")
