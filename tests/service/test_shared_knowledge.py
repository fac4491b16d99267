"""Statements in the state store (``service.knowledge = "state"``): two replicas on one state database
(SQLite here; PostgreSQL in CI), each with its own empty knowledge folder so no file can carry anything:
an expert proposes through one, a reviewer approves through the other, and a question through the first
is answered with the statement, which search and the unresolved queue see too; the review history is
shared; a database's existing .kb file seeds the shared store once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tagql.config import load_settings
from tagql.knowledge.store import KnowledgeBase
from tagql.llm.scripted import ScriptedLLM
from tagql.service.app import create_app
from tagql.service.state import StateStore

from .conftest import sql_then_answer

pytestmark = pytest.mark.anyio


def replica(tmp_path: Path, demo_db_path: Path, state_url: str, folder: str) -> Any:
    settings = load_settings(knowledge_dir=tmp_path / folder)  # a folder of its own: nothing shared on disk
    settings.service.databases = {"superhero": str(demo_db_path)}
    settings.service.knowledge = "state"
    llm = ScriptedLLM(sql_then_answer(sql="SELECT COUNT(*) FROM superhero WHERE height_cm > 200"))
    return create_app(settings, llm=llm, store=StateStore(state_url), host="127.0.0.1")


async def two_replicas_share_statements(make: Callable[[str], Any]) -> None:
    a = make("knowledge-a")
    expert = a.state.service.store.create_token("erin", "expert")
    reviewer = a.state.service.store.create_token("rui", "reviewer")
    b = make("knowledge-b")
    as_expert, as_reviewer = ({"authorization": f"Bearer {t}"} for t in (expert, reviewer))
    ask = {"question": "How many tall heroes are there?", "database": "superhero"}
    async with (httpx.AsyncClient(transport=httpx.ASGITransport(app=a), base_url="http://a") as ca,
                httpx.AsyncClient(transport=httpx.ASGITransport(app=b), base_url="http://b") as cb):
        before = (await cb.post("/v1/ask", json=ask, headers=as_expert)).json()
        assert before["statements"] == []  # b's retriever is built now, with nothing in it
        st = (await ca.post("/v1/databases/superhero/statements", headers=as_expert, json={
            "text": "tall heroes", "sql": "superhero.height_cm > 200"})).json()["statement"]
        listed = (await cb.get("/v1/databases/superhero/statements", headers=as_expert)).json()["statements"]
        assert [(s["id"], s["status"], s["author"]) for s in listed] == [(st["id"], "proposed", "erin")]
        r = (await cb.post(f"/v1/databases/superhero/statements/{st['id']}/review", headers=as_reviewer,
                           json={"action": "approve", "note": "ok"})).json()
        assert [h["action"] for h in r["history"]] == ["propose", "approve"]
        after = (await cb.post("/v1/ask", json=ask, headers=as_expert)).json()
        assert [s["text"] for s in after["statements"]] == ["tall heroes"]  # b's live retriever caught up
        found = (await ca.get("/v1/databases/superhero/statements/search", headers=as_expert,
                              params={"question": "tall heroes?"})).json()["statements"]
        assert [s["sql"] for s in found] == ["superhero.height_cm > 200"]
        edited = (await ca.post(f"/v1/databases/superhero/statements/{st['id']}/review", headers=as_reviewer,
                                json={"action": "edit", "sql": "superhero.height_cm >= 200"})).json()
        assert edited["statement"]["sql"] == "superhero.height_cm >= 200"
        again = (await cb.post("/v1/ask", json=ask, headers=as_expert)).json()
        assert [s["sql"] for s in again["statements"]] == ["superhero.height_cm >= 200"]
    assert not any((Path(a.state.service.settings.knowledge_dir) / n).exists() for n in ("superhero.kb",))


async def test_two_replicas_on_one_sqlite_state(tmp_path: Path, demo_db_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.sqlite'}"
    await two_replicas_share_statements(lambda folder: replica(tmp_path, demo_db_path, url, folder))


@pytest.mark.postgres
async def test_two_replicas_on_one_postgres_state(tmp_path: Path, demo_db_path: Path, pg_schema_url: str) -> None:
    await two_replicas_share_statements(lambda folder: replica(tmp_path, demo_db_path, pg_schema_url, folder))


async def test_a_kb_file_seeds_the_shared_store_once(tmp_path: Path, demo_db_path: Path) -> None:
    from tagql.embeddings import make_embedder

    url = f"sqlite:///{tmp_path / 'state.sqlite'}"
    file = KnowledgeBase.open(tmp_path / "seed" / "superhero.kb", create=True, db_id="superhero",
                              embedder=make_embedder(load_settings()))
    file.add("tall heroes", "superhero.height_cm > 200", status="approved", author="erin")
    first = replica(tmp_path, demo_db_path, url, "seed")
    second = replica(tmp_path, demo_db_path, url, "seed")  # the same file again: not copied twice
    file.add("heavy heroes", "superhero.weight_kg > 100", status="approved")  # after seeding: file only
    for app in (first, second):
        kb = app.state.service.registry.knowledge_base("superhero")
        assert [(s.text, s.author) for s in kb.list()] == [("tall heroes", "erin")]
