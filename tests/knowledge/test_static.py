"""The static token-embedding model distilled from MiniLM and the ``hybrid-static`` retrieval method.

Real model files and real distilled vectors (no mocks of the embeddings). The full distillation runs
once per machine (cached under the tagql cache dir, ~45 s on 2 busy cores); everything else here is
fast."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tagql.knowledge.retrieval import Corpus, IndexRetriever, StaticHybridMethod, make_method
from tagql.knowledge.statements import parse_structured

from .conftest import TOX

HEROES = [
    "'tallest superhero' refers to MAX(superhero.height_cm)",
    "'female' refers to gender.gender = 'Female'",
    "'heaviest' refers to MAX(superhero.weight_kg)",
    "'published by Marvel Comics' refers to publisher.publisher_name = 'Marvel Comics'",
]


@pytest.fixture(scope="session")
def static_model(embedder):
    from tagql.knowledge.static import load_static

    return load_static(embedder)


def corpus_of(statements: list[str]) -> Corpus:
    parts = [parse_structured(s) for s in statements]
    # hybrid-static needs no MiniLM statement embeddings: a placeholder matrix is enough
    return Corpus([p.text for p in parts], [p.sql for p in parts], np.zeros((len(parts), 1), dtype=np.float32))


def test_static_vector_of_a_token_is_minilm_on_that_token_alone(static_model, embedder):
    """The distilled vector of a one-token word is MiniLM's own embedding of that word (before the
    SIF weight and centering, which only scale and shift it), and distillation is deterministic."""
    from tagql.knowledge.static import distill

    tid = static_model._tok.encode("sodium", add_special_tokens=False).ids
    assert len(tid) == 1
    a, w = distill(embedder, token_ids=tid)
    b, _ = distill(embedder, token_ids=tid)
    assert np.array_equal(a, b)
    v = a[tid[0]] / w[tid[0]]
    ref = embedder.embed(["sodium"])[0]
    assert float(v @ ref / np.linalg.norm(v)) > 0.999


def test_windows_are_prefix_sum_means(static_model):
    ws = ["how", "many", "single", "bonded", "molecules", "are", "there"]
    emb, lens = static_model.window_embeddings(ws, 2, 3)
    assert emb.shape == (6 + 5, static_model.dim) and lens.tolist() == [2] * 6 + [3] * 5
    # window "single bonded" (start 2, length 2) equals the embedding of those words alone
    direct = static_model.embed_words([["single", "bonded"]])[0]
    assert np.allclose(emb[2], direct, atol=1e-5)
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-4)
    # a question shorter than every window length is used whole; no words, no windows
    emb, lens = static_model.window_embeddings(["carcinogenic"], 3, 5)
    assert lens.tolist() == [1]
    assert static_model.window_embeddings([], 1, 3)[0].shape == (0, static_model.dim)


@pytest.mark.parametrize(("question", "first"), [
    ("In the molecule containing sodium atoms, how many are non-carcinogenic?", {"sodium atoms", "non-carcinogenic"}),
    ("How many molecules have a triple bond?", {"triple bond"}),
])
def test_hybrid_static_finds_the_relevant_statements(static_model, question, first):
    r = IndexRetriever(corpus_of(TOX), StaticHybridMethod(model=static_model))
    got = r.retrieve(question, k=len(first))
    assert {g.text for g in got} == first
    assert all(a.score >= b.score for a, b in zip(got, got[1:]))


@pytest.mark.parametrize(("question", "first"), [
    ("How many women heroes are there?", "female"),  # no word in common: the embedding decides
    ("who weighs the most", "heaviest"),
    ("Which hero is the tallest one?", "tallest superhero"),
    ("Which heroes did Marvel Comics publish?", "published by Marvel Comics"),
])
def test_hybrid_static_ranks_the_right_statement_first(static_model, question, first):
    r = IndexRetriever(corpus_of(HEROES + TOX), StaticHybridMethod(model=static_model))
    assert r.retrieve(question, k=1)[0].text == first


def test_hybrid_static_is_selectable_by_name_and_distils_from_the_embedder_passed_in(embedder, static_model):
    from tagql.embeddings import EmbeddingUnavailable

    m = make_method("hybrid-static")
    assert m.name == "hybrid-static" and not m.needs_embedder  # no statement vectors of the transformer
    r = IndexRetriever(corpus_of(TOX), "hybrid-static", embedder=embedder)  # the static model of that embedder
    assert r.method.model is static_model and static_model.name == f"{embedder.name}-static"
    assert r.retrieve("non-carcinogenic molecules", k=1)[0].text == "non-carcinogenic"
    # no embedder and no model: a clear error, no process-wide model fetched behind the caller's back
    bare = IndexRetriever(corpus_of(TOX), "hybrid-static")
    with pytest.raises(EmbeddingUnavailable, match="no static model"):
        bare.retrieve("non-carcinogenic molecules", k=1)


def test_distillation_reports_progress(embedder):
    """The long first-use step announces itself: stage (with the reason), done, total, ending at total."""
    from tagql.knowledge.static import STAGE, distill

    calls = []
    distill(embedder, batch_size=2, token_ids=list(range(2000, 2005)),
            progress=lambda stage, done, total: calls.append((stage, done, total)))
    assert calls[0] == (STAGE, 0, 5) and calls[-1] == (STAGE, 5, 5)
    assert [d for _, d, _ in calls] == [0, 2, 4, 5] and "once" in STAGE


def test_large_corpus_uses_first_stage_and_finds_the_statement(static_model):
    """Above ``candidates`` statements a BM25 + whole-question first stage caps the work; the right
    statement still comes first among 2,000 distractors."""
    rng = np.random.default_rng(0)
    filler = ["goal", "season", "player", "team", "match", "league", "country", "stage", "height", "rating"]
    texts = [" ".join(rng.choice(filler, size=3)) + f" {i}" for i in range(2000)]
    c = Corpus(texts + ["sodium atoms"], [f"x = {i}" for i in range(2000)] + ["atom.element = 'na'"],
               np.zeros((2001, 1), dtype=np.float32))
    m = StaticHybridMethod(model=static_model, candidates=64)
    cand, _ = m.score(c, "How many sodium atoms are there?", None)
    assert len(cand) == 64
    assert IndexRetriever(c, m).retrieve("How many sodium atoms are there?", k=1)[0].text == "sodium atoms"


def test_bad_input_empty_repository_blank_and_huge_question(static_model):
    empty = Corpus([], [], np.zeros((0, 1), dtype=np.float32))
    r = IndexRetriever(empty, StaticHybridMethod(model=static_model))
    assert r.retrieve("what is carcinogenic?", k=3) == []
    full = IndexRetriever(corpus_of(TOX), StaticHybridMethod(model=static_model))
    assert len(full.retrieve("", k=2)) == 2 and len(full.retrieve("?!", k=2)) == 2  # no words: no crash
    # a 10,000-word question: windows over its first 64 words only (bounded work), BM25 over all
    # of it; the answer is a normal ranked list
    q = " ".join(["molecules"] * 9_990 + ["with", "a", "triple", "bond", "?"])
    t = time.perf_counter()
    got = full.retrieve(q, k=2)
    assert len(got) == 2 and {g.text for g in got} <= {p.split("'")[1] for p in TOX}
    assert time.perf_counter() - t < 5.0  # ~10 ms idle; generous for a loaded CI machine
    windows, _ = static_model.window_embeddings(q.split()[:64], 1, 12)
    assert len(windows) < 1_000


def test_distillation_cache_is_reused(static_model, embedder, monkeypatch):
    from tagql.knowledge import static

    assert static_model.path is not None and static_model.path.exists()
    assert static.load_static(embedder) is static_model  # same process: the loaded model
    monkeypatch.setattr(static, "_MODELS", {})  # a new process: must read the file, not distill

    def no_distill(*a, **k):
        raise AssertionError("distilled again although the cache file exists")

    monkeypatch.setattr(static, "distill", no_distill)
    again = static.load_static(embedder)
    assert again.path == static_model.path
    assert np.array_equal(again.vectors, static_model.vectors)


def test_damaged_cache_file_is_rebuilt(static_model, embedder, tmp_path, monkeypatch):
    """A truncated/garbage cache file is never used: it is distilled again and replaced. (Here the
    distillation is a stub returning the real vectors, to keep the test fast.)"""
    from tagql.knowledge import static

    raw = np.load(static_model.path)
    calls = []

    def fake_distill(source, progress=None, **kw):
        calls.append(1)
        return raw, np.ones(len(raw), dtype=np.float32)

    monkeypatch.setattr(static, "distill", fake_distill)
    first = static.load_static(embedder, tmp_path)
    assert calls == [1] and first.path.parent == tmp_path
    assert static.load_static(embedder, tmp_path).path == first.path and calls == [1]  # reused
    first.path.write_bytes(b"not a numpy file")
    monkeypatch.setattr(static, "_MODELS", {})  # a new process reads the damaged file
    rebuilt = static.load_static(embedder, tmp_path)
    assert calls == [1, 1] and np.array_equal(rebuilt.vectors, first.vectors)


def test_stemmed_bm25():
    from tagql.text import stem

    # the toolkit's Snowball stems: plural and singular meet (a stem is not always a word)
    for plural, one in [("elements", "element"), ("carbons", "carbon"), ("bodies", "body"), ("movies", "movie"),
                        ("classes", "class"), ("atoms", "atom")]:
        assert stem(plural) == stem(one)
    c = corpus_of(["'carbon' refers to atom.element = 'c'", "'sodium atoms' refers to atom.element = 'na'"])
    assert c.bm25("How many carbons are there?")[0] == 0.0  # plain BM25: 'carbons' is not 'carbon'
    folded = c.stemmed_bm25("How many carbons are there?")
    assert folded[0] > 0.0 and folded[1] == 0.0
    assert c.stemmed_bm25("one sodium atom")[1] > 0.0  # folded on the statement side too


@pytest.mark.parametrize(("question", "first"), [
    ("How many bonds are created by bonding atoms with chlorine element?", "chlorine"),
    ("Is Chlorine in molecule TR001?", "Chlorine"),
])
def test_same_letter_case_breaks_the_tie_between_case_variants(static_model, question, first):
    """Two statements whose texts differ only in letter case score the same on every case-folded
    signal; the one the question spells the same way comes first, whichever is stored first."""
    variants = ["'Chlorine' refers to atom.element = 'cl'", "'chlorine' refers to atom.element = 'cl'"]
    for order in (variants, variants[::-1]):
        r = IndexRetriever(corpus_of(order + TOX), StaticHybridMethod(model=static_model))
        assert r.retrieve(question, k=1)[0].text == first
        # without the case signal it is a tie, and the tie goes to repository order
        plain = IndexRetriever(corpus_of(order + TOX), StaticHybridMethod(model=static_model, w_case=0.0))
        assert plain.retrieve(question, k=1)[0].text == parse_structured(order[0]).text


def test_instance_identifiers():
    from tagql.knowledge.canon import tokens
    from tagql.knowledge.retrieval import instance_ids

    got = {t: sorted(instance_ids(tokens(t))) for t in [
        "bond TR001_10_11", "molecule TR060", "member rec4BLdZHS2Blfp4v", "A12", "finished 1st", "100m sprint",
        "K-12 schools", "born after 1992"]}
    assert got == {"bond TR001_10_11": ["tr001_10_11"], "molecule TR060": ["tr060"],
                   "member rec4BLdZHS2Blfp4v": ["rec4bldzhs2blfp4v"], "A12": [], "finished 1st": [],
                   "100m sprint": [], "K-12 schools": [], "born after 1992": []}


INSTANCES = ["'bond TR001_10_11' refers to connected.bond_id = 'TR001_10_11'",
             "'molecule TR060' refers to molecule.molecule_id = 'TR060'",
             "'atoms' refers to atom.atom_id OR connected.atom_id OR connected.atom_id2",
             "'triple bond' refers to bond.bond_type = '#'"]


def test_statements_about_another_instance_are_found_by_identifier():
    c = corpus_of(INSTANCES)
    assert c.foreign_instances("Name the atoms' elements that form bond TR000_2_3.").tolist() == [0, 1]
    assert c.foreign_instances("Which atoms form bond TR001_10_11?").tolist() == [1]
    assert c.foreign_instances("Is molecule TR060 carcinogenic? And bond TR001_10_11?").tolist() == []
    assert corpus_of(TOX).foreign_instances("any question TR001").tolist() == []


def test_hybrid_static_leaves_out_statements_about_another_instance(static_model):
    """A statement naming another bond would hand the SQL generator a wrong constant; the next
    statements take its place, and it still comes first when the question names its bond."""
    r = IndexRetriever(corpus_of(INSTANCES + TOX), StaticHybridMethod(model=static_model))
    got = [g.text for g in r.retrieve("Name the atoms' elements that form bond TR000_2_3.", k=4)]
    assert len(got) == 4 and "bond TR001_10_11" not in got and "molecule TR060" not in got
    assert r.retrieve("Name the atoms' elements that form bond TR001_10_11.", k=1)[0].text == "bond TR001_10_11"
    plain = IndexRetriever(corpus_of(INSTANCES + TOX), StaticHybridMethod(model=static_model, instances=0))
    assert "bond TR001_10_11" in [g.text for g in plain.retrieve("Name the atoms' elements that form bond TR000_2_3.", k=4)]
