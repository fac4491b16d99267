"""The structured statement form "'<text>' refers to <SQL snippet>" and its parser.

Why a tolerant parser: the paper's DBA-screened data has hand-written variants ("refres to",
quotes around only part of the text, a missing "to", ...). The text part is what retrieval
matches, so we keep all of the left side (quotes removed) rather than only the quoted span.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tagql.errors import TagqlError


class StatementError(TagqlError):
    """A statement is empty, unparseable, or not about this database."""


_REFERS = re.compile(r"\s*\b(?:refers|refres|rfers|refer|means|is represented by)\b(?:\s+to\b)?\s*", re.IGNORECASE)
_TO = re.compile(r"'\s+(?:to|is)\s+", re.IGNORECASE)
_QUOTES = "'\"`‘’“”"


@dataclass(frozen=True)
class Structured:
    text: str
    sql: str

    def render(self) -> str:
        return f"'{self.text}' refers to {self.sql}" if self.sql else self.text


_DOUBLE_QUOTED = re.compile(r'("[^"]*")')  # captured, so split() keeps the spans at odd indexes
_INNER_APOSTROPHE = re.compile(r"(?<=[A-Za-z])'(?=[A-Za-z])")


def _escape_apostrophes(sql: str) -> str:
    """``= 'Women's Soccer'`` -> ``= 'Women''s Soccer'``: DBAs write the apostrophe of a stored value
    as it reads, which leaves the string open (and the model copies the broken literal). Only when
    the single quotes outside double-quoted names do not pair up, and only quotes between letters."""
    outside = _DOUBLE_QUOTED.sub("", sql)
    if outside.count("'") % 2 == 0:
        return sql
    parts = _DOUBLE_QUOTED.split(sql)  # odd indexes are double-quoted spans, left as they are
    return "".join(p if i % 2 else _INNER_APOSTROPHE.sub("''", p) for i, p in enumerate(parts))


def _unwrap_quotes(sql: str) -> str:
    """``'member.t_shirt_size = 'X-Large''`` -> ``member.t_shirt_size = 'X-Large'``: a snippet quoted as
    a whole, the way the text part is. A real string literal (``'it''s'``) has only doubled quotes inside."""
    if len(sql) > 2 and sql[0] == sql[-1] == "'" and "'" in sql[1:-1].replace("''", ""):
        return sql[1:-1].strip()
    return sql


def _clean_text(text: str) -> str:
    text = " ".join(text.split())
    text = text.strip().rstrip(",:;")
    # drop quotes that delimit the phrase, keep apostrophes inside words ("member's")
    text = re.sub(r"(^|\s)['\"`‘’“”]+|['\"`‘’“”]+(?=\s|$|,)", r"\1", text)
    return text.strip().strip(_QUOTES).strip()


def parse_structured(statement: str) -> Structured:
    """Split "'x' refers to y" into (x, y). Raises StatementError if there is no mapping."""
    s = " ".join((statement or "").split())
    if not s:
        raise StatementError("empty statement")
    m = _REFERS.search(s)
    if m is None or m.start() == 0:
        m2 = _TO.search(s)
        if m2 is None:
            raise StatementError(f"not a structured statement (expected \"'text' refers to SQL\"): {s[:80]!r}")
        left, right = s[: m2.start() + 1], s[m2.end():]
    else:
        left, right = s[: m.start()], s[m.end():]
    text, sql = _clean_text(left), _escape_apostrophes(_unwrap_quotes(right.strip().rstrip(".").strip()))
    if not text or not sql:
        raise StatementError(f"structured statement lacks a text or an SQL part: {s[:80]!r}")
    return Structured(text, sql)
