"""WordNet relations for synonym-robust routing: the compiled data, the relations, the lexicon."""

from __future__ import annotations

import numpy as np

from tagql.routing.lexicon import SoftLexicon, related_schema_words
from tagql.text import stem
from tagql.routing.wordnet import WordNet, compile_wordnet, load_wordnet

_HEADER = "  1 This software and database is being provided to you, the LICENSEE, by Princeton University\n"


def _write_dict(root) -> None:
    """A three-synset WordNet in the Princeton file format: singer/vocalist < musician, and car."""
    data = (
        _HEADER
        + "00000001 18 n 02 musician 0 instrumentalist 0 001 ~ 00000002 n 0000 | plays music\n"
        + "00000002 18 n 02 singer 0 vocalist 0 001 @ 00000001 n 0000 | sings\n"
        + "00000003 06 n 02 car 0 motor_car 0 000 | a vehicle\n"
    )
    index = (
        _HEADER
        + "car n 1 0 1 0 00000003\n"
        + "musician n 1 1 ~ 1 0 00000001\n"
        + "singer n 1 1 @ 1 0 00000002\n"
        + "vocalist n 1 1 @ 1 0 00000002\n"
    )
    (root / "data.noun").write_text(data, encoding="latin-1")
    (root / "index.noun").write_text(index, encoding="latin-1")
    for pos in ("verb", "adj"):
        (root / f"data.{pos}").write_text(_HEADER, encoding="latin-1")
        (root / f"index.{pos}").write_text(_HEADER, encoding="latin-1")


def test_compile_reads_the_princeton_format(tmp_path) -> None:
    _write_dict(tmp_path)
    wn = WordNet(compile_wordnet(tmp_path))
    assert "motor_car" not in wn.index  # multi-word lemmas are dropped
    assert wn.related("singers") == {"vocalist": "synonym", "musician": "hypernym", "instrumentalist": "hypernym"}
    assert wn.related("musician") == {"instrumentalist": "synonym", "singer": "hyponym", "vocalist": "hyponym"}
    assert wn.related("car") == {}
    assert wn.related("unknownword") == {}


def test_shipped_wordnet_relates_spider_syn_substitutions() -> None:
    wn = load_wordnet()
    assert wn.lemma("countries") == "country" and wn.lemma("zzzq") is None
    singer = wn.related("singer")
    assert singer["vocalist"] == "synonym" and singer["musician"] == "hypernym"
    assert wn.related("player")["participant"] == "synonym"
    assert wn.related("country")["nation"] == "synonym"
    # only the first senses: "countryside" comes from "country" as a rural area, its 4th-5th sense
    assert "countryside" not in wn.related("country", senses=3)
    assert wn.related("country", senses=5)["countryside"] == "hyponym"


def test_related_words_add_schema_words_at_their_weight() -> None:
    wn = load_wordnet()
    related = related_schema_words(["singer", "stadium"], wn, {"synonym": 0.4, "hypernym": 0.3})
    assert related[stem("vocalist")] == {stem("singer"): 0.4}
    assert related[stem("musician")][stem("singer")] == 0.3
    assert stem("singer") not in related.get(stem("singer"), {})  # never a word onto itself
    assert related_schema_words(["singer"], wn, {"synonym": 0.4}).get(stem("musician")) is None  # no weight, unused

    vecs = np.eye(2, 4, dtype=np.float32)
    lex = SoftLexicon(["singer", "stadium"], vecs, lambda ws: np.zeros((len(ws), 4), np.float32), related=related)
    w = lex.weights("Which vocalists sang in the stadium?")
    assert w[stem("singer")] == 0.4  # the schema word, at the synonym weight
    assert w[stem("stadium")] == 1.0 and w[stem("vocalists")] == 1.0  # the question's own words stay at 1
    assert stem("singer") not in SoftLexicon(["singer"], vecs[:1], lex.embed).weights("Which vocalists sang?")
