"""The column repairs with the real embedded model: a query it writes with a column named after a key
(``hair_colour`` for ``hair_colour_id``) is repaired and returns the colour's name, not an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tagql.config import load_settings
from tagql.db import open_database
from tagql.db import values as values_mod
from tagql.llm import make_llm
from tagql.pipeline import TagQL

pytestmark = pytest.mark.model

GOLD = ("SELECT c.colour FROM superhero s JOIN colour c ON s.hair_colour_id = c.id "
        "WHERE s.superhero_name = 'Abomination'")


def test_the_model_s_key_named_column_is_read_through_its_key(demo_db_path: Path, tmp_path: Path) -> None:
    values_mod.forget_loaded()  # the value index of this test's cache, not one another test loaded
    settings = load_settings(cache_dir=tmp_path / "cache")  # the model itself is found by its path below
    settings.llm.persist_prefixes = False
    llm = make_llm(settings, cache_dir=load_settings().cache_dir)
    db = open_database(demo_db_path)
    session = TagQL(db, llm, settings=settings)
    question = "What is the hair colour of Abomination?"
    outcome = session.synthesizer.run(question, session.statements_for(question), values=session.values_for(question))
    # the 1.5B model writes `hair_colour`, which superhero does not have; the repair names what it did
    assert any("hair_colour -> colour.colour (joined colour on superhero.hair_colour_id)" in n
               for n in outcome.result.notes), outcome.result.notes
    assert outcome.result.rows == db.execute(GOLD).rows == [("No Colour",)]
    values_mod.forget_loaded()
