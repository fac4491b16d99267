"""Issue 31's wrong answers, asked of the real model: a count of the named entity (not of a foreign
key), a total of the column that means what the question says, no filter the question does not state,
and an answer sentence that says the rows it got (or the plain listing that replaces it)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tagql
from tagql.text2sql.answer_check import check_sentence

pytestmark = pytest.mark.model

MARCH_2020 = {"March Meeting", "Officers meeting - March", "March Speaker", "Women's Lacrosse",
              "Habitat for Humanity", "Lacrosse game", "Community Theater"}


@pytest.fixture(scope="module")
def club(shared_data: Path):
    return tagql.connect(shared_data / "bird" / "dev_databases" / "student_club" / "student_club.sqlite",
                         llm="local", knowledge=None)


def said_rows(answer) -> None:
    """The sentence agrees with the rows, or was replaced by a listing with a note saying so."""
    check = check_sentence(answer.answer, answer.columns, [tuple(r) for r in answer.rows], question=answer.question)
    assert check.ok, (answer.answer, check.problems, answer.notes)


def test_dc_comics_count_counts_superheroes(demo_db_path: Path) -> None:
    answer = tagql.connect(demo_db_path, llm="local").ask("How many superheroes are published by DC Comics?")
    assert answer.rows == [[224]], answer.sql
    assert "224" in answer.answer
    said_rows(answer)


def test_food_total_is_what_was_spent(club) -> None:
    answer = club.ask("Total amount spent on food?")
    assert len(answer.rows) == 1 and answer.rows[0][0] == pytest.approx(1234.73), answer.sql
    said_rows(answer)


def test_events_in_march_2020_are_not_filtered_by_type(club) -> None:
    answer = club.ask("Events in March 2020?")
    names = {v for row in answer.rows for v in row if isinstance(v, str)}
    assert MARCH_2020 <= names and len(answer.rows) == 7, answer.sql
    said_rows(answer)
