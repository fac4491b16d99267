"""Checking an answer sentence against the rows it was written from, and the plain listing that
replaces a sentence that disagrees with them.

A small model's sentence can name 1 of the 2 rows it was given, list them in another order, or state a
number the rows do not hold. The check is deterministic and conservative: it judges only what it can
read with certainty.

- **Listed rows** (2 to ``max_listed`` rows, all shown to the model): every row must appear in the
  sentence (each non-NULL cell, text case-insensitively, numbers by value), and the rows must appear in
  the order they were returned (by the first position of each row's first cell).
- **Numbers**: every number the sentence states must be a value of the rows (up to the rounding the
  sentence uses), the row count, or a number of the question; and a one-cell numeric result must be
  stated.
- **Invented list items**: in a one-column text listing, an item between the listed values (split at
  commas and "and") that is no row's value.

A sentence over a result cut to its first rows is checked for invented numbers only.
"""

from __future__ import annotations

import decimal
import re
from dataclasses import dataclass
from typing import Any

_NUMBER = re.compile(r"(?<![\w.])[-+]?\d(?:[\d,]*\d)?(?:\.\d+)?(?![\w])")


_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[t ]\d")


@dataclass
class SentenceCheck:
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, decimal.Decimal)) and not isinstance(v, bool)


def _text(v: Any) -> str:
    return "" if v is None else str(v)


def _numbers_in(text: str) -> list[tuple[float, int, int]]:
    """(value, decimals written, position) of each number in ``text`` ("1,234.5" -> 1234.5, 1)."""
    out = []
    for m in _NUMBER.finditer(text):
        raw = m.group(0).replace(",", "")
        if raw.count(".") > 1 or raw in ("+", "-"):
            continue
        try:
            value = float(raw)
        except ValueError:
            continue
        decimals = len(raw.split(".", 1)[1]) if "." in raw else 0
        out.append((value, decimals, m.start()))
    return out


def _same_number(stated: float, decimals: int, value: float) -> bool:
    """The sentence's number states ``value``: exactly, or rounded or cut to the decimals it wrote."""
    if abs(stated - value) < 1e-9:
        return True
    scale = 10 ** decimals
    return abs(stated - round(value, decimals)) < 1e-9 or abs(stated - int(value * scale) / scale) < 1e-9


def _find_cell(sentence: str, low: str, v: Any, start: int = 0) -> int:
    """Where cell ``v`` appears in the sentence (from ``start``), or -1."""
    if v is None:
        return start
    if _is_number(v):
        for value, decimals, pos in _numbers_in(sentence):
            if pos >= start and _same_number(value, decimals, float(v)):
                return pos
        return -1
    text = _text(v).strip().lower()
    if not text:
        return start
    found = _find_text(low, text, start)
    if found < 0 and _DATETIME.match(text):  # '2020-03-10T12:00:00' said as its date
        found = _find_text(low, text[:10], start)
    return found


def _find_text(low: str, text: str, start: int) -> int:
    """Whole words only: 'o' (oxygen) is not in "form", 'c' is not in "cl"."""
    pattern = (r"(?<!\w)" if text[0].isalnum() else "") + re.escape(text) + (r"(?!\w)" if text[-1].isalnum() else "")
    m = re.compile(pattern).search(low, start)
    return m.start() if m else -1


def check_sentence(sentence: str, columns: list[str], rows: list[tuple], *, question: str = "",
                   complete: bool = True, max_listed: int = 20) -> SentenceCheck:
    """Problems of ``sentence`` as an answer written from ``rows`` (empty when it agrees). ``complete``
    is False when the model saw only the first rows of the result."""
    problems: list[str] = []
    low = sentence.lower()
    distinct = list(dict.fromkeys(tuple(r) for r in rows))  # a repeated row is said once
    if complete and 2 <= len(distinct) <= max_listed:
        positions = []
        for row in distinct:
            # cells without a letter or digit ('-', '+') are codes a sentence may put in words
            cells = [v for v in row if v is not None and re.search(r"\w", _text(v))]
            if not cells:
                continue
            pos = [_find_cell(sentence, low, v) for v in cells]
            if any(p < 0 for p in pos):
                missing = next(v for v, p in zip(cells, pos) if p < 0)
                problems.append(f"the sentence leaves out {_text(missing)!r}")
                continue
            positions.append((_row_position(sentence, low, cells, positions), row))
        if not problems:
            order = [p for p, _ in positions]
            if order != sorted(order):
                problems.append("the sentence lists the rows in another order than the query returned them")
        if not problems and len(columns) == 1 and all(isinstance(r[0], str) for r in distinct):
            problems += _invented_items(sentence, low, [r[0] for r in distinct])
    elif (complete and len(rows) == 1 and len(columns) == 1 and _is_number(rows[0][0])
          and _find_cell(sentence, low, rows[0][0]) < 0):
        problems.append(f"the sentence does not state the value {rows[0][0]!r}")
    problems += _invented_numbers(sentence, rows, question)
    command = _COMMAND.search(sentence)
    if command and not _COMMAND.search(question) and not _quoted_cell(low, rows, command.group(0).lower()):
        # a row told the model to write or drop something and the sentence repeats it as the answer
        problems.append(f"the sentence states a database command ({command.group(0)!r}) the question did not ask for")
    return SentenceCheck(problems)


