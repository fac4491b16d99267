"""Fill a retrieved statement's numbers with the question's own numbers.

Why: numbers are canonicalised so that "paid more than {100} dollars" is retrieved for "paid more
than 50 dollars" (the paper's structuring step). Put into the prompt as stored, the statement tells
the SQL model ``expense.cost > 100`` while the question says 50, and a 1.5B model copies the
statement. Here the statement's words are aligned with the question's (difflib on canonical words);
a number of the statement that sits inside a run of at least two aligned words takes the question's
number, in the text part and in the SQL snippet, but only where the snippet holds that number exactly
once as a standalone value (``> 100``, ``'1000'``), never inside a date like ``'1000-100-08'`` or when
the snippet uses it twice: then that number is left as stored, since there is no safe reading. A
``{100}`` placeholder that already equals the question's number just loses its braces.
"""

from __future__ import annotations

import re
from dataclasses import replace
from difflib import SequenceMatcher

from tagql.knowledge import ScoredStatement
from tagql.knowledge.canon import canonicalise

_EDGE = ".,;:?!\"“”()[]"
_PLACEHOLDER = re.compile(r"[\{\(\[]?(\d+(?:\.\d+)?)[\}\)\]]?")


def _tokens(text: str) -> list[tuple[str, str]]:
    """(raw word, canonical lowercase word) per whitespace word, edge punctuation removed."""
    out = []
    for raw in text.split():
        word = raw.strip(_EDGE)
        if word:
            out.append((word, canonicalise(word).lower().strip("{}()[]")))
    return out


def _number(word: str) -> str | None:
    """The plain number a word carries ("{100}", "79%", "$50", "5"), or None (dates, codes, words)."""
    m = _PLACEHOLDER.search(word)
    if m is None:
        return None
    rest = word[: m.start()] + word[m.end():]
    return m.group(1) if not re.search(r"[\d/\-:]", rest) else None


def _standalone(number: str) -> re.Pattern[str]:
    # not part of a longer number, identifier, decimal or date/time (1000-100-08, 10:30)
    return re.compile(rf"(?<![\w.\-/:]){re.escape(number)}(?![\w.\-/:])")


def instantiate(statement: ScoredStatement, question: str) -> ScoredStatement:
    """``statement`` with its numbers replaced by the question's aligned numbers (see module doc)."""
    if not statement.sql or not re.search(r"\d", statement.text):
        return statement
    s_words, q_words = _tokens(statement.text), _tokens(question)
    matcher = SequenceMatcher(None, [c for _, c in s_words], [c for _, c in q_words], autojunk=False)
    text, sql = statement.text, statement.sql
    for block in matcher.get_matching_blocks():
        if block.size < 2:
            continue
        for off in range(block.size):
            s_raw, q_raw = s_words[block.a + off][0], q_words[block.b + off][0]
            old, new = _number(s_raw), _number(q_raw)
            if old is None or new is None:
                continue
            if old != new:
                pattern = _standalone(old)
                if len(pattern.findall(sql)) != 1:
                    continue
                sql = pattern.sub(new, sql)
            elif "{" not in s_raw:
                continue
            word = s_raw.replace(old, new, 1).replace("{", "").replace("}", "")
            text = re.sub(rf"(?<![\w.]){re.escape(s_raw)}(?![\w.])", lambda _m, w=word: w, text, count=1)
    if (text, sql) == (statement.text, statement.sql):
        return statement
    return replace(statement, text=text, sql=sql)


def for_question(question: str, statements: list[ScoredStatement]) -> list[ScoredStatement]:
    """Every statement instantiated for ``question`` (what goes into the SQL prompt)."""
    return [instantiate(s, question) for s in statements]
