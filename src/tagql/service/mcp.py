"""The MCP server: the registered databases as tools for AI agents, through the same public API and model
queue as the REST service. ``tagql mcp`` serves it over stdio; ``tagql serve`` over streamable HTTP at
``/mcp`` (:func:`http_endpoint`, behind the same bearer tokens). Built on the official ``mcp`` SDK (v2)."""

from __future__ import annotations

from typing import Any

import anyio
from mcp.server.mcpserver import Context  # at module level: the tool signatures' annotations name it

import tagql
from tagql.config import Settings
from tagql.models import METHODS
from tagql.service.core import AskQueue, KnowledgeSearch, Registry


def build_server(settings: Settings, registry: Registry, *, queue: AskQueue | None = None,
                 search: KnowledgeSearch | None = None) -> Any:
    """An ``MCPServer`` with the tools ``list_databases``, ``describe_schema``, ``run_sql``, ``route``,
    ``search_knowledge`` and ``ask``. Errors come back as tool errors carrying tagql's one-line message.
    ``queue`` is the model queue to share (the REST service's); ``owner()`` names the caller's queue lane
    (the HTTP transport passes the token's name, so MCP questions queue fairly beside REST ones)."""
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    limits = (f"Read-only: one SELECT, at most {settings.db.row_cap} rows, stopped after "
              f"{settings.db.statement_timeout_s:g} s.")
    ask_limit = (f"A question waits in a queue of {settings.service.queue_size} and is given up after "
                 f"{settings.service.ask_timeout_s:g} s.")
    queue = queue or AskQueue(settings.service.queue_size, settings.service.workers)
    search = search or KnowledgeSearch(registry)
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

    @server.tool(description="The domain statements an expert wrote for a database (\"'tall heroes' refers to "
                             "superhero.height_cm > 200\") that best match a question, best first, with their "
                             "retrieval scores: what tagql puts into its SQL prompt. Only approved statements; "
                             "an empty list when the database has none. `k`: at most this many (1-20).")
    async def search_knowledge(question: str, database: str, k: int = 3,
                               collection: str | None = None) -> dict[str, Any]:
        if not 1 <= k <= 20:
            raise ToolError("k must be between 1 and 20")
        found = await call(search.search, collection or database, question, k, database if collection else None)
        return {"database": database, "statements": found}

    @server.tool(description="Answer a natural-language question: tagql writes SQL, runs it read-only and "
                             "answers from the rows (returns the answer, the SQL, the rows). Give `database`, "
                             "or `collection` to route the question. `method`: one of "
                             f"{', '.join(METHODS)}. One question runs at a time on the local model. " + ask_limit + " "
                             + limits)
    async def ask(question: str, database: str | None = None, collection: str | None = None,
                  method: str = "sql", force: bool = False, ctx: Context | None = None) -> dict[str, Any]:
        if (database is None) == (collection is None):
            raise ToolError("give database or collection (list_databases names them)")
        try:
            session = registry.get(collection, "collection") if collection else registry.get(database, "database")
            lane = _caller(ctx)
            fut, _ = queue.submit(lambda: session.ask(question, method=method, force=force), owner=lane)
            answer = await anyio.to_thread.run_sync(lambda: fut.result(settings.service.ask_timeout_s))
        except TimeoutError:
            raise ToolError(f"no answer within {settings.service.ask_timeout_s:g} s") from None
        except tagql.TagqlError as exc:
            raise ToolError(exc.one_line()) from None
        return answer.to_dict()

    return server


class _HttpEndpoint:
    """``/mcp``: the caller's token checked like any REST route (role ``reader``), then the SDK's
    streamable HTTP transport (stateless: any replica can answer any request)."""

    def __init__(self, manager: Any, check: Any) -> None:
        self.manager, self.check = manager, check

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        who = await self.check(scope, receive, send)
        if who is None:
            return
        scope[PRINCIPAL_KEY] = who  # set by the server, never from a header: the tools' caller
        await self.manager.handle_request(scope, receive, send)


PRINCIPAL_KEY = "tagql.principal"


def _caller(ctx: Any) -> str:
    """The queue lane of a tool call: the token's name over HTTP, ``mcp`` over stdio."""
    try:
        request = ctx.request_context.request if ctx is not None else None
    except ValueError:  # no request (called outside one)
        request = None
    who = getattr(request, "scope", {}).get(PRINCIPAL_KEY) if request is not None else None
    return who.name if who is not None else "mcp"


def http_endpoint(server: Any, *, host: str, check: Any) -> tuple[Any, Any]:
    """(the ASGI endpoint for ``/mcp``, the session manager's ``run()`` for the app's lifespan).
    ``check(scope, receive, send)`` answers an unauthorised request itself and returns None, else the
    principal. Bound to loopback, the
    SDK's DNS-rebinding protection only lets loopback Host/Origin headers through."""
    from mcp.server.transport_security import TransportSecuritySettings

    from tagql.service.core import is_loopback

    security = None if is_loopback(host) else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    server.streamable_http_app(stateless_http=True, json_response=True, transport_security=security, host=host)
    manager = server.session_manager
    return _HttpEndpoint(manager, check), manager.run
