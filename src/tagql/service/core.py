"""What the HTTP layer stands on: the registered databases (sessions of the public API), the bounded queue
in front of the model, roles, and the mapping of errors to HTTP statuses. No pipeline logic lives here:
every question goes through :meth:`tagql.api.Session.ask`."""

from __future__ import annotations

import ipaddress
import re
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
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
                 llm: str | LLM | None = None) -> None:
        self.settings = settings
        self.sessions: dict[str, Session] = {}
        self.kinds: dict[str, str] = {}
        models: dict[str, LLM] = {}  # one loaded model shared by every session
        for name, target in databases.items():
            self._check_name(name)
            db = open_database(target, settings=settings.db, name=name)
            self._add(name, "database", connect(db, llm=llm, settings=settings, models=models))
        for name in collections:
            self._check_name(name)
            self._add(name, "collection", connect(collection=name, llm=llm, settings=settings, models=models,
                                                  route_method=settings.service.route_method))
        if not self.sessions:
            raise ServiceError("no database registered", "pass --db NAME=PATH_OR_URL or set service.databases")

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
                kb = session.knowledge_base(database if session.is_collection else None)
                if kb is None:
                    return []
                retriever = kb.retriever(session.knowledge_method or default_knowledge_method())
                self._retrievers[(name, db)] = retriever
            found = retriever.retrieve(question, k)
        return [Statement.of(s).model_dump() | {"rendered": s.render()} for s in found]


class Job:
    """One queued question: a cancel flag the worker checks at every stage event."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()

    def check(self) -> None:
        if self.cancelled.is_set():
            raise Cancelled("the client went away")


class AskQueue:
    """A bounded FIFO in front of the model: ``workers`` questions run at once (1 for the embedded model),
    up to ``size`` wait or run; one more is refused (:class:`QueueFull`, HTTP 429)."""

    def __init__(self, size: int, workers: int = 1) -> None:
        if size < 1 or workers < 1:
            raise ServiceError("service.queue_size and service.workers must be at least 1")
        self.size = size
        self.workers = workers
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tagql-ask")
        self._lock = threading.Lock()
        self._pending = 0

    @property
    def pending(self) -> int:
        return self._pending

    def submit(self, fn: Callable[[], Any], owner: str = "") -> tuple[Future, int]:
        """Queue ``fn`` for ``owner`` (a token's name); returns its future and how many were ahead of it."""
        with self._lock:
            if self._pending >= self.size:
                raise QueueFull(f"{self._pending} questions are queued for the model", "retry later")
            ahead = self._pending
            self._pending += 1
        fut = self._pool.submit(fn)
        fut.add_done_callback(self._release)
        return fut, ahead

    def _release(self, _fut: Future) -> None:
        with self._lock:
            self._pending -= 1

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
