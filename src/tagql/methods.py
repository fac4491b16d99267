"""Selectable answering methods, side by side (TAG paper section 4.2):

* ``text2sql`` - the SQL result *is* the answer (no LM over rows);
* ``rag`` - row-level embedding retrieval of 10 rows serialised as "- col: val", then the LM answers;
* ``retrieval_rank`` - RAG over 30 rows, LM re-scores them (0-10), the best 10 go to the LM;
* ``text2sql_lm`` - SQL fetches rows, the LM answers from them;
* ``tag`` - ours: an automatic hybrid plan (SQL + LM operators), validated, then executed; relational
  questions (a plan without operators) stay plain SQL.

Entry point for :mod:`tagql.api`: ``answer(session, question, method) -> Answer`` (with ``method``,
``model``, ``plan`` and ``operator_stats`` set).
"""

from __future__ import annotations

import ast
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import sqlglot
from sqlglot import exp

from tagql.db.connection import Database, Result
from tagql.embeddings import Embedder
from tagql.errors import InvalidQuery, LLMOutputError, QueryFailed, QueryTimeout, TagqlError
from tagql.knowledge.glossary import code_columns, glossary_of
from tagql.llm.base import parallel_calls, system, user
from tagql.models import Answer, Attempt, Statement
from tagql.models import Plan as PlanModel
from tagql.pipeline import TagQL, clean_question
from tagql.tag import tag_prompts
from tagql.text2sql.answer import format_data_points, json_value, result_values
from tagql.tag.cache import OpCache, open_op_cache
from tagql.tag.operators import LMCallLimitExceeded, OperatorError, SemEngine, SemTable
from tagql.tag.plan import Plan, PlanError, Planner, both_options, run_plan
from tagql.text import ALNUM, LETTERS, stems, word_tokens

METHODS = ("tag", "text2sql", "rag", "retrieval_rank", "text2sql_lm")

# what a plan can fail with, made or run; anything else (no model, unknown database) is not the plan's fault
_PLAN_FAILURES = (PlanError, LLMOutputError, InvalidQuery, QueryFailed, QueryTimeout, OperatorError,
                  LMCallLimitExceeded)

_AGG = re.compile(r"^\s*(summari[sz]e|provide (some )?information|describe|give (me )?an overview|what do .* say)",
                  re.IGNORECASE)


_NAMES_ASKED = re.compile(r"\b(?:give|list|return|provide|name)\b[^.?!;]*\bnames?\b", re.IGNORECASE)
_NAME_LIKE = re.compile(r"name|title", re.IGNORECASE)
# "with their population", "and the date of each"; not "with the highest latitude" (a superlative picks rows)
_AMOUNT_ASKED = re.compile(r"\bhow (?:much|many|heavy|tall|old|long|far|big)\b|\b(?:with|and) (?:their|its)\b"
                           r"|\band the\b|\bwith the (?!(?:highest|lowest|most|least|fewest|largest|smallest|"
                           r"biggest|greatest|longest|shortest|best|worst|top|bottom|oldest|newest|earliest|latest)\b)",
                           re.IGNORECASE)
# a code naming the same row as its name column (``circuitRef`` 'silverstone' beside 'Silverstone Circuit')
_CODE_LIKE = re.compile(r"(?:ref|code|slug|abbr|abbreviation)$", re.IGNORECASE)


