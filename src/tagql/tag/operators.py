"""LM operators over rows (LOTUS-style semantic operators), executed efficiently.

Each operator takes a natural-language instruction whose ``{Column}`` fields name columns of the table:

    t = SemTable.from_result(db.execute("SELECT DISTINCT City FROM schools"), engine)
    sv = t.sem_filter("{City} is a city in the Silicon Valley region")
    top = t.sem_topk("{Title} is technical", k=3)
    text = t.sem_agg("Summarize the comments")

Efficiency (what a naive one-call-per-row loop does not do):

* **dedupe** - the LM sees each distinct combination of the *referenced* columns once
  (filtering 1,000 schools on ``{City}`` costs one call per distinct city);
* **persistent cache** keyed by model + operator + instruction + input (:class:`~tagql.tag.cache.OpCache`;
  one write transaction per operator call);
* **constrained outputs** - a filter answers ``yes``/``no`` under a GBNF grammar (one token), a score is
  a digit, extraction is JSON-schema constrained;
* **shared system prefix** - the fixed instruction is the system message, the row is the user message, so
  llama.cpp reuses the evaluated instruction for every row;
* **batching** - ``batch_size > 1`` packs several rows into one call with a grammar for the numbered answers;
* a per-question **LM-call cap** (:class:`LMCallLimitExceeded`) and a progress callback.

Row values are data, never instructions: they are quoted in the user message and outputs are
grammar-constrained, so "ignore previous instructions" in a cell can at most flip that row's label.
"""

from __future__ import annotations

import functools
import json
import re
import string
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tagql.db.connection import Result
from tagql.embeddings import Embedder
from tagql.errors import LLMOutputError, TagqlError
from tagql.knowledge.glossary import Glossary, gloss
from tagql.llm.base import LLM, Message, system, user
from tagql.tag.cache import OpCache, cache_key
from tagql.tag.verdicts import DEFAULT as DEFAULT_CUT
from tagql.tag.verdicts import split_verdicts
from tagql.templates import load_templates

# The operators' prompts and grammars: operator_prompts.toml beside this module (read once; the cache keys on it)
PROMPTS = load_templates("tagql.tag", "operator_prompts.toml")
# Capitalised answers too: forcing lowercase pushed the 1.5B model towards "yes" (bench/tag_operator_lotus.py).
YES_NO_GRAMMAR: str = PROMPTS["yes_no_grammar"]
YES_NO_CHOICES: list[str] = PROMPTS["yes_no_choices"]  # the grammar's replies, yes first (P(yes) = p[0] + p[1])
JUDGE_SYSTEM: str = PROMPTS["judge_system"]


def judge_messages(claim: str) -> list[Message]:
    """The filter's one-claim prompt; the system message names no instruction, so every filter shares it."""
    return [system(JUDGE_SYSTEM), user(PROMPTS.render("judge_user", claim=claim))]


SCORE_GRAMMAR: str = PROMPTS["score_grammar"]
AB_GRAMMAR: str = PROMPTS["ab_grammar"]

Progress = Callable[[str, int, int], None]
CASCADE_MODES = ("auto", "on", "off")
PAIRWISE_MAX = 8  # top-k: a tied group up to this size is ordered by pairwise comparisons


def stderr_progress(every: int = 10) -> Progress:
    """A progress callback printing ``op: done/total`` to stderr every ``every`` inputs and at the end."""
    import sys

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


_SCALED_NUMBER: dict[str, Any] = {
    "type": "object",
    "properties": {"value": {"type": "number"}, "scale": {"enum": ["units", "thousand", "million", "billion"]}},
    "required": ["value", "scale"],
}
_SCALES = {"units": 1.0, "thousand": 1e3, "million": 1e6, "billion": 1e9}


def _plain_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _scaled_number(text: str) -> float | None:
    """``{"value": 39.5, "scale": "million"}`` -> 39500000.0; a value already written in full
    (``{"value": 39933977, "scale": "million"}``, 1,000 or more) is not scaled again."""
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return float(obj)  # a backend that ignored the schema: a bare number is still one
    try:
        value = float(obj["value"])
    except (KeyError, TypeError, ValueError):
        return None
    scale = _SCALES.get(str(obj.get("scale")), 1.0)
    return value * scale if abs(value) < 1000 else value


