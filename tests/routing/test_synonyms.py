"""Synonym robustness: soft lexical matching, mined synonyms, synonym-rewritten synthetic questions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tagql.routing.lexicon import SoftLexicon, content_words, schema_words
from tagql.routing.metrics import Gold, gold_tables, summarize
from tagql.routing.synonyms import (
    SynonymAugmenter,
    load_synonyms,
    load_vocabulary,
    mine_synonyms,
    mine_vocabulary,
    mined_reverse,
)
from tagql.text import BM25, stem, terms

from .conftest import DBS

# hand-made 3-d "embeddings": vocalist ~ singer, arena ~ stadium, weather unrelated
_VEC = {"singer": [1, 0, 0, 0], "vocalist": [0.9, 0.43, 0, 0], "stadium": [0, 1, 0, 0], "arena": [0.1, 0.8, 0.59, 0],
        "weather": [0, 0, 1, 0], "concert": [0, 0, 0.5, 0.87]}


def _embed(words: list[str]) -> np.ndarray:
    v = np.array([_VEC.get(w, [0, 0, 0, 0]) for w in words], dtype=np.float32)
    n = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.where(n > 0, n, 1)


def test_content_and_schema_words() -> None:
    assert content_words("How many singers are in each stadium?") == ["singers", "stadium"]
    assert schema_words(["singer_in_concert", "StadiumID", "name"]) == ["singer", "concert", "stadium"]


def test_soft_lexicon_maps_unknown_words_to_schema_stems() -> None:
    lex = SoftLexicon.build(["singer", "stadium", "concert"], _embed, threshold=0.6)
    q = "How many vocalists performed in the arena when the weather was bad?"
    todo = lex.to_match(q)
    assert todo == ["vocalists", "performed", "arena", "weather", "bad"]  # known words are not looked up
    words = [w.rstrip("s") for w in todo]
    lex.learn(todo, _embed(words))
    w = lex.weights(q)
    assert w[stem("vocalists")] == 1.0  # the question's own words keep weight 1
    assert 0.6 <= w[stem("singer")] < 1.0 and 0.6 <= w[stem("stadium")] < 1.0
    assert stem("concert") not in w  # below the threshold
    assert lex.to_match(q) == []  # cached
    # weighted BM25 = plain BM25 when nothing is soft-matched, and finds the synonym's table otherwise
    bm = BM25([terms("singer: name, country"), terms("stadium: name, capacity")])
    assert np.allclose(bm.scores_weighted({t: 1.0 for t in ["singer", "countri"]}), bm.scores(terms("singer country")))
    assert bm.scores(terms(q)).max() == 0 and bm.scores_weighted(w)[0] > 0 and bm.scores_weighted(w)[1] > 0


def test_mined_substitutions_apply_to_known_words_too() -> None:
    mined = mined_reverse(2, [("players", "participants", 73), ("singer", "vocalist", 3), ("stadium", "arena", 1),
                              ("weather", "climate", 9)])
    assert mined == {"participants": ["players"], "vocalist": ["singer"], "climate": ["weather"]}
    # "participants" is itself a schema word (of another table): the embedding lookup skips it, the mined
    # substitution still adds "players"; "climate" -> "weather" is dropped (no schema word "weather")
    lex = SoftLexicon.build(["player", "participant", "singer", "stadium"], _embed, mined=mined, mined_weight=0.8)
    assert lex.mined == {"participants": [stem("players")], "vocalist": [stem("singer")]}
    q = "How many participants and vocalists are there in the arena?"
    assert "participants" not in lex.to_match(q)
    w = lex.weights(q)
    assert w[stem("participants")] == 1.0 and w[stem("players")] == 0.8
    assert stem("singer") not in w  # whole words only: "vocalists" is not the mined phrase "vocalist"
    assert stem("stadium") not in w  # below min_count, and no embedding match learned
    assert lex.weights("Which PARTICIPANTS won?")[stem("players")] == 0.8


def test_mining_from_aligned_train_questions(tmp_path: Path) -> None:
    train = [{"db_id": "a", "SpiderQuestion": "How many customers live in each city?",
              "SpiderSynQuestion": "How many clients live in each town?", "query": ""}] * 2
    f = tmp_path / "train.json"
    f.write_text(json.dumps(train))
    assert set(mine_synonyms(f)) == {("customers", "clients", 2), ("city", "town", 2)}
    assert mine_synonyms(train) == mine_synonyms(f)  # entries already loaded (a subset of train, say)
    assert mine_synonyms(train[:1]) == []  # seen once: below min_count
    assert {"customers", "clients", "city", "town", "live"} <= set(mine_vocabulary(f))
    # the shipped files (mined from Spider-Syn *train*) load
    assert ("customers", "clients", 216) in load_synonyms()
    assert len(load_vocabulary()) > 2000


def test_augmenter_rewrites_schema_words_deterministically() -> None:
    def make() -> SynonymAugmenter:
        return SynonymAugmenter(["singer", "stadium"], _embed, synonyms=[("singer", "performer", 3)],
                                vocabulary=["vocalist", "arena", "weather"], threshold=0.6, seed=1)

    a = make()
    assert set(a.syn["singer"]) == {"performer", "vocalist"} and a.syn["stadium"] == ["arena"]
    b = make()
    outs = [a.rewrite("Which singer sang in the biggest stadium?") for _ in range(6)]
    assert outs == [b.rewrite("Which singer sang in the biggest stadium?") for _ in range(6)]  # seeded
    assert all(o and o != "Which singer sang in the biggest stadium?" for o in outs)
    assert any("arena" in o for o in outs) and any("performer" in o or "vocalist" in o for o in outs)
    assert a.rewrite("What is the weather like?") is None


@pytest.fixture(scope="module")
def syn_dev(shared_data: Path) -> list[dict]:
    return [e for e in json.loads((shared_data / "spider_syn" / "dev.json").read_text()) if e["db_id"] in DBS][::4]


def test_spider_syn_questions_route_with_soft_matching(small_router, small_collection, syn_dev) -> None:
    golds = [Gold(e["db_id"], gold_tables(e["query"], small_collection.schema(e["db_id"]).table_names)) for e in syn_dev]
    qs = [e["SpiderSynQuestion"] for e in syn_dev]
    assert any(q.source == "syn" for q in small_router.syn)  # synonym rewrites are in the memory
    on = summarize(small_router.route_many(qs, k=8), golds)
    lex = small_router.lexicon
    small_router.lexicon = None
    try:
        off = summarize(small_router.route_many(qs, k=8), golds)
    finally:
        small_router.lexicon = lex
    assert on["db_r@1"] >= 80.0, on
    assert on["db_r@1"] >= off["db_r@1"], (on, off)


def test_lexicon_variant_swaps_mined_substitutions_and_keeps_the_rest(small_router) -> None:
    lex = small_router.lexicon
    q = "How many vocalists performed in the arena?"
    same = lex.variant()
    assert same.weights(q) == lex.weights(q) and same.cache is lex.cache
    swapped = lex.variant(mined={"vocalists": ["singer"]}, related={})
    w = swapped.weights(q)
    assert w[stem("singer")] == pytest.approx(lex.mined_weight)
    assert swapped.related == {} and swapped.words is lex.words
    assert lex.variant(mined={}).mined == {}
