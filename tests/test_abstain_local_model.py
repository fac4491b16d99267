"""Honest abstention with the real embedded model and the shipped thresholds on BIRD's toxicology: a question
about the weather abstains, an answerable one is answered (its value checked against gold SQL)."""

from __future__ import annotations

import pytest

import tagql
from tagql.config import load_settings

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def session(tox) -> tagql.Session:
    settings = load_settings()
    settings.answer.abstain = True
    return tagql.connect(tox.path, llm="local", settings=settings)


def test_the_weather_in_paris_abstains(session: tagql.Session) -> None:
    a = session.ask("What is the weather in Paris?")
    assert a.abstained and a.sql == "" and a.rows == []
    assert a.answer.startswith("This database (toxicology) does not hold that")
    assert "'weather'" in a.abstain_reason


def test_an_answerable_question_is_answered(session: tagql.Session, tox) -> None:
    a = session.ask("How many molecules are there?")
    assert not a.abstained and a.abstain_reason == ""
    assert a.values == [tox.execute("SELECT COUNT(*) FROM molecule").rows[0][0]]
