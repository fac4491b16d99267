"""The service under test: the demo database registered as ``superhero``, a scripted model, state in a
temporary SQLite file, requests through httpx's ASGI transport (client address 127.0.0.1)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tagql.config import load_settings
from tagql.llm.base import Message
from tagql.llm.scripted import ScriptedLLM


def sql_then_answer(sql: str = "SELECT COUNT(*) FROM superhero", answer: str = "There are 750 superheroes.",
                    ) -> Callable[[list[Message]], str]:
    """A model that writes ``sql`` for SQL prompts (they carry the schema) and ``answer`` for the rest."""
    return lambda messages: sql if "CREATE TABLE" in messages[0].content else answer


@pytest.fixture()
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture()
def make_app(tmp_path: Path, demo_db_path: Path) -> Callable[..., Any]:
    from tagql.service.app import create_app
    from tagql.service.state import StateStore

    def make(llm: Any = None, host: str = "127.0.0.1", store: StateStore | None = None, **service: Any) -> Any:
        settings = load_settings(knowledge_dir=tmp_path / "knowledge")
        settings.service.databases = {"superhero": str(demo_db_path)}
        for key, value in service.items():
            setattr(settings.service, key, value)
        store = store or StateStore(f"sqlite:///{tmp_path / 'state.sqlite'}")
        return create_app(settings, llm=llm or ScriptedLLM(sql_then_answer()), store=store, host=host)

    return make


@pytest.fixture()
async def client(make_app: Callable[..., Any]) -> AsyncIterator[httpx.AsyncClient]:
    app = make_app()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://tagql") as c:
        c.app = app  # type: ignore[attr-defined]
        yield c
