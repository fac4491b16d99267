"""Answer generation: data points within a budget, never silently truncated; JSON values; a one-column
result said as it is, without the model (``answer.one_column_answer``)."""

from __future__ import annotations

import datetime as dt
import decimal

from tagql.config import AnswerSettings
from tagql.db.connection import Result
from tagql.llm.scripted import ScriptedLLM
from tagql.text2sql.answer import (format_data_points, generate_answer, json_value, readable_number,
                                  result_values)


def test_small_result_is_shown_whole() -> None:
    r = Result("SELECT", ["name", "h"], [("Ymir", 30480), ("Surtur", 30480)])
    text = format_data_points(r, AnswerSettings())
    assert text == "The query returned 2 rows:\nname | h\nYmir | 30480\nSurtur | 30480"


def test_one_row_is_a_data_point() -> None:
    text = format_data_points(Result("SELECT", ["name", "h"], [("Ymir", 30480)]), AnswerSettings())
    assert text == "Data Point 1:\n- name: Ymir\n- h: 30480"


def test_large_result_says_its_shape_and_what_is_shown() -> None:
    rows = [(f"hero {i}", i) for i in range(500)]
    r = Result("SELECT", ["name", "h"], rows, truncated=True, row_cap=500)
    text = format_data_points(r, AnswerSettings(max_rows_in_prompt=5))
    assert text.startswith("The query returned at least 500 (the result was cut at the row cap) rows and 2 columns; only the first 5 are shown.")
    assert "- h: 500 distinct non-null values, min 0, max 499" in text
    assert text.endswith("name | h\nhero 0 | 0\nhero 1 | 1\nhero 2 | 2\nhero 3 | 3\nhero 4 | 4\n\n"
                         "Give the number of rows and at most five examples.")


def test_character_budget_limits_rows() -> None:
    rows = [("x" * 150,) for _ in range(50)]
    text = format_data_points(Result("SELECT", ["t"], rows), AnswerSettings(max_chars_in_prompt=1000))
    assert "only the first 6 are shown" in text  # 6 lines of 151 characters fit in 1,000


def test_values_are_json_safe() -> None:
    assert json_value(decimal.Decimal("2.50")) == 2.5 and json_value(decimal.Decimal(3)) == 3
    assert json_value(dt.date(2024, 1, 2)) == "2024-01-02"
    assert json_value(b"\x01\xff") == "01ff" and json_value(float("nan")) == "nan"
    assert result_values(Result("", ["a"], [(1,), (2,)])) == [1, 2]
    assert result_values(Result("", ["a", "b"], [(1, "x")])) == [[1, "x"]]


def _answered(result: Result, settings: AnswerSettings) -> tuple[str, int]:
    llm = ScriptedLLM(["The model's sentence."])
    return generate_answer("Which ones?", result, llm, settings), len(llm.prompts)


def test_a_one_column_result_is_said_without_the_model() -> None:
    assert _answered(Result("SELECT", ["COUNT(*)"], [(17,)]), AnswerSettings()) == ("17", 0)
    assert _answered(Result("SELECT", ["AVG(x)"], [(0.1 + 0.2,)]), AnswerSettings()) == ("0.3", 0)
    assert [readable_number(v) for v in (66.90733333333333, 0.05703837386018237, 1234567.891, 12.0, -0.5, 3)] == \
        ["66.9073", "0.0570384", "1234567.89", "12", "-0.5", "3"]
    assert _answered(Result("SELECT", ["name"], [("Hela",), ("Spectre",)]), AnswerSettings()) == \
        ("2 rows (name): Hela; Spectre.", 0)
    cut = Result("SELECT", ["name"], [(f"h{i}",) for i in range(25)], truncated=True, row_cap=25)
    text, calls = _answered(cut, AnswerSettings())
    assert calls == 0 and text.startswith("at least 25 rows (name): h0; h1;") and text.endswith("; and 5 more.")


def test_several_columns_or_the_setting_get_the_models_sentence() -> None:
    two = Result("SELECT", ["name", "height"], [("Ymir", 30480)])
    assert _answered(two, AnswerSettings()) == ("The model's sentence.", 1)
    one = Result("SELECT", ["COUNT(*)"], [(17,)])
    text, calls = _answered(one, AnswerSettings(one_column_answer="model"))
    assert calls == 1 and text == "COUNT(*): 17."  # the sentence names no value: the check's plain listing
