"""Content phrases: the runs of words in a question that carry its own vocabulary.

A question mixes function words ("how many", "of the"), literals ("'Marvel Comics'", "200"), words that
name schema elements and domain words ("tall", "heavy heroes") that only an expert's statement can
define. :func:`content_phrases` cuts the question at everything but the last kind: the maximal runs of
words that are no stop word, no number, quoted literal or name, no punctuation and none of the caller's
``drop`` stems (schema names, sample values). :func:`phrase_key` is the stemmed form that groups
"tall hero" with "tall heroes".
"""

from __future__ import annotations

import re
from collections.abc import Collection

from tagql.text.stem import stem
from tagql.text.stopwords import STOP_WORDS

# quoted literals, words (with inner apostrophes or hyphens), numbers, any other single character
_TOKEN = re.compile(r"\"[^\"]*\"|'[^']*'|[A-Za-z]+(?:['\u2019-][A-Za-z]+)*|\d+(?:[.,:/]\d+)*|\S")
_WORD = re.compile(r"[A-Za-z]+(?:['\u2019-][A-Za-z]+)*$")


def content_phrases(text: str, *, drop: Collection[str] = frozenset(), stop: Collection[str] | None = None,
                    max_words: int = 4, names: bool = False) -> list[str]:
    """The lower-cased content phrases of ``text`` in order, each at most ``max_words`` words (a longer run
    keeps its last ``max_words``: in English the head noun ends the phrase). A word breaks a run when it
    is a stop word (``stop``, default :data:`tagql.text.STOP_WORDS`) or its stem is in ``drop``; so do
    numbers, quoted literals and punctuation, and (unless ``names``) a capitalised word that does not
    start a sentence: a name ("Marvel Comics"), i.e. a value the SQL looks up. Possessive "'s" is dropped."""
    stop = STOP_WORDS if stop is None else stop
    phrases: list[str] = []
    run: list[str] = []

    def close() -> None:
        if run:
            phrases.append(" ".join(run[-max_words:]))
            run.clear()

    start = True
    for token in _TOKEN.findall(text):
        first, start = start, token in ".?!"
        word = token.lower()
        if word.endswith(("'s", "\u2019s")):
            word = word[:-2]
        name = not names and not first and token[:1].isupper()
        if name or not _WORD.match(word) or word in stop or stem(word) in drop:
            close()
            continue
        run.append(word)
    close()
    seen: set[str] = set()
    return [p for p in phrases if not (p in seen or seen.add(p))]  # type: ignore[func-returns-value]


def phrase_key(phrase: str) -> str:
    """The stemmed form of a phrase: ``"tall heroes"`` and ``"tall hero"`` share ``"tall hero"``."""
    return " ".join(stem(w) for w in re.findall(r"[a-z0-9]+", phrase.lower()))


__all__ = ["content_phrases", "phrase_key"]
