"""Query synthesis: question (+ domain statements) -> one validated SQL query -> rows.

The LLM writes SQL; we extract it, check it is a single read-only query in the target dialect,
validate every table/column against the real schema, and execute it. On a validation or
execution error the LLM gets one more try with the error message (configurable). When every try
made with domain statements failed, one more query is written from the bare question (a statement
can mislead a small model into a query that cannot run; configurable).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import sqlglot

from tagql.db.connection import Database, Result
from tagql.db.repair import (
    misplaced_values,
    repair_column_spelling,
    repair_key_named_columns,
    repair_tables_named_after_columns,
    repair_columns,
    repair_conditional_counts,
    repair_missing_group_by,
    repair_scalar_subqueries,
    repair_self_joins,
    repair_table_spelling,
    repair_unknown_tables,
    repair_unlinked_sibling_joins,
    repair_values,
    self_comparisons,
)
from tagql.db.safety import fix_sqlite_double_quoted_strings, parse_read_only, validate_against_schema
from tagql.db.schema import Schema
from tagql.errors import InvalidQuery, LLMOutputError, QueryFailed, QueryTimeout, TagqlError, UnsafeQuery
from tagql.knowledge import ScoredStatement
from tagql.llm.base import LLM, Message, system, user
from tagql.llm.repeats import RepeatWatch
from tagql.text2sql import prompts
from tagql.text2sql.candidates import Candidate, Policy, choose
from tagql.text2sql.context import Example, Turn, follow_up_text
from tagql.text2sql.grounding import (
    repair_aggregated_column,
    repair_counted_table,
    repair_ignored_flags,
    repair_invented_filters,
    repair_projected_keys,
    repair_unused_joins,
    repair_value_by_join,
)
from tagql.text2sql.repair import (
    quote_apostrophes,
    repair_counted_entity,
    repair_date_parts,
    repair_decimal_places,
    repair_length_order,
    repair_listed_values,
    repair_month_order,
    repair_scaled_numbers,
    repair_word_count,
)
from tagql.text2sql.values import ValueMatch

_FENCE = re.compile(r"```(?:sql|sqlite|postgresql|postgres|mysql)?\s*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_KEYWORDS = r"SELECT|WITH|INSERT|UPDATE|DELETE|DROP|CREATE|ALTER|ATTACH|DETACH|PRAGMA|REPLACE|VACUUM|MERGE"
_LINE_START = re.compile(rf"^[ \t]*({_KEYWORDS})\b", re.IGNORECASE | re.MULTILINE)
_INLINE = re.compile(r"\bSELECT\s|\bWITH\s+(RECURSIVE\s+)?\w+\s*(\([^)]*\))?\s+AS\s*\(", re.IGNORECASE)
_STATEMENT = re.compile(rf"({_KEYWORDS})\b", re.IGNORECASE)

log = logging.getLogger(__name__)


def extract_sql(text: str) -> str:
    """Pull one SQL statement out of an LLM reply (code fences, leading prose, trailing notes)."""
    fenced = _FENCE.findall(text)
    candidate = fenced[0] if fenced else text
    if not fenced and "```" in candidate:  # an unterminated fence
        candidate = candidate.split("```", 1)[1]
        candidate = re.sub(r"^(sql|sqlite)\s*\n", "", candidate, flags=re.IGNORECASE)
    # a statement at the start of a line (any kind: the safety check judges it), else an inline SELECT
    m = _LINE_START.search(candidate) or _INLINE.search(candidate)
    if not m:
        raise LLMOutputError(f"the LLM reply contains no SQL query: {text.strip()[:120]!r}")
    sql = candidate[m.start():]
    # keep the first statement: cut at a semicolon outside quotes, or at a blank line followed by prose
    sql = _first_statement(sql)
    sql = re.split(r"\n\s*\n(?=[A-Z][a-z]+\b(?! JOIN))", sql)[0]
    return sql.strip().rstrip(";").strip()


def _first_statement(sql: str) -> str:
    quote: str | None = None
    for i, ch in enumerate(sql):
        if quote:
            if ch == quote:
                quote = None
        elif ch in ("'", '"', "`"):
            quote = ch
        elif ch == ";":
            rest = sql[i + 1:].strip()
            # a second statement stays (the safety check rejects it); trailing prose is cut
            if _STATEMENT.match(rest):
                return sql
            return sql[:i]
    return sql


@dataclass
class Attempt:
    sql: str
    error: str | None = None
    repeated: bool = False  # the same failed SQL as an earlier try, word for word (tagql.llm.repeats)


@dataclass
class QueryOutcome:
    sql: str
    result: Result
    attempts: list[Attempt] = field(default_factory=list)
    llm_seconds: float = 0.0
    exec_seconds: float = 0.0
    used_statements: bool = True  # False when the query that ran was written without them (fallback)
    candidates: list[Candidate] = field(default_factory=list)  # with candidates > 1: every one, greedy first


def prepare_sql(sql: str, db: Database, *, repairs: list[str] | None = None, question: str = "",
                statements: str = "", grounding: bool = True) -> str:
    """Check and normalise ``sql`` for ``db``: read-only, right dialect, known tables/columns.

    SQL written in SQLite style for a server database is transpiled with sqlglot. With ``repairs``
    (a list to append notes to), columns under the wrong table, ``= (SELECT ...)`` lookups that can
    match several rows and misspelt constants are fixed, and a column compared with itself is an
    error (LLM-written SQL only: see ``db/repair.py`` and ``text2sql/repair.py``; ``question`` helps
    choose a join). With a ``question``, what it counts, the filters it states (with its domain
    ``statements``), the keys it means and the table that stores its constants are repaired too
    (``text2sql/grounding.py``; ``grounding=False`` leaves them out, for measuring them). Returns the
    SQL to execute."""
    schema = db.schema
    tree, sql = _parse_for(sql, db, question, repairs)
    before = tree.sql(dialect=db.dialect)
    tree = fix_sqlite_double_quoted_strings(tree, schema)
    if repairs is not None:
        tree = _guarded(tree, repairs, lambda t, notes: _schema_repairs(t, db, question, statements, grounding, notes))
        same = self_comparisons(tree)
        if same:
            raise InvalidQuery(f"the condition {same[0]} compares a column with itself (always true): "
                               "compare it with the matching column of the other table")
    try:
        validate_against_schema(tree, schema)
    except InvalidQuery as exc:
        after = tree.sql(dialect=db.dialect)
        if repairs is not None and after != before:  # the error is about this SQL: callers that rewrite
            exc.repaired_sql = after  # type: ignore[attr-defined]  # further start from it
        raise
    if repairs is not None:
        tree = _guarded(tree, repairs, lambda t, notes: _data_repairs(t, db, question, grounding, notes))
    after = tree.sql(dialect=db.dialect)
    return after if after != before else sql


def _guarded(tree: sqlglot.exp.Expression, repairs: list[str],
             step: Callable[[sqlglot.exp.Expression, list[str]], sqlglot.exp.Expression]) -> sqlglot.exp.Expression:
    """``step(tree, repairs)``, which rewrites ``tree`` and notes what it changed. A repair's own bug (any
    error but a :class:`TagqlError`, which says something about the query) must not lose the question: the
    query then goes on as it was before the step, without its notes, and the bug is logged."""
    pristine, noted = tree.copy(), len(repairs)
    try:
        return step(tree, repairs)
    except TagqlError:
        raise
    except Exception:
        log.warning("a SQL repair failed; the query goes on unrepaired", exc_info=True)
        del repairs[noted:]
        return pristine


def _schema_repairs(tree: sqlglot.exp.Expression, db: Database, question: str, statements: str, grounding: bool,
                    repairs: list[str]) -> sqlglot.exp.Expression:
    """The repairs that read the schema and the question (``db/repair.py``, ``text2sql/repair.py``,
    ``text2sql/grounding.py``), in order; returns the tree (one of them builds a new one)."""
    schema = db.schema
    repairs += repair_literal_filters(tree)
    repairs += repair_table_spelling(tree, schema)
    repairs += repair_unknown_tables(tree, schema)
    repairs += repair_tables_named_after_columns(tree, schema)
    repairs += repair_column_spelling(tree, schema)
    repairs += repair_key_named_columns(tree, schema)
    repairs += repair_columns(tree, schema, question)
    repairs += repair_scalar_subqueries(tree)
    repairs += repair_conditional_counts(tree)
    repairs += repair_missing_group_by(tree)
    repairs += repair_self_joins(tree, schema)
    repairs += repair_unlinked_sibling_joins(tree, schema)
    repairs += repair_counted_entity(tree, schema, question)
    if question and grounding:
        repairs += repair_counted_table(tree, schema, question)
        repairs += repair_invented_filters(tree, schema, question, statements)
        repairs += repair_projected_keys(tree, schema, question)
        repairs += repair_unused_joins(tree, schema, question)
        repairs += repair_aggregated_column(tree, schema, question)
    tree, ordered = repair_length_order(tree, question)
    repairs += ordered
    if db.backend.strftime_dates:
        repairs += repair_date_parts(tree)
        repairs += repair_month_order(tree, question)
    repairs += repair_word_count(tree, question)
    repairs += repair_decimal_places(tree, question)
    repairs += repair_scaled_numbers(tree, question)
    return tree


def _data_repairs(tree: sqlglot.exp.Expression, db: Database, question: str, grounding: bool,
                  repairs: list[str]) -> sqlglot.exp.Expression:
    """The repairs that read the stored values, once the query is valid; a constant that no repair could
    place raises :class:`InvalidQuery` naming where the data has it."""
    repairs += repair_values(tree, db)
    if question:
        repairs += repair_listed_values(tree, db, question)
    if question and grounding:
        repairs += repair_value_by_join(tree, db)
        repairs += repair_ignored_flags(tree, db, question)
    misplaced = misplaced_values(tree, db, repairs=repairs)
    if misplaced:
        raise InvalidQuery(f"{misplaced[0]}: compare the column that holds it (join its table if needed)")
    return tree


def _parse_for(sql: str, db: Database, question: str,
               repairs: list[str] | None) -> tuple[sqlglot.exp.Expression, str]:
    """Parse ``sql`` as a read-only query of ``db``; returns the tree and the SQL it was read from. SQL that
    does not parse is tried once with the question's apostrophes doubled (LLM SQL only, noted in ``repairs``)
    and, on a server database, as SQLite flavour transpiled to its dialect."""
    try:
        return parse_read_only(sql, db.dialect), sql
    except InvalidQuery:
        quoted = quote_apostrophes(sql, question) if repairs is not None else None
        if quoted is not None:
            try:
                tree = parse_read_only(quoted, db.dialect)
            except InvalidQuery:
                pass
            else:
                repairs.append("doubled the apostrophes of the question's words in string constants")
                return tree, quoted
        if db.backend.sqlite_syntax:
            raise
    try:
        sqlglot.parse_one(sql, read="sqlite")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
        raise InvalidQuery(f"SQL does not parse ({db.dialect}): {sql.strip()[:80]!r}") from None
    # small models often write SQLite/MySQL flavour whatever they are told
    translated = sqlglot.transpile(sql, read="sqlite", write=db.dialect)[0]
    return parse_read_only(translated, db.dialect), translated


_LITERAL_CLAIM = re.compile(r"""^\s*\{([^{}]+)\}\s*(?:is|=|==|equals|is equal to)\s*(['"])(.*)\2\s*\.?\s*$""",
                            re.IGNORECASE | re.DOTALL)


def repair_literal_filters(tree: sqlglot.exp.Expression) -> list[str]:
    """``LM_FILTER('{type} is ''Guest Speaker''', type)`` asks the LM whether a value equals a constant:
    the 1.5B model answered "no" to "Guest Speaker is 'Guest Speaker'" (session 19, dev question 26),
    while SQL decides it exactly and without a call. Such a filter becomes ``type = 'Guest Speaker'``
    (respelt later like any constant)."""
    from sqlglot import exp

    notes: list[str] = []
    for call in list(tree.find_all(exp.Anonymous)):
        if str(call.name).upper() != "LM_FILTER" or len(call.expressions) != 2:
            continue
        instruction, column = call.expressions
        if not (isinstance(instruction, exp.Literal) and instruction.is_string and isinstance(column, exp.Column)):
            continue
        m = _LITERAL_CLAIM.match(instruction.this)
        if not m or m.group(1).rsplit(".", 1)[-1].strip().lower() != column.name.lower():
            continue
        eq = exp.EQ(this=column.copy(), expression=exp.Literal.string(m.group(3)))
        notes.append(f"{call.sql()} -> {eq.sql()} (an equality: SQL decides it exactly)")
        call.replace(eq)
    return notes


class QuerySynthesizer:
    """``prompt_schema`` narrows what the LLM sees (e.g. the tables a router chose); queries are still
    validated against the database's full schema."""

    def __init__(
        self, db: Database, llm: LLM, *, max_tokens: int = 384, retries: int = 1, prompt_schema: Schema | None = None,
        statement_style: prompts.StatementStyle = "external", fallback_without_statements: bool = True,
        candidates: int = 1, candidate_temperature: float = 0.7, candidate_policy: Policy = "majority",
        fresh_retry_on_repeat: bool = False, repeat_samples: int = 4, check: Callable[[str], None] | None = None,
    ) -> None:
        self.db = db
        # a caller's own check of each prepared query (raises InvalidQuery: the repair round hears why), e.g.
        # a query across databases that reads only one of them (tagql.cross)
        self.check = check
        # a failed query repeated word for word: repeat_samples repairs sampled at candidate_temperature (or,
        # with 0 or a backend that cannot sample, one more greedy try from the first prompt, the error as a note)
        self.fresh_retry_on_repeat = fresh_retry_on_repeat
        self.repeat_samples = repeat_samples
        # execution-guided choice (text2sql/candidates.py): the greedy query plus candidates - 1 sampled ones,
        # all run, the result most of them agree on wins; 1 = the greedy query alone
        self.candidates = candidates
        self.candidate_temperature = candidate_temperature
        self.candidate_policy = candidate_policy
        self.llm = llm
        self.max_tokens = max_tokens
        self.retries = retries
        self.prompt_schema = prompt_schema
        self.statement_style = statement_style
        self.fallback_without_statements = fallback_without_statements

    def system_message(self) -> Message:
        schema = self.prompt_schema or self.db.schema
        return system(prompts.system_prompt(self.db.name, schema.to_prompt(), self.db.dialect))

    def run(self, question: str, statements: list[ScoredStatement] | None = None, *,
            examples: Sequence[Example] = (), history: Sequence[Turn] = (),
            values: Sequence[ValueMatch] = ()) -> QueryOutcome:
        """SQL for ``question`` with its domain ``statements``, verified ``examples`` (few-shot pairs, most
        similar last), for a follow-up the conversation's earlier turns (``history``, oldest first), and
        the stored ``values`` its words name (:mod:`tagql.text2sql.values`)."""
        attempts: list[Attempt] = []
        clock = [0.0, 0.0]  # LLM seconds, execution seconds, over every try
        context = (tuple(examples), tuple(history), tuple(values))
        try:
            return self._write_and_run(question, statements or [], attempts, self.retries, clock, context)
        except (LLMOutputError, InvalidQuery, UnsafeQuery, QueryFailed):
            if not (statements and self.fallback_without_statements):
                raise
        outcome = self._write_and_run(question, [], attempts, 0, clock, context)
        outcome.used_statements = False
        outcome.result.notes.append(
            "the queries written with the domain statements failed; this one was written from the question alone")
        return outcome

    def _write_and_run(self, question: str, statements: list[ScoredStatement], attempts: list[Attempt],
                       retries: int, clock: list[float],
                       context: tuple[tuple[Example, ...], tuple[Turn, ...], tuple[ValueMatch, ...]] = ((), (), ()),
                       ) -> QueryOutcome:
        """One prompt, then up to ``retries`` repairs with the error message; appends to ``attempts``
        and adds the LLM and execution seconds to ``clock``."""
        examples, history, values = context

        def prompt(note: str = "") -> list[Message]:
            return [self.system_message(),
                    user(prompts.sql_user_prompt(question, statements, style=self.statement_style,
                                                 dialect=self.db.dialect, examples=examples, history=history,
                                                 values=values, note=note))]

        messages = prompt()
        # the repairs that read the question read the whole conversation (a follow-up leaves out what it keeps)
        asked = follow_up_text(question, history) if history else question
        first = messages
        last_error: TagqlError | None = None
        outcome: QueryOutcome | None = None
        repeats = RepeatWatch(self.fresh_retry_on_repeat)
        tries, n = retries + 1, 0
        while n < tries:
            n += 1
            t0 = time.perf_counter()
            reply = self.llm.complete(messages, max_tokens=self.max_tokens)
            clock[0] += time.perf_counter() - t0
            raw_sql = reply.text.strip()
            try:
                sql, result = self._prepare_and_run(reply.text, asked, statements, clock)
            except QueryTimeout:
                raise
            except (LLMOutputError, InvalidQuery, UnsafeQuery, QueryFailed) as exc:
                attempts.append(Attempt(raw_sql, exc.one_line()))
                last_error = exc
                repair = messages + [
                    Message("assistant", reply.text.strip() or "(empty)"),
                    user(prompts.repair_prompt(exc.one_line(), self.db.dialect)),
                ]
                if repeats.failed(raw_sql):
                    # written again word for word after the repair prompt (tagql.llm.repeats): greedy decoding
                    # would keep doing so, so repairs are sampled from the same conversation and the result most
                    # of them agree on is kept; a backend that cannot sample is asked once more, greedily, from
                    # the first prompt with the error as a note
                    attempts[-1].repeated = True
                    if self.repeat_samples and self.llm.supports_samples:
                        outcome = self._sampled_repair(repair, asked, statements, attempts, clock)
                        break
                    tries += n == tries
                    messages = prompt(exc.one_line())
                    continue
                messages = repair
                continue
            attempts.append(Attempt(sql))
            outcome = QueryOutcome(sql, result, attempts, clock[0], clock[1])
            break
        if self.candidates > 1 and self.llm.supports_samples:
            outcome = self._choose_among_candidates(first, outcome, asked, statements, attempts, clock)
        if outcome is not None:
            return outcome
        assert last_error is not None
        last_error.attempts = attempts  # type: ignore[attr-defined]
        raise last_error

    def _prepare_and_run(self, reply: str, asked: str, statements: list[ScoredStatement],
                         clock: list[float]) -> tuple[str, Result]:
        """The SQL of one reply, checked, repaired and run (execution seconds added to ``clock``)."""
        raw_sql = extract_sql(reply)
        repairs: list[str] = []
        sql = prepare_sql(raw_sql, self.db, repairs=repairs, question=asked,
                          statements="\n".join(s.render() for s in statements))
        if self.check is not None:
            self.check(sql)
        t1 = time.perf_counter()
        try:
            result = self.db.execute(sql)
        finally:
            clock[1] += time.perf_counter() - t1
        result.notes[:0] = [f"SQL repaired: {r}" for r in repairs]
        return sql, result

    def _sampled(self, messages: list[Message], n: int, asked: str, statements: list[ScoredStatement],
                 clock: list[float], ran: dict[str, Candidate] | None = None) -> list[Candidate]:
        """``n`` queries sampled from ``messages`` at ``candidate_temperature``, each checked and run once
        (identical SQL runs once: ``ran`` holds the queries already run)."""
        t0 = time.perf_counter()
        replies = self.llm.sample(messages, n=n, max_tokens=self.max_tokens,  # type: ignore[attr-defined]
                                  temperature=self.candidate_temperature)
        clock[0] += time.perf_counter() - t0
        ran = {} if ran is None else ran
        pool: list[Candidate] = []
        for reply in replies:
            text = reply.text.strip()
            try:
                sql = prepare_sql(extract_sql(text), self.db, question=asked,
                                  statements="\n".join(s.render() for s in statements))
            except (LLMOutputError, InvalidQuery, UnsafeQuery) as exc:
                pool.append(Candidate(text, error=exc.one_line()))
                continue
            if sql in ran:  # the same query: the same result, without running it again
                pool.append(Candidate(sql, ran[sql].result, ran[sql].error))
                continue
            try:
                sql, result = self._prepare_and_run(text, asked, statements, clock)
                candidate = Candidate(sql, result)
            except (LLMOutputError, InvalidQuery, UnsafeQuery, QueryFailed) as exc:  # a timeout counts as a failure
                candidate = Candidate(sql, error=exc.one_line())
            ran[sql] = candidate
            pool.append(candidate)
        return pool

    def _sampled_repair(self, messages: list[Message], asked: str, statements: list[ScoredStatement],
                        attempts: list[Attempt], clock: list[float]) -> QueryOutcome | None:
        """After a repeated failure: ``repeat_samples`` repairs sampled from the repair conversation, run; the
        result most of those that ran agree on (None when none ran). Each sample is an attempt."""
        pool = self._sampled(messages, self.repeat_samples, asked, statements, clock)
        for c in pool:
            if not c.ran:
                attempts.append(Attempt(c.sql, c.error))
        picked = choose(pool, "majority")
        if picked is None:
            return None
        index, votes = picked
        chosen = pool[index]
        assert chosen.result is not None
        attempts.append(Attempt(chosen.sql))
        chosen.result.notes.append(f"the model repeated a failed query; {votes} of {len(pool)} repairs sampled "
                                   "after it returned this result")
        return QueryOutcome(chosen.sql, chosen.result, attempts, clock[0], clock[1])

    def _choose_among_candidates(self, messages: list[Message], greedy: QueryOutcome | None, asked: str,
                                 statements: list[ScoredStatement], attempts: list[Attempt],
                                 clock: list[float]) -> QueryOutcome | None:
        """Sample ``candidates - 1`` more queries from the first prompt, run each once (identical SQL runs
        once), and keep the result most candidates agree on (``candidate_policy``); the greedy outcome
        (None when every try failed) is one candidate."""
        pool = [Candidate(greedy.sql, greedy.result, greedy=True) if greedy is not None
                else Candidate(attempts[-1].sql, error=attempts[-1].error, greedy=True)]
        pool += self._sampled(messages, self.candidates - 1, asked, statements, clock, {pool[0].sql: pool[0]})
        picked = choose(pool, self.candidate_policy)
        if picked is None:
            return None
        index, votes = picked
        chosen = pool[index]
        assert chosen.result is not None
        note = f"{votes} of {len(pool)} SQL candidates returned this result"
        if greedy is not None and not chosen.greedy:
            attempts.append(Attempt(chosen.sql))
            outcome = QueryOutcome(chosen.sql, chosen.result, attempts, clock[0], clock[1])
            note += " (chosen over the first query's, which fewer shared)"
        elif greedy is None:
            attempts.append(Attempt(chosen.sql))
            outcome = QueryOutcome(chosen.sql, chosen.result, attempts, clock[0], clock[1])
            note += " (the first query failed)"
        else:
            outcome = greedy
            outcome.llm_seconds, outcome.exec_seconds = clock[0], clock[1]
        outcome.result.notes.append(note)
        outcome.candidates = pool
        return outcome
