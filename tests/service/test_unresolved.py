"""The unresolved-expressions queue: questions whose domain phrases matched no statement and whose answer
failed, came back empty or was marked wrong, grouped by phrase for an expert; a phrase drops out once an
approved statement covers it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tagql.llm.base import Message
from tagql.llm.scripted import ScriptedLLM
from tagql.text.phrases import content_phrases, phrase_key

pytestmark = pytest.mark.anyio

EMPTY = "SELECT full_name FROM superhero WHERE id < 0"
BROKEN = "SELECT nothing FROM nowhere"


def by_question(messages: list[Message]) -> str:
    """SQL per question: 'heavy' ones come back empty, 'gloomy' ones fail, the rest count heroes."""
    if "CREATE TABLE" not in messages[0].content:
        return "An answer."
    asked = " ".join(m.content for m in messages[1:]).lower()
    if "gloomy" in asked:
        return BROKEN
    if "heavy" in asked or "tall" in asked:
        return EMPTY
    return "SELECT COUNT(*) FROM superhero"


def test_content_phrases() -> None:
    assert content_phrases("How many tall heroes from 'Marvel Comics' are heavy?") == ["tall heroes", "heavy"]
    assert content_phrases("Name heavy heroes of Marvel Comics. Heavy ones only") == ["heavy heroes", "heavy ones"]
    assert content_phrases("heroes of Marvel Comics", names=True) == ["heroes", "marvel comics"]
    assert content_phrases("Which superhero's eyes are gloomy?", drop={"superhero", "eye"}) == ["gloomy"]
    assert content_phrases("the very big fat old grey cats", max_words=3) == ["old grey cats"]
    assert phrase_key("Tall Heroes") == phrase_key("tall hero") == "tall hero"


async def test_queue_groups_bad_outcomes_by_phrase(make_app: Callable[..., Any]) -> None:
    app = make_app(llm=ScriptedLLM(by_question))
    store = app.state.service.store
    expert, reader = store.create_token("erin", "expert"), store.create_token("rita", "reader")
    as_expert, as_reader = ({"authorization": f"Bearer {t}"} for t in (expert, reader))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        async def ask(question: str, **kw: Any) -> httpx.Response:
            return await c.post("/v1/ask", headers=as_reader | kw.get("headers", {}),
                                json={"question": question, "database": "superhero"})

        assert (await ask("How many heavy heroes are there?")).json()["rows"] == []
        assert (await ask("Name the heavy heroes.")).json()["rows"] == []
        assert (await ask("Which heroes are gloomy?")).status_code == 422
        streamed = await ask("Count the gloomy heroes", headers={"accept": "text/event-stream"})
        assert "event: error" in streamed.text
        fine = (await ask("How many superheroes are there?")).json()  # answered, rows: not queued
        assert fine["rows"] == [[750]]
        counted = (await ask("How many shiny heroes are there?")).json()  # answered; marked wrong below
        r = await c.post(f"/v1/answers/{counted['id']}/feedback", headers=as_reader,
                         json={"correct": False, "note": "shiny means gold costume"})
        assert r.status_code == 200

        assert (await c.get("/v1/databases/superhero/unresolved", headers=as_reader)).status_code == 403
        queue = (await c.get("/v1/databases/superhero/unresolved", headers=as_expert)).json()
        assert queue["ok"] and queue["database"] == "superhero"
        got = {p["phrase"]: p for p in queue["phrases"]}
        # "heroes" names a schema element (hero_power.hero_id), "many" is the request's: neither is queued
        assert sorted(got) == ["gloomy", "heavy", "shiny"]
        heavy = got["heavy"]
        assert heavy["count"] == 2 and heavy["outcomes"] == {"empty": 2} and heavy["resolved"] is False
        assert {q["question"] for q in heavy["questions"]} == {"How many heavy heroes are there?",
                                                               "Name the heavy heroes."}
        assert all(q["answer_id"] for q in heavy["questions"])
        gloomy = got["gloomy"]
        assert gloomy["count"] == 2 and gloomy["outcomes"] == {"failed": 2}
        assert gloomy["questions"][0]["error"].startswith("unknown table 'nowhere'")
        shiny = got["shiny"]
        assert shiny["outcomes"] == {"wrong": 1} and shiny["questions"][0]["error"] == "shiny means gold costume"

        # an expert writes and a reviewer approves a statement for "heavy heroes": "heavy" leaves the queue
        kb = app.state.service.registry.get("superhero").knowledge_base(create=True)
        kb.add("heavy heroes", "superhero.weight_kg > 200", status="approved")
        queue = (await c.get("/v1/databases/superhero/unresolved", headers=as_expert)).json()
        assert "heavy" not in {p["phrase"] for p in queue["phrases"]}
        everything = (await c.get("/v1/databases/superhero/unresolved?resolved=true", headers=as_expert)).json()
        heavy = next(p for p in everything["phrases"] if p["phrase"] == "heavy")
        assert heavy["resolved"] and heavy["statement"]["sql"] == "superhero.weight_kg > 200"

        # a question whose phrase a statement covers is not queued even when its answer is empty
        before = len(app.state.service.store.unresolved_rows("superhero"))
        assert (await ask("Show heavy heroes")).json()["rows"] == []
        assert len(app.state.service.store.unresolved_rows("superhero")) == before

        # dismissing takes a phrase off the queue
        r = await c.post("/v1/databases/superhero/unresolved/dismiss", headers=as_expert, json={"phrase": "Gloomy"})
        assert r.json() == {"ok": True, "dismissed": 2}
        queue = (await c.get("/v1/databases/superhero/unresolved", headers=as_expert)).json()
        assert [p["phrase"] for p in queue["phrases"]] == ["shiny"]
        missing = await c.post("/v1/databases/superhero/unresolved/dismiss", headers=as_expert, json={"phrase": "x"})
        assert missing.status_code == 404
