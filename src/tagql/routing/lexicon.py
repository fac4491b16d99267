"""Soft lexical matching: question words -> the collection's schema words (synonym robustness).

Spider-Syn replaces schema words with synonyms ("singer" -> "vocalist", "car" -> "automobile"), so
exact-word evidence (BM25, coverage) goes silent. :class:`SoftLexicon` maps each content word of a
question to schema words of the collection by cosine similarity of their sentence-embedding vectors
(the same MiniLM model; one word is a very short sentence). The result is a *weighted* bag of schema
stems -- exact words weigh 1, a soft match weighs its similarity -- fed to BM25 and coverage.

Embedding neighbours are looked up only for words that are *not* schema words of the collection:
Spider-Syn's substitutes are often another database's schema words ("players" -> "participants",
a column of ``local_govt_in_alabama``), and expanding every known word by similarity costs plain
questions accuracy. For those, :class:`SoftLexicon` also takes *mined* substitutions -- synonym
phrase -> original schema words, aligned from Spider-Syn's **train** questions
(:func:`tagql.routing.synonyms.mined_reverse`) -- which apply to any question word, known or not,
at a fixed weight.

Only schema text is indexed (table and column names); no evaluation question is ever seen. A word
vector cache keeps repeated question words free.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tagql.text import LETTERS, STOP_WORDS, split_identifier, stem, terms, word_tokens

# question words that are never about a schema element (the question's own syntax)
_GENERIC = frozenset("""
    many much total average avg mean sum count maximum minimum max min highest lowest largest
    smallest biggest greatest least most top order ordered descending ascending sorted sort
    different distinct unique each every find tell display names name ids id also like just both
    whose having ones older younger oldest youngest larger smaller bigger higher lower longer
    shorter less greater equal times time year years value values number numbers record records
    information info details called named known include includes including contain contains
    containing associated related
