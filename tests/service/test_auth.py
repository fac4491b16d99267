"""Tokens and roles: only hashes are stored; each role may do what the roles below it may; the server runs
open only on loopback with no tokens, and refuses a non-loopback address without tokens."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from tagql.service.core import ServiceError
from tagql.service.state import MIGRATIONS, ROLES, SCHEMA_VERSION, StateStore, TokenError

pytestmark = pytest.mark.anyio

# (method, path, body, the least role that may call it)
ENDPOINTS: list[tuple[str, str, dict[str, Any] | None, str]] = [
    ("GET", "/v1/databases", None, "reader"),
    ("GET", "/v1/databases/superhero/schema", None, "reader"),
    ("POST", "/v1/sql", {"database": "superhero", "sql": "SELECT 1"}, "reader"),
    ("POST", "/v1/ask", {"database": "superhero", "question": "How many superheroes are there?"}, "reader"),
    ("GET", "/v1/databases/superhero/statements", None, "reader"),
    ("POST", "/v1/databases/superhero/statements", {"text": "tall by {role}", "sql": "superhero.height_cm > 200"},
     "expert"),
    ("POST", "/v1/databases/superhero/statements/1/review", {"action": "approve"}, "reviewer"),
    ("GET", "/v1/tokens", None, "admin"),
    ("POST", "/v1/tokens", {"name": "made-by-{role}", "role": "reader"}, "admin"),
]


@pytest.fixture()
def store(tmp_path: Path) -> StateStore:
    return StateStore(f"sqlite:///{tmp_path / 'state.sqlite'}")


async def test_role_matrix(make_app: Callable[..., Any], store: StateStore) -> None:
    tokens = {role: store.create_token(f"user-{role}", role) for role in ROLES}
    app = make_app(store=store)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        for method, path, body, least in ENDPOINTS:
            r = await c.request(method, path, json=body)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", path
            for header in ("Bearer tq_wrong", "Bearer ", "Basic dXNlcjpwYXNz", tokens["admin"]):
                r = await c.request(method, path, json=body, headers={"authorization": header})
                assert r.status_code == 401, (path, header)
            for role, token in tokens.items():
                filled = {k: v.format(role=role) if isinstance(v, str) else v for k, v in (body or {}).items()}
                r = await c.request(method, path, json=filled or None, headers={"authorization": f"Bearer {token}"})
                allowed = ROLES.index(role) >= ROLES.index(least)
                assert r.status_code == (200 if allowed else 403), (method, path, role, r.json())
                if not allowed:
                    assert r.json()["error"] == f"the role '{role}' may not do this (it needs '{least}' or above)"
        assert (await c.get("/v1/health")).status_code == 200  # no auth
        asked = (await c.post("/v1/ask", json=ENDPOINTS[3][2],
                              headers={"authorization": f"Bearer {tokens['reader']}"})).json()
    with store.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT token_name FROM answers WHERE id = :i"), {"i": asked["id"]}).scalar() \
            == "user-reader"
        hashes = [r[0] for r in conn.execute(sa.text("SELECT token_hash FROM tokens"))]
    assert len(hashes) == 5 and not any(t in hashes for t in tokens.values())  # only hashes are kept


async def test_open_only_on_loopback_without_tokens(make_app: Callable[..., Any], store: StateStore) -> None:
    with pytest.raises(ServiceError, match="refusing to serve on 0.0.0.0 without tokens"):
        make_app(host="0.0.0.0", store=store)
    app = make_app(store=store)
    app.state.service.auth_cache_s = 0  # the token made below by another process counts at once
    local = httpx.ASGITransport(app=app, client=("127.0.0.1", 5000))
    remote = httpx.ASGITransport(app=app, client=("10.1.2.3", 5000))
    async with httpx.AsyncClient(transport=local, base_url="http://t") as c:
        assert (await c.get("/v1/databases")).status_code == 200  # open: local use
    async with httpx.AsyncClient(transport=remote, base_url="http://t") as c:
        assert (await c.get("/v1/databases")).status_code == 401  # never open to another host
    token = store.create_token("admin", "admin")
    async with httpx.AsyncClient(transport=local, base_url="http://t") as c:
        assert (await c.get("/v1/databases")).status_code == 401  # tokens exist: even loopback needs one
        made = (await c.post("/v1/tokens", json={"name": "ann", "role": "expert"},
                             headers={"authorization": f"Bearer {token}"})).json()
    assert made["token"].startswith("tq_") and store.lookup_token(made["token"]) == ("ann", "expert")
    async with httpx.AsyncClient(transport=local, base_url="http://t") as c:
        ann = {"authorization": f"Bearer {made['token']}"}
        assert (await c.get("/v1/databases", headers=ann)).status_code == 200
        app.state.service.auth_cache_s = 60
        assert (await c.get("/v1/databases", headers=ann)).status_code == 200  # cached now
        assert (await c.delete("/v1/tokens/ann", headers={"authorization": f"Bearer {token}"})).status_code == 200
        assert (await c.get("/v1/databases", headers=ann)).status_code == 401  # revoked here: at once
    make_app(host="0.0.0.0", store=store)  # with tokens it starts


def test_tokens_and_versioned_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    store = StateStore(url)
    token = store.create_token("bob", "reviewer")
    assert store.lookup_token(token) == ("bob", "reviewer") and store.lookup_token(token + "x") is None
    with pytest.raises(TokenError, match="unknown role 'boss'"):
        store.create_token("eve", "boss")
    with pytest.raises(TokenError, match="a token named 'bob' exists"):
        store.create_token("bob", "reader")
    assert store.revoke_token("bob") and store.lookup_token(token) is None
    with store.engine.connect() as conn:
        assert conn.execute(sa.text("PRAGMA journal_mode")).scalar() == "wal"
        assert [tuple(r) for r in conn.execute(sa.text("SELECT version, description FROM schema_version"))] == [
            (1, "tokens, answers, feedback, verified examples"), (2, "review history of knowledge statements"),
            *[(v, d) for v, d, _ in MIGRATIONS[2:]]]
    assert StateStore(url).migrate() == []  # reopening applies nothing
    with store.engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO schema_version VALUES (99, 'from the future', 'now')"))
    from tagql.service.state import StateError

    with pytest.raises(StateError, match=f"schema version 99, this tagql knows up to {SCHEMA_VERSION}"):
        StateStore(url)
