"""`tagql token`, `tagql serve`'s refusals and `tagql mcp` over stdio (the SDK's client)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tagql.cli import app

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    path = tmp_path / "tagql.toml"
    path.write_text(f'[service]\nstate_url = "sqlite:///{tmp_path / "state.sqlite"}"\n')
    return path


def test_token_create_list_revoke(config: Path) -> None:
    from tagql.service.state import StateStore

    runner = CliRunner()
    made = runner.invoke(app, ["token", "create", "ana", "--role", "expert", "--config", str(config)])
    assert made.exit_code == 0, made.output
    token = made.output.strip()
    store = StateStore(f"sqlite:///{config.parent / 'state.sqlite'}")
    assert token.startswith("tq_") and store.lookup_token(token) == ("ana", "expert")
    listed = runner.invoke(app, ["token", "list", "--config", str(config)])
    assert listed.exit_code == 0 and "ana\texpert" in listed.output and token not in listed.output
    again = runner.invoke(app, ["token", "create", "ana", "--config", str(config)])
    assert again.exit_code == 2 and "a token named 'ana' exists" in again.output
    bad = runner.invoke(app, ["token", "create", "bo", "--role", "boss", "--config", str(config)])
    assert bad.exit_code == 2 and "unknown role 'boss' (use one of: reader, expert, reviewer, admin)" in bad.output
    assert runner.invoke(app, ["token", "revoke", "ana", "--config", str(config)]).exit_code == 0
    assert store.lookup_token(token) is None


def test_serve_refuses_bad_setups(config: Path, demo_db_path: Path) -> None:
    runner = CliRunner()
    public = runner.invoke(app, ["serve", "--host", "0.0.0.0", "--config", str(config), "--db", f"h={demo_db_path}"])
    assert public.exit_code == 2 and "refusing to serve on 0.0.0.0 without tokens" in public.output
    nodb = runner.invoke(app, ["serve", "--config", str(config)])
    assert nodb.exit_code == 2 and "no database registered" in nodb.output
    bad = runner.invoke(app, ["serve", "--config", str(config), "--db", str(demo_db_path)])
    assert bad.exit_code == 2 and "--db wants NAME=PATH_OR_URL" in bad.output
    missing = runner.invoke(app, ["serve", "--config", str(config), "--db", "h=/nonexistent.sqlite"])
    assert missing.exit_code == 2 and "does not exist" in missing.output


@pytest.mark.anyio
async def test_mcp_over_stdio(config: Path, demo_db_path: Path) -> None:
    from mcp import Client, StdioServerParameters

    server = StdioServerParameters(
        command=sys.executable, args=["-m", "tagql.cli", "mcp", "--config", str(config), "--db", f"heroes={demo_db_path}"],
        env={"PYTHONPATH": os.environ.get("PYTHONPATH") or str(REPO / "src")})
    async with Client(server) as client:
        assert {t.name for t in (await client.list_tools()).tools} >= {"list_databases", "run_sql", "ask"}
        result = await client.call_tool("run_sql", {"database": "heroes",
                                                    "sql": "SELECT COUNT(*) AS n FROM superhero"})
        assert not result.is_error and result.structured_content["rows"] == [[750]]


@pytest.fixture()
def anyio_backend() -> str:
    return "asyncio"
