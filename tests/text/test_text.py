"""The text toolkit: identifier splitting, token shapes, terms, Snowball stems, stop words, BM25."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tagql.text import (
    ALNUM,
    BM25,
    LETTERS,
    LETTERS_DIGITS,
    STOP_WORDS,
    WORD,
    split_identifier,
    stem,
    stems,
    terms,
    word_tokens,
)


def test_split_identifier() -> None:
    assert split_identifier("singer_in_concert") == "singer in concert"
    assert split_identifier("StuID") == "stu id"
    assert split_identifier("HTMLParser") == "html parser"
    assert split_identifier("Home-Town  Name") == "home town name"


def test_word_token_shapes() -> None:
    text = "Bond TR001_10_11 has single_bonds, t1 and 42 atoms"
    assert word_tokens(text) == word_tokens(text, WORD) == ["bond", "tr001_10_11", "has", "single_bonds", "t1",
                                                            "and", "42", "atoms"]
    assert word_tokens("t1 single_bonds", LETTERS) == ["t", "single", "bonds"]
    assert word_tokens("t1 single_bonds", LETTERS_DIGITS) == ["t", "1", "single", "bonds"]
    assert word_tokens("t1 single_bonds", ALNUM) == ["t1", "single", "bonds"]


def test_terms_split_stop_and_stem() -> None:
    assert terms("How many singers are in singer_in_concert?") == ["singer", "singer", "concert"]
    assert terms("Show the StuID") == ["stu", "id"]  # "show", "the" are stop words
    assert terms("List the singers", stem=False) == ["singers"]
    assert terms("List the singers", stop=frozenset()) == ["list", "the", "singer"]
    assert terms("Singers", stem=str.upper) == ["SINGERS"]
    assert {"list", "show", "s", "the", "which"} <= STOP_WORDS


@pytest.mark.parametrize(("a", "b"), [("elements", "element"), ("bodies", "body"), ("movies", "movie"),
                                      ("singers", "singer"), ("carbons", "carbon"), ("aliens", "alien")])
def test_one_stem_for_plural_and_singular(a: str, b: str) -> None:
    assert stem(a) == stem(b)


def test_stems_of_a_text() -> None:
    assert stems("Single bonds") == {"singl", "bond"}
    assert stems("single_bonds") == {"single_bond"}  # WORD keeps '_' inside a token
    assert stems("single_bonds", ALNUM) == {stem("single"), stem("bond")}
    assert stems("Aliens") == stems("alien")


def _okapi(docs: list[list[str]], query: list[str], k1: float, b: float) -> list[float]:
    """Textbook Okapi BM25, one document at a time (the reference the index must equal)."""
    n, avg = len(docs), sum(map(len, docs)) / len(docs)
    out = []
    for d in docs:
        s = 0.0
        for q in query:
            df = sum(q in x for x in docs)
            tf = d.count(q)
            if tf:
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                s += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / avg))
        out.append(s)
    return out


def test_bm25_equals_textbook_okapi() -> None:
    docs = [terms(t) for t in ["singer: name, country, age", "concert: name, year, stadium id",
                               "singer in concert: concert id, singer id", "stadium: name, capacity, location"]]
    for k1 in (1.2, 1.5):
        bm = BM25(docs, k1=k1)
        for q in ["singers from which country", "concert singer", "stadium stadium capacity", "nothing here"]:
            assert np.allclose(bm.scores(terms(q)), _okapi(docs, terms(q), k1, 0.75), atol=1e-5)
    bm = BM25(docs)
    assert bm.scores(["zzz"]).tolist() == [0.0] * 4 and bm.scores([]).shape == (4,)
    assert "singer" in bm and "zzz" not in bm and len(bm) == 4


def test_bm25_weighted_bag() -> None:
    bm = BM25([terms("singer: name, country"), terms("stadium: name, capacity")])
    # weight 1 for every term = plain BM25; a repeated term = weight 2; weights scale linearly
    assert np.allclose(bm.scores_weighted({"singer": 1.0, "countri": 1.0}), bm.scores(["singer", "countri"]))
    assert np.allclose(bm.scores_weighted({"singer": 2.0}), bm.scores(["singer", "singer"]))
    assert np.allclose(bm.scores_weighted({"stadium": 0.5}), 0.5 * bm.scores(["stadium"]))
    assert BM25([]).scores(["x"]).shape == (0,)