def answer_values(question: str, result: Result, *, ordered: bool = False) -> list[Any]:
    """The values of a plan's result that answer a list question. When the question asks for names ("Give
    the publisher name", "List their full names") and the plan also selected what it compared or sorted
    by (``publisher_name, COUNT(*)``), only the columns named like names are kept; in an ordered result
    of one text column, a value repeated by a join or a missing DISTINCT is kept once, at its first place
    (``c, c, c, o, o`` is the ranking ``c, o``). A column the SQL only sorts by (``event_date`` for
    "meetings in calendar-month order") is dropped unless the question names it (names and titles stay),
    and so is a code beside a name column (``circuitRef`` 'silverstone' next to 'Silverstone Circuit')."""
    columns = list(result.columns)
    keep = list(range(len(columns)))
    if len(columns) > 1 and _NAMES_ASKED.search(question):
        named = [i for i, c in enumerate(columns) if "name" in c.lower()]
        keep = named or keep
    if len(keep) > 1 and any(_NAME_LIKE.search(columns[i]) for i in keep):
        codes = {i for i in keep if _CODE_LIKE.search(columns[i]) and not _NAME_LIKE.search(columns[i])
                 and not _asked(question, columns[i], columns)}
        keep = [i for i in keep if i not in codes]
    if len(keep) > 1 and not _AMOUNT_ASKED.search(question):
        keys = _sort_keys(result.sql)
        unasked = {i for i in keep if columns[i].lower() in keys and not _NAME_LIKE.search(columns[i])
                   and not _asked(question, columns[i], columns)}
        keep = [i for i in keep if i not in unasked] or keep
    if len(keep) < len(columns):
        result = Result(result.sql, [columns[i] for i in keep], [tuple(r[i] for i in keep) for r in result.rows])
    values = result_values(result)
    if ordered and len(result.columns) == 1 and values and all(isinstance(v, str) for v in values):
        values = list(dict.fromkeys(values))
    return values


def _sort_keys(sql: str) -> set[str]:
    """Lower-cased names of the columns the outermost ORDER BY of ``sql`` sorts by (empty if none or
    unparsable)."""
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
        return set()
    order = tree.args.get("order") if isinstance(tree, exp.Select) else None
    return {c.name.lower() for c in order.find_all(exp.Column)} if order is not None else set()


def _asked(question: str, column: str, columns: Sequence[str]) -> bool:
    """Does the question name ``column`` by a word the other columns do not share (``event_date``
    beside ``event_name``: "date")?"""
    others = {w for c in columns if c != column for w in _column_words(c)}
    own = _column_words(column) - others or _column_words(column)
    asked = set(word_tokens(question, LETTERS))
    return bool(own & asked)


def _column_words(column: str) -> set[str]:
    return set(word_tokens(column, LETTERS))


def is_aggregation(question: str) -> bool:
    """Aggregation questions (TAG-Bench) want a summary, not a list of values."""
    return bool(_AGG.search(question))


def make_engine(session: TagQL, *, progress: Any = None) -> SemEngine:
    s = session.settings.tag
    cache = (open_op_cache(s.cache_url, Path(session.settings.cache_dir) / "tag_cache.sqlite") if s.cache
             else OpCache(None))
    glossary = glossary_of(session.knowledge)
    return SemEngine(session.llm, cache=cache, max_calls=s.max_lm_calls, batch_size=s.batch_size,
                     progress=progress, agg_chunk_chars=s.agg_chunk_chars, cascade=s.cascade,
                     cascade_sample=s.cascade_sample, cascade_min_inputs=s.cascade_min_inputs,
                     glossary=glossary, code_columns=code_columns(glossary, session.db) if glossary else (),
                     split=s.split_verdicts, embedder=lambda: session.embedder,
                     concurrency=parallel_calls(session.llm), max_link_calls=s.max_link_calls)


def parse_list(text: str) -> list[Any]:
    """The values of a ``[v1, v2]`` reply (Python literal; lenient about the surrounding text)."""
    m = re.search(r"\[.*\]", text, re.DOTALL)
    if not m:
        return [text.strip()] if text.strip() else []
    try:
        val = ast.literal_eval(m.group(0))
    except (ValueError, SyntaxError):
        inner = m.group(0)[1:-1]
        return [p.strip().strip("'\"") for p in inner.split(",") if p.strip()]
    return list(val) if isinstance(val, (list, tuple)) else [val]


def lm_answer(session: TagQL, question: str, data: str) -> tuple[str, list[Any]]:
    """Paper B.2: a Python list for match/comparison/ranking, free text for aggregation."""
    if is_aggregation(question):
        reply = session.llm.complete([system(tag_prompts.AGG_ANSWER), user(tag_prompts.answer_prompt(data, question))],
                                     max_tokens=256)
        return reply.text.strip(), []
    reply = session.llm.complete([system(tag_prompts.LIST_ANSWER), user(tag_prompts.answer_prompt(data, question))],
                                 max_tokens=session.settings.answer.max_answer_tokens)
    values = parse_list(reply.text)
    return reply.text.strip(), [json_value(v) for v in values]


