"""Stemming: Snowball (Porter 2) English, memoised -- one stemmer for every stage.

"elements" and "element", "bodies" and "body", "movies" and "movie" meet at one stem; so do words of a
schema name and of a question ("singers" / ``singer_id``). Compare stems with stems: a stem is not
always a word ("bodi", "movi").
"""

from __future__ import annotations

import re
from functools import lru_cache

import snowballstemmer

_STEMMER = snowballstemmer.stemmer("english")


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """The Snowball English stem of one lower-case word (``"singers"`` -> ``"singer"``)."""
    return _STEMMER.stemWord(word)


def stems(text: str, pattern: str = r"\w+") -> set[str]:
    """The set of stems of ``text``'s lower-cased tokens of shape ``pattern`` (see
    :func:`tagql.text.word_tokens`)."""
    return {stem(w) for w in re.findall(pattern, text.lower())}
