"""Answer sentences never reorder, drop or invent rows (issue 31): the check against the rows, and the
plain listing that replaces a sentence that disagrees, with a note saying why. A scripted LLM writes the
sentences; tests/test_answer_check_local_model.py asks the real model."""

from __future__ import annotations

import pytest

from tagql.config import AnswerSettings
from tagql.db.connection import Result
from tagql.llm.scripted import ScriptedLLM
from tagql.text2sql.answer import generate_answer
from tagql.text2sql.answer_check import check_sentence, plain_listing

EVENTS = Result("SELECT event_name, event_date FROM event ...", ["event_name"],
                [("March Meeting",), ("Officers meeting - March",), ("March Speaker",)])


def answer(result: Result, sentence: str, question: str = "Events in March 2020?") -> tuple[str, list[str]]:
    result = Result(result.sql, list(result.columns), list(result.rows), truncated=result.truncated)
    # the model writes the sentence even for one column, so that the check is what decides
    text = generate_answer(question, result, ScriptedLLM([sentence]), AnswerSettings(one_column_answer="model"))
    return text, result.notes


def test_a_sentence_that_lists_every_row_in_order_is_kept() -> None:
    sentence = "The events in March 2020 were March Meeting, Officers meeting - March and March Speaker."
    assert answer(EVENTS, sentence) == (sentence, [])


@pytest.mark.parametrize("sentence, problem", [
    # drop: 1 of the 3 rows (the "names 1 of the 2 rows it got")
    ("The event in March 2020 was the March Meeting.", "leaves out 'Officers meeting - March'"),
    # reorder
    ("The events were March Speaker, March Meeting and Officers meeting - March.", "another order"),
    # invent a row
    ("The events were March Meeting, Spring Elections, Officers meeting - March and March Speaker.",
     "names 'Spring Elections'"),
    # invent a number
    ("There were 5 events: March Meeting, Officers meeting - March and March Speaker.", "states 5"),
])
def test_a_sentence_that_drops_reorders_or_invents_rows_is_replaced(sentence, problem) -> None:
    text, notes = answer(EVENTS, sentence)
    assert text == "3 rows (event_name): March Meeting; Officers meeting - March; March Speaker."
    assert len(notes) == 1 and problem in notes[0] and sentence in notes[0]


def test_numbers_are_checked_up_to_the_rounding_the_sentence_uses() -> None:
    total = Result("SELECT SUM(spent) ...", ["SUM(spent)"], [(1234.7299999999998,)])
    q = "Total amount spent on food?"
    assert answer(total, "The total amount spent on food was $1,234.73.", q)[1] == []
    assert answer(total, "About 1235 dollars were spent on food.", q)[1] == []
    text, notes = answer(total, "The total amount spent on food was $2,595.", q)
    assert text == "SUM(spent): 1234.73." and "does not state the value 1234.72" in notes[0]
    count = Result("SELECT COUNT(*) ...", ["COUNT(*)"], [(224,)])
    assert answer(count, "DC Comics published 224 superheroes.", "How many superheroes are published by DC Comics?")[1] == []
    assert answer(count, "DC Comics published one superhero.", "How many superheroes are published by DC Comics?")[1]


def test_values_of_the_question_dates_and_codes_are_not_invented_numbers() -> None:
    rows = Result("", ["event_name", "event_date"], [("March Meeting", "2020-03-10T12:00:00"),
                                                     ("March Speaker", "2020-03-24T12:00:00")])
    sentence = "In March 2020 there were 2 events: March Meeting on 2020-03-10 and March Speaker on 2020-03-24."
    assert check_sentence(sentence, rows.columns, rows.rows, question="Events in March 2020?").ok


def test_repeated_rows_and_symbol_cells_need_saying_once_or_not_at_all() -> None:
    rows = [("Football game",), ("Football game",), ("Women's Soccer",)]
    assert check_sentence("Football game and Women's Soccer.", ["event_name"], rows).ok
    assert check_sentence("TR000 is not carcinogenic; TR001 is.", ["molecule_id", "label"],
                          [("TR000", "-"), ("TR001", "+")]).ok
    # a one-letter value is a whole word, not a letter of another word
    assert not check_sentence("The elements that form the bond are c.", ["element"], [("o",), ("c",)]).ok


def test_a_cut_result_is_checked_for_invented_numbers_only() -> None:
    rows = [(f"hero {i}",) for i in range(30)]
    assert check_sentence("There are at least 30 heroes, e.g. hero 3.", ["name"], rows, complete=False).ok
    assert not check_sentence("There are 45 heroes.", ["name"], rows, complete=False).ok


def test_plain_listing_is_deterministic() -> None:
    assert plain_listing(["n"], [(224,)]) == "n: 224."
    assert plain_listing(["a", "b"], [(1, "x"), (2, None)]) == "2 rows (a, b): 1, x; 2, NULL."
    assert plain_listing(["a"], [(i,) for i in range(25)], truncated=True, max_rows=2) == \
        "at least 25 rows (a): 0; 1; and 23 more."