_CHOICES = re.compile(r"\b(?:answer|reply|respond)(?: with)?\s+((?:['\"][^'\"]+['\"]\s*(?:,|or)\s*)+['\"][^'\"]+['\"])",
                      re.IGNORECASE)


def offered_choices(question: str) -> list[str]:
    """The answers a comparison question offers (``... Answer 'halogen' or 'alkali metal'.``), else []."""
    m = _CHOICES.search(question)
    return re.findall(r"['\"]([^'\"]+)['\"]", m.group(1)) if m else []


def magnitudes(result: Result, choices: Sequence[str] = ()) -> str:
    """A line that orders the quantities a comparison sets side by side, so a small model need not compare
    digits itself: for a one-row result of several numbers ("single_bonds: 41, double_bonds: 3" made the
    1.5B model pick "double"; "from largest to smallest: single_bonds (41), double_bonds (3)" did not), or
    for rows that each carry one of the offered answers as a label (a plan that labels every name 'one
    word' or 'several words' instead of counting them), how many rows carry each."""
    if len(result.rows) == 1:
        pairs = [(c, v) for c, v in zip(result.columns, result.rows[0])
                 if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(pairs) >= 2:
            ordered = sorted(pairs, key=lambda p: -p[1])
            return "\nFrom largest to smallest: " + ", ".join(f"{c} ({json_value(v)})" for c, v in ordered)
    tally = _label_tally(result, choices)
    if tally:
        return "\nRows per answer, from most to fewest: " + ", ".join(f"{c} ({n})" for c, n in tally)
    totals = _indicator_totals(result)
    if totals:
        return (f"\nTotals over the {len(result.rows)} rows, from largest to smallest: "
                + ", ".join(f"{c} ({n})" for c, n in totals))
    return ""


def _label_tally(result: Result, choices: Sequence[str]) -> list[tuple[str, int]]:
    """(choice, rows labelled with it), most first, when some column holds only offered answers."""
    if not choices or len(result.rows) < 2:
        return []
    lower = {c.lower(): c for c in choices}
    for i in range(len(result.columns)):
        labels = [str(r[i]).strip().lower() for r in result.rows if r[i] is not None]
        if labels and all(v in lower for v in labels):
            counts = Counter(labels)
            return sorted(((c, counts.get(c.lower(), 0)) for c in choices), key=lambda p: -p[1])
    return []


def _indicator_totals(result: Result) -> list[tuple[str, int]]:
    """(column, sum), largest first, when at least two columns hold only 0/1 flags over several rows (a
    plan that marks each bond `single` 1/0 and `double` 1/0 instead of counting them)."""
    if len(result.rows) < 2:
        return []
    flags = [i for i in range(len(result.columns))
             if all(type(r[i]) is int and r[i] in (0, 1) for r in result.rows)]
    if len(flags) < 2:
        return []
    return sorted(((result.columns[i], sum(r[i] for r in result.rows)) for i in flags), key=lambda p: -p[1])


_MORE = {"more", "most", "larger", "largest", "greater", "greatest", "higher", "highest", "heavier",
         "heaviest", "bigger", "biggest", "longer", "longest", "older", "oldest", "taller", "tallest"}
_LESS = {"fewer", "fewest", "less", "least", "smaller", "smallest", "lower", "lowest", "lighter",
         "lightest", "shorter", "shortest", "younger", "youngest", "cheaper", "cheapest"}
_FILLER = {"a", "an", "the", "of"}


def compared_choice(question: str, result: Result, choices: Sequence[str]) -> str | None:
    """The offered answer the result's numbers decide, when they decide it without reading: the question
    compares in one direction only ("more", "heavier" vs "fewer", "lighter") and each offered answer has
    exactly one quantity -- a numeric column named after it (``single_bonds: 41, double_bonds: 3``, or
    the totals of 0/1 flag columns), a number on the one row labelled with it, or how many rows carry it
    as a label. The database did the counting; a 1.5B model handed the ordered numbers still picked the
    smaller one on the dev set. None (the LM decides) when the direction, the mapping or a tie is unclear."""
    asked = set(word_tokens(question, LETTERS))
    more, less = bool(asked & _MORE), bool(asked & _LESS)
    if more == less or len(choices) < 2:
        return None
    amounts = _amounts(result, choices)
    if amounts is None:
        return None
    best = (max if more else min)(amounts.values())
    winners = [c for c in choices if amounts[c] == best]
    return winners[0] if len(winners) == 1 else None


def _amounts(result: Result, choices: Sequence[str]) -> dict[str, float] | None:
    """One quantity per offered answer (see :func:`compared_choice`), or None."""
    lower = {c.lower(): c for c in choices}
    numeric = [i for i in range(len(result.columns)) if result.rows and all(
        isinstance(r[i], (int, float)) and not isinstance(r[i], bool) for r in result.rows)]
    # rows labelled with the answers, one row each, and one number beside the label
    for i in range(len(result.columns)):
        labels = [str(r[i]).strip().lower() for r in result.rows]
        others = [j for j in numeric if j != i]
        if labels and len(set(labels)) == len(labels) and set(labels) <= set(lower) and len(others) == 1:
            found = {lower[v]: float(r[others[0]]) for v, r in zip(labels, result.rows)}
            return {c: found.get(c, 0.0) for c in choices} if len(found) == len(choices) else None
    tally = _label_tally(result, choices)
    if tally:
        return {c: float(n) for c, n in tally}
    if len(result.rows) == 1:
        totals = {result.columns[i]: float(result.rows[0][i]) for i in numeric}
    else:
        totals = {c: float(n) for c, n in _indicator_totals(result)}
    named: dict[str, str] = {}  # answer -> the one column named after it
    for choice in choices:
        want = _stems(choice) - _FILLER
        hits = [c for c in totals if want and want <= _stems(c)] or _closest_columns(want, totals)
        if len(hits) != 1:
            return None
        named[choice] = hits[0]
    # two answers read from one column ('metals', 'transition metals') decide nothing
    return {ch: totals[c] for ch, c in named.items()} if len(set(named.values())) == len(choices) else None


def _closest_columns(want: set[str], columns: Iterable[str]) -> list[str]:
    """The column sharing the most of an answer's words, when it shares at least half of them and no
    other column shares as many (``south_america_before_1830`` for 'South American, before 1830': the
    model's alias rarely spells the answer word for word); else every tied column, or none."""
    shared = {c: len(want & _stems(c)) for c in columns}
    best = max(shared.values(), default=0)
    return [c for c, n in shared.items() if n == best] if want and best * 2 >= len(want) else []


def _stems(text: str) -> set[str]:
    """Word stems, camelCase and digits split off (the model's alias ``SouthAmericanBefore1830``)."""
    return stems(re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Za-z])(?=\d)|(?<=\d)(?=[A-Za-z])", " ", text), ALNUM)