""".split())  # noqa: SIM905


def content_words(text: str) -> list[str]:
    """Unstemmed content words: lower case, alphabetic, >= 3 letters, no stop or question words."""
    out = []
    for w in word_tokens(split_identifier(text), LETTERS):
        if len(w) >= 3 and w not in STOP_WORDS and w not in _GENERIC:
            out.append(w)
    return list(dict.fromkeys(out))


def schema_words(names: Iterable[str]) -> list[str]:
    """Distinct unstemmed words of schema names (``singer_in_concert`` -> singer, concert)."""
    return content_words(" ".join(names))


class SoftLexicon:
    """Question words -> weighted schema stems (exact = 1.0, embedding neighbour = its similarity)."""

    def __init__(self, words: list[str], vecs: np.ndarray, embed: Callable[[list[str]], np.ndarray], *,
                 threshold: float = 0.55, top: int = 3, expand_known: bool = False, cache_size: int = 50_000,
                 mined: dict[str, list[str]] | None = None, mined_weight: float = 0.85,
                 related: dict[str, dict[str, float]] | None = None) -> None:
        self.words = words
        self.stems = [stem(w) for w in words]
        self.known = set(self.stems)
        self.vecs = vecs.astype(np.float32) if len(words) else np.zeros((0, 384), np.float32)
        self.embed = embed
        self.threshold = threshold
        self.top = top
        self.expand_known = expand_known
        self.cache: dict[str, list[tuple[str, float]]] = {}
        self.cache_size = cache_size
        # mined substitutions: synonym phrase -> stems of its schema originals (kept if the collection has them)
        self.mined: dict[str, list[str]] = {}
        for phrase, originals in (mined or {}).items():
            key = " ".join(word_tokens(phrase, LETTERS))
            got = [st for o in originals for st in terms(o) if st in self.known]
            if key and got:
                self.mined[key] = list(dict.fromkeys(self.mined.get(key, []) + got))
        self.mined_weight = mined_weight
        # thesaurus relations: question stem -> {schema stem: weight} (see :func:`related_schema_words`)
        self.related = related or {}
        self._mined_pat = re.compile(r"\b(" + "|".join(sorted(map(re.escape, self.mined), key=len, reverse=True))
                                     + r")\b") if self.mined else None

    def to_match(self, question: str) -> list[str]:
        """The question's words that need an embedding lookup (not cached)."""
        return [w for w in self._candidates(question) if w not in self.cache]

    def _candidates(self, question: str) -> list[str]:
        ws = content_words(question)
        return ws if self.expand_known else [w for w in ws if stem(w) not in self.known]

    def learn(self, words: list[str], vecs: np.ndarray) -> None:
        """Cache the schema neighbours of ``words`` given their vectors."""
        if not len(words):
            return
        if len(self.cache) > self.cache_size:
            self.cache.clear()
        if not len(self.words):
            self.cache.update({w: [] for w in words})
            return
        sims = vecs @ self.vecs.T
        k = min(self.top * 3, sims.shape[1])
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        for i, w in enumerate(words):
            best: dict[str, float] = {}
            for j in sorted(top[i], key=lambda j: -sims[i, j]):
                s = float(sims[i, j])
                if s < self.threshold or len(best) >= self.top:
                    break
                st = self.stems[j]
                if st not in best and st != stem(w):
                    best[st] = s
            self.cache[w] = list(best.items())

    def weights(self, question: str) -> dict[str, float]:
        """Stem -> weight: the question's own stems (1.0), soft matches of its unknown words, thesaurus
        relations and mined substitutions of any of its words."""
        out = {t: 1.0 for t in terms(question)}
        for w in self._candidates(question):
            for st, s in self.cache.get(w, ()):
                if out.get(st, 0.0) < s:
                    out[st] = s
        for w in content_words(question) if self.related else ():
            for st, s in self.related.get(stem(w), {}).items():
                if out.get(st, 0.0) < s:
                    out[st] = s
        if self._mined_pat is not None:
            for m in self._mined_pat.finditer(" ".join(word_tokens(question, LETTERS))):
                for st in self.mined[m.group(0)]:
                    if out.get(st, 0.0) < self.mined_weight:
                        out[st] = self.mined_weight
        return out

    def variant(self, *, mined: dict[str, list[str]] | None = None,
                related: dict[str, dict[str, float]] | None = None) -> SoftLexicon:
        """The same lexicon (words, vectors, settings, shared neighbour cache) with other mined substitutions
        (synonym phrase -> originals, as for the constructor) and / or thesaurus relations; ``None`` keeps
        this one's. The tuning benchmarks swap them without re-embedding anything."""
        new = type(self)(self.words, self.vecs, self.embed, threshold=self.threshold, top=self.top,
                         expand_known=self.expand_known, cache_size=self.cache_size, mined=mined,
                         mined_weight=self.mined_weight, related=self.related if related is None else related)
        if mined is None:
            new.mined, new._mined_pat = self.mined, self._mined_pat
        new.cache = self.cache
        return new

    @classmethod
    def build(cls, words: list[str], embed: Callable[[list[str]], np.ndarray], **kw: Any) -> SoftLexicon:
        vecs = embed(words) if words else np.zeros((0, 384), np.float32)
        return cls(words, vecs, embed, **kw)


def related_schema_words(words: Iterable[str], wordnet: Any, weights: dict[str, float], *, senses: int = 3,
                         max_sisters: int = 30) -> dict[str, dict[str, float]]:
    """Question stem -> {schema stem: weight} for every word WordNet relates to a schema word in
    ``words`` (``weights`` per relation, see :data:`tagql.routing.wordnet.RELATIONS`; a relation
    missing from ``weights`` is not used). "participants" -> {"player": w_synonym} when a schema has
    a ``player`` table."""
    out: dict[str, dict[str, float]] = {}
    for word in dict.fromkeys(words):
        target = stem(word)
        for other, relation in wordnet.related(word, senses=senses, max_sisters=max_sisters).items():
            w = weights.get(relation, 0.0)
            key = stem(other)
            if w <= 0 or key == target:
                continue
            slot = out.setdefault(key, {})
            if slot.get(target, 0.0) < w:
                slot[target] = w
    return out
