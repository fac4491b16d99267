"""MCP over streamable HTTP at ``/mcp`` on the REST server: the SDK's own client, with the same bearer tokens
and roles as the REST routes, the same model queue, and ``search_knowledge`` over the statements an expert
added through REST. In process (ASGI, the app's lifespan running) and against a real uvicorn on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.loopback import free_port, wait_until_healthy

from .test_uvicorn import REPO

pytestmark = pytest.mark.anyio

TOOLS = {"list_databases", "describe_schema", "run_sql", "route", "ask", "search_knowledge"}


def payload(result: Any) -> dict:
    assert not result.is_error, result.content
    return result.structured_content if result.structured_content is not None else json.loads(result.content[0].text)


def mcp_client(app: Any, token: str | None) -> Any:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), headers=headers,
                              base_url="http://127.0.0.1:8000")
    return Client(streamable_http_client("http://127.0.0.1:8000/mcp", http_client=http))


async def test_tools_over_http_with_tokens(make_app: Callable[..., Any]) -> None:
    app = make_app()
    store = app.state.service.store
    reader, expert = store.create_token("rita", "reader"), store.create_token("erin", "expert")
    async with app.router.lifespan_context(app):
        async with mcp_client(app, reader) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == TOOLS
            assert "at most 10000 rows" in tools["run_sql"].description
            assert "queue of 8" in tools["ask"].description and "after 600 s" in tools["ask"].description
            assert "ctx" not in tools["ask"].input_schema["properties"]
            rows = payload(await client.call_tool("run_sql", {"database": "superhero",
                                                              "sql": "SELECT COUNT(*) FROM superhero"}))
            assert rows["rows"] == [[750]]
            answer = payload(await client.call_tool("ask", {"question": "How many superheroes are there?",
                                                           "database": "superhero"}))
            assert answer["values"] == [750]
            none = payload(await client.call_tool("search_knowledge", {"question": "tall heroes",
                                                                      "database": "superhero"}))
            assert none == {"database": "superhero", "statements": []}

        # an expert adds a statement through REST, a reviewer approves it: search_knowledge finds it
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
            auth = {"authorization": f"Bearer {expert}"}
            st = (await c.post("/v1/databases/superhero/statements", headers=auth, json={
                "text": "tall heroes", "sql": "superhero.height_cm > 200"})).json()["statement"]
            kb = app.state.service.registry.get("superhero").knowledge_base()
            kb.approve(st["id"])
            kb.add("blue-eyed heroes", "superhero.eye_colour_id = 7", status="approved")
        async with mcp_client(app, reader) as client:
            found = payload(await client.call_tool("search_knowledge", {"question": "How many tall heroes?",
                                                                       "database": "superhero", "k": 1}))
            assert [(s["text"], s["sql"]) for s in found["statements"]] == [("tall heroes", "superhero.height_cm > 200")]
            assert found["statements"][0]["rendered"] == "'tall heroes' refers to superhero.height_cm > 200"
            bad = await client.call_tool("search_knowledge", {"question": "x", "database": "nope"})
            assert bad.is_error and "no database or collection 'nope'" in bad.content[0].text


async def test_mcp_needs_a_token_when_tokens_exist(make_app: Callable[..., Any], tmp_path: Path) -> None:
    from tagql.service.state import StateStore

    app = make_app()
    app.state.service.store.create_token("rita", "reader")
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
            r = await c.post("/mcp", json=init, headers=headers)
            assert r.status_code == 401 and r.json()["error"].startswith("this server needs a token")
            assert r.headers["www-authenticate"] == "Bearer"
            r = await c.post("/mcp", json=init, headers=headers | {"authorization": "Bearer tq_nope"})
            assert r.status_code == 401 and "unknown token" in r.json()["error"]
    # no tokens, loopback: open, but a foreign Host header is refused (DNS rebinding)
    open_app = make_app(store=StateStore(f"sqlite:///{tmp_path / 'open.sqlite'}"))
    async with open_app.router.lifespan_context(open_app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=open_app), base_url="http://evil.example") as c:
            r = await c.post("/mcp", json=init, headers=headers)
            assert r.status_code == 421, r.text
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=open_app), base_url="http://127.0.0.1:8000") as c:
            r = await c.post("/mcp", json=init, headers=headers)
            assert r.status_code == 200 and r.json()["result"]["serverInfo"]["name"] == "tagql"


def _chain(exc: BaseException) -> str:
    """The messages of an exception, its causes and (exception groups) its members."""
    parts = [f"{type(exc).__name__}: {exc}"]
    for sub in getattr(exc, "exceptions", ()):
        parts.append(_chain(sub))
    if exc.__cause__ is not None:
        parts.append(_chain(exc.__cause__))
    return " | ".join(parts)


def test_mcp_over_real_uvicorn(tmp_path: Path, demo_db_path: Path) -> None:
    import anyio

    from tagql.service.state import StateStore

    state = tmp_path / "state.sqlite"
    token = StateStore(f"sqlite:///{state}").create_token("agent", "reader")
    config = tmp_path / "tagql.toml"
    config.write_text(f'[service]\nstate_url = "sqlite:///{state}"\n')
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(REPO / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tagql.cli", "serve", "--config", str(config), "--port", str(port),
         "--db", f"heroes={demo_db_path}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"

    async def talk() -> None:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"})
        async with Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            listed = payload(await client.call_tool("list_databases", {}))
            assert [d["name"] for d in listed["databases"]] == ["heroes"]
            rows = payload(await client.call_tool("run_sql", {"database": "heroes",
                                                              "sql": "SELECT COUNT(*) AS n FROM superhero"}))
            assert rows["rows"] == [[750]]
            schema = await client.call_tool("describe_schema", {"database": "heroes"})
            assert "CREATE TABLE superhero" in schema.content[0].text
            bad = await client.call_tool("run_sql", {"database": "heroes", "sql": "DROP TABLE superhero"})
            assert bad.is_error and bad.content[0].text.endswith("only SELECT queries may run, got DROP")

    async def anonymous() -> None:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async with Client(streamable_http_client(f"{base}/mcp", http_client=httpx2.AsyncClient())) as client:
            await client.list_tools()

    try:
        wait_until_healthy(base)
        anyio.run(talk)
        with pytest.raises(BaseException) as refused:  # noqa: B017 - no token: initialize gets 401
            anyio.run(anonymous)
        assert "MCPError: Server returned an error response" in _chain(refused.value)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=20)
    assert "POST /mcp HTTP/1.1\" 200" in out and "POST /mcp HTTP/1.1\" 401" in out