def choose(session: TagQL, question: str, result: Result, choices: list[str]) -> str:
    """TAG's generation step for a question that offers its answers: when the result's numbers decide
    it (:func:`compared_choice`), they do; otherwise the LM reads the plan's result (e.g. the two counts
    being compared, ordered for it by :func:`magnitudes`) and picks one option, constrained to the options."""
    decided = compared_choice(question, result, choices)
    if decided is not None:
        return decided
    data = format_data_points(result, session.settings.answer) + magnitudes(result, choices)
    reply = session.llm.complete(
        [system(tag_prompts.CHOICE_ANSWER), user(tag_prompts.answer_prompt(data, question))],
        max_tokens=24, json_schema={"type": "string", "enum": choices})
    text = reply.text.strip()
    try:
        picked = json.loads(text)
    except ValueError:
        picked = text.strip('"')
    if picked not in choices:
        raise LLMOutputError(f"the LM picked none of the offered answers {choices}: {text[:60]!r}")
    return picked


def sentence(values: list[Any], total_rows: int | None = None) -> str:
    if not values:
        return "No rows satisfy the question."
    shown = ", ".join(str(v) for v in values[:20])
    more = f" (and {len(values) - 20} more)" if len(values) > 20 else ""
    return f"Answer: {shown}{more}."


def _is_choice(values: list[Any], choices: list[str]) -> bool:
    return len(values) == 1 and str(values[0]).strip().lower() in {c.lower() for c in choices}