class SemEngine:
    """Runs LM operators for one session/question: LM, cache, call cap, batching, progress, stats."""

    def __init__(
        self, llm: LLM, *, cache: OpCache | None = None, max_calls: int = 200, batch_size: int = 1,
        progress: Progress | None = None, agg_chunk_chars: int = 4000, cascade: str = "on",
        cascade_sample: int = 16, cascade_min_inputs: int = 40,
        embedder: Embedder | Callable[[], Embedder] | None = None,
        glossary: Glossary | None = None, code_columns: Collection[str] = (), split: bool = True,
    ) -> None:
        if cascade not in CASCADE_MODES:
            raise TagqlError(f"unknown cascade mode {cascade!r}", f"use one of: {', '.join(CASCADE_MODES)}")
        self.llm = llm
        self.cache = cache if cache is not None else OpCache(None)
        self.max_calls = max_calls
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
        # value glosses from the database's domain statements; codes of a code column that no statement
        # glosses are glossed by the LM on first use (fill), with the known ones as examples
        self.glossary: dict[str, dict[str, str]] = {c: dict(m) for c, m in (glossary or {}).items()}
        self.code_columns = {c.lower() for c in code_columns} & set(self.glossary)
        self._gloss_asked: set[tuple[str, str]] = set()
        self.stats = EngineStats()
        self.pending_error: BaseException | None = None  # set by SQL UDFs (sqlite swallows exceptions)

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
            self.stats.cache_hits += 1
            return hit
        if self.stats.lm_calls >= self.max_calls:
            raise LMCallLimitExceeded(
                f"stopped after {self.max_calls} LM calls for this question ({kind} on {instruction!r})",
                "narrow the question, filter with SQL first, or raise TAGQL_TAG__MAX_LM_CALLS",
            )
        self.stats.lm_calls += 1
        t0 = time.perf_counter()
        text = produce()
        self.stats.seconds += time.perf_counter() - t0
        self.cache.put(key, text)
        return text

    def _chunks(self, op: str, items: list[str], size: int) -> Iterator[list[str]]:
        """``items`` in chunks of ``size``, ticking progress after each chunk."""
        for start in range(0, len(items), size):
            yield items[start: start + size]
            self._tick(op, min(start + size, len(items)), len(items))

    def _tick(self, op: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(op, done, total)

    # -- boolean ------------------------------------------------------------------------------------
    def judge_many(
        self, instruction: str, claims: list[str], *, op: str = "filter", weights: Sequence[int] | None = None,
    ) -> list[bool]:
        """Yes/no for each filled-in claim (claims are already distinct); large filters may go through
        the cheap-first cascade (see ``cascade`` in ``__init__``). ``weights``: how many rows each claim
        stands for (the cascade always asks the LM about the heavy ones)."""
        known = self._cached_verdicts(instruction, claims)
        if self._cascades(len(claims), len(known)):
            embedder = self._cascade_embedder()
            if embedder is not None:
                return self._judge_cascaded(instruction, claims, op, known, embedder, weights)
        return self._judge(instruction, claims, op)

    def _cached_verdicts(self, instruction: str, claims: list[str]) -> dict[int, bool]:
        """Claims whose one-claim verdict is already in the cache (free labels for the cascade; with
        token probabilities, cached P(yes) above 0.5)."""
        if self.cascade == "off" or len(claims) < self.cascade_min_inputs:
            return {}
        if self._yes_probs_fn() is not None:
            cached = {i: self.cache.get(self._key("filter_p", instruction, c)) for i, c in enumerate(claims)}
            return {i: float(hit) > DEFAULT_CUT for i, hit in cached.items() if hit is not None}
        out = {}
        for i, c in enumerate(claims):
            hit = self.cache.get(self._key("filter", instruction, c))
            if hit is not None and hit.strip().lower() in ("yes", "no"):
                out[i] = hit.strip().lower() == "yes"
        return out

    def _cascades(self, n: int, n_known: int) -> bool:
        if self.cascade == "off" or n < self.cascade_min_inputs:
            return False
        # split verdicts need every input's P(yes) (the cut over a proxy-chosen sample of 52 states said
        # yes to 31 for "borders Canada", bench/results/tag_judge_s22.json): "on" acts as "auto" then
        if self.cascade == "on" and self._yes_probs_fn() is None:
            return True
        calls_needed = -(-(n - n_known) // self.batch_size)
        return calls_needed > self.max_calls - self.stats.lm_calls

    def _cascade_embedder(self) -> Embedder | None:
        """The embedder passed in (a zero-argument callable is called once, on the first cascade)."""
        if callable(self._embedder) and not isinstance(self._embedder, Embedder):
            from tagql.embeddings import EmbeddingUnavailable

            try:
                self._embedder = self._embedder()
            except EmbeddingUnavailable:
                if self.cascade == "on":
                    raise
                self._embedder = None
        if self._embedder is None and self.cascade == "on":
            from tagql.embeddings import EmbeddingUnavailable

            raise EmbeddingUnavailable("the filter cascade needs an embedder", "pass embedder= to SemEngine")
        return self._embedder  # None ("auto"): the filter runs without a cascade (and may hit the cap)

    def _judge_cascaded(
        self, instruction: str, claims: list[str], op: str, known: dict[int, bool], embedder: Embedder,
        weights: Sequence[int] | None,
    ) -> list[bool]:
        from tagql.tag import cascade

        scores = cascade.proxy_scores(embedder, instruction, claims)
        labels = dict(known)
        sample = cascade.sample_indexes(scores, self.cascade_sample) + cascade.heavy_indexes(weights or [])
        sample = [i for i in dict.fromkeys(sample) if i not in labels]

        def judge(indexes: list[int]) -> None:
            # the cascade judges a chosen part of the inputs, over which no gap means what it means over
            # all of them: P(yes) is cut at 0.5 here (split verdicts need every input judged)
            texts = [claims[i] for i in indexes]
            got = self._yes_probs(instruction, texts, op)
            verdicts = self._judge_generated(instruction, texts, op) if got is None else [p > DEFAULT_CUT for p in got]
            labels.update(zip(indexes, verdicts))

        judge(sample)
        decided = cascade.decide(scores, labels)
        judge([i for i in range(len(claims)) if i not in labels and i not in decided])
        self.stats.cascade_decided += len(decided)
        return [labels[i] if i in labels else decided[i] for i in range(len(claims))]

    def _judge(self, instruction: str, claims: list[str], op: str) -> list[bool]:
        """Yes/no from the LM (through the cache) for each claim: split verdicts over their P(yes) when
        the LM gives token probabilities (:mod:`tagql.tag.verdicts`), else each generated reply."""
        # Why this wording: see judge_system in operator_prompts.toml.
        probs = self._yes_probs(instruction, claims, op)
        return split_verdicts(probs) if probs is not None else self._judge_generated(instruction, claims, op)

    def _judge_generated(self, instruction: str, claims: list[str], op: str) -> list[bool]:
        """Each claim's generated (grammar-forced) yes/no, through the cache."""
        out: list[bool] = []
        for chunk in self._chunks(op, claims, self.batch_size):
            if len(chunk) == 1 and self.batch_size == 1:
                text = self.call(
                    "filter", instruction, chunk[0], judge_messages(chunk[0]), max_tokens=2, grammar=YES_NO_GRAMMAR,
                )
                out.append(_parse_bool(text, chunk[0]))
                continue
            answers = self._numbered_batch(
                "filter_batch", instruction, JUDGE_SYSTEM, chunk, tag="statement", rule=PROMPTS["yes_no_rule"],
                value=r"yes|no", what="yes/no", noun="statement", ask=PROMPTS["judge_batch_ask"],
            )
            out.extend(a == "yes" for a in answers)
        return out

    def _yes_probs_fn(self) -> Callable[..., list[float]] | None:
        fn = getattr(self.llm, "choice_probs", None)
        return fn if self.split and self.batch_size == 1 and callable(fn) else None

    def _yes_probs(self, instruction: str, claims: list[str], op: str) -> list[float] | None:
        """P(yes) of each claim from the judge's token probabilities (one cached LM call each, the same
        prompt as the grammar-forced yes/no), or None when the LM does not expose them, batching is on,
        or ``split`` is off: then the filter reads the generated yes/no."""
        fn = self._yes_probs_fn()
        if fn is None:
            return None
        out: list[float] = []
        for chunk in self._chunks(op, claims, 1):
            def p_yes(claim: str = chunk[0]) -> str:
                p = fn(judge_messages(claim), YES_NO_CHOICES)
                return f"{p[0] + p[1]:.6f}"
            try:
                out.append(float(self._cached("filter_p", instruction, chunk[0], p_yes)))
            except LLMOutputError:  # an endpoint without log-probabilities: generated yes/no from now on
                self.split = False
                return None
        return out

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

    def score_many(self, instruction: str, items: list[str]) -> list[int]:
        """A 0-10 score per item (one-token grammar; ``batch_size`` items per call)."""
        sys_text = PROMPTS.render("score_system", instruction=instruction)
        scores: list[int] = []
        for chunk in self._chunks("topk", items, self.batch_size):
            if self.batch_size == 1:
                text = self.call(
                    "score", instruction, chunk[0],
                    [system(sys_text), user(PROMPTS.render("score_user", record=chunk[0]))],
                    max_tokens=3, grammar=SCORE_GRAMMAR,
                )
                m = re.search(r"\d+", text)
                if not m:
                    raise LLMOutputError(f"the LM gave no score for {chunk[0][:60]!r}: {text[:40]!r}")
                scores.append(min(10, int(m.group())))
                continue
            got = self._numbered_batch(
                "score_batch", instruction, sys_text, chunk, tag="record", rule=PROMPTS["score_rule"],
                value=r"\d+", what="score", noun="record", ask=PROMPTS["score_batch_ask"],
            )
            scores.extend(min(10, int(v)) for v in got)
        return scores

    def rank_scores(self, instruction: str, items: list[str]) -> list[float]:
        """Scores to rank by (top-k): as many LM calls as :meth:`score_many`, far fewer ties.

        When the LM exposes its token probabilities (``llm.digit_probs``: the local llama.cpp backend),
        the score is the *expected* digit on a 0-9 scale, ``sum(d * p(d))`` over the ten digit tokens of
        the grammar-forced answer (probability-weighted scoring, as in G-EVAL / monoT5-style rerankers):
        two records the model both rates "9" still differ by how sure it is, so ties are practically
        gone at no extra call. Batches (``batch_size`` > 1) read each numbered line's digit the same
        way in one call. Without probabilities this is :meth:`score_many` (integer 0-10) and
        :meth:`SemTable.sem_topk` refines the ties that matter."""
        probs = getattr(self.llm, "digit_probs", None)
        if not callable(probs):
            return [float(v) for v in self.score_many(instruction, items)]
        sys_text = PROMPTS.render("digit_system", instruction=instruction)

        def expected(msgs: list[Message], slots: int) -> Callable[[], str]:
            return lambda: json.dumps([_expected_digit(p) for p in probs(msgs, slots=slots)])

        out: list[float] = []
        for chunk in self._chunks("topk", items, self.batch_size):
            if self.batch_size == 1:
                prompt = [system(sys_text), user(PROMPTS.render("digit_user", record=chunk[0]))]
                text = self._cached("score_p", instruction, chunk[0], expected(prompt, 1))
            else:
                ask = PROMPTS.render("numbered_user", listed=_numbered(chunk, "record"), ask=PROMPTS["digit_batch_ask"])
                prompt = [system(sys_text), user(ask)]
                text = self._cached("score_p_batch", instruction, json.dumps(chunk, ensure_ascii=False),
                                    expected(prompt, len(chunk)))
            values = json.loads(text)
            if len(values) != len(chunk):
                raise LLMOutputError(f"the LM gave {len(values)} scores for {len(chunk)} records")
            out.extend(float(v) for v in values)
        return out

    def fine_scores(self, instruction: str, items: list[str], *, batch: int = 8) -> list[int]:
        """A 0-100 score per item, ``batch`` numbered items per call: a finer scale for items that tied on
        the 0-10 scale, rated side by side so the LM can spread them apart."""
        sys_text = PROMPTS.render("fine_system", instruction=instruction)
        out: list[int] = []
        for chunk in self._chunks("topk_refine", items, batch):
            got = self._numbered_batch(
                "score100_batch", instruction, sys_text, chunk, tag="record", rule=PROMPTS["score100_rule"],
                value=r"\d+", what="score", noun="record", ask=PROMPTS["fine_batch_ask"], tokens_per_item=8,
            )
            out.extend(min(100, int(v)) for v in got)
        return out

    def prefer(self, instruction: str, a: str, b: str) -> bool:
        """True when ``a`` satisfies the criterion better than ``b``."""
        sys_text = PROMPTS.render("compare_system", instruction=instruction)
        text = self.call(
            "compare", instruction, json.dumps([a, b], ensure_ascii=False),
            [system(sys_text), user(PROMPTS.render("compare_user", a=a, b=b))],
            max_tokens=2, grammar=AB_GRAMMAR,
        )
        return text.strip().upper().startswith("A")

    def map_many(self, instruction: str, items: list[str], *, max_tokens: int = 48) -> list[str]:
        sys_text = PROMPTS.render("map_system", instruction=instruction)
        out: list[str] = []
        for i, item in enumerate(items):
            text = self.call(
                "map", instruction, item,
                [system(sys_text), user(PROMPTS.render("map_user", record=item))], max_tokens=max_tokens,
            )
            out.append(text.strip().splitlines()[0].strip() if text.strip() else "")
            self._tick("map", i + 1, len(items))
        return out

    def number_many(self, instruction: str, items: list[str], *, style: str = "scaled") -> list[float | None]:
        """One number per item (``LM_NUMBER``: a year, a population, a month's number), constrained so the
        reply sorts as one (``map`` answers in words: "about 39 million"). A reply that is not a number
        is ``None`` (sorted last), never a guess.

        ``style="scaled"`` (default) asks for ``{"value": ..., "scale": "units"|"thousand"|"million"|
        "billion"}``: a bare number lets the 1.5B model switch units between rows (California 39.5,
        New York 1950, Virginia 800000: "in millions" for some states, people for others), and with a
        scale beside the value it writes either the full count or the value in millions and says which.
        ``style="plain"`` is the bare JSON number (``bench/tag_numbers.py`` compares the two)."""
        plain = style == "plain"
        sys_text = PROMPTS.render("number_system", instruction=instruction,
                                  reply=PROMPTS["number_reply_plain" if plain else "number_reply_scaled"])
        schema = {"type": "number"} if plain else _SCALED_NUMBER
        out: list[float | None] = []
        for i, item in enumerate(items):
            text = self.call("number" if plain else "number_scaled", instruction, item,
                             [system(sys_text), user(PROMPTS.render("number_user", record=item))],
                             max_tokens=16 if plain else 40, json_schema=schema)
            out.append(_plain_number(text) if plain else _scaled_number(text))
            self._tick("number", i + 1, len(items))
        return out

    def extract_many(self, instruction: str, fields: list[str], items: list[str]) -> list[dict[str, Any]]:
        schema = {
            "type": "object", "properties": {f: {"type": ["string", "null"]} for f in fields},
            "required": fields,
        }
        sys_text = PROMPTS.render("extract_system", fields=", ".join(fields), instruction=instruction)
        out: list[dict[str, Any]] = []
        for i, item in enumerate(items):
            text = self.call(
                "extract", instruction + "|" + ",".join(fields), item,
                [system(sys_text), user(PROMPTS.render("extract_user", record=item))], max_tokens=160,
                json_schema=schema,
            )
            try:
                obj = json.loads(text[text.find("{"): text.rfind("}") + 1])
            except ValueError as exc:
                raise LLMOutputError(f"the LM did not return JSON for extraction: {text[:80]!r}") from exc
            out.append({f: obj.get(f) if isinstance(obj, dict) else None for f in fields})
            self._tick("extract", i + 1, len(items))
        return out

    def summarize(self, instruction: str, blocks: list[str], *, max_tokens: int = 256) -> str:
        """Hierarchical aggregation: summarise chunks that fit ``agg_chunk_chars``, then the summaries."""
        sys_text = PROMPTS["agg_system"]
        level = 0
        while True:
            chunks: list[list[str]] = [[]]
            size = 0
            for b in blocks:
                if chunks[-1] and size + len(b) > self.agg_chunk_chars:
                    chunks.append([])
                    size = 0
                chunks[-1].append(b[: self.agg_chunk_chars])
                size += len(b)
            outs = []
            for i, ch in enumerate(chunks):
                data = "\n".join(ch)
                note = "" if len(chunks) == 1 and level == 0 else (
                    PROMPTS["agg_note_partials"] if level else
                    PROMPTS.render("agg_note_part", part=i + 1, parts=len(chunks))
                )
                outs.append(self.call(
                    "agg", instruction, data,
                    [system(sys_text), user(PROMPTS.render("agg_user", data=data, instruction=instruction, note=note))],
                    max_tokens=max_tokens,
                ))
                self._tick("agg", i + 1, len(chunks))
            if len(outs) == 1:
                return outs[0]
            blocks = [PROMPTS.render("agg_partial", n=i + 1, summary=o) for i, o in enumerate(outs)]
            level += 1


def _numbered(items: list[str], tag: str) -> str:
    """``1. <tag>item</tag>`` lines, one per item."""
    return "\n".join(PROMPTS.render("numbered_item", n=j + 1, tag=tag, item=c) for j, c in enumerate(items))


def _expected_digit(p: Sequence[float]) -> float:
    """``sum(d * p[d])`` (not rounded: a near-certain "9" and a certain one still differ; JSON keeps
    floats exactly, so cached and fresh runs rank alike)."""
    total = sum(p) or 1.0
    return sum(d * q for d, q in enumerate(p)) / total


def _parse_bool(text: str, claim: str) -> bool:
    t = text.strip().lower()
    if t.startswith(("yes", "true")):
        return True
    if t.startswith(("no", "false")):
        return False
    raise LLMOutputError(f"the LM answered {text[:40]!r} instead of yes/no for {claim[:60]!r}")


def _one_cache_batch(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run an operator inside one :meth:`OpCache.batch`: its cache entries are written in one transaction."""
    @functools.wraps(method)
    def run(self: SemTable, *args: Any, **kwargs: Any) -> Any:
        with self.engine.cache.batch():
            return method(self, *args, **kwargs)
    return run


class SemTable:
    """Rows plus column names, with LM operators that each return a new table (LOTUS-style)."""

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

    @_one_cache_batch
    def sem_filter(self, instruction: str, *, limit: int | None = None) -> SemTable:
        """Rows for which the statement holds, in order. With ``limit``, inputs are judged in row order
        and judging stops as soon as ``limit`` rows passed (ORDER BY + filter + LIMIT costs few calls)."""
        t0, c0 = time.perf_counter(), self.engine.stats.lm_calls
        per_row, distinct = self._distinct(instruction, "filter")
        if limit is None:
            rows_per = Counter(per_row)
            verdict = dict(zip(distinct, self.engine.judge_many(instruction, distinct,
                                                                weights=[rows_per[d] for d in distinct])))
            kept = [r for r, k in zip(self.rows, per_row) if verdict[k]]
        else:
            verdict, kept = {}, []
            step = self.engine.batch_size
            pos = 0
            for i, (r, k) in enumerate(zip(self.rows, per_row)):
                if len(kept) >= limit:
                    break
                if k not in verdict:
                    todo = [d for d in dict.fromkeys(per_row[i:]) if d not in verdict][:step]
                    verdict.update(zip(todo, self.engine.judge_many(instruction, todo)))
                    pos += len(todo)
                    self.engine._tick("filter", pos, len(distinct))
                if verdict[k]:
                    kept.append(r)
        out = SemTable(self.columns, kept, self.engine)
        self._record("filter", instruction, len(self.rows), len(distinct), t0, c0)
        return out

    @_one_cache_batch
    def sem_map(self, instruction: str, new_column: str, *, max_tokens: int = 48) -> SemTable:
        t0, c0 = time.perf_counter(), self.engine.stats.lm_calls
        per_row, distinct = self._distinct(instruction, "map")
        values = dict(zip(distinct, self.engine.map_many(instruction, distinct, max_tokens=max_tokens)))
        out = SemTable(self.columns + [new_column], [r + (values[k],) for r, k in zip(self.rows, per_row)],
                       self.engine)
        self._record("map", instruction, len(self.rows), len(distinct), t0, c0)
        return out

    @_one_cache_batch
    def sem_extract(self, instruction: str, fields: list[str]) -> SemTable:
        if not fields:
            raise OperatorError("extract needs at least one output field name")
        t0, c0 = time.perf_counter(), self.engine.stats.lm_calls
        per_row, distinct = self._distinct(instruction, "extract")
        values = dict(zip(distinct, self.engine.extract_many(instruction, fields, distinct)))
        rows = [r + tuple(values[k][f] for f in fields) for r, k in zip(self.rows, per_row)]
        out = SemTable(self.columns + list(fields), rows, self.engine)
        self._record("extract", instruction, len(self.rows), len(distinct), t0, c0)
        return out

    @_one_cache_batch
    def sem_topk(self, instruction: str, k: int, *, refine: bool = True) -> SemTable:
        """The ``k`` rows that best satisfy the criterion, best first (one row per distinct input).

        Ranking is pointwise: one score per distinct input (``batch_size`` inputs per call), i.e. n calls
        for n inputs (n / batch_size batched), where LOTUS's default quickselect compares every remaining
        row with a random pivot per round (about 2n pairwise calls for a small k). An integer 0-10 score
        alone ties badly: on world_1 cities most got the same score and the "top 10" was the first ten
        rows in row order (precision@10 0.3). So ties are broken, cheapest first:

        1. **Token probabilities** (an LM with ``digit_probs``: the local llama.cpp backend): the score
           is the expected digit of a 0-9 answer (:meth:`SemEngine.rank_scores`), so two records both
           rated "9" still differ by how sure the model is. Same call count, no extra call; ties are
           practically gone.
        2. With ``refine``, for LMs without probabilities and whatever ties remain, only the tied groups
           that decide the top ``k`` (starting above position ``k``) are refined; groups below are never
           looked at again. A group larger than 8 is re-scored on a 0-100 scale with 8 records side by
           side per call (:meth:`SemEngine.fine_scores`: ~size/8 calls; side by side, the LM can compare
           the records it rated alike); a group of at most 8 that still ties is ordered by pairwise
           comparisons (a few calls).

        Not chosen: pairwise refinement of a large group (a tournament) costs ~size calls, as much as the
        scoring itself; a wider scale for every input costs more tokens per call and still ties where
        the model answers round numbers.
        """
        if k < 1:
            raise OperatorError(f"top-k needs k >= 1, got {k}")
        t0, c0 = time.perf_counter(), self.engine.stats.lm_calls
        per_row, distinct = self._distinct(instruction, "topk")
        keys: dict[str, tuple[float, ...]] = {
            d: (v,) for d, v in zip(distinct, self.engine.rank_scores(instruction, distinct))
        }
        order = sorted(distinct, key=lambda d: -keys[d][0])  # stable: ties keep row order
        if refine and len(order) > 1:
            order = self._refine_large_ties(instruction, order, keys, k)
            order = self._break_ties(instruction, order, keys, k)
        # k rows: the first row (in row order) of each of the k best distinct inputs. Rows that repeat a
        # chosen input do not come along: over 10,000 atom rows, "the 4 most halogen-like elements" is 4
        # elements, not the 8,000 rows that carry them.
        first_row = {}
        for i, d in enumerate(per_row):
            first_row.setdefault(d, i)
        chosen = [self.rows[first_row[d]] for d in order[:k]]
        self._record("topk", instruction, len(self.rows), len(distinct), t0, c0)
        return SemTable(self.columns, chosen, self.engine)

    def _refine_large_ties(
        self, instruction: str, order: list[str], keys: dict[str, tuple[float, ...]], k: int,
    ) -> list[str]:
        """Re-score (0-100, batched) each tied group larger than :data:`PAIRWISE_MAX` that starts in the top k."""
        out: list[str] = []
        for i, j in _tied_groups(order, keys):
            group = order[i:j]
            if i < k and len(group) > PAIRWISE_MAX:
                fine = dict(zip(group, self.engine.fine_scores(instruction, group)))
                for d in group:
                    keys[d] = keys[d] + (float(fine[d]),)
                group = sorted(group, key=lambda d: -fine[d])
            out.extend(group)
        return out

    def _break_ties(self, instruction: str, order: list[str], keys: dict[str, tuple[float, ...]], k: int) -> list[str]:
        """Order each still-tied group of at most :data:`PAIRWISE_MAX` that starts in the top k pairwise."""
        out: list[str] = []
        for i, j in _tied_groups(order, keys):
            group = order[i:j]
            need = k - i  # positions of the top k this group decides
            if i < k and 1 < len(group) <= PAIRWISE_MAX:
                if need < len(group) / 2:  # select only the best `need` items (fewer comparisons)
                    rest, best = list(group), []
                    for _ in range(need):
                        champ = rest[0]
                        for item in rest[1:]:
                            if self.engine.prefer(instruction, item, champ):
                                champ = item
                        best.append(champ)
                        rest.remove(champ)
                    group = best + rest
                else:  # insertion sort with the LM as comparator
                    sorted_group: list[str] = []
                    for item in group:
                        pos = len(sorted_group)
                        while pos > 0 and self.engine.prefer(instruction, item, sorted_group[pos - 1]):
                            pos -= 1
                        sorted_group.insert(pos, item)
                    group = sorted_group
            out.extend(group)
        return out

    @_one_cache_batch
    def sem_agg(self, instruction: str, columns: Sequence[str] | None = None) -> str:
        """Summarise/aggregate all rows into one text (hierarchically when they do not fit)."""
        t0, c0 = time.perf_counter(), self.engine.stats.lm_calls
        cols = list(columns) if columns else self.columns
        idx = [resolve_columns("{" + c + "}", self.columns, op="agg")[c] for c in cols]
        if not self.rows:
            return "There are no rows to summarise."
        blocks = [
            f"Data Point {n + 1}:\n" + "\n".join(f"- {self.columns[i]}: {_text(r[i])}" for i in idx)
            for n, r in enumerate(self.rows)
        ]
        text = self.engine.summarize(instruction, blocks)
        self._record("agg", instruction, len(self.rows), len(self.rows), t0, c0)
        return text

    @_one_cache_batch
    def sem_join(self, other: SemTable, instruction: str) -> SemTable:
        """Rows of ``self`` x ``other`` for which the predicate holds. Reference columns as
        ``{Col:left}`` / ``{Col:right}`` (or a plain ``{Col}`` that only one side has)."""
        t0, c0 = time.perf_counter(), self.engine.stats.lm_calls
        left_map: dict[str, int] = {}
        right_map: dict[str, int] = {}
        for name in template_fields(instruction):
            base, _, side = name.partition(":")
            in_l = resolve_or_none(base, self.columns)
            in_r = resolve_or_none(base, other.columns)
            if side == "left" or (not side and in_l is not None and in_r is None):
                if in_l is None:
                    raise OperatorError(f"join instruction references left column '{base}', which is missing",
                                        f"the left columns are: {', '.join(self.columns)}")
                left_map[name] = in_l
            elif side == "right" or (not side and in_r is not None and in_l is None):
                if in_r is None:
                    raise OperatorError(f"join instruction references right column '{base}', which is missing",
                                        f"the right columns are: {', '.join(other.columns)}")
                right_map[name] = in_r
            elif in_l is not None:
                raise OperatorError(f"join column '{base}' is on both sides", "write {Col:left} or {Col:right}")
            else:
                raise OperatorError(f"join instruction references column '{base}', which neither side has")
        if not left_map or not right_map:
            raise OperatorError("a join instruction must reference a column of each side",
                                "e.g. {Name:left} is the capital of {Country:right}")
        lkeys = [self.engine.fill(instruction, {n: r[i] for n, i in left_map.items()}) for r in self.rows]
        pairs: dict[str, str] = {}
        for lk in dict.fromkeys(lkeys):
            for r in other.rows:
                pairs.setdefault(self.engine.fill(lk, {n: r[i] for n, i in right_map.items()}), "")
        claims = list(pairs)
        n_all = len(self.rows) * len(other.rows)
        self.engine.stats.deduped += n_all - len(claims)
        verdict = dict(zip(claims, self.engine.judge_many(instruction, claims, op="join")))
        rows = []
        for lrow, lk in zip(self.rows, lkeys):
            for rrow in other.rows:
                if verdict[self.engine.fill(lk, {n: rrow[i] for n, i in right_map.items()})]:
                    rows.append(lrow + rrow)
        cols = self.columns + [c if c not in self.columns else f"{c}_right" for c in other.columns]
        self._record("join", instruction, n_all, len(claims), t0, c0)
        return SemTable(cols, rows, self.engine)


def _tied_groups(order: list[str], keys: dict[str, tuple[float, ...]]) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each run of equal keys in ``order``."""
    i = 0
    while i < len(order):
        j = i + 1
        while j < len(order) and keys[order[j]] == keys[order[i]]:
            j += 1
        yield i, j
        i = j


def resolve_or_none(name: str, columns: Sequence[str]) -> int | None:
    try:
        return resolve_columns("{" + name + "}", columns)[name]
    except OperatorError:
        return None
