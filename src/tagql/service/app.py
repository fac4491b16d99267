"""The REST service: a FastAPI app over :mod:`tagql.api` (``tagql serve``; docs/service.md).

Every route parses, checks the caller's role, calls the public API (questions through the bounded model
queue, everything else in a worker thread) and serialises the API's own models. Errors are
``{"ok": false, "error": "<one line>", "status": N}``."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Annotated, Any, Literal

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

import tagql
from tagql.api import NoConfidentRoute, Session, UsageError
from tagql.config import Settings
from tagql.llm.base import LLM
from tagql.models import METHODS
from tagql.service.core import (
    AskQueue,
    AskTimeout,
    Forbidden,
    Job,
    KnowledgeSearch,
    Principal,
    QueueFull,
    Registry,
    ServiceError,
    TooLarge,
    Unauthorized,
    UnknownName,
    http_status,
    is_loopback,
)
from tagql.service.metrics import Metrics, MetricsMiddleware
from tagql.service.state import ROLES, StateStore, default_state_url, hash_token
from tagql.service.ui import mount_ui
from tagql.service.unresolved import UnresolvedQueue
from tagql.text2sql.answer import json_value

log = logging.getLogger("tagql.service")

# -- request bodies ----------------------------------------------------------------------------------


class AskRequest(BaseModel):
    question: str = Field(description="the question, in plain words")
    database: str | None = Field(None, description="a registered database (or give collection)")
    collection: str | None = Field(None, description="a registered collection: the question is routed")
    method: str = Field("sql", description=f"one of: {', '.join(METHODS)}")
    k: int | None = Field(None, description="domain statements retrieved for the prompt")
    pick: str | None = Field(None, description="collections: answer on this database of the candidates")
    force: bool = Field(False, description="collections: answer from the best guess even when unsure")
    conversation_id: str | None = Field(None, max_length=64, description="continue this conversation: the "
                                        "question is a follow-up of its earlier turns (every answer returns one)")


class SqlRequest(BaseModel):
    sql: str = Field(description="one read-only SELECT")
    database: str | None = Field(None, description="a registered database, or a database of `collection`")
    collection: str | None = None


class RouteRequest(BaseModel):
    question: str
    collection: str
    k: int = Field(5, ge=1, le=50)


class TokenRequest(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    role: str = Field(description=f"one of: {', '.join(ROLES)}")


class StatementRequest(BaseModel):
    text: str = Field(min_length=1, description="the domain phrase, e.g. 'tall heroes'")
    sql: str = Field("", description="what it refers to in SQL, e.g. superhero.height_cm > 200")
    nl: str = Field("", description="the expert's own wording, if any")


class ReviewRequest(BaseModel):
    action: Literal["approve", "reject", "edit"]
    note: str | None = Field(None, max_length=4000, description="the reviewer's note (a rejection's reason)")
    text: str | None = Field(None, description="edit: the new text part")
    sql: str | None = Field(None, description="edit: the new SQL part")


class DismissRequest(BaseModel):
    phrase: str = Field(min_length=1, max_length=400, description="the phrase (or its key) to take off the queue")


class FeedbackRequest(BaseModel):
    correct: bool = Field(description="was the answer right?")
    sql: str | None = Field(None, description="the right SQL, when the answer was wrong")
    note: str | None = Field(None, max_length=4000)


# -- the service -------------------------------------------------------------------------------------


class Service:
    """The registry, the queue, the state store and the settings the routes share."""

    def __init__(self, settings: Settings, registry: Registry, store: StateStore) -> None:
        self.settings = settings
        self.limits = settings.service
        self.registry = registry
        self.store = store
        self.queue = AskQueue(self.limits.queue_size, self.limits.workers)
        self.search = KnowledgeSearch(registry)
        self.unresolved = UnresolvedQueue(registry, self.search, store)
        self.open = False  # set by create_app from the bound address
        self._auth_cache: dict[str, tuple[float, Any]] = {}
        self.auth_cache_s = AUTH_CACHE_S

    def principal(self, request: Request) -> Principal:
        header = request.headers.get("authorization", "")
        if not header:
            # open (no tokens, bound to loopback): local use only, so a loopback client too (an app
            # bound elsewhere by a bare ASGI server cannot end up open to the network)
            client = request.client.host if request.client else ""
            if self.open and is_loopback(client) and not self._cached("has-tokens", self.store.has_tokens):
                return Principal("local", "admin")
            raise Unauthorized("this server needs a token")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        found = None
        if scheme.lower() == "bearer" and token:
            found = self._cached("token:" + hash_token(token), lambda: self.store.lookup_token(token))
        if found is None:
            raise Unauthorized("unknown token")
        return Principal(*found)

    def _cached(self, key: str, look: Any) -> Any:
        """Token look-ups, kept ``auth_cache_s`` (a token made or revoked by another process or replica takes
        effect within that time; through this server's /v1/tokens at once)."""
        now = time.monotonic()
        hit = self._auth_cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        value = look()
        if len(self._auth_cache) > 10_000:
            self._auth_cache.clear()
        self._auth_cache[key] = (now + self.auth_cache_s, value)
        return value

    def check_question(self, question: str) -> None:
        if not question.strip():
            raise UsageError("the question is empty")
        if len(question) > self.limits.max_question_chars:
            raise TooLarge(f"the question has {len(question)} characters, the limit is "
                           f"{self.limits.max_question_chars}", "shorten it")

    def target(self, database: str | None, collection: str | None) -> tuple[str, Session]:
        if (database is None) == (collection is None):
            raise UsageError("name a database or a collection", "GET /v1/databases lists them")
        if collection is not None:
            return collection, self.registry.get(collection, "collection")
        return database, self.registry.get(database, "database")  # type: ignore[arg-type,return-value]


AUTH_CACHE_S = 2.0


def role(needed: str) -> Any:
    async def check(request: Request) -> Principal:  # async: no thread hop (look-ups are cached)
        who = request.app.state.service.principal(request)
        if not who.may(needed):
            raise Forbidden(f"the role '{who.role}' may not do this", f"it needs '{needed}' or above")
        return who
    return Depends(check)


Reader = Annotated[Principal, role("reader")]


def error_body(exc: BaseException, status: int) -> dict[str, Any]:
    message = exc.one_line() if isinstance(exc, tagql.TagqlError) else "internal error (see the server log)"
    body: dict[str, Any] = {"ok": False, "error": message, "status": status}
    if isinstance(exc, NoConfidentRoute):
        body["candidates"] = [c.model_dump() for c in exc.candidates]
    return body


def error_response(exc: BaseException, retry_after_s: int = 5) -> JSONResponse:
    status = http_status(exc)
    headers = {}
    if status == 429:
        headers["Retry-After"] = str(retry_after_s)
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(error_body(exc, status), status_code=status, headers=headers)


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes (413), by Content-Length or as they stream in."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await error_response(TooLarge(f"the request body is over {self.limit} bytes"))(
                scope, receive, send)
        # a body without Content-Length (chunked) is read here, up to the limit, before the app sees it: an
        # error raised while the app reads would surface as FastAPI's 400 "error parsing the body"
        messages: list[dict] = []
        seen = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break  # the client went away
            seen += len(message.get("body", b""))
            if seen > self.limit:
                return await error_response(TooLarge(f"the request body is over {self.limit} bytes"))(
                    scope, receive, send)
            if not message.get("more_body"):
                break

        async def replay() -> dict:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


