"""Domain knowledge end to end with the real embedded model: a store's statement reaches the SQL
prompt, a near miss below the score floor does not, and the rows equal the gold SQL's."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import tagql
from tagql.db import open_database
from tagql.embeddings import make_embedder
from tagql.knowledge.store import KnowledgeBase

pytestmark = pytest.mark.model

# BIRD's evidence for such questions: publisher 1 is the empty publisher name. Without the
# statement the model has no way to know it.
STATEMENTS = [
    "'no publisher' refers to superhero.publisher_id = 1",
    "'male superheroes' refers to gender.gender = 'Male'",
    "'heroes with blue eyes' refers to colour.colour = 'Blue'",
]
QUESTION = "How many superheroes have no publisher?"
GOLD = "SELECT COUNT(*) FROM superhero WHERE publisher_id = 1"


def test_retrieved_statement_fixes_the_sql_and_near_misses_stay_out(tmp_path: Path, demo_db_path: Path) -> None:
    db = open_database(demo_db_path)
    store = tmp_path / "superhero.kb"
    kb = KnowledgeBase.open(store, create=True, db_id="superhero", schema=db.schema, embedder=make_embedder())
    kb.add_structured(STATEMENTS, status="approved")
    answer = tagql.connect(db, llm="local", knowledge=store).ask(QUESTION)
    used = [s.text for s in answer.statements]
    assert used == ["no publisher"], answer.statements  # 'male superheroes' (0.95) is below the floor
    gold = db.execute(GOLD).rows
    assert Counter(map(tuple, answer.rows)) == Counter(map(tuple, gold)), answer.sql
    assert gold[0][0] > 0
