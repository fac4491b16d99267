"""Answer generation: the LM answers the question from the result table, within a token budget.

Large results are never silently truncated: the prompt says how many rows/columns there are,
summarises each column, and shows the first rows that fit.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Callable
from typing import Any, cast

from tagql.config import AnswerSettings
from tagql.db.connection import Result
from tagql.llm.base import LLM, Streams, system, user
from tagql.text2sql import prompts
from tagql.text2sql.answer_check import check_sentence, plain_cell, plain_listing


def json_value(v: Any) -> Any:
    """A JSON-safe version of a database value."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, (dt.date, dt.datetime, dt.time)):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    return str(v)


def result_values(result: Result) -> list[Any]:
    """Machine-readable values: a flat list for one column, else a list of rows."""
    if len(result.columns) == 1:
        return [json_value(r[0]) for r in result.rows]
    return [[json_value(v) for v in r] for r in result.rows]


def _cell(v: Any, limit: int = 200) -> str:
    s = "NULL" if v is None else str(json_value(v))
    return s if len(s) <= limit else s[: limit - 3] + "..."


def describe_shape(result: Result) -> str:
    """One line per column: type of values, distinct count, numeric range."""
    lines = []
    for i, col in enumerate(result.columns):
        vals = [r[i] for r in result.rows if r[i] is not None]
        nums = [v for v in vals if isinstance(v, (int, float, decimal.Decimal)) and not isinstance(v, bool)]
        desc = f"- {col}: {len(set(map(str, vals)))} distinct non-null values"
        if nums and len(nums) == len(vals):
            desc += f", min {min(nums)}, max {max(nums)}"
        lines.append(desc)
    return "\n".join(lines)


def format_data_points(result: Result, settings: AnswerSettings) -> str:
    """The result as the answer LM reads it, cut to the budget with a note saying so.

    One row reads as the TAG paper's data point ("- col: value" lines). Several rows are a table:
    the column names once, then one line per row. Prompt tokens are what an answer costs on a CPU
    (~150 per second here), and repeating every column name on every row made a 20-row answer
    prompt about three times longer than the table."""
    n = len(result.rows)
    if n == 1 and not result.truncated:
        return "Data Point 1:\n" + "\n".join(f"- {c}: {_cell(v)}" for c, v in zip(result.columns, result.rows[0]))
    lines: list[str] = []
    used = 0
    for row in result.rows[: settings.max_rows_in_prompt]:
        line = " | ".join(_cell(v) for v in row)
        if used + len(line) > settings.max_chars_in_prompt and lines:
            break
        lines.append(line)
        used += len(line) + 1
    shown = len(lines)
    table = " | ".join(result.columns) + "\n" + "\n".join(lines)
    total = f"at least {n} (the result was cut at the row cap)" if result.truncated else str(n)
    if shown < n or result.truncated:
        return (
            f"The query returned {total} rows and {len(result.columns)} columns; only the first {shown} are "
            f"shown. Column summary over the {n} fetched rows:\n{describe_shape(result)}\n\n{table}\n\n"
            f"Give the number of rows and at most five examples."
        )
    return f"The query returned {n} rows:\n{table}"


def rows_answer(result: Result) -> str:
    """A one-column result said as it is, no model: the value, or the values in order with their count.
    What the 1.5B model wrote for such results was the value itself ("17", "Atlas") or a sentence that
    misread the rows; the rows are the answer (``answer.one_column_answer``)."""
    if len(result.rows) == 1 and not result.truncated:
        return readable_number(result.rows[0][0])
    return plain_listing(result.columns, result.rows, truncated=result.truncated)


def readable_number(v: Any) -> str:
    """A value as a person reads it: a float to six significant digits and at least two decimals
    (66.90733333333333 -> 66.9073, 0.05703837386018237 -> 0.0570384, 1234567.891 -> 1234567.89), what
    the model's sentences did; ``Answer.values`` keeps every digit. Anything else as :func:`plain_cell`."""
    if not isinstance(v, float) or not math.isfinite(v) or v == 0 or v.is_integer():
        return plain_cell(v)
    decimals = max(2, 5 - math.floor(math.log10(abs(v))))
    return f"{v:.{decimals}f}".rstrip("0").rstrip(".")


def generate_answer(question: str, result: Result, llm: LLM, settings: AnswerSettings,
                    on_text: Callable[[str], None] | None = None) -> str:
    """Ask the LM for a short answer grounded in the rows. The schema is deliberately left out:
    with it, small models "correct" ids into names they saw in the schema's examples. A sentence that
    leaves out, reorders or invents rows or numbers (``answer_check``) is replaced by a plain listing of
    the rows, with a note on ``result.notes`` saying why. ``on_text`` hears the sentence piece by piece as
    the model writes it, when the model streams (``supports_stream``); it sees the raw sentence, the
    return value is the checked one."""
    if not result.rows:
        return "The query returned no rows, so the database has no data matching the question."
    if len(result.columns) == 1 and settings.one_column_answer == "rows":
        return rows_answer(result)
    data = format_data_points(result, settings)
    messages = [system(prompts.ANSWER_SYSTEM), user(prompts.answer_user_prompt(question, data))]
    if on_text is not None and llm.supports_stream:
        reply = cast("Streams", llm).stream(messages, on_text=on_text, max_tokens=settings.max_answer_tokens)
    else:
        reply = llm.complete(messages, max_tokens=settings.max_answer_tokens)
    text = reply.text.strip()
    if not text:
        return "(the model gave no answer; see the rows)"
    complete = not result.truncated and "only the first" not in data
    check = check_sentence(text, result.columns, result.rows, question=question, complete=complete)
    if check.ok:
        return text
    # a sentence that drops, reorders or invents rows is worse than none: the rows, said plainly
    result.notes.append(f"answer sentence replaced by a plain listing: {check.problems[0]} (it read: {text!r})")
    return plain_listing(result.columns, result.rows, truncated=result.truncated)
