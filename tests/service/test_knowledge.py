"""Knowledge through the service: an expert proposes, a reviewer approves (history kept in the state store),
and the next question retrieves the approved statement."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tagql.llm.scripted import ScriptedLLM

from .conftest import sql_then_answer

pytestmark = pytest.mark.anyio


async def test_propose_review_then_retrieved(make_app: Callable[..., Any]) -> None:
    llm = ScriptedLLM(sql_then_answer(sql="SELECT COUNT(*) FROM superhero WHERE height_cm > 200", answer="Some."))
    app = make_app(llm=llm)
    store = app.state.service.store
    expert, reviewer = store.create_token("erin", "expert"), store.create_token("rui", "reviewer")
    as_expert, as_reviewer = ({"authorization": f"Bearer {t}"} for t in (expert, reviewer))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        listed = await c.get("/v1/databases/superhero/statements", headers=as_expert)
        assert listed.json()["statements"] == []  # no store yet
        first = await c.post("/v1/databases/superhero/statements", headers=as_expert, json={
            "text": "tall heroes", "sql": "superhero.height_cm > 200", "nl": "tall means over 2 m"})
        st = first.json()["statement"]
        assert (st["status"], st["author"], st["reason"]) == ("proposed", "erin", "")
        bad = (await c.post("/v1/databases/superhero/statements", headers=as_expert,
                            json={"text": "heavy", "sql": "superhero.mass > 1"})).json()["statement"]
        assert bad["status"] == "proposed" and "mass" in bad["reason"]  # validated against the schema
        ask = {"question": "How many tall heroes are there?", "database": "superhero"}
        before = (await c.post("/v1/ask", json=ask, headers=as_expert)).json()
        assert before["statements"] == []  # proposed statements are not used

        r = await c.post(f"/v1/databases/superhero/statements/{st['id']}/review", headers=as_expert,
                         json={"action": "approve"})
        assert r.status_code == 403
        r = (await c.post(f"/v1/databases/superhero/statements/{st['id']}/review", headers=as_reviewer,
                          json={"action": "approve", "note": "checked against the data"})).json()
        assert r["statement"]["status"] == "approved"
        assert [(h["action"], h["token_name"], h["note"]) for h in r["history"]] == [
            ("propose", "erin", None), ("approve", "rui", "checked against the data")]
        r = (await c.post(f"/v1/databases/superhero/statements/{bad['id']}/review", headers=as_reviewer,
                          json={"action": "reject", "note": "no such column"})).json()
        assert (r["statement"]["status"], r["statement"]["reason"]) == ("rejected", "no such column")
        missing = await c.post("/v1/databases/superhero/statements/99/review", headers=as_reviewer,
                               json={"action": "approve"})
        assert missing.status_code == 404

        after = (await c.post("/v1/ask", json=ask, headers=as_expert)).json()
        assert [s["text"] for s in after["statements"]] == ["tall heroes"]
        approved = (await c.get("/v1/databases/superhero/statements?status=approved", headers=as_expert)).json()
        assert [s["text"] for s in approved["statements"]] == ["tall heroes"]


async def test_search_statements_over_rest(client: httpx.AsyncClient) -> None:
    kb = client.app.state.service.registry.get("superhero").knowledge_base(create=True)
    kb.add("tall heroes", "superhero.height_cm > 200", status="approved")
    kb.add("heavy heroes", "superhero.weight_kg > 100", status="proposed")  # not approved: never returned
    r = (await client.get("/v1/databases/superhero/statements/search",
                          params={"question": "Which tall heroes are heavy?", "k": 3})).json()
    assert r["ok"] and [s["text"] for s in r["statements"]] == ["tall heroes"]
    assert r["statements"][0]["score"] > 0
    bad = await client.get("/v1/databases/superhero/statements/search", params={"question": "x", "k": 0})
    assert bad.status_code == 400
