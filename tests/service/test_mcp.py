"""The MCP server through the SDK's own client: in process (with a scripted model) and over stdio
(`tagql mcp` as a subprocess)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tagql.config import load_settings
from tagql.llm.scripted import ScriptedLLM

from .conftest import sql_then_answer

pytestmark = pytest.mark.anyio


def payload(result) -> dict:
    assert not result.is_error, result.content
    return result.structured_content if result.structured_content is not None else json.loads(result.content[0].text)


async def test_tools_in_process(demo_db_path: Path) -> None:
    from mcp import Client

    from tagql.service.core import Registry
    from tagql.service.mcp import build_server

    settings = load_settings()
    registry = Registry(settings, databases={"heroes": str(demo_db_path)}, collections=[],
                        llm=ScriptedLLM(sql_then_answer()))
    async with Client(build_server(settings, registry)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {"list_databases", "describe_schema", "run_sql", "route", "ask", "search_knowledge"}
        assert "at most 10000 rows" in tools["run_sql"].description
        listed = payload(await client.call_tool("list_databases", {}))
        assert [d["name"] for d in listed["databases"]] == ["heroes"]
        schema = await client.call_tool("describe_schema", {"database": "heroes"})
        assert "CREATE TABLE superhero" in schema.content[0].text
        rows = payload(await client.call_tool("run_sql", {"database": "heroes", "sql": "SELECT COUNT(*) FROM superhero"}))
        assert rows["rows"] == [[750]]
        answer = payload(await client.call_tool("ask", {"question": "How many superheroes are there?",
                                                       "database": "heroes"}))
        assert answer["values"] == [750] and answer["sql"] == "SELECT COUNT(*) FROM superhero"
        bad = await client.call_tool("run_sql", {"database": "heroes", "sql": "DELETE FROM superhero"})
        assert bad.is_error and bad.content[0].text.endswith(": only SELECT queries may run, got DELETE")
        unknown = await client.call_tool("ask", {"question": "x?", "database": "nope"})
        assert unknown.is_error and "no database 'nope'" in unknown.content[0].text
