"""Tokenising: identifier splitting, lower-cased word tokens, and the bag of terms BM25 compares.

Schema names are written for machines (``singer_in_concert``, ``StuID``); questions are written for
people. :func:`split_identifier` puts both in one vocabulary; :func:`word_tokens` cuts lower-cased text into
tokens of one of a few named shapes; :func:`terms` chains splitting, stop words and stemming (BM25
only reaches the paper's routing baseline with both).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from functools import lru_cache

from tagql.text.stem import stem as snowball
from tagql.text.stopwords import STOP_WORDS

# token shapes (matched against lower-cased text)
WORD = r"\w+"  # letters, digits and '_' ("tr001_10_11" is one token)
LETTERS = r"[a-z]+"  # letters only ("t1" -> "t")
LETTERS_DIGITS = r"[a-z]+|\d+"  # runs of letters and runs of digits ("t1" -> "t", "1")
ALNUM = r"[a-z0-9]+"  # letters and digits, '_' splits ("single_bonds" -> "single", "bonds")

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def split_identifier(name: str) -> str:
    """``singer_in_concert`` -> ``singer in concert``; ``StuID`` -> ``stu id``; ``Home-Town`` ->
    ``home town``."""
    name = _CAMEL.sub(" ", name.replace("_", " ").replace("-", " "))
    return " ".join(name.split()).lower()


@lru_cache(maxsize=16)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def word_tokens(text: str, pattern: str = WORD) -> list[str]:
    """The lower-cased tokens of ``text`` of shape ``pattern`` (:data:`WORD`, :data:`LETTERS`,
    :data:`LETTERS_DIGITS`, :data:`ALNUM` or any regex over lower-case text), in order."""
    return _compiled(pattern).findall(text.lower())


def terms(text: str, *, stop: Collection[str] | None = None, stem: bool | Callable[[str], str] = True,
          split: bool = True, pattern: str = LETTERS_DIGITS) -> list[str]:
    """The terms of ``text`` that BM25 and the routers compare: identifiers split (``split``), tokens
    of shape ``pattern``, stop words dropped (``stop``: default :data:`tagql.text.STOP_WORDS`, an empty
    set keeps them) and stemmed (``stem``: True = Snowball, False = as written, or a function)."""
    drop = STOP_WORDS if stop is None else stop
    fold = snowball if stem is True else stem or None
    toks = word_tokens(split_identifier(text) if split else text, pattern)
    return [fold(w) if fold else w for w in toks if w not in drop]