def create_app(settings: Settings | None = None, *, llm: str | LLM | None = None, registry: Registry | None = None,
               store: StateStore | None = None, host: str | None = None) -> FastAPI:
    """The ASGI app. ``settings.service`` names the databases, collections, state store and limits;
    ``host`` is the address it will be bound to (loopback without tokens runs open; any other address
    without tokens refuses to start). ``llm`` overrides the configured model (tests pass a scripted one)."""
    settings = settings or tagql.config.load_settings()
    conf = settings.service
    host = host or conf.host
    store = store or StateStore(conf.state_url or default_state_url(tagql.config.user_config_dir()))
    if not is_loopback(host) and not store.has_tokens():
        raise ServiceError(f"refusing to serve on {host} without tokens",
                           "create one with: tagql token create NAME --role admin (or bind to 127.0.0.1)")
    if conf.tag_cache == "state" and settings.tag.cache_url != store.url:  # operator verdicts in the state store
        settings = settings.model_copy(update={"tag": settings.tag.model_copy(update={"cache_url": store.url})})
    registry = registry or Registry(settings, databases=conf.databases, collections=conf.collections, llm=llm,
                                    knowledge_engine=store.engine if conf.knowledge == "state" else None)
    for session in registry.sessions.values():  # verified examples reach the SQL prompt, read at each question
        session.use_examples(lambda name: latest_examples(store.verified_examples(name)))
    service = Service(settings, registry, store)
    service.open = is_loopback(host)
    mcp_endpoint, mcp_run = _mcp(service, host)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with mcp_run():  # the MCP transport's task group lives as long as the server
            yield

    app = FastAPI(title="tagql", version=tagql.__version__, lifespan=lifespan,
                  description="Questions over registered databases: text-to-SQL, TAG methods, routing. "
                              "Errors are {ok: false, error, status}. MCP (streamable HTTP) at /mcp. "
                              "See docs/service.md.")
    app.state.service = service
    app.router.routes.append(Route("/mcp", mcp_endpoint, methods=["GET", "POST", "DELETE"]))

    @app.exception_handler(tagql.TagqlError)
    async def tagql_error(_request: Request, exc: tagql.TagqlError) -> JSONResponse:
        return error_response(exc, conf.retry_after_s)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"] if p != "body")
        message = f"{where}: {first['msg']}" if where else str(first["msg"])
        return JSONResponse({"ok": False, "error": message, "status": 400}, status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"ok": False, "error": str(exc.detail), "status": exc.status_code},
                            status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def crash(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return error_response(exc)

    app.add_middleware(BodyLimit, limit=conf.max_body_bytes)
    metrics = Metrics(service.queue)
    app.add_middleware(MetricsMiddleware, metrics=metrics)

    # -- read-only ----------------------------------------------------------------------------------

    @app.get("/v1/health", summary="Liveness, version and queue depth (no auth)")
    def health() -> dict[str, Any]:
        return {"ok": True, "version": tagql.__version__, "databases": len(service.registry.sessions),
                "queue": {"pending": service.queue.pending, "size": service.queue.size}}

    @app.get("/metrics", summary="Prometheus metrics (text format)", response_class=Response)
    def metrics_text(_who: Reader) -> Response:
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    @app.get("/v1/databases", summary="The registered databases and collections")
    def databases(_who: Reader) -> dict[str, Any]:
        return {"ok": True, "databases": service.registry.describe()}

    @app.get("/v1/databases/{name}/schema", summary="A database's schema (tables, columns, keys, samples)")
    def schema(name: str, _who: Reader, database: str | None = None) -> dict[str, Any]:
        session = service.registry.get(name)
        s = session.schema(database)
        tables = [{**asdict(t), "columns": [{**asdict(c), "samples": [json_value(v) for v in c.samples]}
                                            for c in t.columns]} for t in s.tables]
        return {"ok": True, "name": s.name, "dialect": s.dialect, "tables": tables, "prompt": s.to_prompt()}

    @app.get("/v1/databases/{name}/examples", summary="Verified question -> SQL pairs of a database")
    def examples(name: str, _who: Reader) -> dict[str, Any]:
        service.registry.get(name)
        return {"ok": True, "examples": service.store.verified_examples(name)}

    # -- SQL, routing -------------------------------------------------------------------------------

    @app.post("/v1/sql", summary="Run one read-only query (same checks, row cap and time limit as the CLI)")
    async def run_sql(body: SqlRequest, _who: Reader) -> dict[str, Any]:
        if len(body.sql) > conf.max_sql_chars:
            raise TooLarge(f"the SQL has {len(body.sql)} characters, the limit is {conf.max_sql_chars}")
        if body.collection is not None:
            session, database = service.registry.get(body.collection, "collection"), body.database
        else:
            if body.database is None:
                raise UsageError("name a database", "GET /v1/databases lists them")
            session, database = service.registry.get(body.database, "database"), None
        result = await anyio.to_thread.run_sync(session.sql, body.sql, database)
        return {"ok": True, **result.model_dump(mode="json")}

    @app.post("/v1/route", summary="A collection's best candidate databases and tables for a question")
    async def route(body: RouteRequest, _who: Reader) -> dict[str, Any]:
        service.check_question(body.question)
        session = service.registry.get(body.collection, "collection")
        candidates = await anyio.to_thread.run_sync(session.route, body.question, body.k)
        return {"ok": True, "candidates": [c.model_dump() for c in candidates]}

    # -- questions ----------------------------------------------------------------------------------

    @app.post("/v1/ask", summary="Answer a question (JSON, or stage events with Accept: text/event-stream)",
              responses={200: {"content": {"text/event-stream": {}}}})
    async def ask(body: AskRequest, request: Request, who: Reader) -> Any:
        service.check_question(body.question)
        target, session = service.target(body.database, body.collection)
        if body.method not in METHODS:
            raise UsageError(f"unknown method '{body.method}'", f"use one of: {', '.join(METHODS)}")
        choose = None
        if body.pick is not None:
            if not session.is_collection:
                raise UsageError("pick applies to collections only")
            choose = _picker(body.pick)
        history: list[dict[str, Any]] = []
        conversation_id = uuid.uuid4().hex
        if body.conversation_id is not None:
            conversation_id = body.conversation_id
            history = await anyio.to_thread.run_sync(_conversation, service, conversation_id, who, target)
        job = Job()
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        stream = "text/event-stream" in request.headers.get("accept", "")

        routed: dict[str, str] = {}

        def on_event(name: str, data: dict[str, Any]) -> None:
            job.check()
            if name == "routed":
                routed["database"] = data["chosen"]["database"]
            if stream and name != "done":
                loop.call_soon_threadsafe(events.put_nowait, (name, data))

        def work() -> Any:
            job.check()  # cancelled while queued
            with service.registry.model.answering(job.check):  # the model stops within a step once cancelled
                return session.ask(body.question, method=body.method, k=body.k, choose=choose, force=body.force,
                                   on_event=on_event, history=history or None)

        try:
            fut, ahead = service.queue.submit(work, owner=who.name)
        except QueueFull:
            metrics.asks.labels("429").inc()
            raise

        def finish(answer: Any) -> dict[str, Any]:
            payload = answer.to_dict()
            if body.pick is not None:
                payload["picked"] = body.pick  # the user's choice among routed candidates, kept to be counted
            answer_id = service.store.save_answer(payload, target=target, token_name=who.name)
            service.store.add_turn(conversation_id, answer_id, who.name)
            if not answer.rows and body.method == "sql":
                service.unresolved.record(target=target, database=answer.database, question=answer.question,
                                          outcome="empty", answer_id=answer_id, token_name=who.name)
            return {"ok": True, "id": answer_id, "conversation_id": conversation_id, **payload}

        def failed(f: Any) -> None:  # in the worker thread, when the question could not be answered
            exc = None if f.cancelled() else f.exception()
            routed_ok = not session.is_collection or "database" in routed
            if exc is not None and http_status(exc) in (422, 502) and body.method == "sql" and routed_ok:
                service.unresolved.record(target=target, database=routed.get("database"), question=body.question,
                                          outcome="failed", error=error_body(exc, http_status(exc))["error"],
                                          token_name=who.name)

        fut.add_done_callback(failed)

        if not stream:
            try:
                answer = await asyncio.wait_for(asyncio.wrap_future(fut), conf.ask_timeout_s)
            except TimeoutError:
                job.cancelled.set()
                metrics.asks.labels("504").inc()
                raise AskTimeout(f"no answer within {conf.ask_timeout_s:g} s", "ask something simpler") from None
            except BaseException as exc:
                metrics.asks.labels(str(http_status(exc))).inc()
                raise
            metrics.asks.labels("answered").inc()
            return await anyio.to_thread.run_sync(finish, answer)

        fut.add_done_callback(lambda _f: loop.call_soon_threadsafe(events.put_nowait, None))
        fut.add_done_callback(lambda f: metrics.asks.labels(
            "answered" if not f.cancelled() and f.exception() is None
            else "cancelled" if f.cancelled() else str(http_status(f.exception()))).inc())
        return StreamingResponse(_events(fut, job, events, ahead, finish, conf.ask_timeout_s),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.get("/v1/conversations/{conversation_id}", summary="A conversation's answers, oldest first")
    def conversation_get(conversation_id: str, who: Reader) -> dict[str, Any]:
        turns = _conversation(service, conversation_id, who, None)
        return {"ok": True, "conversation_id": conversation_id,
                "answers": [{k: v for k, v in t.items() if k != "token_name"} for t in turns]}

    @app.get("/v1/answers/{answer_id}.csv", summary="An answer's rows as CSV")
    def answer_csv(answer_id: str, _who: Reader) -> StreamingResponse:
        answer = _stored(service, answer_id)

        def lines() -> Any:
            buf = io.StringIO()
            writer = csv.writer(buf)
            for row in [answer.get("columns", []), *answer.get("rows", [])]:
                writer.writerow(row)
                yield buf.getvalue()
                buf.seek(0)
                buf.truncate()

        return StreamingResponse(lines(), media_type="text/csv",
                                 headers={"Content-Disposition": f'attachment; filename="{answer_id}.csv"'})

    @app.get("/v1/answers/{answer_id}", summary="A stored answer (and its feedback)")
    def answer_get(answer_id: str, _who: Reader) -> dict[str, Any]:
        answer = _stored(service, answer_id)
        return {"ok": True, **answer, "feedback": service.store.feedback_for(answer_id)}

    @app.post("/v1/answers/{answer_id}/feedback",
              summary="Right or wrong (with the right SQL): a confirmed or corrected pair becomes a verified example")
    async def answer_feedback(answer_id: str, body: FeedbackRequest, who: Reader) -> dict[str, Any]:
        answer = _stored(service, answer_id)
        verified = None
        if body.sql:  # a correction: it must run on the answer's database
            session = service.registry.get(answer["target"])
            database = answer["database"] if session.is_collection else None
            await anyio.to_thread.run_sync(session.sql, body.sql, database)
            verified = (answer["database"], answer["question"], body.sql)
        elif body.correct and answer.get("sql"):
            verified = (answer["database"], answer["question"], answer["sql"])
        ids = await anyio.to_thread.run_sync(
            lambda: service.store.add_feedback(answer_id, correct=body.correct, sql=body.sql, note=body.note,
                                               token_name=who.name, verified=verified))
        if not body.correct and answer.get("method", "sql") == "sql":
            await anyio.to_thread.run_sync(lambda: service.unresolved.record(
                target=answer["target"], database=answer["database"], question=answer["question"],
                outcome="wrong", error=body.note, answer_id=answer_id, token_name=who.name))
        return {"ok": True, **ids}

    # -- knowledge (expert adds, reviewer approves) ---------------------------------------------------

    def knowledge_base(name: str, create: bool = False) -> Any:
        service.registry.get(name, "database")
        return service.registry.knowledge_base(name, create=create)

    @app.get("/v1/databases/{name}/statements", summary="A database's domain statements (with review state)")
    def statements(name: str, _who: Reader, status: str | None = None) -> dict[str, Any]:
        kb = knowledge_base(name)
        listed = kb.list(status) if kb is not None else []
        return {"ok": True, "statements": [st.to_dict() for st in listed]}

    @app.get("/v1/databases/{name}/statements/search",
             summary="The approved statements that best match a question, with scores (what the SQL prompt gets)")
    async def statements_search(name: str, question: str, _who: Reader, k: int = 3,
                                database: str | None = None) -> dict[str, Any]:
        service.check_question(question)
        if not 1 <= k <= 20:
            raise UsageError("k must be between 1 and 20")
        found = await anyio.to_thread.run_sync(service.search.search, name, question, k, database)
        return {"ok": True, "statements": found}

    @app.post("/v1/databases/{name}/statements", summary="Propose a domain statement (expert)")
    async def statement_add(name: str, body: StatementRequest,
                            who: Annotated[Principal, role("expert")]) -> dict[str, Any]:
        from tagql.knowledge.validate import snippet_problem

        def add() -> dict[str, Any]:
            kb = knowledge_base(name, create=True)
            reason = (snippet_problem(body.sql, kb.schema) or "") if body.sql else ""
            sid = kb.add(body.text, body.sql, nl=body.nl, status="proposed", reason=reason, author=who.name)
            service.store.add_review(name, sid, "propose", None, who.name)
            return kb.get(sid).to_dict()

        return {"ok": True, "statement": await anyio.to_thread.run_sync(add)}

    @app.post("/v1/databases/{name}/statements/{sid}/review",
              summary="Approve, reject or edit a statement, with a note (reviewer)")
    async def statement_review(name: str, sid: int, body: ReviewRequest,
                               who: Annotated[Principal, role("reviewer")]) -> dict[str, Any]:
        def review() -> dict[str, Any]:
            from tagql.knowledge.store import KnowledgeStoreError

            kb = knowledge_base(name)
            try:
                kb.get(sid) if kb is not None else None
            except KnowledgeStoreError:
                kb = None
            if kb is None:
                raise UnknownName(f"no statement {sid} for '{name}'")
            if body.action == "approve":
                st = kb.approve(sid)
            elif body.action == "reject":
                st = kb.reject(sid, body.note or "")
            else:
                if body.text is None and body.sql is None:
                    raise UsageError("an edit needs text or sql")
                st = kb.edit(sid, text=body.text, sql=body.sql)
            service.store.add_review(name, sid, body.action, body.note, who.name)
            return {"statement": st.to_dict(), "history": service.store.reviews(name, sid)}

        return {"ok": True, **await anyio.to_thread.run_sync(review)}

    @app.get("/v1/databases/{name}/unresolved",
             summary="Domain phrases no statement matched, from failed, empty or wrong answers: what to write next "
                     "(expert)")
    async def unresolved_list(name: str, _who: Annotated[Principal, role("expert")], database: str | None = None,
                              limit: int = 50, questions: int = 10, resolved: bool = False) -> dict[str, Any]:
        if not (1 <= limit <= 500 and 1 <= questions <= 100):
            raise UsageError("limit must be 1-500 and questions 1-100")
        session = service.registry.get(name)
        if session.is_collection and database is None:
            raise UsageError("name one of the collection's databases", "add ?database=NAME")
        phrases = await anyio.to_thread.run_sync(lambda: service.unresolved.listing(
            name, database, limit=limit, questions=questions, include_resolved=resolved))
        return {"ok": True, "database": database or name, "phrases": phrases}

    @app.post("/v1/databases/{name}/unresolved/dismiss", summary="Take a phrase off the unresolved queue (expert)")
    async def unresolved_dismiss(name: str, body: DismissRequest, _who: Annotated[Principal, role("expert")],
                                 database: str | None = None) -> dict[str, Any]:
        from tagql.text.phrases import phrase_key

        session = service.registry.get(name)
        db = session.database(database if session.is_collection else None).name
        n = await anyio.to_thread.run_sync(service.store.dismiss_unresolved, db, phrase_key(body.phrase))
        if not n:
            raise UnknownName(f"'{body.phrase}' is not on the unresolved queue of '{db}'")
        return {"ok": True, "dismissed": n}

    # -- tokens (admin) -----------------------------------------------------------------------------

    @app.get("/v1/tokens", summary="Token names and roles (admin)")
    def tokens_list(_who: Annotated[Principal, role("admin")]) -> dict[str, Any]:
        return {"ok": True, "tokens": service.store.list_tokens()}

    @app.post("/v1/tokens", summary="Create a token; it is shown once, only its hash is kept (admin)")
    def tokens_create(body: TokenRequest, _who: Annotated[Principal, role("admin")]) -> dict[str, Any]:
        token = service.store.create_token(body.name, body.role)
        service._auth_cache.clear()
        return {"ok": True, "name": body.name, "role": body.role, "token": token}

    @app.delete("/v1/tokens/{name}", summary="Revoke a token (admin)")
    def tokens_revoke(name: str, _who: Annotated[Principal, role("admin")]) -> dict[str, Any]:
        if not service.store.revoke_token(name):
            raise UnknownName(f"no token named '{name}'")
        service._auth_cache.clear()
        return {"ok": True}

    mount_ui(app, Reader, Annotated[Principal, role("expert")])  # the web UI at / (docs/ui.md) and its endpoints
    return app


def _mcp(service: Service, host: str) -> tuple[Any, Any]:
    """The MCP tools over streamable HTTP: the same registry, model queue and tokens as the REST routes."""
    from tagql.service.mcp import build_server, http_endpoint

    server = build_server(service.settings, service.registry, queue=service.queue, search=service.search)

    async def check(scope: dict, receive: Any, send: Any) -> Principal | None:
        try:
            who = service.principal(Request(scope))
            if not who.may("reader"):
                raise Forbidden(f"the role '{who.role}' may not do this", "it needs 'reader' or above")
        except tagql.TagqlError as exc:
            await error_response(exc, service.limits.retry_after_s)(scope, receive, send)
            return None
        return who

    return http_endpoint(server, host=host, check=check)


def _picker(name: str) -> Any:
    def choose(candidates: list[Any]) -> Any:
        for c in candidates:
            if c.database == name:
                return c
        raise UsageError(f"'{name}' is not among the routed candidates",
                         f"pick one of: {', '.join(c.database for c in candidates)}")
    return choose


def latest_examples(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The verified examples to prompt with: per question (up to case) only its latest SQL, so a correction
    replaces what was confirmed before."""
    latest: dict[str, dict[str, Any]] = {}
    for row in rows:  # oldest first
        key = " ".join(str(row["question"]).lower().split())
        latest.pop(key, None)
        latest[key] = row
    return list(latest.values())


def _conversation(service: Service, conversation_id: str, who: Principal, target: str | None) -> list[dict[str, Any]]:
    """The turns of a conversation the caller holds (another caller's is as unknown as a made-up id); with
    ``target``, the follow-up must name the same database or collection."""
    turns = service.store.conversation(conversation_id)
    if not turns or turns[0]["token_name"] != who.name:
        raise UnknownName(f"no conversation '{conversation_id}' on this server",
                          "leave conversation_id out to start one (every answer returns its conversation_id)")
    if target is not None and turns[-1]["target"] != target:
        raise UsageError(f"conversation '{conversation_id}' is on '{turns[-1]['target']}', not '{target}'",
                         "ask the follow-up on the same database or collection, or start a new conversation")
    return turns


def _stored(service: Service, answer_id: str) -> dict[str, Any]:
    answer = service.store.answer(answer_id)
    if answer is None:
        raise UnknownName(f"no answer '{answer_id}' on this server")
    return answer


def _sse(name: str, data: Any) -> str:
    return f"event: {name}\ndata: {json.dumps(data, default=str)}\n\n"


async def _events(fut: Any, job: Job, events: asyncio.Queue, ahead: int, finish: Any,
                  timeout_s: float) -> AsyncIterator[str]:
    """Stage events as the worker emits them, then ``done`` (the answer with its id) or ``error``. A client
    that goes away cancels the job: it stops at its next stage."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    try:
        yield _sse("queued", {"ahead": ahead})
        while True:
            try:
                item = await asyncio.wait_for(events.get(), 15.0)
            except TimeoutError:
                if loop.time() > deadline:
                    job.cancelled.set()
                    exc = AskTimeout(f"no answer within {timeout_s:g} s")
                    yield _sse("error", error_body(exc, http_status(exc)))
                    return
                yield ": keep-alive\n\n"
                continue
            if item is not None:
                yield _sse(*item)
                continue
            try:
                answer = fut.result()
            except BaseException as exc:
                if not isinstance(exc, tagql.TagqlError):
                    log.error("ask failed", exc_info=exc)
                yield _sse("error", error_body(exc, http_status(exc)))
                return
            yield _sse("done", await anyio.to_thread.run_sync(finish, answer))
            return
    finally:
        if not fut.done():
            job.cancelled.set()
            fut.cancel()
