"""The web UI at ``/`` (docs/ui.md): server-rendered Jinja2 pages (autoescaped) plus small plain ES modules
under ``/ui/static``; every bit of data the pages show comes from the public REST API, called by the browser
with the user's token. The pages themselves carry no data, so they need no token.

Also the two endpoints the UI added to the API: ``POST /v1/chart`` (the chart choice of
:mod:`tagql.service.charts` for a result's columns and rows) and ``POST /v1/databases/{name}/statements/structure``
(an expert's plain words -> the LLM's phrase and SQL, shown for confirmation before anything is stored)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, get_args

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel, Field

import tagql
from tagql.api import UsageError
from tagql.service.charts import ChartError, chart

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
TEMPLATES = HERE / "templates"
MAX_CHART_ROWS = 5000
# The pages load scripts, styles, data and images from this server only, and run no inline or eval'd script
# (Vega evaluates its expressions with its interpreter: vega-embed's ``ast: true``). A value that slipped
# into the page as markup could neither run nor send anything elsewhere.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


class StructureRequest(BaseModel):
    nl: str = Field(min_length=1, max_length=2000, description="the statement in plain words, e.g. "
                                                                "'tall heroes are those over 2 metres'")


class ChartRequest(BaseModel):
    columns: list[str] = Field(description="the result's column names")
    rows: list[list[Any]] = Field(description=f"its rows (or a sample of them, at most {MAX_CHART_ROWS})")
    mark: str | None = Field(None, description="bar | line | point | none (default: proposed from the types)")
    x: str | None = Field(None, description="the column on x (default: proposed)")
    y: str | None = Field(None, description="the column on y (default: proposed)")


def mount_ui(app: FastAPI, reader: Any, expert: Any) -> None:
    """Add the pages, their static files, ``POST /v1/chart`` and the structuring preview to ``app``
    (``reader``, ``expert``: the route dependencies, ``Annotated[Principal, Depends(...)]``, that check the
    caller's role)."""
    check_reader = get_args(reader)[1]  # the Depends(...) of Annotated[Principal, Depends(...)]
    check_expert = get_args(expert)[1]
    templates = Jinja2Templates(directory=str(TEMPLATES))  # autoescape on for .html
    app.mount("/ui/static", StaticFiles(directory=str(STATIC)), name="ui-static")

    def page(request: Request, name: str, title: str) -> HTMLResponse:
        response = templates.TemplateResponse(request, name, {"title": title, "version": tagql.__version__,
                                                              "page": name.removesuffix(".html")})
        response.headers["Cache-Control"] = "no-cache"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Content-Security-Policy"] = CSP
        return response

    @app.get("/", include_in_schema=False, response_class=HTMLResponse)
    def ask_page(request: Request) -> HTMLResponse:
        return page(request, "ask.html", "Ask")

    @app.get("/knowledge", include_in_schema=False, response_class=HTMLResponse)
    def knowledge_page(request: Request) -> HTMLResponse:
        return page(request, "knowledge.html", "Knowledge")

    @app.post("/v1/chart", summary="The proposed Vega-Lite chart for a result (bar, line, scatter or none)")
    def chart_for(body: ChartRequest, _who: Any = check_reader) -> dict[str, Any]:
        if len(body.rows) > MAX_CHART_ROWS:
            raise UsageError(f"{len(body.rows)} rows were sent, the limit is {MAX_CHART_ROWS}",
                             "send a sample of the rows")
        try:
            return {"ok": True, **chart(body.columns, body.rows, mark=body.mark, x=body.x, y=body.y)}
        except ChartError as exc:
            raise UsageError(str(exc)) from None

    @app.post("/v1/databases/{name}/statements/structure",
              summary="Structure a statement in plain words with the LLM into a phrase and its SQL, for the expert "
                      "to confirm and then propose (nothing is stored; expert)")
    async def statement_structure(name: str, body: StructureRequest, request: Request,
                                  who: Any = check_expert) -> dict[str, Any]:
        from tagql.service.core import AskTimeout

        service = request.app.state.service
        session = service.registry.get(name, "database")

        def work() -> dict[str, Any]:
            from tagql.knowledge.structuring import Structurer

            kb = session.knowledge_base()
            schema = kb.schema if kb is not None else session.database().schema
            result = Structurer(session.llm(), schema, kb.exemplars() if kb is not None else None).structure(body.nl)
            return {"nl": result.nl, "text": result.text, "sql": result.sql, "problem": result.problem}

        fut, _ahead = service.queue.submit(work, owner=who.name)  # the model's queue, like a question
        try:
            found = await asyncio.wait_for(asyncio.wrap_future(fut), service.limits.ask_timeout_s)
        except TimeoutError:
            raise AskTimeout(f"no structuring within {service.limits.ask_timeout_s:g} s",
                             "write the phrase and SQL yourself") from None
        return {"ok": True, **found}
