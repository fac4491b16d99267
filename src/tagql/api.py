"""The one public path. ``tagql.connect(...)`` opens a database or a collection of databases and returns a
:class:`Session`; its :meth:`Session.ask` answers a question with any method, routed or not. The CLI,
the REST service and the MCP server are thin shells over this module: they parse, call it, and print.

Every option is checked before the language model loads (a typo costs no model load), and an option
that does not apply is an error, never silently ignored.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tagql.config import Settings, for_tag, load_settings
from tagql.db.connection import Database, open_database
from tagql.db.schema import Schema
from tagql.embeddings import Embedder, Progress, check_backend, make_embedder
from tagql.errors import TagqlError
from tagql.knowledge import Retriever, ScoredStatement
from tagql.knowledge.store import STATUSES as STATEMENT_STATUSES
from tagql.knowledge.store import KnowledgeBase, KnowledgeStoreError
from tagql.llm import make_llm
from tagql.llm.base import LLM
from tagql.models import METHODS, Answer, RouteCandidate, SqlResult
from tagql.pipeline import TagQL, clean_question, open_knowledge
from tagql.text2sql.values import ValueMatch

ROUTE_METHODS = ("ours", "bm25", "dense")

EventHandler = Callable[[str, dict[str, Any]], None]
"""``on_event(name, data)``: stage events as they happen (``routed``, ``statements``, ``sql``, ``rows``,
``answer``, ``done``), for interfaces that stream. TAG methods send ``plan`` when the plan is made (before
its operators' ``progress``) and again as it ran, with its trace."""

Chooser = Callable[[list[RouteCandidate]], RouteCandidate]
"""Human in the loop for collections: given the candidate schemas, best first, return the one to use."""

ExampleSource = Mapping[str, Iterable[Any]] | Iterable[Any] | Callable[[str], Iterable[Any]]
"""Verified question -> SQL examples: per database name (a mapping, or a function called before each
question, e.g. one reading the service's state store), or one list for a single-database session. Each
example is a ``(question, sql)`` pair, a mapping with those keys, or an object with those attributes."""

MAX_TURNS = 3
"""Earlier turns a follow-up is written with (the last ones): enough for "and for X?" chains, few tokens."""


class UsageError(TagqlError):
    """An option that does not exist or does not apply."""


class NoConfidentRoute(TagqlError):
    """Routing is unsure which database the question is about; ``candidates`` holds the best guesses."""

    hint = "rephrase with the names of what you ask about, pick a schema, or answer anyway with force"

    def __init__(self, message: str, candidates: list[RouteCandidate] | None = None) -> None:
        super().__init__(message)
        self.candidates = candidates or []


def check_choice(name: str, value: str | None, allowed: tuple[str, ...] | list[str]) -> None:
    """A one-line error naming the allowed values when ``value`` is not one of them."""
    if value is not None and value not in allowed:
        raise UsageError(f"unknown {name} '{value}'", f"use one of: {', '.join(allowed)}")


def default_knowledge_method() -> str:
    from tagql.knowledge.retrieval import DEFAULT_METHOD

    return DEFAULT_METHOD


def knowledge_methods() -> tuple[str, ...]:
    from tagql.knowledge.retrieval import METHODS as KNOWLEDGE_METHODS

    return tuple(KNOWLEDGE_METHODS)


class Session:
    """A database (or a collection of databases) with a language model. Create with :func:`connect`.

    The model loads on the first question that needs it; ``sql``, ``schema`` and ``route`` never load it."""

    def __init__(
        self, *, settings: Settings, database: Database | None = None, collection: Any = None,
        llm: str | LLM | None = None, knowledge: Retriever | str | Path | None = None,
        knowledge_method: str | None = None, route_method: str = "ours",
        progress: Callable[[int, int], None] | None = None, embedder: Embedder | None = None,
        step_progress: Progress | None = None, models: dict[str, LLM] | None = None,
        examples: ExampleSource | None = None,
    ) -> None:
        self.settings = settings
        self._embedder = embedder
        self.step_progress = step_progress
        self._database = database
        self.collection = collection
        self._llm_choice = llm
        self._knowledge = knowledge
        self.knowledge_method = knowledge_method
        self.route_method = route_method
        self.progress = progress
        self._models: dict[str, LLM] = models if models is not None else {}  # by model name; may be shared
        self._dbs: dict[str, Database] = {} if database is None else {database.name: database}
        self._retrievers: dict[str, Retriever | None] = {}
        self._router: Any = None
        self._prepared: dict[tuple[str, str], str] = {}  # (database, query) -> checked SQL, for repeated queries
        self._lock = threading.Lock()
        self._example_source: ExampleSource | None = None
        self._example_indexes: dict[str, Any] = {}  # database -> ExampleIndex, rebuilt when its pairs change
        self.example_k = 3
        self._example_embedder: Embedder | None = None
        if examples is not None:
            self.use_examples(examples)

    # -- what is here --------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The database's name, or the collection's."""
        return self.collection.name if self.collection is not None else self._database.name  # type: ignore[union-attr]

    @property
    def is_collection(self) -> bool:
        return self.collection is not None

    def databases(self) -> list[str]:
        """The database names this session can answer over."""
        return list(self.collection.databases) if self.is_collection else [self.name]

    def database(self, name: str | None = None) -> Database:
        """An opened database of this session (the only one, or ``name`` in a collection)."""
        if not self.is_collection:
            if name not in (None, self.name):
                raise UsageError(f"no database '{name}' here", f"this session is on '{self.name}'")
            return self._database  # type: ignore[return-value]
        if not name:
            raise UsageError("name a database of the collection", f"one of: {', '.join(self.databases())}")
        if name not in self._dbs:
            self._dbs[name] = self.collection.open(name, settings=self.settings.db)
        return self._dbs[name]

    def schema(self, database: str | None = None) -> Schema:
        return self.database(database).schema

    def embedder(self) -> Embedder:
        """The session's sentence embedder (``embed.backend``), loaded on first use and passed to knowledge
        retrieval, routing and the TAG methods."""
        if self._embedder is None:
            self._embedder = make_embedder(self.settings)
        return self._embedder

    # -- answering -----------------------------------------------------------------------------------

    def sql(self, query: str, database: str | None = None) -> SqlResult:
        """Run one read-only query through the same checks as generated SQL (no LLM)."""
        from tagql.text2sql.answer import json_value
        from tagql.text2sql.query import prepare_sql

        db = self.database(database)
        key = (db.name, query)
        with self._lock:
            prepared = self._prepared.get(key)
        if prepared is None:
            prepared = prepare_sql(query, db)  # parsing and checks cost ~20x the run of a small query
            with self._lock:
                if len(self._prepared) >= 256:
                    self._prepared.pop(next(iter(self._prepared)))
                self._prepared[key] = prepared
        result = db.execute(prepared)
        return SqlResult(database=db.name, sql=result.sql or query, columns=list(result.columns),
                         rows=[[json_value(v) for v in r] for r in result.rows], truncated=result.truncated,
                         notes=list(result.notes))

    def route(self, question: str, k: int = 5) -> list[RouteCandidate]:
        """The collection's best candidate schemas for ``question``, best first."""
        if not self.is_collection:
            raise UsageError("routing needs a collection", f"this session is on the database '{self.name}'")
        if k < 1:
            raise UsageError("k must be at least 1")
        return [RouteCandidate.of(c) for c in self._loaded_router().route(clean_question(question), k)]

    def _loaded_router(self) -> Any:
        """The collection's router for ``route_method``, loaded once, with the session's embedder (bm25
        needs none)."""
        if self._router is None:
            kw = {} if self.route_method == "bm25" else {"embedder": self.embedder()}
            self._router = self.collection.router(self.route_method, **kw)
        return self._router

    def ask(
        self, question: str, *, method: str = "sql", k: int | None = None, choose: Chooser | None = None,
        force: bool = False, on_event: EventHandler | None = None, history: Sequence[Any] | None = None,
    ) -> Answer:
        """Answer ``question``: route (collections), retrieve up to ``k`` domain statements, write SQL,
        run it read-only, answer from the rows; ``method`` picks a TAG method instead (``docs/tag.md``).
        ``choose`` picks among routed candidates; ``force`` answers from the best guess when routing is unsure.

        ``history`` makes the question a follow-up ("and for DC Comics?"): the earlier turns, oldest first,
        as :class:`Answer` objects, :class:`tagql.Turn` or mappings with ``question``, ``sql`` and
        optionally ``answer``; the last :data:`MAX_TURNS` are shown to the SQL prompt. On a collection a
        follow-up stays on the database of the last turn that names one (no routing).
        :meth:`conversation` keeps the history for you. Verified examples (:meth:`use_examples`) of the
        answering database go into the SQL prompt too."""
        self.check_options(method=method, k=k, choose=choose, force=force)
        emit = on_event or (lambda name, data: None)
        question = clean_question(question)
        turns, history_db = self._turns(history)
        if turns and method != "sql":
            raise UsageError("a follow-up (history) is answered with method 'sql' only",
                             f"ask it without history, or with method 'sql' instead of '{method}'")
        if method == "cross":
            return self._ask_across(question, emit)
        t0 = time.perf_counter()
        routing: list[RouteCandidate] = []
        notes: list[str] = []
        tables: list[str] | None = None
        scores: dict[str, float] | None = None
        if self.is_collection and turns and history_db in self.databases() and choose is None:
            name = history_db  # a follow-up stays where the conversation is
        elif self.is_collection:
            routing, chosen, note = self._route_for_ask(question, choose, force)
            emit("routed", {"candidates": [c.model_dump() for c in routing], "chosen": chosen.model_dump()})
            name, tables, scores = chosen.database, chosen.tables, chosen.table_scores
            if note and choose is None:
                notes.append(note)
        else:
            name = self.name
        route_s = time.perf_counter() - t0
        pipeline = self._pipeline(name, method, tables, k, question, scores)
        if method == "sql":
            answer = pipeline.ask(question, k=k, on_event=emit, history=turns)
        else:
            answer = self._answer_with_method(pipeline, question, method, emit)
        answer.method = method
        if self.is_collection:
            answer.routing = routing
            answer.notes.extend(notes)
            answer.timings = {"route_s": round(route_s, 3), **answer.timings,
                              "total_s": round(time.perf_counter() - t0, 3)}
        emit("answer", {"answer": answer.answer, "values": answer.values})
        emit("done", answer.to_dict())
        return answer

    def check_options(self, question: str | None = None, *, method: str = "sql", k: int | None = None,
                      choose: Chooser | None = None, force: bool = False) -> None:
        """Raise a one-line error for a question or options of :meth:`ask` that cannot work here (an empty
        question, an unknown method, an option that does not apply); interfaces call it before loading
        the model."""
        if question is not None:
            clean_question(question)
        check_choice("method", method, METHODS)
        if k is not None and k < 0:
            raise UsageError("k must be 0 or more")
        if (choose is not None or force) and not self.is_collection:
            raise UsageError("--pick/--force (choose/force) apply to collections only", f"'{self.name}' is one database")
        if method == "cross" and not self.is_collection:
            raise UsageError("method 'cross' answers across the databases of a collection",
                             f"'{self.name}' is one database: use --collection NAME, or another method")
        if method == "cross" and choose is not None:
            raise UsageError("method 'cross' picks its databases itself", "drop --pick (choose)")

    def llm(self, method: str = "sql") -> LLM:
        """The language model ``method`` runs on, loaded once (the TAG methods use ``tag.model``)."""
        settings = self._settings_for(method)
        key = settings.llm.model
        if key not in self._models:
            choice = self._llm_choice
            if choice is not None and not isinstance(choice, str):
                self._models[key] = choice
            else:
                self._models[key] = make_llm(settings, backend=choice, progress=self.progress)
        return self._models[key]

    def knowledge_base(self, database: str | None = None, *, create: bool = False) -> Any:
        """The knowledge store of one of this session's databases (``<knowledge_dir>/<name>.kb``), with the
        session's embedder; None when it has none yet and not ``create``. A store created here is used
        from the next question on."""
        from tagql.knowledge.store import default_store_path

        db = self.database(database)
        path = default_store_path(db.name, self.settings)
        if not path.exists() and not create:
            return None
        existed = path.exists()
        kb = KnowledgeBase.open(path, create=create, db_id=db.name, schema=db.schema, embedder=self.embedder,
                                static_dir=Path(self.settings.cache_dir) / "static")
        if not existed:
            self.reload_knowledge(db.name)
        return kb

    def reload_knowledge(self, database: str | None = None) -> None:
        """Open the knowledge store of ``database`` (all: None) again on the next question, e.g. one created
        since this session first looked (an open store follows its own changes without this)."""
        if database is None:
            self._retrievers.clear()
        else:
            self._retrievers.pop(database, None)

    # -- conversations and verified examples ---------------------------------------------------------

    def conversation(self) -> Conversation:
        """A conversation on this session: each :meth:`Conversation.ask` after the first is a follow-up of
        the earlier ones ("and for DC Comics?")."""
        return Conversation(self)

    def use_examples(self, examples: ExampleSource | None, *, k: int = 3, embedder: Embedder | None = None) -> None:
        """Verified question -> SQL pairs to show the SQL prompt: the ``k`` most similar to each question
        (BM25 over their questions; with ``embedder`` fused with its embedding ranking). ``examples`` is a
        mapping of database name to pairs, a function of the database name called before each question (so
        pairs added since are used at once), or a list of pairs for a one-database session; None stops
        using them."""
        if k < 0:
            raise UsageError("k must be 0 or more")
        if examples is not None and not callable(examples) and not isinstance(examples, Mapping):
            if self.is_collection:
                raise UsageError("a collection needs its examples per database",
                                 "pass a mapping of database name to pairs, or a function of the name")
            examples = {self.name: list(examples)}
        with self._lock:
            self._example_source, self.example_k, self._example_embedder = examples, k, embedder
            self._example_indexes.clear()

    def examples_for(self, database: str | None = None) -> Any:
        """The :class:`~tagql.text2sql.context.ExampleIndex` of a database's verified examples (None: it has
        none), rebuilt only when its pairs changed."""
        from tagql.text2sql.context import ExampleIndex

        name = self.database(database).name
        source = self._example_source
        if source is None:
            return None
        pairs = list(source(name) if callable(source) else source.get(name, []))  # type: ignore[union-attr]
        if not pairs:
            return None
        index = ExampleIndex(pairs, embedder=self._example_embedder)
        with self._lock:
            cached = self._example_indexes.get(name)
            if cached is not None and cached.key == index.key:
                return cached  # keeps its computed embeddings
            self._example_indexes[name] = index
        return index

    def _turns(self, history: Sequence[Any] | None) -> tuple[tuple[Any, ...], str | None]:
        """The last :data:`MAX_TURNS` turns of ``history`` and the database of the last one that names one."""
        from tagql.text2sql.context import Turn

        if not history:
            return (), None
        try:
            turns = tuple(Turn.of(t) for t in history)
        except ValueError as exc:
            raise UsageError(str(exc), "give each turn its question and SQL") from None
        database = next((str(d) for t in reversed(history)
                         if (d := (t.get("database") if isinstance(t, Mapping) else getattr(t, "database", None)))),
                        None)
        return turns[-MAX_TURNS:], database

    # -- internals -----------------------------------------------------------------------------------

    def _settings_for(self, method: str) -> Settings:
        passed_model = self._llm_choice is not None and not isinstance(self._llm_choice, str)
        # cross writes SQL on each database: the SQL model, like plain questions
        return self.settings if method in ("sql", "cross") or passed_model else for_tag(self.settings)

    def _retriever(self, name: str) -> Retriever | None:
        if name not in self._retrievers:
            k = self._knowledge
            if k is not None and not isinstance(k, (str, Path)):
                self._retrievers[name] = k
            else:
                self._retrievers[name] = open_knowledge(name, self.settings, k, method=self.knowledge_method,
                                                        embedder=self.embedder, progress=self.step_progress)
        return self._retrievers[name]

    def _pipeline(self, name: str, method: str, tables: list[str] | None, k: int | None, question: str = "",
                  scores: dict[str, float] | None = None) -> TagQL:
        from tagql.routing.linking import routed_prompt_schema

        db = self.database(name if self.is_collection else None)
        subset = routed_prompt_schema(db.schema, tables, question, self.settings.answer, scores) if tables else None
        return TagQL(db, self.llm(method), settings=self._settings_for(method), knowledge=self._retriever(name),
                     knowledge_k=k, prompt_schema=subset if subset and subset.tables else None,
                     embedder=self._embedder, examples=self.examples_for(db.name) if method == "sql" else None,
                     example_k=self.example_k, step_progress=self.step_progress)

    def _route_for_ask(self, question: str, choose: Chooser | None,
                       force: bool) -> tuple[list[RouteCandidate], RouteCandidate, str | None]:
        from tagql.routing.hitl import confidence_note

        candidates = self.route(question, 5)
        if not candidates:
            raise TagqlError(f"no database of collection '{self.name}' matches the question")
        note = confidence_note(candidates)
        if note and choose is None and not force:
            raise NoConfidentRoute(note, candidates)
        chosen = choose(candidates) if choose else candidates[0]
        if chosen.database not in self.databases():
            raise UsageError(f"'{chosen.database}' is not a database of collection '{self.name}'")
        return candidates, chosen, note

    def _ask_across(self, question: str, emit: EventHandler) -> Answer:
        """``method="cross"``: route, plan one sub-question per database, run each on its database, join
        the results in DuckDB (the LM matching values written differently), answer (:mod:`tagql.cross`)."""
        from tagql.cross import answer_across
        from tagql.models import Plan as PlanModel
        from tagql.tag.cache import OpCache
        from tagql.tag.operators import SemEngine
        from tagql.text2sql.answer import json_value, result_values

        t0 = time.perf_counter()
        routing = self.route(question, 5)
        if not routing:
            raise TagqlError(f"no database of collection '{self.name}' matches the question")
        emit("routed", {"candidates": [c.model_dump() for c in routing], "chosen": routing[0].model_dump()})
        route_s = time.perf_counter() - t0
        settings = self._settings_for("cross")
        llm = self.llm("cross")
        before = llm.usage.snapshot()
        cache = OpCache(Path(settings.cache_dir) / "tag_cache.sqlite") if settings.tag.cache else OpCache(None)
        engine = SemEngine(llm, cache=cache, max_calls=settings.tag.max_lm_calls,
                           max_link_calls=settings.tag.max_link_calls,
                           progress=lambda op, done, total: emit("progress", {"operator": op, "done": done,
                                                                              "total": total}))

        def context(name: str, asked: str) -> tuple[list[ScoredStatement], list[ValueMatch]]:
            pipeline = self._pipeline(name, "cross", None, None)
            hints = pipeline.values_for(asked) if settings.answer.cross_value_hints else []
            return pipeline.statements_for(asked), hints

        outcome = answer_across(question, [(c.database, c.tables) for c in routing], llm=llm,
                                open_db=self.database, engine=engine, max_tokens=settings.answer.max_sql_tokens,
                                retries=settings.answer.sql_retries, workdir=Path(settings.cache_dir) / "cross",
                                context=context)
        plan = PlanModel(sql=outcome.sql, cross=outcome.to_dict())
        emit("plan", plan.model_dump())
        result = outcome.result
        rows = [[json_value(v) for v in r] for r in result.rows]
        emit("sql", {"sql": outcome.sql})
        emit("rows", {"columns": list(result.columns), "rows": rows, "truncated": result.truncated})
        values = result_values(result)
        shown = ", ".join(str(v) for v in values[:20]) + (f" (and {len(values) - 20} more)" if len(values) > 20 else "")
        answer = Answer(
            question=question, database=" + ".join(outcome.plan.databases), sql=outcome.sql,
            columns=list(result.columns), rows=rows[:200], values=values,
            answer=f"Answer: {shown}." if values else "No rows answer the question.",
            timings={"route_s": round(route_s, 3), **outcome.timings, "total_s": round(time.perf_counter() - t0, 3)},
            tokens=llm.usage.since(before), notes=[*outcome.notes, *result.notes], truncated=result.truncated,
            routing=routing, method="cross", model=str(getattr(llm, "name", "")), plan=plan,
            operator_stats=engine.stats.to_dict(),
        )
        emit("answer", {"answer": answer.answer, "values": answer.values})
        emit("done", answer.to_dict())
        return answer

    def _answer_with_method(self, pipeline: TagQL, question: str, method: str, emit: EventHandler) -> Answer:
        from tagql.methods import answer as answer_with
        from tagql.methods import make_engine

        def progress(op: str, done: int, total: int) -> None:
            emit("progress", {"operator": op, "done": done, "total": total})

        answer = answer_with(pipeline, question, method, engine=make_engine(pipeline.for_tag(), progress=progress),
                             on_plan=lambda plan: emit("plan", plan))
        if answer.plan is not None:  # again, as run: with its trace (or the fallback it took)
            emit("plan", answer.plan.model_dump())
        if answer.sql:
            emit("sql", {"sql": answer.sql})
        emit("rows", {"columns": answer.columns, "rows": answer.rows, "truncated": answer.truncated})
        return answer


class Conversation:
    """Questions asked one after another on a session, each later one a follow-up of the earlier ones
    (create with :meth:`Session.conversation`). ``answers`` holds every answer, oldest first."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.answers: list[Answer] = []

    def ask(self, question: str, **options: Any) -> Answer:
        """:meth:`Session.ask` with this conversation's earlier answers as ``history``; the answer joins it."""
        answer = self.session.ask(question, history=self.answers[-MAX_TURNS:] or None, **options)
        self.answers.append(answer)
        return answer


def connect(
    db: str | Path | Database | None = None,
    llm: str | LLM | None = None,
    *,
    collection: str | Any = None,
    settings: Settings | None = None,
    knowledge: Retriever | str | Path | None = None,
    knowledge_method: str | None = None,
    descriptions: str | Path | None = None,
    route_method: str = "ours",
    progress: Callable[[int, int], None] | None = None,
    embedder: Embedder | None = None,
    step_progress: Progress | None = None,
    models: dict[str, LLM] | None = None,
    examples: ExampleSource | None = None,
) -> Session:
    """Open ``db`` (a SQLite/DuckDB path or a SQLAlchemy URL) or ``collection`` (a name built with
    ``tagql route index``) with ``llm`` (``"local"``, ``"openai"``, an :class:`~tagql.llm.LLM`, or None for
    the configured default).

    ``knowledge`` is a :class:`~tagql.knowledge.Retriever` or a knowledge-store path; by default each
    database's store in ``knowledge_dir`` is used when it exists. ``progress(done, total)`` hears model
    assembly on first use; ``step_progress(stage, done, total)`` other long first-use steps (distilling the
    static token embeddings). ``embedder`` defaults to :func:`tagql.embeddings.make_embedder` (loaded when
    first needed). ``models`` is a cache of loaded models (by model name) that several sessions may share,
    so a server with many databases loads each model once. ``examples`` are verified question -> SQL pairs
    shown to the SQL prompt (see :meth:`Session.use_examples`). The database is opened and its schema read
    now, so a bad path fails here."""
    settings = settings or load_settings()
    if (db is None) == (collection is None):
        raise UsageError("give a database or a collection", "e.g. --db PATH_OR_URL or --collection NAME")
    check_choice("knowledge method", knowledge_method, knowledge_methods())
    check_choice("route method", route_method, ROUTE_METHODS)
    if isinstance(llm, str):
        check_choice("llm backend", llm, ("local", "openai"))
    if collection is not None:
        if knowledge is not None or descriptions is not None:
            raise UsageError("knowledge and descriptions apply to one database, not a collection",
                             "each database of a collection uses its own default store")
        if isinstance(collection, str):
            from tagql.routing.collection import Collection

            collection = Collection.load(collection, settings)
        collection.require_nonempty()
        return Session(settings=settings, collection=collection, llm=llm, knowledge_method=knowledge_method,
                       route_method=route_method, progress=progress, embedder=embedder, step_progress=step_progress,
                       models=models, examples=examples)
    database = db if isinstance(db, Database) else open_database(db, settings=settings.db,
                                                                   descriptions_dir=descriptions)
    _ = database.schema  # fail now on a database that cannot be read
    return Session(settings=settings, database=database, llm=llm, knowledge=knowledge,
                   knowledge_method=knowledge_method, route_method=route_method, progress=progress,
                   embedder=embedder, step_progress=step_progress, models=models, examples=examples)


# -- domain knowledge: the stores experts write and reviewers approve ------------------------------------

def open_knowledge_base(
    db: str | Path | None = None, *, store: str | Path | None = None, db_id: str | None = None, create: bool = False,
    settings: Settings | None = None,
) -> tuple[Any, Database | None]:
    """The knowledge store of a database and the connected database (None for a schema-only source).

    ``db`` is a database path/URL, or a BIRD/Spider ``tables.json`` with ``db_id``; ``store`` defaults to
    ``<knowledge_dir>/<db name>.kb``. With ``create`` a missing store is made for that schema."""
    import json

    from tagql.knowledge.store import default_store_path

    settings = settings or load_settings()
    if db is None:
        if store is None and not db_id:
            raise KnowledgeStoreError("give --store PATH or --db")
        path = Path(store) if store is not None else default_store_path(str(db_id), settings)
        return KnowledgeBase.open(path, create=False, **_kb_embedding(settings)), None
    source = Path(db).expanduser()
    database: Database | None = None
    if source.suffix.lower() == ".json":
        if not db_id:
            raise KnowledgeStoreError("--db with a tables.json needs --db-id NAME")
        try:
            entries = json.loads(source.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise KnowledgeStoreError(f"cannot read schemas from {source}: {exc}") from None
        entry = next((e for e in entries if isinstance(e, dict) and e.get("db_id") == db_id), None)
        if entry is None:
            raise KnowledgeStoreError(f"no database {db_id!r} in {source}")
        name, schema = db_id, Schema.from_spider(entry)
    else:
        database = open_database(db, settings=settings.db)
        name, schema = db_id or database.name, database.schema
    path = Path(store) if store is not None else default_store_path(name, settings)
    return KnowledgeBase.open(path, create=create, db_id=name, schema=schema, **_kb_embedding(settings)), database


def _kb_embedding(settings: Settings) -> dict[str, Any]:
    """A store's embedder (a factory: loaded when a statement is embedded or a question retrieves, not for
    list/review) and where its retrievers cache the static token table."""
    return {"embedder": lambda: make_embedder(settings), "static_dir": Path(settings.cache_dir) / "static"}


def add_statements(
    kb: Any, statements: list[str], *, structured: bool = False, approved: bool = False, author: str = "",
    llm: str | LLM | None = None, database: Database | None = None, settings: Settings | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[Any]:
    """Add plain-language statements (structured by the LLM into "'text' refers to SQL") or, with
    ``structured``, ready ones; checked against the schema and, given ``database``, its data.

    New statements are 'proposed' (used once a reviewer approves them) unless ``approved``. The
    embedder is loaded before the LLM, so a missing one fails at once, not after the LLM's work."""
    items = [s.strip() for s in statements if s and s.strip()]
    if not items:
        raise KnowledgeStoreError("nothing to add", "pass a statement or --file")
    _ = kb.embedder  # fail now when the embedding model is not installed
    if structured:
        ids = kb.add_structured(items, status="approved" if approved else "proposed", author=author)
    else:
        from tagql.knowledge.structuring import Structurer

        settings = settings or load_settings()
        if isinstance(llm, str):
            check_choice("llm backend", llm, ("local", "openai"))
        model = llm if llm is not None and not isinstance(llm, str) else make_llm(settings, backend=llm,
                                                                                    progress=progress)
        ids = kb.add_nl(items, Structurer(model, kb.schema, kb.exemplars()), author=author, approve_valid=approved)
    if database is not None:  # a live database: the new statements' constants are checked against its data
        kb.check(database, only=ids)
    return [kb.get(i) for i in ids]


def exemplars_from_json(text: str) -> list[Any]:
    """Few-shot structuring exemplars from a JSON list of ``{nl, structured}``."""
    from tagql.knowledge.structuring import exemplars_from_json as parse

    return parse(text)


def import_paper_statements(
    data: Path, out_dir: Path, only: list[str] | None = None, *, llm: str | LLM | None = None,
    settings: Settings | None = None,
) -> list[tuple[str, Any, int]]:
    """One store per BIRD database from the knowledge paper's IN-set statements: (name, store, added)."""
    from tagql.knowledge.importer import PAPER_DBS, bird_sqlite, import_database

    settings = settings or load_settings()
    model = None if llm is None else (llm if not isinstance(llm, str) else make_llm(settings, backend=llm))
    done = []
    for name in only or PAPER_DBS:
        sqlite = bird_sqlite(data, name)
        database = open_database(sqlite, settings=settings.db) if sqlite.exists() else None
        kb, n = import_database(data, name, out_dir / f"{name}.kb", llm=model, database=database,
                                embedder=lambda: make_embedder(settings))
        done.append((name, kb, n))
    return done


def statement_holds_back(reason: str) -> bool:
    """Whether a data-check reason keeps an approved statement out of prompts until it is fixed."""
    from tagql.knowledge.validate import holds_back

    return holds_back(reason)


# -- collections of databases ------------------------------------------------------------------------

def route_note(candidates: list[RouteCandidate]) -> str | None:
    """A one-line warning when no candidate looks right (the question may be about none of them)."""
    from tagql.routing.hitl import confidence_note

    return confidence_note(candidates)


def index_collection(
    name: str, *, spider_tables: Path | None = None, spider_databases: Path | None = None,
    ddl: list[Path] | None = None, databases: list[str] | None = None, remove: list[str] | None = None,
    build_router: bool = True, questions_per_table: int = 24, finetune: bool = False,
    progress: Callable[[str, int, int], None] | None = None, settings: Settings | None = None,
) -> dict[str, Any]:
    """Build or update collection ``name`` from its sources, then train (or incrementally update) its
    router; ``progress(stage, done, total)`` hears each stage. Returns a summary."""
    from tagql.routing.collection import Collection
    from tagql.routing.errors import EmptyCollection
    from tagql.routing.ours import BuildConfig, GraphRouter

    t0 = time.perf_counter()
    tick = progress or (lambda stage, done, total: None)
    settings = settings or load_settings()
    if build_router:
        check_backend(settings)  # before reading any database: the router embeds its synthetic questions
    coll = Collection.create(name, settings)
    existed = bool(coll.entries)
    for r in remove or []:
        coll.remove(r)
    if spider_tables:
        coll.add_spider(spider_tables, spider_databases, progress=tick)
    for f in ddl or []:
        coll.add_ddl(f)
    for i, target in enumerate(databases or []):
        coll.add_database(target)
        tick("reading databases", i + 1, len(databases or []))
    if not coll.entries:
        raise EmptyCollection(f"collection '{name}' would have no databases")
    coll.save()
    info: dict[str, Any] = {}
    if build_router:
        if existed and (coll.path / "router" / "meta.json").exists():
            info = GraphRouter.load(coll, make_embedder(settings)).update(progress=tick)
        else:
            info = GraphRouter.build(coll, BuildConfig(questions_per_table=questions_per_table, finetune=finetune),
                                     tick, embedder=make_embedder(settings)).meta
    return {"ok": True, "collection": name, "databases": len(coll.entries),
            "tables": sum(len(e.schema.tables) for e in coll.entries.values()),
            "graph_edges": coll.graph.g.number_of_edges(), "seconds": round(time.perf_counter() - t0, 1),
            "path": str(coll.path), "router": {k: v for k, v in info.items() if k != "weights"}}


# -- set-up --------------------------------------------------------------------------------------------

def demo_database() -> Path:
    """The bundled demo database (BIRD's superhero, CC BY-SA 4.0)."""
    from tagql.demo import demo_database_path

    return demo_database_path()


def prepare_model(name: str | None = None, *, settings: Settings | None = None,
                  progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Assemble and verify an embedded model now (it is otherwise done on first use): its path, and the
    models tagql knows with the role each plays in the configuration."""
    from tagql.llm.model_pack import PACKS, REQUANTIZED, resolve_model_path

    settings = settings or load_settings()
    chosen = name or settings.llm.model
    path = resolve_model_path(chosen, settings.cache_dir, progress)
    roles = {settings.llm.model: "default for ask", settings.tag.model: "default for --method"}
    return {"ok": True, "model": chosen, "path": str(path),
            "models": [{"name": p.name, "description": p.description, "role": roles.get(p.name, "")}
                       for p in [*PACKS.values(), *REQUANTIZED.values()]]}


__all__ = [
    "MAX_TURNS", "ROUTE_METHODS", "STATEMENT_STATUSES", "Conversation", "KnowledgeBase", "KnowledgeStoreError", "NoConfidentRoute", "Session",
    "UsageError", "add_statements", "check_choice", "connect", "default_knowledge_method", "demo_database",
    "exemplars_from_json", "import_paper_statements", "index_collection", "knowledge_methods",
    "open_knowledge_base", "prepare_model", "route_note", "statement_holds_back",
]
