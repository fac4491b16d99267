"""The thin pipeline joining the stages: retrieve knowledge -> synthesize query -> execute -> answer.

(Routing across many databases plugs in before it; see ``tagql.routing``.)
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tagql.config import Settings, for_tag, load_settings
from tagql.db.connection import Database, open_database
from tagql.db.schema import Schema
from tagql.errors import TagqlError
from tagql.knowledge import Retriever, ScoredStatement
from tagql.knowledge.instantiate import for_question
from tagql.llm import make_llm
from tagql.llm.base import LLM
from tagql.tag.answer import generate_answer, json_value, result_values
from tagql.tag.query import Attempt, QuerySynthesizer


def clean_question(question: str) -> str:
    """The question without surrounding blanks; an empty one is a user error."""
    question = question.strip()
    if not question:
        raise TagqlError("the question is empty", "ask something about the data")
    return question


@dataclass
class Answer:
    """Everything one question produced. ``to_dict()`` is the ``--json`` output."""

    question: str
    database: str
    sql: str
    columns: list[str]
    rows: list[list[Any]]
    answer: str
    values: list[Any]
    timings: dict[str, float]
    tokens: dict[str, float]
    statements: list[ScoredStatement] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    truncated: bool = False
    routing: list[dict[str, Any]] = field(default_factory=list)  # candidate schemas, best first (collections)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["statements"] = [{"text": s.text, "sql": s.sql, "score": round(s.score, 4)} for s in self.statements]
        return d


class TagQL:
    """A database plus a language model. Create with :func:`connect`."""

    def __init__(
        self, db: Database, llm: LLM, *, settings: Settings | None = None, knowledge: Retriever | None = None,
        knowledge_k: int | None = None, prompt_schema: Schema | None = None,
    ) -> None:
        self.db = db
        self.llm = llm
        self.settings = settings or load_settings()
        self.knowledge = knowledge
        self.knowledge_k = knowledge_k
        self._tag_session: TagQL | None = None
        self.synthesizer = QuerySynthesizer(
            db, llm, max_tokens=self.settings.answer.max_sql_tokens, retries=self.settings.answer.sql_retries,
            prompt_schema=prompt_schema, statement_style=self.settings.answer.statement_style,
            fallback_without_statements=self.settings.answer.fallback_without_statements,
        )

    @property
    def schema(self):
        return self.db.schema

    def for_tag(self) -> TagQL:
        """This session on the model of the TAG methods (``tag.model``, see :func:`tagql.config.for_tag`),
        loaded once. Itself when that is its model already, or when its model is not the configured local
        one (an endpoint, or an :class:`~tagql.llm.LLM` passed to :func:`connect`)."""
        wanted = for_tag(self.settings)
        if wanted is self.settings or getattr(self.llm, "name", None) != self.settings.llm.model:
            return self
        if self._tag_session is None:
            self._tag_session = TagQL(self.db, make_llm(wanted), settings=wanted, knowledge=self.knowledge,
                                      knowledge_k=self.knowledge_k, prompt_schema=self.synthesizer.prompt_schema)
        return self._tag_session

    def statements_for(self, question: str) -> list[ScoredStatement]:
        """The domain statements retrieved for ``question`` (top-K of the database's store, instantiated
        with the question's constants when configured); none without a store. Every answering method
        uses these, so expert knowledge reaches plans and baselines alike."""
        statements = self.knowledge.retrieve(question, self.knowledge_k) if self.knowledge else []
        if self.settings.answer.instantiate_statements:
            statements = for_question(question, statements)
        return statements

    def ask(self, question: str) -> Answer:
        question = clean_question(question)
        t_start = time.perf_counter()
        before = self.llm.usage.snapshot()
        t0 = time.perf_counter()
        statements = self.statements_for(question)
        t_retrieve = time.perf_counter() - t0
        outcome = self.synthesizer.run(question, statements)
        t1 = time.perf_counter()
        text = generate_answer(question, outcome.result, self.llm, self.settings.answer)
        t_answer = time.perf_counter() - t1
        result = outcome.result
        return Answer(
            question=question,
            database=self.db.name,
            sql=outcome.sql,
            columns=result.columns,
            rows=[[json_value(v) for v in r] for r in result.rows],
            answer=text,
            values=result_values(result),
            timings={
                "retrieve_s": round(t_retrieve, 3),
                "synthesize_s": round(outcome.llm_seconds, 3),
                "execute_s": round(outcome.exec_seconds, 3),
                "answer_s": round(t_answer, 3),
                "total_s": round(time.perf_counter() - t_start, 3),
            },
            tokens=self.llm.usage.since(before),
            statements=statements if outcome.used_statements else [],
            attempts=outcome.attempts,
            notes=list(result.notes),
            truncated=result.truncated,
        )


def open_knowledge(
    db_name: str, settings: Settings, store: str | Path | None = None, *, method: str | None = None,
    k: int | None = None,
) -> Retriever | None:
    """The domain-knowledge retriever for a database: ``store`` if given, else the database's default
    store ``<knowledge_dir>/<db name>.kb`` when one exists (else no knowledge)."""
    from tagql.knowledge.retrieval import DEFAULT_K, DEFAULT_METHOD
    from tagql.knowledge.store import retriever_for

    return retriever_for(db_name, store=store, settings=settings, method=method or DEFAULT_METHOD, k=k or DEFAULT_K)


def connect(
    db: str | Path | Database,
    llm: str | LLM | None = None,
    *,
    settings: Settings | None = None,
    knowledge: Retriever | str | Path | None = None,
    descriptions: str | Path | None = None,
) -> TagQL:
    """Open ``db`` (SQLite path or SQLAlchemy URL) with ``llm`` (``"local"``, ``"openai"``, an
    :class:`~tagql.llm.LLM`, or None for the configured default).

    ``knowledge`` is a :class:`~tagql.knowledge.Retriever` or the path of a knowledge store; by default
    the database's store in ``knowledge_dir`` is used when it exists."""
    settings = settings or load_settings()
    database = db if isinstance(db, Database) else open_database(
        db, settings=settings.db, descriptions_dir=descriptions
    )
    if knowledge is None or isinstance(knowledge, (str, Path)):
        knowledge = open_knowledge(database.name, settings, knowledge)
    model = llm if (llm is not None and not isinstance(llm, str)) else make_llm(settings, backend=llm)
    return TagQL(database, model, settings=settings, knowledge=knowledge)


class NoConfidentRoute(TagqlError):
    hint = "rephrase with the names of what you ask about, pick a schema with --pick, or answer anyway with --force"


class RoutedTagQL:
    """Questions over a collection of databases: route to a database and its tables, then answer there
    (DBCopilot's best-schema mode: the LLM sees the routed tables; validation uses the full schema)."""

    def __init__(
        self, collection: Any, llm: LLM, *, settings: Settings | None = None, method: str = "ours", k: int = 5,
        choose: Any = None, answer_when_unsure: bool = False,
    ) -> None:
        self.collection = collection
        # below the router's confidence floor the question is probably about none of the databases:
        # refuse (with the best guess) unless asked to answer anyway or a human picks the schema
        self.answer_when_unsure = answer_when_unsure
        self.llm = llm
        self.settings = settings or load_settings()
        self.router = collection.router(method)
        self.k = k
        self.choose = choose  # optional human-in-the-loop: (candidates) -> candidate
        self._dbs: dict[str, Database] = {}

    def ask(self, question: str) -> Answer:
        t0 = time.perf_counter()
        candidates = self.router.route(question, self.k)
        if not candidates:
            raise TagqlError(f"no database of collection '{self.collection.name}' matches the question")
        from tagql.routing.hitl import confidence_note

        note = confidence_note(candidates)
        if note and self.choose is None and not self.answer_when_unsure:
            raise NoConfidentRoute(note)
        chosen = self.choose(candidates) if self.choose else candidates[0]
        route_s = time.perf_counter() - t0
        if chosen.database not in self._dbs:
            self._dbs[chosen.database] = self.collection.open(chosen.database, settings=self.settings.db)
        db = self._dbs[chosen.database]
        subset = db.schema.subset(chosen.tables) if chosen.tables else None
        session = TagQL(
            db, self.llm, settings=self.settings, knowledge=open_knowledge(db.name, self.settings),
            prompt_schema=subset if subset and subset.tables else None,
        )
        answer = session.ask(question)
        answer.routing = [c.to_dict() for c in candidates]
        if note and self.choose is None:
            answer.notes.append(note)
        answer.timings = {"route_s": round(route_s, 3), **answer.timings,
                          "total_s": round(time.perf_counter() - t0, 3)}
        return answer
