"""What the HTTP layer stands on: the registered databases (sessions of the public API), the bounded queue
in front of the model, roles, and the mapping of errors to HTTP statuses. No pipeline logic lives here:
every question goes through :meth:`tagql.api.Session.ask`."""

from __future__ import annotations

import ipaddress
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tagql.api import NoConfidentRoute, Session, UsageError, connect, default_knowledge_method
from tagql.config import Settings
from tagql.db.connection import open_database
from tagql.errors import (
    ConfigError,
    DatabaseNotFound,
    InvalidQuery,
    LLMOutputError,
    LLMUnavailable,
    NotADatabase,
    QueryFailed,
    QueryTimeout,
    TagqlError,
    UnsafeQuery,
)
from tagql.llm import make_llm
from tagql.llm.base import LLM
from tagql.service.state import ROLES, StateError, TokenError

NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")


class ServiceError(TagqlError):
    """The service cannot start as configured."""


class UnknownName(TagqlError):
    """A database, collection or answer the server does not have (404)."""


class Unauthorized(TagqlError):
    """No token, or an unknown one (401)."""

    hint = "send 'Authorization: Bearer <token>' (tagql token create NAME --role ROLE)"


class Forbidden(TagqlError):
    """The token's role may not do this (403)."""


class QueueFull(TagqlError):
    """Every place in the model's queue is taken (429)."""


class AskTimeout(TagqlError):
    """The question was not answered within service.ask_timeout_s (504)."""


class Cancelled(TagqlError):
    """The client went away; the work stopped at the next stage."""


class TooLarge(TagqlError):
    """A request body or question over the configured limit (413)."""


_STATUS: list[tuple[type[BaseException], int]] = [
    (NoConfidentRoute, 409), (UsageError, 400), (TokenError, 400), (UnknownName, 404), (Unauthorized, 401),
    (Forbidden, 403), (TooLarge, 413), (QueueFull, 429), (AskTimeout, 504), (QueryTimeout, 504),
    (UnsafeQuery, 422), (InvalidQuery, 422), (QueryFailed, 422), (LLMUnavailable, 503), (LLMOutputError, 502),
    (DatabaseNotFound, 503), (NotADatabase, 503), (ConfigError, 500), (StateError, 500), (Cancelled, 499),
]


def http_status(exc: BaseException) -> int:
    """The HTTP status of an error: a class above, else 422 for any other tagql error (the question could
    not be answered as asked) and 500 for anything else."""
    for cls, status in _STATUS:
        if isinstance(exc, cls):
            return status
    return 422 if isinstance(exc, TagqlError) else 500


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Principal:
    """Who is asking: a token's name and role (``local`` / admin when the server runs open)."""

    name: str
    role: str

    def may(self, role: str) -> bool:
        return ROLES.index(self.role) >= ROLES.index(role)


