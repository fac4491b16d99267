"""Conversations and verified examples through the REST API (issue 33): ``conversation_id`` threads
follow-ups (their SQL prompt shows the earlier turns), and feedback turns into a verified example the next
question's SQL prompt shows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tagql.llm.base import Message
from tagql.llm.scripted import ScriptedLLM

pytestmark = pytest.mark.anyio

MARVEL = ("SELECT COUNT(*) FROM superhero AS T1 JOIN publisher AS T2 ON T1.publisher_id = T2.id "
          "WHERE T2.publisher_name = 'Marvel Comics'")
DC = MARVEL.replace("Marvel Comics", "DC Comics")


def by_question(sqls: dict[str, str]) -> Callable[[list[Message]], str]:
    """SQL prompts (they carry the schema) get the SQL of the question they end with; answers a sentence."""
    def reply(messages: list[Message]) -> str:
        if "CREATE TABLE" not in messages[0].content:
            return "That many."
        asked = messages[-1].content.rsplit("Query: ", 1)[1].split("\n")[0]
        return sqls[asked]
    return reply


def client_for(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://tagql")


async def test_conversation_id_threads_follow_ups(make_app: Callable[..., Any]) -> None:
    llm = ScriptedLLM(by_question({"How many superheroes are published by Marvel Comics?": MARVEL,
                                   "and for DC Comics?": DC, "How many publishers are there?":
                                   "SELECT COUNT(*) FROM publisher"}))
    async with client_for(make_app(llm)) as c:
        first = (await c.post("/v1/ask", json={"database": "superhero",
                                               "question": "How many superheroes are published by Marvel Comics?"})).json()
        cid = first["conversation_id"]
        assert first["ok"] and len(cid) == 32 and first["context_turns"] == 0
        second = (await c.post("/v1/ask", json={"database": "superhero", "question": "and for DC Comics?",
                                                "conversation_id": cid})).json()
        assert second["conversation_id"] == cid and second["values"] == [224] and second["context_turns"] == 1
        follow_prompt = llm.prompts[1][1].content  # one prompt per question: counts are said without the model
        assert "Earlier questions in this conversation" in follow_prompt and MARVEL in follow_prompt
        assert f"-- Answer: {first['answer']}" in follow_prompt
        # a new question without the id starts its own conversation: a plain prompt
        other = (await c.post("/v1/ask", json={"database": "superhero",
                                               "question": "How many publishers are there?"})).json()
        assert other["conversation_id"] != cid and llm.prompts[2][1].content == \
            "Query: How many publishers are there?\nSQL:"
        thread = (await c.get(f"/v1/conversations/{cid}")).json()
        assert [a["question"] for a in thread["answers"]] == [
            "How many superheroes are published by Marvel Comics?", "and for DC Comics?"]
        assert [a["id"] for a in thread["answers"]] == [first["id"], second["id"]]


async def test_unknown_foreign_or_misplaced_conversations_are_refused(make_app: Callable[..., Any],
                                                                      tmp_path: Path) -> None:
    from tagql.service.state import StateStore

    store = StateStore(f"sqlite:///{tmp_path / 'state.sqlite'}")
    app = make_app(ScriptedLLM(by_question({"q1?": "SELECT COUNT(*) FROM publisher"})), store=store)
    async with client_for(app) as c:
        r = await c.post("/v1/ask", json={"database": "superhero", "question": "q1?", "conversation_id": "nope"})
        assert r.status_code == 404 and "conversation_id out to start one" in r.json()["error"]
        assert (await c.get("/v1/conversations/nope")).status_code == 404
        cid = (await c.post("/v1/ask", json={"database": "superhero", "question": "q1?"})).json()["conversation_id"]
        # another token's conversation is unknown to this caller
        token = store.create_token("ana", "reader")
        app.state.service._auth_cache.clear()
        r = await c.post("/v1/ask", json={"database": "superhero", "question": "q1?", "conversation_id": cid},
                         headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 404
        # a follow-up with a TAG method cannot use the history
        admin = store.create_token("root", "admin")
        r = await c.post("/v1/ask", json={"database": "superhero", "question": "q1?", "conversation_id": cid,
                                          "method": "text2sql"}, headers={"Authorization": f"Bearer {admin}"})
        assert r.status_code == 404  # the conversation was started open ("local"), not by this token


async def test_feedback_becomes_an_example_in_the_next_prompt(make_app: Callable[..., Any]) -> None:
    asked = "How many superheroes does Marvel Comics publish?"
    llm = ScriptedLLM(by_question({asked: "SELECT COUNT(*) FROM superhero",
                                   "How many superheroes does DC Comics publish?": DC}))
    async with client_for(make_app(llm)) as c:
        first = (await c.post("/v1/ask", json={"database": "superhero", "question": asked})).json()
        assert first["examples"] == [] and "Verified examples" not in llm.prompts[0][1].content
        # wrong: the user corrects it; the pair becomes a verified example
        fb = (await c.post(f"/v1/answers/{first['id']}/feedback", json={"correct": False, "sql": MARVEL})).json()
        assert fb["verified_example_id"] == 1
        second = (await c.post("/v1/ask", json={"database": "superhero",
                                                "question": "How many superheroes does DC Comics publish?"})).json()
        prompt = llm.prompts[1][1].content  # the second question's SQL prompt (a count needs no sentence)
        assert f"Query: {asked}\nSQL: {MARVEL}" in prompt and "Verified examples" in prompt
        assert second["examples"] == [{"question": asked, "sql": MARVEL}] and second["values"] == [224]


async def test_a_correction_replaces_the_confirmed_sql_of_the_same_question(make_app: Callable[..., Any]) -> None:
    asked = "How many superheroes does Marvel Comics publish?"
    llm = ScriptedLLM(by_question({asked: "SELECT COUNT(*) FROM superhero", asked.upper(): MARVEL}))
    async with client_for(make_app(llm)) as c:
        first = (await c.post("/v1/ask", json={"database": "superhero", "question": asked})).json()
        await c.post(f"/v1/answers/{first['id']}/feedback", json={"correct": True})
        await c.post(f"/v1/answers/{first['id']}/feedback", json={"correct": False, "sql": MARVEL})
        again = (await c.post("/v1/ask", json={"database": "superhero", "question": asked.upper()})).json()
        assert again["examples"] == [{"question": asked, "sql": MARVEL}]


def test_a_version_2_state_store_gains_conversations_keeping_its_answers(tmp_path: Path) -> None:
    import sqlalchemy as sa

    from tagql.service.state import SCHEMA_VERSION, StateStore

    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    store = StateStore(url)
    answer_id = store.save_answer({"question": "q?", "database": "superhero", "sql": "SELECT 1"},
                                  target="superhero", token_name="local")
    with store.engine.begin() as conn:  # as a state written before conversations existed
        version_2 = {"schema_version", "tokens", "answers", "feedback", "verified_examples", "reviews"}
        for table in set(sa.inspect(conn).get_table_names()) - version_2:  # 3 and every later migration
            conn.execute(sa.text(f"DROP TABLE {table}"))
        conn.execute(sa.text("DELETE FROM schema_version WHERE version >= 3"))
    assert StateStore(url).migrate() == [] and store.version() == SCHEMA_VERSION  # reopening applied 3 and on
    store.add_turn("c1", answer_id, "local")
    turns = store.conversation("c1")
    assert turns is not None and [(t["question"], t["id"]) for t in turns] == [("q?", answer_id)]
    assert store.conversation("c2") is None


async def test_a_streamed_follow_up_carries_the_conversation(make_app: Callable[..., Any]) -> None:
    import json

    llm = ScriptedLLM(by_question({"How many superheroes are published by Marvel Comics?": MARVEL,
                                   "and for DC Comics?": DC}))
    async with client_for(make_app(llm)) as c:
        first = (await c.post("/v1/ask", json={"database": "superhero",
                                               "question": "How many superheroes are published by Marvel Comics?"})).json()
        r = await c.post("/v1/ask", headers={"accept": "text/event-stream"},
                         json={"database": "superhero", "question": "and for DC Comics?",
                               "conversation_id": first["conversation_id"]})
    done = json.loads(r.text.strip().split("\n\n")[-1].split("data: ", 1)[1])
    assert done["conversation_id"] == first["conversation_id"] and done["values"] == [224]
    assert done["context_turns"] == 1
