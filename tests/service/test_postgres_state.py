"""Two replicas sharing one PostgreSQL state database: a token made on one works on the other, an answer
given by one is read, corrected and turned into a verified example through the other."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from tagql.service.state import SCHEMA_VERSION, StateStore

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "tagql_service_test"


@pytest.fixture()
def state_url(postgres_owner_url: str) -> str:
    engine = sa.create_engine(postgres_owner_url)  # the state writes: the owner role
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
        conn.execute(sa.text(f"CREATE SCHEMA {SCHEMA}"))
    engine.dispose()
    sep = "&" if "?" in postgres_owner_url else "?"
    return f"{postgres_owner_url}{sep}options=-csearch_path%3D{SCHEMA}"


async def test_two_replicas_share_state(make_app: Callable[..., Any], state_url: str) -> None:
    first, second = StateStore(state_url), StateStore(state_url)  # one engine each, as two processes
    assert first.version() == second.version() == SCHEMA_VERSION and second.migrate() == []
    token = first.create_token("ana", "reader")
    a = make_app(store=first, host="0.0.0.0")
    b = make_app(store=second, host="0.0.0.0")  # starts on a public address: the token is in the shared state
    auth = {"authorization": f"Bearer {token}"}
    ask = {"question": "How many superheroes are there?", "database": "superhero"}
    async with (httpx.AsyncClient(transport=httpx.ASGITransport(app=a), base_url="http://a", headers=auth) as ca,
                httpx.AsyncClient(transport=httpx.ASGITransport(app=b), base_url="http://b", headers=auth) as cb):
        answer = (await ca.post("/v1/ask", json=ask)).json()
        seen = (await cb.get(f"/v1/answers/{answer['id']}")).json()
        assert seen["values"] == [750] and seen["target"] == "superhero"
        fixed = await cb.post(f"/v1/answers/{answer['id']}/feedback",
                              json={"correct": False, "sql": "SELECT COUNT(DISTINCT id) FROM superhero"})
        assert fixed.status_code == 200
        examples = (await ca.get("/v1/databases/superhero/examples")).json()["examples"]
        assert [e["sql"] for e in examples] == ["SELECT COUNT(DISTINCT id) FROM superhero"]
        assert len((await ca.get(f"/v1/answers/{answer['id']}")).json()["feedback"]) == 1
    with first.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT current_schema()")).scalar() == SCHEMA
