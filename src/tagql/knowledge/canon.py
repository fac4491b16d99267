"""Canonicalisation shared by statements and questions.

Why: an expert writes "born after 1992", a user asks "born after 1985". Replacing every number and
date by one fixed placeholder on *both* sides (the paper's structuring step) makes such pairs match
lexically and in embedding space. Structured statements from the paper's data already carry
placeholders like ``{100}``, ``(1000)`` or ``100/100/100``; they normalise to the same token.
"""

from __future__ import annotations

import re

from tagql.text import WORD, word_tokens

PLACEHOLDER = "100"

# a number, optionally a date/time made of numbers and separators, optionally wrapped in () or {}
# (not inside identifiers such as TR060 or T1: those are values a question names literally)
_NUMBER = re.compile(r"(?<![A-Za-z_\d])[\{\(\[]?\d+(?:[.,:/\-T]\d+)*[\}\)\]]?(?![A-Za-z_\d])")
_WORD = re.compile(r"[\w%]+(?:['’\-]\w+)*|[<>=!]+|[+\-*#]")
_SPACE = re.compile(r"\s+")


def canonicalise(text: str) -> str:
    """Numbers and dates -> one placeholder; whitespace collapsed. Case is kept (the embedder is
    uncased, BM25 lowercases itself)."""
    out = _NUMBER.sub(PLACEHOLDER, text)
    return _SPACE.sub(" ", out).strip()


def words(text: str) -> list[str]:
    """Whitespace words of the canonical text, with edge punctuation removed: the units of the
    sub-string windows. Symbols like '+', '-' or '#' survive (they are values in this domain)."""
    out = []
    for raw in canonicalise(text).split(" "):
        w = raw.strip(".,;:?!\"“”()[]{}")
        if w:
            out.append(w)
    return out


def tokens(text: str) -> list[str]:
    """Lowercased ``\\w+`` tokens of the canonical text (the BM25 vocabulary)."""
    return word_tokens(canonicalise(text), WORD)
