"""Routing takes its embedder as an argument: none is fetched behind the caller's back, an index built
with one embedder is not silently queried with another."""

from __future__ import annotations

import numpy as np
import pytest

from tagql.embeddings import EmbeddingUnavailable
from tagql.routing.errors import IndexMissing
from tagql.routing.ours import BuildConfig, GraphRouter


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
