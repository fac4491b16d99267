"""Conversations and verified examples in the SQL prompt (issue 33): earlier turns and the most similar
verified question -> SQL pairs reach the prompt; without them the prompt is the plain one, byte for byte."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tagql
from tagql.api import UsageError
from tagql.config import load_settings
from tagql.db import open_database
from tagql.knowledge import ScoredStatement
from tagql.llm.scripted import ScriptedLLM
from tagql.text2sql import prompts
from tagql.text2sql.context import Example, ExampleIndex, Turn
from tagql.text2sql.query import QuerySynthesizer

MARVEL = ("SELECT COUNT(*) FROM superhero AS T1 JOIN publisher AS T2 ON T1.publisher_id = T2.id "
          "WHERE T2.publisher_name = 'Marvel Comics'")
DC = MARVEL.replace("Marvel Comics", "DC Comics")

# the plain prompt as it was before conversations and examples existed (kept literally: cached KV prefixes
# and every measured figure depend on these bytes)
PLAIN = "Query: How many superheroes are there?\nSQL:"
PLAIN_WITH_KNOWLEDGE = (
    "-- External Knowledge: 'tall' refers to height_cm > 200\n"
    "-- Using valid SQLite and understanding External Knowledge, answer the following question for the tables "
    "provided above.\nQuery: How many tall superheroes are there?\nSQL:")


def test_without_history_or_examples_the_prompt_is_byte_identical() -> None:
    st = [ScoredStatement(text="tall", sql="height_cm > 200", score=1.0)]
    assert prompts.sql_user_prompt("How many superheroes are there?", []) == PLAIN
    assert prompts.sql_user_prompt("How many superheroes are there?", [], examples=(), history=()) == PLAIN
    assert prompts.sql_user_prompt("How many tall superheroes are there?", st) == PLAIN_WITH_KNOWLEDGE
    assert prompts.sql_user_prompt("How many tall superheroes are there?", st, examples=[], history=[]) \
        == PLAIN_WITH_KNOWLEDGE


def test_history_and_examples_precede_the_question_in_order() -> None:
    text = prompts.sql_user_prompt(
        "and for DC Comics?", [], history=[Turn("How many Marvel heroes?", MARVEL, "387 heroes.")],
        examples=[Example("How many publishers?", "SELECT COUNT(*)\n  FROM publisher")])
    assert text.endswith("Query: and for DC Comics?\nSQL:")
    ex, hist, follow = (text.index("Query: How many publishers?\nSQL: SELECT COUNT(*) FROM publisher"),
                        text.index(f"Query: How many Marvel heroes?\nSQL: {MARVEL}\n-- Answer: 387 heroes."),
                        text.index("follows up on the last one"))
    assert ex < hist < follow < text.index("Query: and for DC Comics?")


def test_the_synthesizer_sends_the_context_and_repairs_read_the_whole_conversation(demo_db_path: Path) -> None:
    db = open_database(demo_db_path)
    llm = ScriptedLLM([DC, DC])
    synth = QuerySynthesizer(db, llm)
    plain = synth.run("How many superheroes are published by DC Comics?")
    follow = synth.run("and for DC Comics?", history=[Turn("How many superheroes are published by Marvel Comics?",
                                                           MARVEL)])
    assert plain.result.rows == follow.result.rows == [(224,)]
    assert llm.prompts[0][0] == llm.prompts[1][0]  # the cached system prefix is untouched
    assert "Earlier questions in this conversation" not in llm.prompts[0][1].content
    assert MARVEL in llm.prompts[1][1].content


def test_example_index_finds_the_most_similar_questions_most_similar_last() -> None:
    index = ExampleIndex([("How many publishers are there?", "SELECT COUNT(*) FROM publisher"),
                          {"question": "List the heroes with blue eyes", "sql": "SELECT 1"},
                          Example("Which hero is the tallest?", "SELECT 2"),
                          ("How many publishers are there?", "SELECT COUNT(*) FROM publisher")])  # a duplicate
    assert len(index) == 3
    found = index.similar("How many heroes have blue eyes?", k=2)
    assert found[-1].question == "List the heroes with blue eyes"
    assert index.similar("completely unrelated words", k=2) == []  # BM25 alone: no shared term, no example
    assert index.similar("publishers", k=0) == []


class _Letters:
    """A tiny embedder: a question's letter counts (enough to rank by shared words)."""

    name, dim = "letters", 26

    def embed(self, texts, batch_size: int = 128) -> np.ndarray:
        out = np.zeros((len(texts), 26), dtype=np.float32)
        for i, t in enumerate(texts):
            for ch in t.lower():
                if "a" <= ch <= "z":
                    out[i, ord(ch) - 97] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def test_example_index_fuses_an_embedder_passed_in() -> None:
    index = ExampleIndex([("zzz qqq", "SELECT 1"), ("How many publishers are there?", "SELECT 2")],
                         embedder=_Letters())
    found = index.similar("zzzz", k=2)  # no shared BM25 term with anything: the embedding still ranks
    assert [e.sql for e in found] == ["SELECT 2", "SELECT 1"]


