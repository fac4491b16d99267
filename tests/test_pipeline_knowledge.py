"""The pipeline retrieves approved domain statements from a knowledge store and puts them in the prompt."""

from __future__ import annotations

from pathlib import Path

import tagql
from tagql.db import open_database
from tagql.embeddings import make_embedder
from tagql.knowledge.store import KnowledgeBase
from tagql.llm.scripted import ScriptedLLM


def test_store_statements_reach_the_sql_prompt(tmp_path: Path, demo_db_path: Path) -> None:
    db = open_database(demo_db_path)
    store = tmp_path / "superhero.kb"
    kb = KnowledgeBase.open(store, create=True, db_id="superhero", schema=db.schema, embedder=make_embedder())
    kb.add_structured([
        "'giant heroes' refers to superhero.height_cm > 10000",
        "'heroes with blue eyes' refers to colour.colour = 'Blue'",
    ], status="approved")
    kb.add_structured(["'villains' refers to alignment.alignment = 'Bad'"], status="proposed")
    llm = ScriptedLLM(["SELECT superhero_name FROM superhero WHERE height_cm > 10000", "Godzilla, Surtur and Ymir."])
    tq = tagql.connect(db, llm=llm, knowledge=store)
    answer = tq.ask("Which giant heroes are there?")
    prompt = llm.prompts[0][1].content
    assert "'giant heroes' refers to superhero.height_cm > 10000" in prompt
    assert "villains" not in prompt  # only approved statements are retrieved
    assert answer.statements[0].text == "giant heroes" and answer.statements[0].score > 0
    assert sorted(answer.values) == ["Godzilla", "Surtur", "Ymir"]


def test_retrieved_statement_takes_the_question_number(tmp_path: Path, demo_db_path: Path) -> None:
    from tagql.config import load_settings

    db = open_database(demo_db_path)
    store = tmp_path / "superhero.kb"
    kb = KnowledgeBase.open(store, create=True, db_id="superhero", schema=db.schema, embedder=make_embedder())
    kb.add_structured(
        ["'heroes heavier than {100} kg' refers to superhero.weight_kg > 100"], status="approved")
    question = "Which heroes heavier than 500 kg are there?"
    for instantiate, want in [(True, "'heroes heavier than 500 kg' refers to superhero.weight_kg > 500"),
                              (False, "'heroes heavier than {100} kg' refers to superhero.weight_kg > 100")]:
        settings = load_settings()
        settings.answer.instantiate_statements = instantiate
        llm = ScriptedLLM(["SELECT superhero_name FROM superhero WHERE weight_kg > 500", "Some."])
        answer = tagql.connect(db, llm=llm, knowledge=store, settings=settings).ask(question)
        assert want in llm.prompts[0][1].content
        assert answer.statements[0].render() == want  # the Answer lists what the prompt used
