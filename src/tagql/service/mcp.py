"""The MCP server (``tagql mcp``, stdio): the registered databases as tools for AI agents, through the same
public API and model queue as the REST service. Built on the official ``mcp`` SDK (v2)."""

from __future__ import annotations

from typing import Any

import anyio

import tagql
from tagql.config import Settings
from tagql.models import METHODS
from tagql.service.core import AskQueue, Registry


def build_server(settings: Settings, registry: Registry) -> Any:
    """An ``MCPServer`` with the tools ``list_databases``, ``describe_schema``, ``run_sql``, ``route`` and
    ``ask``. Errors come back as tool errors carrying tagql's one-line message."""
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    limits = (f"Read-only: one SELECT, at most {settings.db.row_cap} rows, stopped after "
              f"{settings.db.statement_timeout_s:g} s.")
    queue = AskQueue(settings.service.queue_size, settings.service.workers)
    server = MCPServer("tagql", version=tagql.__version__, instructions=(
        "Answer questions over the relational databases this server registered. Call list_databases "
        "first, describe_schema to see tables, then ask (natural language) or run_sql (SQL). " + limits))

    async def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))
        except tagql.TagqlError as exc:
            raise ToolError(exc.one_line()) from None

    @server.tool(description="The databases and collections registered on this server (names to pass to "
                             "the other tools).")
    async def list_databases() -> dict[str, Any]:
        return {"databases": await call(registry.describe)}

    @server.tool(description="A database's schema as CREATE TABLE statements with column descriptions and "
                             "sample values. `database` names a registered database (or, with `collection`, "
                             "one of its databases).")
    async def describe_schema(database: str, collection: str | None = None) -> str:
        if collection is not None:
            return (await call(lambda: registry.get(collection, "collection").schema(database))).to_prompt()
        return (await call(lambda: registry.get(database, "database").schema())).to_prompt()

    @server.tool(description="Run one read-only SQL query on a registered database. " + limits)
    async def run_sql(database: str, sql: str, collection: str | None = None) -> dict[str, Any]:
        if collection is not None:
            result = await call(lambda: registry.get(collection, "collection").sql(sql, database))
        else:
            result = await call(lambda: registry.get(database, "database").sql(sql))
        return result.model_dump(mode="json")

    @server.tool(description="For a question over a collection of databases: the best candidate databases "
                             "and tables, best first.")
    async def route(question: str, collection: str, k: int = 5) -> dict[str, Any]:
        candidates = await call(lambda: registry.get(collection, "collection").route(question, k))
        return {"candidates": [c.model_dump() for c in candidates]}

    @server.tool(description="Answer a natural-language question: tagql writes SQL, runs it read-only and "
                             "answers from the rows (returns the answer, the SQL, the rows). Give `database`, "
                             "or `collection` to route the question. `method`: one of "
                             f"{', '.join(METHODS)}. One question runs at a time on the local model. " + limits)
    async def ask(question: str, database: str | None = None, collection: str | None = None,
                  method: str = "sql", force: bool = False) -> dict[str, Any]:
        if (database is None) == (collection is None):
            raise ToolError("give database or collection (list_databases names them)")
        try:
            session = registry.get(collection, "collection") if collection else registry.get(database, "database")
            fut, _ = queue.submit(lambda: session.ask(question, method=method, force=force))
            answer = await anyio.to_thread.run_sync(fut.result)
        except tagql.TagqlError as exc:
            raise ToolError(exc.one_line()) from None
        return answer.to_dict()

    return server