def test_session_conversation_passes_earlier_turns(demo_db_path: Path) -> None:
    llm = ScriptedLLM([MARVEL, "387 superheroes.", DC, "224 superheroes."])
    settings = load_settings()
    settings.answer.one_column_answer = "model"  # the sentences are the model's, so that their prompts show
    conv = tagql.connect(demo_db_path, llm=llm, settings=settings).conversation()
    first = conv.ask("How many superheroes are published by Marvel Comics?")
    second = conv.ask("and for DC Comics?")
    assert first.context_turns == 0 and second.context_turns == 1 and second.values == [224]
    sql_prompt = llm.prompts[2][1].content
    assert "Query: How many superheroes are published by Marvel Comics?" in sql_prompt and MARVEL in sql_prompt
    assert "-- Answer: 387 superheroes." in sql_prompt
    # the sentence answers the follow-up as asked (not the earlier question: see pipeline.py)
    assert "Question: and for DC Comics?\nAnswer:" in llm.prompts[3][1].content
    assert "Marvel" not in llm.prompts[3][1].content
    assert "Earlier questions" not in llm.prompts[0][1].content


def test_history_accepts_mappings_and_is_refused_for_tag_methods(demo_db_path: Path) -> None:
    session = tagql.connect(demo_db_path, llm=ScriptedLLM([DC, "224."]))
    answer = session.ask("and for DC Comics?", history=[{"question": "Marvel heroes?", "sql": MARVEL}])
    assert answer.values == [224]
    with pytest.raises(UsageError, match="method 'sql' only"):
        session.ask("and for DC Comics?", method="text2sql", history=[{"question": "q", "sql": MARVEL}])
    with pytest.raises(UsageError, match="question"):
        session.ask("and for DC Comics?", history=[{"sql": MARVEL}])


def test_session_examples_reach_the_prompt_and_the_answer(demo_db_path: Path) -> None:
    pairs = [("How many superheroes does Marvel Comics publish?", MARVEL),
             ("How many publishers are there?", "SELECT COUNT(*) FROM publisher")]
    llm = ScriptedLLM([DC, "224.", "SELECT COUNT(*) FROM publisher", "25."])
    session = tagql.connect(demo_db_path, llm=llm, examples=pairs)
    answer = session.ask("How many superheroes does DC Comics publish?")
    assert answer.examples[-1].sql == MARVEL
    assert f"Query: How many superheroes does Marvel Comics publish?\nSQL: {MARVEL}" in llm.prompts[0][1].content
    session.use_examples(None)
    plain = session.ask("How many publishers are there?")
    assert plain.examples == [] and llm.prompts[2][1].content == "Query: How many publishers are there?\nSQL:"


def test_examples_from_a_function_are_read_before_each_question(demo_db_path: Path) -> None:
    store: dict[str, list] = {"superhero": []}
    llm = ScriptedLLM(lambda messages: "SELECT COUNT(*) FROM publisher" if "SQL:" in messages[-1].content
                      else "25.")
    session = tagql.connect(demo_db_path, llm=llm)
    session.use_examples(lambda name: store[name], k=1)
    assert session.ask("How many publishers are there?").examples == []
    store["superhero"].append({"question": "Count the publishers", "sql": "SELECT COUNT(*) FROM publisher"})
    assert [e.question for e in session.ask("How many publishers are there?").examples] == ["Count the publishers"]
    with pytest.raises(UsageError):
        session.use_examples([], k=-1)
