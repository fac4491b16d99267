"""The engine core every LM operator runs on: one LM call at a time through the cache, under the call cap,
with batching and progress (:class:`EngineBase`); the row table the operators transform (:class:`TableBase`);
the ``{Column}`` templates of instructions; the operators' prompts (``prompts.toml`` beside this module).
"""

from __future__ import annotations

import functools
import json
import re
import string
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from tagql.db.connection import Result
from tagql.embeddings import Embedder
from tagql.errors import LLMOutputError, TagqlError
from tagql.knowledge.glossary import Glossary, gloss
from tagql.llm.base import LLM, Message, system, user
from tagql.tag.cache import OpCache, cache_key
from tagql.templates import load_templates

if TYPE_CHECKING:
    from tagql.tag.operators.engine import SemEngine
    from tagql.tag.operators.table import SemTable

# The operators' prompts and grammars: prompts.toml beside this module (read once; the cache keys on its text)
PROMPTS = load_templates("tagql.tag.operators")

Progress = Callable[[str, int, int], None]
T = TypeVar("T")
R = TypeVar("R")
CASCADE_MODES = ("auto", "on", "off")


def stderr_progress(every: int = 10) -> Progress:
    """A progress callback printing ``op: done/total`` to stderr every ``every`` inputs and at the end."""
    def report(op: str, done: int, total: int) -> None:
        if done == total or done % every == 0:
            print(f"  {op}: {done}/{total}", file=sys.stderr, flush=True)
    return report


class OperatorError(TagqlError):
    """An operator instruction is invalid (unknown column, bad arguments)."""


class LMCallLimitExceeded(TagqlError):
    """The per-question cap on LM calls was reached."""


@dataclass
class EngineStats:
    lm_calls: int = 0
    cache_hits: int = 0
    deduped: int = 0  # rows answered by another row's identical input
    cascade_decided: int = 0  # filter inputs the embedding proxy decided without the LM (tagql.tag.cascade)
    seconds: float = 0.0
    per_operator: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "lm_calls": self.lm_calls, "cache_hits": self.cache_hits, "deduped": self.deduped,
            "cascade_decided": self.cascade_decided,
            "seconds": round(self.seconds, 3), "operators": self.per_operator,
        }

def drop_unmatched_braces(text: str) -> str:
    """``a {b} c}`` -> ``a {b} c``; ``{a {b}`` -> ``a {b}``: braces that open or close nothing go."""
    keep = [True] * len(text)
    opened: list[int] = []
    for i, ch in enumerate(text):
        if ch == "{":
            if opened:  # a brace inside a reference: the earlier one opened nothing
                keep[opened.pop()] = False
            opened.append(i)
        elif ch == "}":
            if opened:
                opened.pop()
            else:
                keep[i] = False
    for i in opened:
        keep[i] = False
    return "".join(ch for ch, k in zip(text, keep) if k)


def repair_braces(instruction: str) -> str:
    """``instruction`` unchanged when it parses as a template, else without its unmatched braces (small
    models close a quoted value with a stray one: ``{Department} is 'Foreign Language'}``)."""
    try:
        template_fields(instruction)
    except OperatorError:
        return drop_unmatched_braces(instruction)
    return instruction


def template_fields(instruction: str) -> list[str]:
    """The ``{Column}`` names in an instruction, in order of first appearance (``{Col:left}`` keeps the tag)."""
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(instruction))
    except ValueError as exc:
        raise OperatorError(f"malformed instruction {instruction!r}: {exc}", "use {Column} to reference columns")
    for _, fname, spec, _ in parsed:
        if fname is None:
            continue
        full = f"{fname}:{spec}" if spec else fname
        if full.strip() and full not in names:
            names.append(full)
    return names


def resolve_columns(instruction: str, columns: Sequence[str], *, op: str = "operator") -> dict[str, int]:
    """Map each ``{field}`` of the instruction to a column index (exact, then case-insensitive)."""
    out: dict[str, int] = {}
    lower = {c.lower(): i for i, c in enumerate(columns)}
    for name in template_fields(instruction):
        if name in columns:
            out[name] = list(columns).index(name)
        elif name.lower() in lower:
            out[name] = lower[name.lower()]
        else:
            raise OperatorError(
                f"{op} instruction {instruction!r} references column '{name}', which the rows do not have",
                f"the columns are: {', '.join(columns)}",
            )
    return out