# -- RAG row index ------------------------------------------------------------------------------------------

_ROW_INDEX: dict[tuple[str, str], tuple[list[str], np.ndarray]] = {}


def serialize_row(table: str, columns: list[str], row: tuple[Any, ...]) -> str:
    return f"Table {table}:\n" + "\n".join(f"- {c}: {json_value(v)}" for c, v in zip(columns, row))


def row_index(db: Database, embedder: Embedder, *, per_table: int = 2000) -> tuple[list[str], np.ndarray]:
    """Every table's rows serialised and embedded (cached per database and embedder for the process)."""
    key = (str(db.path or db.name), embedder.name)
    if key not in _ROW_INDEX:
        texts: list[str] = []
        for name in db.schema.table_names:
            r = db.execute(f'SELECT * FROM "{name}" LIMIT {per_table}')
            texts.extend(serialize_row(name, r.columns, row) for row in r.rows)
        vecs = embedder.embed(texts) if texts else np.zeros((0, 1))
        _ROW_INDEX[key] = (texts, vecs)
    return _ROW_INDEX[key]


def retrieve_rows(db: Database, question: str, k: int, embedder: Embedder) -> list[str]:
    texts, vecs = row_index(db, embedder)
    if not texts:
        return []
    q = embedder.embed([question])[0]
    top = np.argsort(-(vecs @ q))[:k]
    return [texts[i] for i in top]


def _points(rows: list[str]) -> str:
    return "\n".join(f"Data Point {i + 1}:\n{r}" for i, r in enumerate(rows))


# -- the methods -------------------------------------------------------------------------------------------

