"""The database re-ranker: exported trees, its features, and the router that uses it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tagql.routing.rerank import (
    CONTEXT,
    EVIDENCE,
    FEATURES,
    MODEL_PATH,
    TreeEnsemble,
    candidate_features,
    load_reranker,
    schema_word_rows,
    soft_coverage,
)

from .conftest import DBS


@pytest.fixture(scope="module")
def dev(spider_dir: Path) -> list[dict]:
    return [e for e in json.loads((spider_dir / "dev.json").read_text()) if e["db_id"] in DBS][::4]


def test_exported_trees_reproduce_sklearn_scores() -> None:
    from sklearn.ensemble import HistGradientBoostingClassifier

    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, len(FEATURES))).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 3] * x[:, 5] > 0).astype(int)
    model = HistGradientBoostingClassifier(max_iter=30, max_leaf_nodes=7, random_state=0, early_stopping=False).fit(x, y)
    spec = json.loads(json.dumps(TreeEnsemble.from_sklearn(model, {"note": "test"})))  # through JSON, as shipped
    trees = TreeEnsemble(spec)
    assert trees.meta == {"note": "test"}
    np.testing.assert_allclose(trees.decision(x), model.decision_function(x), atol=1e-6)
    np.testing.assert_allclose(trees.decision(x[:16]), model.decision_function(x[:16]), atol=1e-6)  # one question
    assert trees.decision(x[:0]).shape == (0,)


def test_a_model_fitted_on_other_features_is_refused() -> None:
    with pytest.raises(ValueError, match="refit"):
        TreeEnsemble({"features": ["a", "b"], "baseline": 0.0, "trees": []})


def test_shipped_model_loads_and_scores_finite() -> None:
    model = load_reranker()
    assert model is not None, f"{MODEL_PATH} is missing: python -m bench.routing.rerank --write-model"
    assert model.n_trees > 10
    x = np.zeros((3, len(FEATURES)), dtype=np.float32)
    assert np.isfinite(model.decision(x)).all()


def test_soft_coverage_counts_explained_and_unexplained_words() -> None:
    # schema words: 0 "singer" (db 0), 1 "stadium" (db 0 and db 1), 2 "flight" (db 1)
    schema = np.eye(3, 4, dtype=np.float32)
    order, starts = schema_word_rows(["singer", "stadium", "flight"], [["singer", "stadium"], ["stadium", "flight"]])
    assert order.tolist() == [0, 1, 1, 2] and starts.tolist() == [0, 2]
    words = np.array([[1, 0, 0, 0], [0.3, 0.9, 0, 0.1]], dtype=np.float32)  # "vocalist" ~ singer, "arena" ~ stadium
    cov = soft_coverage(words, schema, order, starts)
    np.testing.assert_allclose(cov[0], [0.95, 0.9, 0])  # both words explained by db 0
    np.testing.assert_allclose(cov[1], [0.45, 0.0, 1])  # db 1 explains "arena" only
    assert soft_coverage(np.zeros((0, 4), np.float32), schema, order, starts).sum() == 0


def test_candidate_features_rank_the_first_stage_and_measure_gaps() -> None:
    nd = 20
    rng = np.random.default_rng(1)
    dlg = rng.normal(size=nd)
    db = rng.normal(size=(nd, 7))
    tab = rng.normal(size=(nd, 5))
    soft = rng.random(size=(nd, 3))
    near = rng.random(size=nd)
    cand, x = candidate_features(dlg, db, tab, soft, near, top=5)
    assert cand.tolist() == np.argsort(-dlg)[:5].tolist()
    assert x.shape == (5, len(FEATURES))
    ne = len(EVIDENCE)
    np.testing.assert_allclose(x[:, :7], db[cand], rtol=1e-6)
    assert (x[:, ne:2 * ne] <= 1e-6).all() and np.allclose(x[:, ne:2 * ne].max(axis=0), 0)  # gaps to the best
    ctx = {n: x[:, 2 * ne + i] for i, n in enumerate(CONTEXT)}
    assert ctx["rank"].tolist() == [0, 1, 2, 3, 4]
    assert ctx["gap_to_best"][0] == 0 and (ctx["gap_to_best"][1:] < 0).all()
    assert ctx["gap_to_other"][0] > 0  # the leader's margin over the runner-up


def test_router_reranks_and_keeps_trails(small_router, small_collection, dev) -> None:
    from tagql.routing.ours import GraphRouter

    assert small_router.reranker is not None
    plain = GraphRouter.load(small_collection, small_router.emb, overrides={"rerank": False})
    assert plain.reranker is None
    qs = [e["question"] for e in dev[:40]]
    with_rr, without = small_router.route_many(qs, k=5), plain.route_many(qs, k=5)
    for cands in with_rr:
        assert len({c.database for c in cands}) == len(cands)
        for c in cands:
            assert 0.0 <= c.confidence <= 1.0
            for trail in c.trails:  # every trail still follows the graph
                for i, t in enumerate(trail[1:], 1):
                    assert any(t in small_collection.graph.neighbours(c.database, u) for u in trail[:i])
    gold = [e["db_id"] for e in dev[:40]]
    hits = sum(c[0].database == g for c, g in zip(with_rr, gold))
    assert hits >= sum(c[0].database == g for c, g in zip(without, gold)) - 2
    assert hits >= 34
    # the same candidates as the stage the re-ranker reads, each a database of the collection
    cand, x, dlg = small_router.rerank_inputs(qs[:1])[0]
    assert x.shape == (len(cand), len(FEATURES)) and len(dlg) == len(small_router.dbs)


def test_a_stale_or_missing_model_file_means_first_stage_only(tmp_path: Path) -> None:
    stale = tmp_path / "old.json"
    stale.write_text(json.dumps({"features": ["a"], "baseline": 0.0, "trees": []}))
    with pytest.warns(UserWarning, match="first stage only"):
        assert load_reranker(str(stale)) is None
    with pytest.warns(UserWarning, match="no database re-ranker"):
        assert load_reranker(str(tmp_path / "absent.json")) is None


def test_copy_aware_rows_count_every_database_that_answers() -> None:
    from bench.routing.rerank import recall1, training_arrays

    x = np.zeros((3, len(FEATURES)), dtype=np.float32)
    single = (np.array([7, 3, 5]), x, 3)  # gold database 3, ranked second
    copies = (np.array([7, 3, 5]), x, np.array([5, 7]))  # database 5 and a copy holder 7
    feats, labels = training_arrays([single, copies])
    assert feats.shape == (6, len(FEATURES)) and labels.tolist() == [0, 1, 0, 1, 0, 1]
    assert recall1([single]) == 0.0 and recall1([copies]) == 100.0  # as routed: 7 first
    assert recall1([single, copies], lambda f: np.array([0.0, 1.0, 0.0])) == 50.0  # 3 first: right only for the first