def resolve_or_none(name: str, columns: Sequence[str]) -> int | None:
    try:
        return resolve_columns("{" + name + "}", columns)[name]
    except OperatorError:
        return None


def _text(v: Any) -> str:
    return "NULL" if v is None else str(v)


def fill(instruction: str, values: dict[str, Any], glossary: Glossary | None = None) -> str:
    """The instruction with each ``{field}`` replaced by its value, written ``value (gloss)`` when the
    glossary says what a stored code means (``cl (Chlorine)``; :mod:`tagql.knowledge.glossary`)."""
    out = instruction
    for name, v in values.items():
        g = gloss(glossary, name, v)
        out = out.replace("{" + name + "}", _text(v) if g is None else f"{_text(v)} ({g})")
    return out


def _numbered(items: list[str], tag: str) -> str:
    """``1. <tag>item</tag>`` lines, one per item."""
    return "\n".join(PROMPTS.render("numbered_item", n=j + 1, tag=tag, item=c) for j, c in enumerate(items))


class EngineBase:
    """Runs LM operators for one session/question: LM, cache, call cap, batching, progress, stats. The
    operators' own methods are in their modules (:mod:`~tagql.tag.operators.sem_filter`, ...);
    :class:`~tagql.tag.operators.engine.SemEngine` joins them."""

    def __init__(
        self, llm: LLM, *, cache: OpCache | None = None, max_calls: int = 200, batch_size: int = 1,
        progress: Progress | None = None, agg_chunk_chars: int = 4000, cascade: str = "on",
        cascade_sample: int = 16, cascade_min_inputs: int = 40,
        embedder: Embedder | Callable[[], Embedder] | None = None,
        glossary: Glossary | None = None, code_columns: Collection[str] = (), split: bool = True,
        concurrency: int = 1, max_link_calls: int = 0,
    ) -> None:
        if cascade not in CASCADE_MODES:
            raise TagqlError(f"unknown cascade mode {cascade!r}", f"use one of: {', '.join(CASCADE_MODES)}")
        self.llm = llm
        self.cache = cache if cache is not None else OpCache(None)
        self.max_calls = max_calls
        # LM_CHOOSE calls a lost link (a join over a key the database does not have) may take on top of
        # max_calls: derived once per database and cached, it is not one question's cost (udf.prefetch_choices)
        self.max_link_calls = max_link_calls
        self.batch_size = max(1, batch_size)
        self.progress = progress
        self.agg_chunk_chars = agg_chunk_chars
        # cheap-first filter cascade (tagql.tag.cascade): "on" for every filter of at least
        # cascade_min_inputs distinct inputs, "auto" only when the filter's uncached inputs exceed the
        # calls left under the cap (a question that would otherwise stop), "off" never
        self.cascade = cascade
        self.cascade_sample = cascade_sample
        self.cascade_min_inputs = cascade_min_inputs
        self._embedder = embedder
        # filters decide from P(yes) over all their inputs (tagql.tag.verdicts) when the LM exposes it
        self.split = split
        # LM_FILTER verdicts judged before a statement ran (tagql.tag.udf.prefetch_filters), per instruction
        self.prejudged: dict[str, dict[str, bool]] = {}
        self.choices: dict[str, list[str]] = {}  # LM_CHOOSE option sources ('table.column') -> stored values
        # LM_CHOOSE answers chosen before a statement ran (tagql.tag.udf.prefetch_choices), per (instruction, source)
        self.prechosen: dict[tuple[str, str], dict[str, str | None]] = {}
        # value glosses from the database's domain statements; codes of a code column that no statement
        # glosses are glossed by the LM on first use (fill), with the known ones as examples
        self.glossary: dict[str, dict[str, str]] = {c: dict(m) for c, m in (glossary or {}).items()}
        self.code_columns = {c.lower() for c in code_columns} & set(self.glossary)
        self._gloss_asked: set[tuple[str, str]] = set()
        self.stats = EngineStats()
        self.pending_error: BaseException | None = None  # set by SQL UDFs (sqlite swallows exceptions)
        # calls of one operator run at once, from threads: the LLM's parallel_calls (a pool of servers);
        # 1 = one after the other (the in-process model)
        self.concurrency = max(1, concurrency)
        self._calls_lock = threading.Lock()

    def fill(self, instruction: str, values: dict[str, Any]) -> str:
        """:func:`fill` with this engine's value glossary: every operator fills inputs through here."""
        if self.code_columns:
            for name, v in values.items():
                self._gloss_code(name, v)
        return fill(instruction, values, self.glossary)

    def _gloss_code(self, field_name: str, value: Any) -> None:
        """Learn what an unglossed code of a code column stands for (one cached LM call per code; none
        once the call cap is reached, and a reply that is not a short name is ignored)."""
        column = field_name.rsplit(".", 1)[-1].lower()
        if column not in self.code_columns or not isinstance(value, str) or not value.strip():
            return
        known = self.glossary.get(column)
        if known is None or value in known or (column, value) in self._gloss_asked:
            return
        self._gloss_asked.add((column, value))
        shots = list(known.items())[:8]
        messages = [system(PROMPTS.render("gloss_system", column=column))]
        for code, name in shots:  # as chat turns: the 1.5B model glossed b, k, cu right only this way
            messages += [user(PROMPTS.render("gloss_user", code=code)), Message("assistant", name)]
        messages.append(user(PROMPTS.render("gloss_user", code=value)))
        try:
            text = self.call("gloss", column + "\n" + "\n".join(f"{c} = {n}" for c, n in shots), value,
                             messages, max_tokens=12)
        except LMCallLimitExceeded:
            return
        name = (text.strip().splitlines() or [""])[0]
        name = re.sub(rf"^\s*{re.escape(value)}\s*[=:]\s*", "", name, flags=re.IGNORECASE).strip(" '\".")
        if name and len(name.split()) <= 4 and name.lower() != value.lower():
            known[value] = name

    # -- one LM call, cached and capped ---------------------------------------------------------------
    def call(
        self, kind: str, instruction: str, payload: str, messages: list[Message], *, max_tokens: int = 8,
        grammar: str | None = None, json_schema: dict[str, Any] | None = None,
    ) -> str:
        return self._cached(kind, instruction, payload, lambda: self.llm.complete(
            messages, max_tokens=max_tokens, grammar=grammar, json_schema=json_schema).text.strip())

    def _key(self, kind: str, instruction: str, payload: str) -> str:
        return cache_key(getattr(self.llm, "name", "llm"), kind, instruction, payload, prompts=PROMPTS.digest)

    def _cached(self, kind: str, instruction: str, payload: str, produce: Callable[[], str]) -> str:
        """The cached text for (model, kind, instruction, payload), else ``produce()`` (one LM call, capped)."""
        key = self._key(kind, instruction, payload)
        hit = self.cache.get(key)
        if hit is not None:
            with self._calls_lock:
                self.stats.cache_hits += 1
            return hit
        with self._calls_lock:
            if self.stats.lm_calls >= self.max_calls:
                raise LMCallLimitExceeded(
                    f"stopped after {self.max_calls} LM calls for this question ({kind} on {instruction!r})",
                    "narrow the question, filter with SQL first, or raise TAGQL_TAG__MAX_LM_CALLS",
                )
            self.stats.lm_calls += 1
        t0 = time.perf_counter()
        text = produce()
        with self._calls_lock:
            self.stats.seconds += time.perf_counter() - t0
        self.cache.put(key, text)
        return text

    def _each(self, op: str, items: Sequence[T], fn: Callable[[T], R]) -> list[R]:
        """``[fn(item) for item in items]``, ticking progress per item; with ``concurrency > 1`` up to that
        many at once (threads: each ``fn`` is a cached LM call, the LLM a pool of servers). The first error
        stops it: calls not started are dropped, calls in flight finish (and are cached), then it raises."""
        if self.concurrency == 1 or len(items) < 2:
            out = []
            for i, item in enumerate(items):
                out.append(fn(item))
                self._tick(op, i + 1, len(items))
            return out
        results: list[Any] = [None] * len(items)
        done = 0
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items)), thread_name_prefix="tagql-op") as pool:
            futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
            try:
                for fut in as_completed(futures):
                    results[futures[fut]] = fut.result()
                    done += 1
                    self._tick(op, done, len(items))
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
        return results

    def _chunks(self, op: str, items: list[str], size: int) -> Iterator[list[str]]:
        """``items`` in chunks of ``size``, ticking progress after each chunk."""
        for start in range(0, len(items), size):
            yield items[start: start + size]
            self._tick(op, min(start + size, len(items)), len(items))

    def _tick(self, op: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(op, done, total)

    def _numbered_batch(
        self, kind: str, instruction: str, sys_text: str, chunk: list[str], *, tag: str, rule: str, value: str,
        what: str, noun: str, ask: str, tokens_per_item: int = 6,
    ) -> list[str]:
        """One call for several items: numbered ``<tag>`` items in, a grammar-forced ``N: value`` line per
        item out. Returns the values in item order; a missing line is an error, never a guess."""
        listed = _numbered(chunk, tag)
        grammar = "root ::= " + ' "\\n" '.join(f'"{j + 1}: " v' for j in range(len(chunk))) + f"\nv ::= {rule}"
        text = self.call(
            kind, instruction, json.dumps(chunk, ensure_ascii=False),
            [system(sys_text), user(PROMPTS.render("numbered_user", listed=listed, ask=ask))],
            max_tokens=tokens_per_item * len(chunk) + 4, grammar=grammar,
        )
        got = {int(n): v for n, v in re.findall(rf"(\d+)\s*:\s*({value})", text.lower())}
        for j in range(len(chunk)):
            if j + 1 not in got:
                raise LLMOutputError(f"the LM gave no {what} for {noun} {j + 1} of a batch: {text[:80]!r}")
        return [got[j + 1] for j in range(len(chunk))]


def _one_cache_batch(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run an operator inside one :meth:`OpCache.batch`: its cache entries are written in one transaction."""
    @functools.wraps(method)
    def run(self: SemTable, *args: Any, **kwargs: Any) -> Any:
        with self.engine.cache.batch():
            return method(self, *args, **kwargs)
    return run


class TableBase:
    """Rows plus column names; each operator (its module's ``...Table`` mixin) returns a new table."""

    def __init__(self, columns: Sequence[str], rows: Sequence[Sequence[Any]], engine: SemEngine) -> None:
        self.columns = list(columns)
        self.rows = [tuple(r) for r in rows]
        self.engine = engine

    @classmethod
    def from_result(cls, result: Result, engine: SemEngine) -> SemTable:
        return cls(result.columns, result.rows, engine)

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        return f"SemTable({self.columns}, {len(self.rows)} rows)"

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r)) for r in self.rows]

    def column(self, name: str) -> list[Any]:
        idx = resolve_columns("{" + name + "}", self.columns, op="column")[name]
        return [r[idx] for r in self.rows]

    def to_result(self, sql: str = "") -> Result:
        return Result(sql, list(self.columns), list(self.rows))

    def _distinct(self, instruction: str, op: str) -> tuple[list[str], list[str]]:
        """(per-row filled instruction, distinct filled instructions in first-seen order)."""
        cols = resolve_columns(instruction, self.columns, op=op)
        if not cols:
            raise OperatorError(
                f"{op} instruction {instruction!r} references no column", "name columns in braces, e.g. {City}"
            )
        per_row = [self.engine.fill(instruction, {n: r[i] for n, i in cols.items()}) for r in self.rows]
        distinct = list(dict.fromkeys(per_row))
        self.engine.stats.deduped += len(per_row) - len(distinct)
        return per_row, distinct

    def _record(self, op: str, instruction: str, rows_in: int, distinct: int, t0: float, calls0: int) -> None:
        self.engine.stats.per_operator.append({
            "op": op, "instruction": instruction, "rows": rows_in, "distinct_inputs": distinct,
            "lm_calls": self.engine.stats.lm_calls - calls0, "seconds": round(time.perf_counter() - t0, 3),
        })