def answer(session: TagQL, question: str, method: str = "tag", *, engine: SemEngine | None = None,
           on_plan: Callable[[dict[str, Any]], None] | None = None) -> Answer:
    """Answer ``question`` with ``method`` (one of :data:`METHODS`). ``on_plan`` gets the TAG plan as
    soon as it is made, before its operators run (a streaming interface shows it while they work)."""
    if method not in METHODS:
        raise TagqlError(f"unknown method '{method}'", f"use one of: {', '.join(METHODS)}")
    question = clean_question(question)
    session = session.for_tag()
    engine = engine or make_engine(session)
    llm = session.llm
    before = llm.usage.snapshot()
    t0 = time.perf_counter()
    sql, result, text, values, plan = "", Result("", [], []), "", [], None
    attempts: list[Any] = []
    notes: list[str] = []
    # expert knowledge (the database's store): every method that writes SQL gets the same statements
    statements = [] if method in ("rag", "retrieval_rank") else session.statements_for(question)
    if method in ("text2sql", "text2sql_lm"):
        outcome = session.synthesizer.run(question, statements)
        sql, result, attempts = outcome.sql, outcome.result, outcome.attempts
        if method == "text2sql":
            values = result_values(result)
            text = sentence(values)
        else:
            text, values = lm_answer(session, question, format_data_points(result, session.settings.answer))
    elif method in ("rag", "retrieval_rank"):
        if method == "rag":
            rows = retrieve_rows(session.db, question, 10, session.embedder)
        else:
            cands = retrieve_rows(session.db, question, 30, session.embedder)
            scores = engine.score_many(f"the record is relevant to answering: {question}", cands)
            order = sorted(range(len(cands)), key=lambda i: -scores[i])[:10]
            rows = [cands[i] for i in order]
        text, values = lm_answer(session, question, _points(rows))
        result = Result("", ["row"], [(r,) for r in rows])
    else:  # tag
        planner = Planner(session.db, llm, engine, retries=session.settings.answer.sql_retries,
                          exemplars=session.settings.tag.plan_exemplars,
                          map_invented_columns=session.settings.tag.map_invented_columns,
                          unplaced_columns_to_lm=session.settings.tag.unplaced_columns_to_lm,
                          fresh_retry_on_repeat=session.settings.answer.fresh_retry_on_repeat,
                          filter_check_inputs=session.settings.tag.filter_check_inputs)
        p: Plan | None = None
        try:
            p, plan_attempts = planner.make(question, statements)
            if p.operators and str(p.operators[-1].get("op", "")).lower() == "agg" and not is_aggregation(question):
                # a list/count question answers with values: a summary of them would hide them in prose
                p.operators.pop()
                plan_attempts.append({"dropped": "agg (the question asks for values, not a summary)"})
            both = both_options(p, offered_choices(question), session.db)
            if both:
                plan_attempts.append({"both_options": both})
            if on_plan is not None:
                on_plan(p.to_dict())
            run = run_plan(p, session.db, engine, udf_timeout_s=session.settings.tag.udf_timeout_s)
        except _PLAN_FAILURES as exc:
            # no plan, or one that failed when it ran (a bad column, the LM-call cap): answer with
            # SQL + LM (text2sql_lm) instead of an error, and say so
            made = "no valid plan" if isinstance(exc, (PlanError, LLMOutputError)) else "the plan failed"
            notes.append(f"{made} ({exc.one_line()}); answered with text2sql_lm")
            try:
                outcome = session.synthesizer.run(question, statements)
            except TagqlError as again:  # both failed: the error carries what the planner tried too
                again.plan_attempts = getattr(exc, "attempts", None)  # type: ignore[attr-defined]
                again.plan_error = exc.one_line()  # type: ignore[attr-defined]
                raise
            sql, result, attempts = outcome.sql, outcome.result, outcome.attempts
            plan = {"fallback": "text2sql_lm", "error": exc.one_line()}
            if p is not None:
                plan["failed_plan"] = p.to_dict()
            if getattr(exc, "attempts", None):
                plan["attempts"] = exc.attempts
            # the question needs the LM: its values are judged, not guessed, here too (unless the cap is spent)
            if planner.hybrid and not isinstance(exc, LMCallLimitExceeded):
                fallback = Plan(sql)
                converted = planner.guesses_to_filters(fallback, question, statements)
                if converted:
                    converted += planner.move_filters_passing_none(fallback, question)
                    try:
                        run = run_plan(fallback, session.db, engine, udf_timeout_s=session.settings.tag.udf_timeout_s)
                    except _PLAN_FAILURES as again:  # the judged version failed too (the cap): the SQL as written
                        plan["guesses_kept"] = again.one_line()
                    else:
                        sql, result = run.sql, run.result
                        plan["guesses_to_lm_filter"] = converted
            choices = offered_choices(question)
            if choices:
                values = [choose(session, question, result, choices)]
                text = sentence(values)
            else:
                text, values = lm_answer(session, question, format_data_points(result, session.settings.answer))
        else:
            sql, result = run.sql, run.result
            plan = {**p.to_dict(), "relational": p.relational, "trace": run.trace, "attempts": plan_attempts}
            if run.summary is not None:
                text, values = run.summary, []
            elif is_aggregation(question) and result.rows:
                # a summary question whose plan has no agg: summarise the rows (grounded in them)
                text = SemTable.from_result(result, engine).sem_agg(question)
                values = []
            else:
                ordered = bool(re.search(r"\border\s+by\b", sql, re.IGNORECASE)) or any(
                    str(op.get("op", "")).lower() in ("sort", "topk") for op in p.operators)
                values = answer_values(question, result, ordered=ordered)
                choices = offered_choices(question)
                if choices and not _is_choice(values, choices):
                    # the plan computed what is compared (two counts, two totals): the LM picks the answer
                    picked = choose(session, question, result, choices)
                    plan["chose"] = {"from": choices, "picked": picked}
                    values = [picked]
                text = sentence(values)
            notes.extend(result.notes)
    usage = llm.usage.since(before)
    return Answer(
        question=question, database=session.db.name, sql=sql, columns=list(result.columns),
        rows=[[json_value(v) for v in r] for r in result.rows[:200]], answer=text, values=values,
        timings={"total_s": round(time.perf_counter() - t0, 3), "lm_s": usage["seconds"]},
        tokens=usage, attempts=[Attempt(sql=a.sql, error=a.error) for a in attempts], notes=notes,
        truncated=result.truncated, statements=[Statement.of(s) for s in statements],
        method=method, model=str(getattr(llm, "name", "")), plan=PlanModel(**plan) if plan else None,
        operator_stats=engine.stats.to_dict(),
    )
