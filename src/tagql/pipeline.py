"""The thin pipeline joining the stages on one database: retrieve knowledge -> synthesize query ->
execute -> answer. Routing over a collection and the TAG methods sit above it, in :mod:`tagql.api`,
the one public path every interface uses."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tagql.config import Settings, default_settings, for_tag
from tagql.db.connection import Database
from tagql.db.schema import Schema
from tagql.embeddings import Embedder, Progress, make_embedder
from tagql.errors import TagqlError
from tagql.knowledge import Retriever, ScoredStatement
from tagql.knowledge.instantiate import for_question
from tagql.llm import make_llm
from tagql.llm.base import LLM
from tagql.models import Answer, Attempt, Example, Statement
from tagql.text2sql.abstain import Thresholds, Verdict, check_question
from tagql.text2sql.answer import generate_answer, json_value, result_values
from tagql.text2sql.context import ExampleIndex, Turn, follow_up_text
from tagql.text2sql.query import QuerySynthesizer
from tagql.text2sql.values import ValueMatch, match_values, render_values


def clean_question(question: str) -> str:
    """The question without surrounding blanks; an empty one is a user error."""
    question = question.strip()
    if not question:
        raise TagqlError("the question is empty", "ask something about the data")
    return question


class TagQL:
    """A database plus a language model. Create with :func:`connect`."""

    def __init__(
        self, db: Database, llm: LLM, *, settings: Settings | None = None, knowledge: Retriever | None = None,
        knowledge_k: int | None = None, prompt_schema: Schema | None = None, embedder: Embedder | None = None,
        examples: ExampleIndex | None = None, example_k: int = 3, step_progress: Progress | None = None,
    ) -> None:
        self.db = db
        self.examples = examples  # verified question -> SQL pairs of this database (few-shot, most similar)
        self.example_k = example_k
        self.llm = llm
        self.settings = settings or default_settings()
        self._embedder = embedder
        self.knowledge = knowledge
        self.knowledge_k = knowledge_k
        self._tag_session: TagQL | None = None
        self.step_progress = step_progress  # hears a long first-use step (building the value index)
        self.synthesizer = QuerySynthesizer(
            db, llm, max_tokens=self.settings.answer.max_sql_tokens, retries=self.settings.answer.sql_retries,
            prompt_schema=prompt_schema, statement_style=self.settings.answer.statement_style,
            fallback_without_statements=self.settings.answer.fallback_without_statements,
            candidates=self.settings.answer.sql_candidates,
            candidate_temperature=self.settings.answer.sql_candidate_temperature,
            candidate_policy=self.settings.answer.sql_candidate_policy,
            fresh_retry_on_repeat=self.settings.answer.fresh_retry_on_repeat,
            repeat_samples=self.settings.answer.repeat_samples,
        )

    @property
    def schema(self):
        return self.db.schema

    @property
    def embedder(self) -> Embedder:
        """The session's sentence embedder (TAG row retrieval, filter cascades), loaded on first use."""
        if self._embedder is None:
            self._embedder = make_embedder(self.settings)
        return self._embedder

    def for_tag(self) -> TagQL:
        """This session on the model of the TAG methods (``tag.model``, see :func:`tagql.config.for_tag`),
        loaded once. Itself when that is its model already, or when its model is not the configured local
        one (an endpoint, or an :class:`~tagql.llm.LLM` passed to :func:`connect`)."""
        wanted = for_tag(self.settings)
        if wanted is self.settings or getattr(self.llm, "name", None) != self.settings.llm.model:
            return self
        if self._tag_session is None:
            self._tag_session = TagQL(self.db, make_llm(wanted), settings=wanted, knowledge=self.knowledge,
                                      knowledge_k=self.knowledge_k, prompt_schema=self.synthesizer.prompt_schema,
                                      embedder=self._embedder)
        return self._tag_session

    def statements_for(self, question: str, k: int | None = None) -> list[ScoredStatement]:
        """The domain statements retrieved for ``question`` (top-K of the database's store, instantiated
        with the question's constants when configured); none without a store. Every answering method
        uses these, so expert knowledge reaches plans and baselines alike."""
        statements = self.knowledge.retrieve(question, k or self.knowledge_k) if self.knowledge else []
        if self.settings.answer.instantiate_statements:
            statements = for_question(question, statements)
        return statements

    def values_for(self, question: str) -> list[ValueMatch]:
        """The stored values ``question``'s words name (``answer.value_hints``; none when off), from the
        database's value index (built once and cached under ``cache_dir/values/``), in the tables the SQL
        prompt shows."""
        if not self.settings.answer.value_hints:
            return []
        from tagql.db.values import value_index

        index = value_index(self.db, self.settings.cache_dir, progress=self.step_progress)
        shown = self.synthesizer.prompt_schema
        return match_values(question, index, tables=[t.name for t in shown.tables] if shown is not None else None)

    def ask(self, question: str, *, k: int | None = None,
            on_event: Callable[[str, dict[str, Any]], None] | None = None, history: Sequence[Turn] = ()) -> Answer:
        """SQL for ``question`` (with up to ``k`` domain statements and the most similar verified examples),
        run read-only, answered from its rows. ``history`` (earlier turns, oldest first) makes it a
        follow-up: the SQL prompt shows them and the question is read together with them.
        ``on_event(name, data)`` hears each stage as it ends: ``statements``, ``sql``, ``rows``, then (a model
        that streams) ``answer`` per piece of the sentence as it is written: ``{"token", "answer": so far}``."""
        emit = on_event or (lambda name, data: None)
        question = clean_question(question)
        history = tuple(history)
        # retrieval reads a follow-up together with the question it follows
        about = follow_up_text(question, history[-1:]) if history else question
        t_start = time.perf_counter()
        before = self.llm.usage.snapshot()
        t0 = time.perf_counter()
        statements = self.statements_for(about, k)
        examples = self.examples.similar(about, self.example_k) if self.examples is not None else []
        values = self.values_for(question)
        t_retrieve = time.perf_counter() - t0
        emit("statements", {"statements": [Statement.of(s).model_dump() for s in statements]})
        if self.settings.answer.abstain and not history:  # a follow-up is read with its history: not judged alone
            t0 = time.perf_counter()
            verdict = self.check_answerable(question, statements)
            if verdict.abstain:
                return Answer(
                    question=question, database=self.db.name, answer=verdict.reason, abstained=True,
                    abstain_reason=verdict.reason,
                    timings={"retrieve_s": round(t_retrieve, 3), "abstain_s": round(time.perf_counter() - t0, 3),
                             "total_s": round(time.perf_counter() - t_start, 3)},
                    tokens=self.llm.usage.since(before), model=str(getattr(self.llm, "name", "")),
                    notes=[f"abstained: P(answerable) {verdict.p_answerable:.3f}, "
                           f"{len(verdict.uncovered)} question words match nothing in the database"
                           if verdict.p_answerable is not None else
                           f"abstained on schema coverage: {len(verdict.uncovered)} question words match nothing "
                           "in the database",
                           "if the database does hold it, a domain statement that defines those words lets it "
                           "answer (tagql knowledge add); knowledge about the stored values (a company's country) "
                           "is method tag's; answer.abstain = false turns the check off"],
                )
        outcome = self.synthesizer.run(question, statements, examples=examples, history=history, values=values)
        result = outcome.result
        rows = [[json_value(v) for v in r] for r in result.rows]
        emit("sql", {"sql": outcome.sql})
        emit("rows", {"columns": result.columns, "rows": rows, "truncated": result.truncated})
        t1 = time.perf_counter()
        pieces: list[str] = []

        def answer_text(piece: str) -> None:  # the sentence as the model writes it (a streaming model)
            if piece:  # an empty piece is the model asking whether to go on: nothing to send
                pieces.append(piece)
                emit("answer", {"token": piece, "answer": "".join(pieces)})

        # the sentence answers the follow-up as asked: given the earlier question too, the 1.5B model
        # said "224 superheroes are published by Marvel Comics." for "And for DC Comics?"
        text = generate_answer(question, result, self.llm, self.settings.answer,
                               on_text=answer_text if on_event is not None else None)
        t_answer = time.perf_counter() - t1
        return Answer(
            question=question,
            database=self.db.name,
            sql=outcome.sql,
            columns=result.columns,
            rows=rows,
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
            statements=[Statement.of(s) for s in statements] if outcome.used_statements else [],
            attempts=[Attempt(sql=a.sql, error=a.error) for a in outcome.attempts],
            notes=[*([f"values found in the data: {render_values(values)}"] if values else []), *result.notes],
            truncated=result.truncated,
            model=str(getattr(self.llm, "name", "")),
            examples=[Example(question=e.question, sql=e.sql) for e in examples],
            context_turns=len(history),
        )


    def check_answerable(self, question: str, statements: Sequence[ScoredStatement] = ()) -> Verdict:
        """Whether this database can answer ``question`` (:mod:`tagql.text2sql.abstain`), with the configured
        thresholds; the yes/no is asked after the SQL prompt's own system message (its schema prefix)."""
        a = self.settings.answer
        thresholds = Thresholds(p_alone=a.abstain_p_alone, p_with_gap=a.abstain_p_with_gap,
                                min_uncovered=a.abstain_min_uncovered, coverage_alone=a.abstain_coverage_alone,
                                prompt=a.abstain_prompt)
        from tagql.db.values import value_index

        index = value_index(self.db, self.settings.cache_dir, progress=self.step_progress)
        return check_question(question, self.db, self.llm, self.synthesizer.system_message(),
                              statements=[s.render() for s in statements], thresholds=thresholds, index=index)


def open_knowledge(
    db_name: str, settings: Settings, store: str | Path | None = None, *, method: str | None = None,
    k: int | None = None, embedder: Embedder | Callable[[], Embedder] | None = None,
    progress: Progress | None = None,
) -> Retriever | None:
    """The domain-knowledge retriever for a database: ``store`` if given, else the database's default
    store ``<knowledge_dir>/<db name>.kb`` when one exists (else no knowledge). ``embedder`` (or a
    factory, called only when there is a store) defaults to :func:`~tagql.embeddings.make_embedder`;
    ``progress(stage, done, total)`` hears about a long first-use step (distilling the static token
    embeddings, ~1 min once)."""
    from tagql.knowledge.retrieval import DEFAULT_K, DEFAULT_METHOD
    from tagql.knowledge.store import retriever_for

    return retriever_for(db_name, store=store, settings=settings, method=method or DEFAULT_METHOD, k=k or DEFAULT_K,
                         embedder=embedder or (lambda: make_embedder(settings)), progress=progress)
