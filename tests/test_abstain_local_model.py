"""Honest abstention with the real embedded model on the demo database: a question about the weather abstains,
an answerable one is answered (the rows checked against gold SQL)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tagql
from tagql.config import load_settings
from tagql.db import open_database

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def session(demo_db_path: Path) -> tagql.Session:
    settings = load_settings()
    settings.answer.abstain = True
    return tagql.connect(demo_db_path, llm="local", settings=settings)


def test_the_weather_in_paris_abstains(session: tagql.Session) -> None:
    a = session.ask("What is the weather in Paris?")
    assert a.abstained and a.sql == "" and a.rows == []
    assert a.answer.startswith("This database (superhero) does not hold that")
    assert a.tokens["calls"] == 1  # the yes/no only: no SQL was written


def test_an_answerable_question_is_answered(session: tagql.Session) -> None:
    a = session.ask("How many superheroes have blue eyes?")
    gold = ("SELECT COUNT(*) FROM superhero s JOIN colour c ON s.eye_colour_id = c.id WHERE c.colour = 'Blue'")
    assert not a.abstained and a.abstain_reason == ""
    assert a.values == [open_database(session.database().path).execute(gold).rows[0][0]]