class Registry:
    """The databases and collections the operator registered, each one API session. Clients name them;
    a client never supplies a path or URL."""

    def __init__(self, settings: Settings, *, databases: dict[str, str], collections: list[str],
                 llm: str | LLM | None = None, knowledge_engine: Any = None) -> None:
        self.settings = settings
        self.sessions: dict[str, Session] = {}
        self.kinds: dict[str, str] = {}
        self.shared: dict[str, Any] = {}  # name -> SharedKnowledgeBase, with a knowledge_engine
        # one model shared by every session (loaded on the first question), stoppable between decoding steps
        self.model = StoppableLLM(llm if llm is not None and not isinstance(llm, str)
                                  else (lambda: make_llm(settings, backend=llm)))
        models: dict[str, LLM] = {settings.llm.model: self.model}  # type: ignore[dict-item]
        for name, target in databases.items():
            self._check_name(name)
            db = open_database(target, settings=settings.db, name=name)
            if knowledge_engine is None:
                self._add(name, "database", connect(db, llm=llm, settings=settings, models=models))
            else:
                self._add(name, "database", self._shared(knowledge_engine, db, llm, models))
        for name in collections:
            self._check_name(name)
            self._add(name, "collection", connect(collection=name, llm=llm, settings=settings, models=models,
                                                  route_method=settings.service.route_method))
        if not self.sessions:
            raise ServiceError("no database registered", "pass --db NAME=PATH_OR_URL or set service.databases")

    def _shared(self, engine: Any, db: Any, llm: str | LLM | None, models: dict[str, LLM]) -> Session:
        """A session whose statements live in the shared tables of ``engine`` (seeded once from the
        database's ``.kb`` file, if it has one): every replica on that state reads and writes the same."""
        from tagql.knowledge.shared import SharedKnowledgeBase
        from tagql.knowledge.store import KnowledgeBase, default_store_path

        holder: dict[str, Session] = {}
        kb = SharedKnowledgeBase.open_shared(engine, db.name, schema=db.schema,
                                             embedder=lambda: holder["session"].embedder(),
                                             static_dir=Path(self.settings.cache_dir) / "static")
        path = default_store_path(db.name, self.settings)
        if path.exists():
            kb.seed_from(KnowledgeBase.open(path))
        retriever = kb.retriever(default_knowledge_method())
        holder["session"] = session = connect(db, llm=llm, settings=self.settings, models=models, knowledge=retriever)
        self.shared[db.name] = kb
        return session

    def knowledge_base(self, name: str, database: str | None = None, *, create: bool = False) -> Any:
        """The knowledge base of a registered database (the shared one with ``service.knowledge = "state"``),
        or of ``database`` in a registered collection; None when it has none yet and not ``create``."""
        session = self.get(name)
        if name in self.shared and not session.is_collection:
            return self.shared[name]
        return session.knowledge_base(database if session.is_collection else None, create=create)

    def _check_name(self, name: str) -> None:
        if not NAME_RE.match(name):
            raise ServiceError(f"'{name}' is not a usable name", "use letters, digits, '_', '.', '-'")
        if name in self.sessions:
            raise ServiceError(f"'{name}' is registered twice", "give each database and collection its own name")

    def _add(self, name: str, kind: str, session: Session) -> None:
        self.sessions[name] = session
        self.kinds[name] = kind

    def get(self, name: str, kind: str | None = None) -> Session:
        session = self.sessions.get(name)
        if session is None or (kind is not None and self.kinds[name] != kind):
            what = kind or "database or collection"
            raise UnknownName(f"no {what} '{name}' on this server", "GET /v1/databases lists them")
        return session

    def describe(self) -> list[dict[str, Any]]:
        out = []
        for name, session in self.sessions.items():
            entry: dict[str, Any] = {"name": name, "kind": self.kinds[name]}
            if self.kinds[name] == "database":
                db = session.database()
                entry |= {"dialect": db.dialect, "tables": db.schema.table_names}
            else:
                entry["databases"] = session.databases()
            out.append(entry)
        return out


class KnowledgeSearch:
    """Domain statements for a question, straight from a registered database's knowledge base (the public
    API's ``Session.knowledge_base``): the approved statements the SQL prompt would get, with their scores.
    One live retriever per database (it follows later adds and reviews)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._retrievers: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def search(self, name: str, question: str, k: int | None = 3,
               database: str | None = None) -> list[dict[str, Any]]:
        """``name``: a registered database (or a collection, with ``database`` one of its databases).
        ``k`` None: K left to the retriever (its score floor applies): exactly what the SQL prompt gets."""
        from tagql.models import Statement

        session = self.registry.get(name)
        db = session.database(database if session.is_collection else None).name
        with self._lock:  # a retriever refreshes its index in place: one question at a time
            retriever = self._retrievers.get((name, db))
            if retriever is None:
                kb = self.registry.knowledge_base(name, database)
                if kb is None:
                    return []
                retriever = kb.retriever(session.knowledge_method or default_knowledge_method())
                self._retrievers[(name, db)] = retriever
            found = retriever.retrieve(question, k)
        return [Statement.of(s).model_dump() | {"rendered": s.render()} for s in found]


class StoppableLLM:
    """The service's model: the configured backend (made on first use), whose generations a cancelled question
    stops. Inside :meth:`answering` (the worker thread answering a question), every unconstrained
    :meth:`complete` runs as a stream when the backend streams (``supports_stream``; the same tokens), and
    the question's check runs after every decoding step: a question whose client went away raises
    :class:`Cancelled` there, so the model stops within one step instead of finishing the SQL or the
    sentence. Everything else is the backend's own."""

    def __init__(self, backend: LLM | Callable[[], LLM]) -> None:
        self._backend = backend
        self._made: LLM | None = None if callable(backend) else backend  # type: ignore[assignment]
        self._lock = threading.Lock()
        self._local = threading.local()

    @property
    def inner(self) -> LLM:
        if self._made is None:
            with self._lock:
                if self._made is None:
                    self._made = self._backend()  # type: ignore[operator]
        return self._made

    @contextmanager
    def answering(self, check: Callable[[], None]) -> Iterator[None]:
        """Generations in this thread call ``check`` after every decoding step while inside."""
        self._local.check = check
        try:
            yield
        finally:
            self._local.check = None

    def complete(self, messages: list[Any], *, max_tokens: int = 256, json_schema: dict[str, Any] | None = None,
                 grammar: str | None = None, stop: list[str] | None = None) -> Any:
        check = getattr(self._local, "check", None)
        inner = self.inner
        if check is not None and inner.supports_stream and json_schema is None and grammar is None:
            return inner.stream(messages, on_text=lambda _piece: check(), max_tokens=max_tokens,  # type: ignore[attr-defined]
                                stop=stop)
        return inner.complete(messages, max_tokens=max_tokens, json_schema=json_schema, grammar=grammar, stop=stop)

    def stream(self, messages: list[Any], *, on_text: Callable[[str], None], max_tokens: int = 256,
               stop: list[str] | None = None) -> Any:
        check = getattr(self._local, "check", None)

        def both(piece: str) -> None:
            if check is not None:
                check()
            on_text(piece)

        return self.inner.stream(messages, on_text=both, max_tokens=max_tokens, stop=stop)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:  # name, usage, supports_*, choice_probs, ...: the backend's
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.inner, name)


