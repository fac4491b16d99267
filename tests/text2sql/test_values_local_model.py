"""Values from the data with the real embedded model: the found value's stored spelling reaches the SQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from tagql.config import load_settings
from tagql.db import open_database
from tagql.db import values as values_mod
from tagql.llm import make_llm
from tagql.pipeline import TagQL

pytestmark = pytest.mark.model

GOLD = ("SELECT COUNT(*) FROM superhero s JOIN publisher p ON s.publisher_id = p.id "
        "WHERE p.publisher_name = 'Marvel Comics'")


def test_a_value_hint_makes_the_model_write_the_stored_spelling(demo_db_path: Path, tmp_path: Path) -> None:
    values_mod.forget_loaded()
    settings = load_settings(cache_dir=tmp_path / "cache")  # the model itself is found by its path below
    settings.llm.persist_prefixes = False
    llm = make_llm(settings, cache_dir=load_settings().cache_dir)
    settings.answer.value_hints = True
    db = open_database(demo_db_path)
    session = TagQL(db, llm, settings=settings)
    question = "How many superheroes were published by Marvel?"  # the data says 'Marvel Comics'
    values = session.values_for(question)
    assert [m.render() for m in values][:1] == ["publisher.publisher_name = 'Marvel Comics'"]
    outcome = session.synthesizer.run(question, values=values)
    assert "'Marvel Comics'" in outcome.sql
    assert outcome.result.rows == db.execute(GOLD).rows == [(387,)]
    values_mod.forget_loaded()
