"""The UI's own endpoints over HTTP (ASGI, no browser): the pages and their headers, POST /v1/chart, and the
structuring preview POST /v1/databases/{name}/statements/structure (expert role, nothing stored)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tagql.config import load_settings
from tagql.llm.scripted import ScriptedLLM

from .conftest import scripted

pytestmark = pytest.mark.anyio


@pytest.fixture()
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture()
def app(tmp_path: Path, demo_db_path: Path) -> Any:
    from tagql.service.app import create_app
    from tagql.service.state import StateStore

    settings = load_settings(knowledge_dir=tmp_path / "knowledge")
    settings.service.databases = {"superhero": str(demo_db_path)}
    return create_app(settings, llm=ScriptedLLM(scripted), store=StateStore(f"sqlite:///{tmp_path / 's.sqlite'}"),
                      host="127.0.0.1")


async def test_pages_and_chart(app: Any) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        page = await c.get("/")
        assert page.status_code == 200 and '<label for="question">Question</label>' in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert (await c.get("/knowledge")).status_code == 200
        js = await c.get("/ui/static/js/ask.js")
        assert js.status_code == 200 and "javascript" in js.headers["content-type"]
        assert "innerHTML" not in js.text  # data goes into the page as text only
        chart = (await c.post("/v1/chart", json={"columns": ["publisher_name", "n"],
                                                 "rows": [["Marvel", 387], ["DC", 224]]})).json()
        assert (chart["mark"], chart["x"], chart["y"]) == ("bar", "publisher_name", "n")
        bad = await c.post("/v1/chart", json={"columns": ["a"], "rows": [[1], [2]], "x": "nope"})
        assert bad.status_code == 400 and bad.json()["error"].startswith("no column 'nope' for x")


async def test_structure_preview_needs_an_expert_and_stores_nothing(app: Any) -> None:
    store = app.state.service.store
    reader, expert = store.create_token("rea", "reader"), store.create_token("erin", "expert")
    body = {"nl": "Tall heroes are those over 2 metres."}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        r = await c.post("/v1/databases/superhero/statements/structure", json=body,
                         headers={"authorization": f"Bearer {reader}"})
        assert r.status_code == 403
        as_expert = {"authorization": f"Bearer {expert}"}
        r = await c.post("/v1/databases/superhero/statements/structure", json=body, headers=as_expert)
        assert r.json() == {"ok": True, "nl": "Tall heroes are those over 2 metres.", "text": "tall heroes",
                            "sql": "superhero.height_cm > 200", "problem": ""}
        listed = await c.get("/v1/databases/superhero/statements", headers=as_expert)
        assert listed.json()["statements"] == []
        missing = await c.post("/v1/databases/nope/statements/structure", json=body, headers=as_expert)
        assert missing.status_code == 404