class Job:
    """One queued question: a cancel flag the worker checks at every stage event."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()

    def check(self) -> None:
        if self.cancelled.is_set():
            raise Cancelled("the client went away")


class AskQueue:
    """A bounded, fair queue in front of the model: ``workers`` questions run at once (1 for the embedded
    model), up to ``size`` wait or run; one more is refused (:class:`QueueFull`, HTTP 429).

    Fair: each owner (a token's name) has its own FIFO and the workers take from the owners in turn
    (round robin), so a client that floods the queue delays another client's question by at most one of
    its own per turn, not by all of them. The queue's capacity is shared (first come)."""

    def __init__(self, size: int, workers: int = 1) -> None:
        if size < 1 or workers < 1:
            raise ServiceError("service.queue_size and service.workers must be at least 1")
        self.size = size
        self.workers = workers
        self._cond = threading.Condition()
        self._lanes: dict[str, deque[tuple[Future, Callable[[], Any]]]] = {}
        self._turn: deque[str] = deque()  # owners with queued work, next to serve first
        self._pending = 0  # queued + running
        self._running = 0
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"tagql-ask-{i}", daemon=True)
                         for i in range(workers)]
        for t in self._threads:
            t.start()

    @property
    def pending(self) -> int:
        return self._pending

    def submit(self, fn: Callable[[], Any], owner: str = "") -> tuple[Future, int]:
        """Queue ``fn`` in ``owner``'s lane; returns its future and how many questions will start or are
        running before it (given what is queued now)."""
        fut: Future = Future()
        with self._cond:
            if self._closed:
                raise ServiceError("the service is shutting down")
            if self._pending >= self.size:
                raise QueueFull(f"{self._pending} questions are queued for the model", "retry later")
            lane = self._lanes.setdefault(owner, deque())
            if not lane:
                self._turn.append(owner)
            lane.append((fut, fn))
            ahead = self._running + self._ahead_of(owner, len(lane) - 1)
            self._pending += 1
            self._cond.notify()
        fut.add_done_callback(self._release)
        return fut, ahead

    def _ahead_of(self, owner: str, position: int) -> int:
        """Queued questions the round robin takes before ``owner``'s ``position``-th (0 = its first)."""
        ahead = position
        turn = list(self._turn)
        mine = turn.index(owner)
        for i, other in enumerate(turn):
            if other != owner:
                # owners before this one in the turn order get position + 1 turns, those after it position
                ahead += min(len(self._lanes[other]), position + (1 if i < mine else 0))
        return ahead

    def _next(self) -> tuple[Future, Callable[[], Any]] | None:
        while not self._turn and not self._closed:
            self._cond.wait()
        if self._closed:
            return None
        owner = self._turn.popleft()
        lane = self._lanes[owner]
        job = lane.popleft()
        if lane:
            self._turn.append(owner)  # its next question waits for everyone else's turn
        else:
            del self._lanes[owner]
        return job

    def _work(self) -> None:
        while True:
            with self._cond:
                job = self._next()
                if job is None:
                    return
                self._running += 1
            fut, fn = job
            try:
                if fut.set_running_or_notify_cancel():  # False: cancelled while queued
                    try:
                        result = fn()
                    except BaseException as exc:  # noqa: BLE001 - handed to the waiting request
                        fut.set_exception(exc)
                    else:
                        fut.set_result(result)
            finally:
                with self._cond:
                    self._running -= 1

    def _release(self, _fut: Future) -> None:
        with self._cond:
            self._pending -= 1

    def shutdown(self) -> None:
        with self._cond:
            self._closed = True
            queued = [fut for lane in self._lanes.values() for fut, _ in lane]
            self._lanes.clear()
            self._turn.clear()
            self._cond.notify_all()
        for fut in queued:
            fut.cancel()
