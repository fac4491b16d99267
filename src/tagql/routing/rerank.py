"""A second-stage database re-ranker: gradient-boosted trees over the router's evidence for its top databases.

The logistic database scorer of :class:`tagql.routing.ours.GraphRouter` is fitted on synthetic questions,
whose words are the schema's own. Real questions -- Spider-Syn's above all -- name tables and columns by
synonyms, and how far to trust a soft match, a value hit or a neighbour vote then depends on the other
evidence and on how the candidates compare. The re-ranker learns that from **real questions of Spider's
train split** (each plain question and its Spider-Syn version, routed against the 166 Spider databases
with the synonyms mined from the *other* half of the train databases, so no question sees its own
substitutions), and again among 1,000 databases, 823 of them distractors recombined from the other half's
databases: trees fitted on real, whole databases alone promoted distractor fragments in large
collections (Spider dev at 1,000 databases: R@1 84.25 first stage, 77.50 re-ranked, 87.50 refitted).
And a third time among 10,000 (1,500 questions per half, a database holding copies of the gold tables
counting as right): fitted at 1,000 at most, the trees added nothing there (Spider dev 71.50; 78.00 refitted).
``bench/routing/rerank.py --distractors 1000 --collection-rows DIR`` fits it and writes
``data/db_reranker.json``. Its features are
database-agnostic (scores, their gaps to the best candidate, ranks), so the shipped trees apply to any
collection. It re-orders the router's ``TOP`` best databases; the others keep their order below them.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

TOP = 16  # databases re-ranked per question (the gold one is within them for ~97% of Spider-Syn dev)
MODEL_PATH = Path(__file__).parent / "data" / "db_reranker.json"
# per-candidate evidence, each also as its difference from the best candidate's value
EVIDENCE = ("max_logit", "lse_logit", "knn_db", "bm25_db", "dense_db", "cover_db", "value_db",
            "t_bm25", "t_dense", "t_knn", "t_value", "t_cover",
            "soft_mean", "soft_min", "soft_missing")
CONTEXT = ("db_logit", "gap_to_best", "gap_to_other", "rank", "near", "near_gap")
FEATURES = EVIDENCE + tuple(f"{e}_gap" for e in EVIDENCE) + CONTEXT
SOFT_MISSING = 0.5  # a question word whose best match in a database is below this is unexplained there


def soft_coverage(word_vecs: np.ndarray, schema_vecs: np.ndarray, order: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """(databases, 3): how well each database's schema words explain the question's content words --
    the mean and the minimum over words of the best cosine similarity, and how many words stay below
    :data:`SOFT_MISSING`. ``order``/``starts`` list each database's schema-word rows, databases in order."""
    out = np.zeros((len(starts), 3), dtype=np.float32)
    if not len(word_vecs) or not len(order):
        return out
    best = np.clip(np.maximum.reduceat((word_vecs @ schema_vecs.T)[:, order], starts, axis=1), 0.0, 1.0)
    out[:, 0] = best.mean(axis=0)
    out[:, 1] = best.min(axis=0)
    out[:, 2] = (best < SOFT_MISSING).sum(axis=0)
    return out


def candidate_features(dlg: np.ndarray, db_feats: np.ndarray, table_feats: np.ndarray, soft: np.ndarray,
                       near: np.ndarray, top: int = TOP) -> tuple[np.ndarray, np.ndarray]:
    """(the ``top`` databases by the first-stage logit ``dlg``, their (top, FEATURES) matrix) for one question.

    ``db_feats`` (databases, 7): the first-stage database features without the bias; ``table_feats``
    (databases, 5): the table features of each database's best table; ``soft`` (databases, 3):
    :func:`soft_coverage`; ``near`` (databases,): the nearest synthetic question's cosine."""
    cand = np.argsort(-dlg, kind="stable")[:top]
    ev = np.concatenate([db_feats[cand], table_feats[cand], soft[cand]], axis=1)
    gaps = ev - ev.max(axis=0, keepdims=True)
    d = dlg[cand]
    other = np.where(np.arange(len(cand)) == 0, d[1] if len(cand) > 1 else d[0], d[0])
    ctx = np.stack([d, d - d[0], d - other, np.arange(len(cand)), near[cand], near[cand] - near[cand].max()], axis=1)
    return cand, np.concatenate([ev, gaps, ctx], axis=1).astype(np.float32)


