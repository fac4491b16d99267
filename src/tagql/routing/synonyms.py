"""Synonym data mined from Spider's *train* split, for synonym-robust routing (Spider-Syn).

Two shipped files in ``routing/data/`` (see ``ATTRIBUTION.md``), both from ``train_spider.json`` of
Spider-Syn (the 7000 Spider training questions, each also rewritten with synonyms):

* ``synonyms.json`` -- word-level substitutions ``[schema word(s), synonym, count]``, aligned from each
  ``SpiderQuestion`` / ``SpiderSynQuestion`` pair (e.g. customer -> client, country -> nation);
* ``vocabulary.json`` -- the content words of the training questions (both versions): an English
  word list in which to look for embedding neighbours of a collection's schema words.

No dev question is used. :class:`SynonymAugmenter` rewrites synthetic questions with these
synonyms, so the router's memory and scorer also see questions that do not use the schema's words.
"""

from __future__ import annotations

import difflib
import json
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from tagql.routing.lexicon import content_words
from tagql.text import LETTERS_DIGITS, stem, word_tokens

_DATA = Path(__file__).parent / "data"


def _aligned(a: str, b: str) -> list[tuple[str, str]]:
    ta, tb = word_tokens(a, LETTERS_DIGITS), word_tokens(b, LETTERS_DIGITS)
    sm = difflib.SequenceMatcher(a=ta, b=tb, autojunk=False)
    return [(" ".join(ta[i1:i2]), " ".join(tb[j1:j2])) for op, i1, i2, j1, j2 in sm.get_opcodes()
            if op == "replace" and i2 - i1 <= 3 and j2 - j1 <= 3]


def mine_synonyms(train_json: str | Path | list[dict], min_count: int = 2) -> list[tuple[str, str, int]]:
    """``(original, synonym, count)`` substitutions of Spider-Syn's train questions (a file, or its
    entries already loaded, e.g. a subset)."""
    train = train_json if isinstance(train_json, list) else json.loads(Path(train_json).read_text())
    c: Counter[tuple[str, str]] = Counter()
    for e in train:
        if e.get("SpiderSynQuestion") and e.get("SpiderQuestion"):
            for o, s in _aligned(e["SpiderQuestion"], e["SpiderSynQuestion"]):
                if content_words(o) and content_words(s) and stem(o) != stem(s):
                    c[(o, s)] += 1
    return sorted(((o, s, n) for (o, s), n in c.items() if n >= min_count), key=lambda x: (-x[2], x[0], x[1]))


def mine_vocabulary(train_json: str | Path, min_count: int = 2) -> list[str]:
    """Content words of the train questions (original and synonym versions), most frequent first."""
    train = json.loads(Path(train_json).read_text())
    c: Counter[str] = Counter()
    for e in train:
        for k in ("SpiderQuestion", "SpiderSynQuestion", "question"):
            if e.get(k):
                c.update(content_words(e[k]))
    return [w for w, n in sorted(c.items(), key=lambda x: (-x[1], x[0])) if n >= min_count and len(w) <= 20]


@lru_cache(maxsize=1)
def load_synonyms() -> tuple[tuple[str, str, int], ...]:
    return tuple(tuple(x) for x in json.loads((_DATA / "synonyms.json").read_text()))  # type: ignore[misc]


@lru_cache(maxsize=1)
def load_vocabulary() -> tuple[str, ...]:
    return tuple(json.loads((_DATA / "vocabulary.json").read_text()))


def mined_reverse(min_count: int = 5,
                  synonyms: Sequence[tuple[str, str, int]] | None = None) -> dict[str, list[str]]:
    """Synonym phrase -> the schema words it replaced (most frequent first), substitutions seen at least
    ``min_count`` times in Spider-Syn's train questions (for :class:`tagql.routing.lexicon.SoftLexicon`)."""
    out: dict[str, list[str]] = {}
    for o, s, n in sorted(load_synonyms() if synonyms is None else synonyms, key=lambda x: -x[2]):
        if n >= min_count and o not in out.setdefault(s, []):
            out[s].append(o)
    return out


class SynonymAugmenter:
    """Schema word -> synonyms: the mined substitutions plus embedding neighbours in the vocabulary."""

    def __init__(self, schema_words: Sequence[str], embed: Callable[[list[str]], np.ndarray], *,
                 threshold: float = 0.62, top: int = 3, seed: int = 0,
                 synonyms: Sequence[tuple[str, str, int]] | None = None, vocabulary: Sequence[str] | None = None,
                 vectors: Callable[[list[str]], np.ndarray] | None = None) -> None:
        vectors = vectors or embed
        self.rng = random.Random(seed)
        self.syn: dict[str, list[str]] = {}
        for o, s, _n in (load_synonyms() if synonyms is None else synonyms):
            self.syn.setdefault(o, [])
            if s not in self.syn[o]:
                self.syn[o].append(s)
        vocab = list(load_vocabulary() if vocabulary is None else vocabulary)
        words = [w for w in dict.fromkeys(schema_words)]
        if words and vocab:
            wv, vv = vectors(words), vectors(vocab)
            sims = wv @ vv.T
            vstems = [stem(v) for v in vocab]
            for i, w in enumerate(words):
                st = stem(w)
                order = np.argsort(-sims[i])[: top * 4]
                got = self.syn.setdefault(w, [])
                n = 0
                for j in order:
                    if sims[i, j] < threshold or n >= top:
                        break
                    if vstems[j] != st and vocab[j] not in got and not vocab[j].startswith(w[:4]):
                        got.append(vocab[j])
                        n += 1
        self.syn = {k: v for k, v in self.syn.items() if v}
        self._pat = re.compile(r"\b(" + "|".join(sorted(map(re.escape, self.syn), key=len, reverse=True)) + r")\b",
                               re.IGNORECASE) if self.syn else None

    def rewrite(self, question: str, share: float = 0.6) -> str | None:
        """The question with some of its schema words replaced by synonyms (``None``: nothing to replace)."""
        if self._pat is None:
            return None
        hits = list(self._pat.finditer(question))
        if not hits:
            return None
        pick = [m for m in hits if self.rng.random() < share] or [self.rng.choice(hits)]
        out, last = [], 0
        for m in pick:
            out += [question[last:m.start()], self.rng.choice(self.syn[m.group(0).lower()])]
            last = m.end()
        return "".join(out) + question[last:]
