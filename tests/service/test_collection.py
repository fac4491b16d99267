"""A registered collection: /v1/route, a routed /v1/ask, the client's pick, /v1/sql on a member database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tagql.config import load_settings
from tagql.llm.base import Message
from tagql.llm.scripted import ScriptedLLM

pytestmark = pytest.mark.anyio


def by_schema(messages: list[Message]) -> str:
    prompt = messages[0].content
    if "CREATE TABLE singer" in prompt:
        return "SELECT COUNT(*) FROM singer"
    if "CREATE TABLE superhero" in prompt:
        return "SELECT COUNT(*) FROM superhero"
    return "Counted."


@pytest.fixture()
def app(tmp_path: Path, demo_db_path: Path, shared_data: Path) -> Any:
    from tagql.routing.collection import Collection
    from tagql.service.app import create_app
    from tagql.service.state import StateStore

    settings = load_settings(collections_dir=tmp_path / "collections", knowledge_dir=tmp_path / "knowledge")
    coll = Collection.create("mixed", settings=settings)
    coll.add_database(str(demo_db_path))
    coll.add_database(str(shared_data / "spider" / "database" / "concert_singer" / "concert_singer.sqlite"))
    coll.save()
    settings.service.collections = ["mixed"]
    settings.service.route_method = "bm25"
    return create_app(settings, llm=ScriptedLLM(by_schema), store=StateStore(f"sqlite:///{tmp_path / 's.sqlite'}"))


async def test_routed_questions(app: Any) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        listed = (await c.get("/v1/databases")).json()["databases"]
        assert listed == [{"name": "mixed", "kind": "collection", "databases": ["superhero", "concert_singer"]}]
        route = (await c.post("/v1/route", json={"question": "How many singers do we have?", "collection": "mixed",
                                                 "k": 2})).json()
        assert [x["database"] for x in route["candidates"]] == ["concert_singer", "superhero"]
        ask = {"question": "How many singers do we have?", "collection": "mixed"}
        answer = (await c.post("/v1/ask", json=ask)).json()
        assert answer["database"] == "concert_singer" and answer["values"] == [6]
        assert answer["routing"][0]["database"] == "concert_singer"
        picked = (await c.post("/v1/ask", json={**ask, "pick": "superhero"})).json()
        assert picked["database"] == "superhero" and picked["values"] == [750]
        wrong = await c.post("/v1/ask", json={**ask, "pick": "nowhere"})
        assert wrong.status_code == 400 and "not among the routed candidates" in wrong.json()["error"]
        rows = await c.post("/v1/sql", json={"collection": "mixed", "database": "concert_singer",
                                             "sql": "SELECT COUNT(*) FROM singer"})
        assert rows.json()["rows"] == [[6]]
        csv = await c.get(f"/v1/answers/{answer['id']}.csv")
        assert csv.text.splitlines() == ["COUNT(*)", "6"]
        assert (await c.post("/v1/route", json={"question": "x?", "collection": "superhero"})).status_code == 404