class TreeEnsemble:
    """Additive binary trees (a fitted ``HistGradientBoostingClassifier``, exported to JSON) scored in numpy."""

    def __init__(self, spec: dict[str, Any]) -> None:
        if tuple(spec["features"]) != FEATURES:
            raise ValueError("the re-ranker file was fitted on other features; refit it: python -m bench.routing.rerank")
        self.baseline = float(spec["baseline"])
        trees = spec["trees"]
        self.n_trees = len(trees)
        self.meta = {k: v for k, v in spec.items() if k not in ("trees", "features", "baseline")}
        # every tree's nodes in one (trees, most nodes) array per field, padded with leaves worth 0, so
        # that all trees descend together: one numpy step per level instead of per level and tree
        # (200 trees: 24 -> ~1 ms per question routed)
        width = max((len(t["leaf"]) for t in trees), default=1)

        def packed(key: str, fill: Any, dtype: Any) -> np.ndarray:
            out = np.full((len(trees), width), fill, dtype=dtype)
            for i, t in enumerate(trees):
                out[i, : len(t[key])] = t[key]
            return out

        self._feature = packed("feature", 0, np.int64)
        self._threshold = packed("threshold", 0.0, np.float64)
        self._left = packed("left", 0, np.int64)
        self._right = packed("right", 0, np.int64)
        self._leaf = packed("leaf", True, bool)
        self._value = packed("value", 0.0, np.float64)

    def decision(self, x: np.ndarray) -> np.ndarray:
        """Log-odds that each row's database is the question's."""
        x = np.asarray(x)
        tree = np.arange(self.n_trees)[:, None]
        rows = np.arange(len(x))[None, :]
        node = np.zeros((self.n_trees, len(x)), dtype=np.int64)
        while True:
            leaf = self._leaf[tree, node]
            if leaf.all():
                break
            go_left = x[rows, self._feature[tree, node]] <= self._threshold[tree, node]
            node = np.where(leaf, node, np.where(go_left, self._left[tree, node], self._right[tree, node]))
        return self.baseline + self._value[tree, node].sum(axis=0)

    @classmethod
    def from_sklearn(cls, model: Any, meta: dict[str, Any] | None = None) -> dict[str, Any]:
        """The JSON spec of a fitted binary ``HistGradientBoostingClassifier`` (numeric features, no NaN)."""
        trees = []
        for (pred,) in model._predictors:
            n = pred.nodes
            trees.append({"feature": n["feature_idx"].tolist(), "threshold": n["num_threshold"].tolist(),
                          "left": n["left"].tolist(), "right": n["right"].tolist(),
                          "leaf": n["is_leaf"].astype(bool).tolist(), "value": n["value"].tolist()})
        return {"features": list(FEATURES), "baseline": float(np.ravel(model._baseline_prediction)[0]),
                "trees": trees, **(meta or {})}


@lru_cache(maxsize=4)
def load_reranker(path: str = str(MODEL_PATH)) -> TreeEnsemble | None:
    """The shipped re-ranker, or None (routing without it, with a warning) when the file is absent or
    was fitted on other features."""
    p = Path(path)
    if not p.exists():
        warnings.warn(f"no database re-ranker at {p}: routing with the first stage only", stacklevel=2)
        return None
    try:
        return TreeEnsemble(json.loads(p.read_text()))
    except (ValueError, KeyError) as e:
        warnings.warn(f"database re-ranker unusable ({e}): routing with the first stage only", stacklevel=2)
        return None


def schema_word_rows(words: Sequence[str], db_words: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray]:
    """(order, starts) for :func:`soft_coverage`: the rows in ``words`` of each database's schema words."""
    index = {w: i for i, w in enumerate(words)}
    order: list[int] = []
    starts: list[int] = []
    for ws in db_words:
        starts.append(len(order))
        ids = sorted({index[w] for w in ws if w in index})
        order += ids or [0]  # reduceat needs a non-empty segment; a database without words matches nothing well
    return np.array(order, dtype=np.int64), np.array(starts, dtype=np.int64)