# SQL that changes data, in an answer sentence: what a row's injected instruction makes a model say
_COMMAND = re.compile(r"\b(?:drop\s+table|delete\s+from|insert\s+into|truncate\s+table|alter\s+table|"
                      r"update\s+\w+\s+set|attach\s+database)\b", re.IGNORECASE)


def _quoted_cell(low: str, rows: list[tuple], command: str) -> bool:
    """The command is part of a cell the sentence quotes whole (it reports the stored value as a value)."""
    for row in rows:
        for v in row:
            text = _text(v).lower() if v is not None else ""
            if command in text and text in low:
                return True
    return False


def _row_position(sentence: str, low: str, cells: list[Any], earlier: list[tuple[int, Any]]) -> int:
    """Where a row is mentioned: its first cell's first occurrence after the previous row's mention
    (so repeated values, 'Meeting' in 'March Meeting' and 'Officers meeting', do not read as reordered)."""
    start = earlier[-1][0] + 1 if earlier else 0
    pos = _find_cell(sentence, low, cells[0], start)
    return pos if pos >= 0 else _find_cell(sentence, low, cells[0])


def _invented_items(sentence: str, low: str, values: list[str]) -> list[str]:
    values = [v for v in values if re.search(r"\w", v)]
    if not values:
        return []
    spans = [(_find_cell(sentence, low, v), len(v.strip())) for v in values]
    if any(s < 0 for s, _ in spans):
        return []
    first, last = min(s for s, _ in spans), max(s + n for s, n in spans)
    between = sentence[first:last]
    known = {v.strip().lower() for v in values}
    for v in sorted(known, key=len, reverse=True):
        between = re.sub(r"(?<!\w)" + re.escape(v) + r"(?!\w)", "\x00", between, flags=re.IGNORECASE)
    for item in re.split(r",|;|\band\b|\x00", between):
        item = item.strip(" .:'\"()").strip()
        if item and re.search(r"[A-Za-z0-9]", item) and item.lower() not in ("and", "or", "as well as"):
            return [f"the sentence names {item!r}, which no row holds"]
    return []


def _invented_numbers(sentence: str, rows: list[tuple], question: str) -> list[str]:
    allowed = [float(v) for row in rows for v in row if _is_number(v)]
    allowed.append(float(len(rows)))
    allowed += [v for v, _, _ in _numbers_in(question)]
    # numbers inside text values ('2020-03-10', 'TR001_2') are the values themselves, not claims
    texts = " ".join(_text(v) for row in rows for v in row if not _is_number(v)).lower()
    problems = []
    for value, decimals, pos in _numbers_in(sentence):
        token = _NUMBER.match(sentence, pos)
        if token and token.group(0).lower() in texts:
            continue
        if any(_same_number(value, decimals, a) or _same_number(value, decimals, a * 100) for a in allowed):
            continue
        problems.append(f"the sentence states {token.group(0) if token else value}, which is not in the rows")
        break
    return problems


def plain_cell(v: Any) -> str:
    """A value as a plain answer says it: floats without binary noise (1234.7299999999998 -> 1234.73)."""
    if isinstance(v, float):
        return format(v, ".12g")
    return "NULL" if v is None else str(v)


def plain_listing(columns: list[str], rows: list[tuple], *, truncated: bool = False, max_rows: int = 20) -> str:
    """The rows as one deterministic line: a single value, or the rows in order ("a, b; c, d")."""
    if len(rows) == 1 and len(columns) == 1:
        return f"{columns[0]}: {plain_cell(rows[0][0])}."
    shown = rows[:max_rows]
    items = "; ".join(", ".join(plain_cell(v) for v in row) for row in shown)
    head = ", ".join(columns)
    more = len(rows) - len(shown)
    count = f"at least {len(rows)}" if truncated else str(len(rows))
    tail = f"; and {more} more" if more > 0 else ""
    return f"{count} rows ({head}): {items}{tail}."
