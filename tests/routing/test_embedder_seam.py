"""Routing takes its embedder as an argument: none is fetched behind the caller's back, an index built
with one embedder is not silently queried with another, and the scorer is fitted without scikit-learn."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from tagql.embeddings import EmbeddingUnavailable
from tagql.routing.errors import IndexMissing
from tagql.routing.ours import BuildConfig, GraphRouter, fit_logistic


class OtherEmbedder:
    """Another model's vectors (same shape): must never meet an index built with the default one."""

    name, dim = "some-other-model", 384

    def embed(self, texts, batch_size=128):
        return np.ones((len(texts), 384), dtype=np.float32) / np.sqrt(384)


def test_router_needs_an_embedder_passed_in(small_collection, small_router):
    with pytest.raises(EmbeddingUnavailable, match="needs an embedder"):
        GraphRouter(small_collection, BuildConfig(), None)
    with pytest.raises(EmbeddingUnavailable, match="needs an embedder"):
        small_collection.router("dense")
    with pytest.raises(EmbeddingUnavailable, match="needs an embedder"):
        small_collection.router("ours")
    assert small_collection.router("bm25").route("How many singers do we have?")  # bm25 needs none


def test_index_built_with_another_embedder_asks_for_a_rebuild(small_collection, small_router):
    with pytest.raises(IndexMissing, match="built with the .* embedder, not some-other-model") as e:
        GraphRouter.load(small_collection, OtherEmbedder())
    assert "tagql route index" in e.value.one_line()
    assert GraphRouter.load(small_collection, small_router.emb).meta["encoder"] == small_router.emb.name


def test_fit_logistic_is_the_regularised_optimum():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 11))
    x[:, -1] = 1.0
    y = (x @ rng.normal(size=11) * 3 + rng.normal(size=3000) > 0).astype(int)
    w = fit_logistic(x, y)
    p = 1 / (1 + np.exp(-(x @ w)))
    assert np.abs(w + x.T @ (p - y)).max() < 1e-6  # gradient of 0.5|w|^2 + sum(log-loss) is zero
    # separable data: the L2 term keeps the weights finite (no divergence)
    ws = fit_logistic(x, (x[:, 0] > 0).astype(int))
    assert np.isfinite(ws).all() and ws[0] > 1.0


@pytest.mark.skipif(importlib.util.find_spec("sklearn") is None, reason="scikit-learn not installed")
def test_fit_logistic_matches_scikit_learn():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(1)
    x = rng.normal(size=(2000, 8))
    y = (x @ rng.normal(size=8) + rng.normal(size=2000) > 0).astype(int)
    ref = LogisticRegression(C=1.0, fit_intercept=False, tol=1e-10, max_iter=5000).fit(x, y).coef_[0]
    assert np.allclose(fit_logistic(x, y), ref, atol=1e-6)


def test_long_documents_are_embedded_in_small_batches(small_collection, small_router, tmp_path):
    """Database documents (every table of a database) are embedded LONG_BATCH at a time: a batch of 128
    of them padded to the encoder's length held ~2.6 GB of runtime memory at 1,000 databases."""
    from tagql.routing import ours

    calls = []

    class Recording:
        name, dim = small_router.emb.name, 384

        def embed(self, texts, batch_size=128):
            calls.append((max(map(len, texts)), batch_size))
            return small_router.emb.embed(texts, batch_size=batch_size)

    from tagql.routing.collection import Collection

    coll = Collection("seam", tmp_path / "seam", dict(small_collection.entries))  # no cached vectors
    r = GraphRouter(coll, small_router.cfg, Recording())
    assert any(n > ours.LONG_TEXT and b == ours.LONG_BATCH for n, b in calls)
    assert all(b == ours.LONG_BATCH for n, b in calls if n > ours.LONG_TEXT)
    assert np.allclose(r.db_vecs, small_router.db_vecs, atol=1e-5)
