"""The REST API through httpx's ASGI transport, with a scripted model."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tagql.llm.scripted import ScriptedLLM

from .conftest import sql_then_answer

pytestmark = pytest.mark.anyio


async def test_health_databases_schema(client: httpx.AsyncClient) -> None:
    health = (await client.get("/v1/health")).json()
    assert health["ok"] and health["queue"] == {"pending": 0, "size": 8}
    dbs = (await client.get("/v1/databases")).json()["databases"]
    assert dbs == [{"name": "superhero", "kind": "database", "dialect": "sqlite",
                    "tables": ["alignment", "attribute", "colour", "gender", "hero_attribute", "hero_power",
                               "publisher", "race", "superhero", "superpower"]}]
    schema = (await client.get("/v1/databases/superhero/schema")).json()
    hero = next(t for t in schema["tables"] if t["name"] == "superhero")
    assert {"name", "type", "primary_key", "samples"} <= set(hero["columns"][0])
    assert "CREATE TABLE superhero" in schema["prompt"]
    r = await client.get("/v1/databases/nope/schema")
    assert r.status_code == 404 and r.json() == {
        "ok": False, "error": "no database or collection 'nope' on this server (GET /v1/databases lists them)",
        "status": 404}


async def test_sql_runs_read_only_with_statuses(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/sql", json={"database": "superhero", "sql": "SELECT COUNT(*) AS n FROM superhero"})
    assert r.status_code == 200 and r.json()["rows"] == [[750]] and r.json()["columns"] == ["n"]
    for sql, status in [("DELETE FROM superhero", 422), ("SELEC nonsense", 422),
                        ("SELECT no_such_column FROM superhero", 422)]:
        r = await client.post("/v1/sql", json={"database": "superhero", "sql": sql})
        assert r.status_code == status and r.json()["ok"] is False and r.json()["status"] == status, sql
    assert (await client.post("/v1/sql", json={"database": "other", "sql": "SELECT 1"})).status_code == 404
    r = await client.post("/v1/sql", json={"database": "superhero"})
    assert r.status_code == 400 and r.json()["error"] == "sql: Field required"
    # a client cannot open a path of its own: names only
    r = await client.post("/v1/sql", json={"database": "/etc/passwd", "sql": "SELECT 1"})
    assert r.status_code == 404


async def test_ask_store_csv_and_feedback_to_verified_example(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/ask", json={"question": "How many superheroes are there?", "database": "superhero"})
    body = r.json()
    assert r.status_code == 200 and body["ok"] and body["values"] == [750] and len(body["id"]) == 32
    assert body["sql"] == "SELECT COUNT(*) FROM superhero" and body["answer"] == "750"
    stored = (await client.get(f"/v1/answers/{body['id']}")).json()
    assert stored["answer"] == body["answer"] and stored["target"] == "superhero" and stored["feedback"] == []
    csv = await client.get(f"/v1/answers/{body['id']}.csv")
    assert csv.headers["content-type"].startswith("text/csv") and csv.text.splitlines() == ["COUNT(*)", "750"]
    assert (await client.get("/v1/answers/0123.csv")).status_code == 404

    ok = (await client.post(f"/v1/answers/{body['id']}/feedback", json={"correct": True})).json()
    assert ok["verified_example_id"] == 1
    fixed = await client.post(f"/v1/answers/{body['id']}/feedback",
                              json={"correct": False, "sql": "SELECT COUNT(id) FROM superhero", "note": "ids"})
    assert fixed.json()["verified_example_id"] == 2
    bad = await client.post(f"/v1/answers/{body['id']}/feedback", json={"correct": False, "sql": "SELECT nope"})
    assert bad.status_code == 422
    wrong = (await client.post(f"/v1/answers/{body['id']}/feedback", json={"correct": False})).json()
    assert wrong["verified_example_id"] is None
    examples = (await client.get("/v1/databases/superhero/examples")).json()["examples"]
    assert [(e["question"], e["sql"]) for e in examples] == [
        ("How many superheroes are there?", "SELECT COUNT(*) FROM superhero"),
        ("How many superheroes are there?", "SELECT COUNT(id) FROM superhero")]
    assert len((await client.get(f"/v1/answers/{body['id']}")).json()["feedback"]) == 3


async def test_bad_asks_are_400_404_413(client: httpx.AsyncClient) -> None:
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"question": "x?", "database": "superhero", "method": "magic"}, 400, "unknown method 'magic'"),
        ({"question": "x?", "database": "superhero", "k": -1}, 400, "k must be 0 or more"),
        ({"question": "x?"}, 400, "name a database or a collection"),
        ({"question": "x?", "database": "superhero", "collection": "c"}, 400, "name a database or a collection"),
        ({"question": "x?", "database": "nope"}, 404, "no database 'nope'"),
        ({"question": "x?", "collection": "nope"}, 404, "no collection 'nope'"),
        ({"question": "   ", "database": "superhero"}, 400, "the question is empty"),
        ({"question": "x" * 2001, "database": "superhero"}, 413, "the limit is 2000"),
        ({"question": "x?", "database": "superhero", "pick": "a"}, 400, "pick applies to collections only"),
    ]
    for body, status, message in cases:
        r = await client.post("/v1/ask", json=body)
        assert r.status_code == status and message in r.json()["error"], (body, r.json())
    r = await client.post("/v1/sql", content=b"{" + b" " * 70_000 + b"}", headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["status"] == 413


def blocking_llm() -> tuple[ScriptedLLM, threading.Event]:
    release = threading.Event()
    answer = sql_then_answer()

    def reply(messages: Any) -> str:
        assert release.wait(10)
        return answer(messages)

    return ScriptedLLM(reply), release


async def wait_for(cond: Callable[[], bool]) -> None:
    for _ in range(500):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def test_full_queue_is_429_with_retry_after(make_app: Callable[..., Any]) -> None:
    llm, release = blocking_llm()
    app = make_app(llm=llm, queue_size=2, retry_after_s=7)
    service = app.state.service
    ask = {"question": "How many superheroes are there?", "database": "superhero"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        first = [asyncio.create_task(c.post("/v1/ask", json=ask)) for _ in range(2)]
        await wait_for(lambda: service.queue.pending == 2)
        r = await c.post("/v1/ask", json=ask)
        assert r.status_code == 429 and r.headers["retry-after"] == "7" and r.json()["status"] == 429
        release.set()
        assert [(await t).status_code for t in first] == [200, 200]
        assert service.queue.pending == 0
        assert (await c.post("/v1/ask", json=ask)).status_code == 200


async def test_slow_answer_is_504(make_app: Callable[..., Any]) -> None:
    llm, release = blocking_llm()
    app = make_app(llm=llm, ask_timeout_s=0.2)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        r = await c.post("/v1/ask", json={"question": "How many superheroes are there?", "database": "superhero"})
        assert r.status_code == 504 and "no answer within 0.2 s" in r.json()["error"]
    release.set()
    await wait_for(lambda: app.state.service.queue.pending == 0)  # the worker stopped at its next stage


async def test_metrics_count_requests_by_route_and_asks_by_outcome(client: httpx.AsyncClient) -> None:
    answered = await client.post("/v1/ask", json={"question": "How many superheroes are there?",
                                                  "database": "superhero"})
    await client.get(f"/v1/answers/{answered.json()['id']}")
    await client.post("/v1/sql", json={"database": "superhero", "sql": "DELETE FROM superhero"})
    r = await client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    lines = set(r.text.splitlines())
    assert 'tagql_http_requests_total{method="POST",route="/v1/ask",status="200"} 1.0' in lines
    assert 'tagql_http_requests_total{method="GET",route="/v1/answers/{answer_id}",status="200"} 1.0' in lines
    assert 'tagql_http_requests_total{method="POST",route="/v1/sql",status="422"} 1.0' in lines
    assert 'tagql_asks_total{outcome="answered"} 1.0' in lines
    assert "tagql_queue_pending 0.0" in lines and "tagql_queue_size 8.0" in lines
