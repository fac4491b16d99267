"""``filter``: keep the rows for which a statement holds (yes/no from the LM, split over P(yes) when the LM
gives token probabilities, cheap-first cascade for large filters). Also the judge of ``join``."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

from tagql.embeddings import Embedder, EmbeddingUnavailable
from tagql.errors import LLMOutputError
from tagql.llm.base import ChoiceProbs, Message, system, user
from tagql.tag import cascade
from tagql.tag.operators.base import PROMPTS, EngineBase, TableBase, _one_cache_batch
from tagql.tag.verdicts import DEFAULT as DEFAULT_CUT
from tagql.tag.verdicts import split_verdicts

if TYPE_CHECKING:
    from tagql.tag.operators.table import SemTable


# Capitalised answers too: forcing lowercase pushed the 1.5B model towards "yes" (bench/tag/operator_lotus.py).
YES_NO_GRAMMAR: str = PROMPTS["yes_no_grammar"]
# the grammar's replies, yes first (P(yes) = p[0] + p[1])
YES_NO_CHOICES: list[str] = PROMPTS["yes_no_choices"]
JUDGE_SYSTEM: str = PROMPTS["judge_system"]


def judge_messages(claim: str) -> list[Message]:
    """The filter's one-claim prompt; the system message names no instruction, so every filter shares it."""
    return [system(JUDGE_SYSTEM), user(PROMPTS.render("judge_user", claim=claim))]


def _parse_bool(text: str, claim: str) -> bool:
    t = text.strip().lower()
    if t.startswith(("yes", "true")):
        return True
    if t.startswith(("no", "false")):
        return False
    raise LLMOutputError(f"the LM answered {text[:40]!r} instead of yes/no for {claim[:60]!r}")


class FilterEngine(EngineBase):
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
        # yes to 31 for "borders Canada", bench/results/tag/judge_variants.json): "on" acts as "auto" then
        if self.cascade == "on" and self._yes_probs_fn() is None:
            return True
        calls_needed = -(-(n - n_known) // self.batch_size)
        return calls_needed > self.max_calls - self.stats.lm_calls

    def _cascade_embedder(self) -> Embedder | None:
        """The embedder passed in (a zero-argument callable is called once, on the first cascade)."""
        if callable(self._embedder) and not isinstance(self._embedder, Embedder):
            try:
                self._embedder = self._embedder()
            except EmbeddingUnavailable:
                if self.cascade == "on":
                    raise
                self._embedder = None
        if self._embedder is None and self.cascade == "on":
            raise EmbeddingUnavailable("the filter cascade needs an embedder", "pass embedder= to SemEngine")
        return self._embedder  # None ("auto"): the filter runs without a cascade (and may hit the cap)

    def _judge_cascaded(
        self, instruction: str, claims: list[str], op: str, known: dict[int, bool], embedder: Embedder,
        weights: Sequence[int] | None,
    ) -> list[bool]:
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
        # Why this wording: see judge_system in prompts.toml.
        probs = self._yes_probs(instruction, claims, op)
        return split_verdicts(probs) if probs is not None else self._judge_generated(instruction, claims, op)

    def _judge_generated(self, instruction: str, claims: list[str], op: str) -> list[bool]:
        """Each claim's generated (grammar-forced) yes/no, through the cache."""
        def judge(chunk: list[str]) -> list[bool]:
            if len(chunk) == 1 and self.batch_size == 1:
                text = self.call(
                    "filter", instruction, chunk[0], judge_messages(chunk[0]), max_tokens=2, grammar=YES_NO_GRAMMAR,
                )
                return [_parse_bool(text, chunk[0])]
            answers = self._numbered_batch(
                "filter_batch", instruction, JUDGE_SYSTEM, chunk, tag="statement",
                rule=PROMPTS["yes_no_rule"],
                value=r"yes|no", what="yes/no", noun="statement", ask=PROMPTS["judge_batch_ask"],
            )
            return [a == "yes" for a in answers]

        chunks = [claims[i: i + self.batch_size] for i in range(0, len(claims), self.batch_size)]
        return [v for got in self._each(op, chunks, judge) for v in got]

    def _yes_probs_fn(self) -> Callable[..., list[float]] | None:
        """The LM's ``choice_probs`` when filters split verdicts over P(yes): the LM declares token
        probabilities, ``split`` is on and claims are judged one per call."""
        if not (self.split and self.batch_size == 1 and self.llm.supports_choice_probs):
            return None
        return cast(ChoiceProbs, self.llm).choice_probs

    def _yes_probs(self, instruction: str, claims: list[str], op: str) -> list[float] | None:
        """P(yes) of each claim from the judge's token probabilities (one cached LM call each, the same
        prompt as the grammar-forced yes/no), or None when the LM does not expose them, batching is on,
        or ``split`` is off: then the filter reads the generated yes/no."""
        fn = self._yes_probs_fn()
        if fn is None:
            return None
        def one(claim: str) -> float:
            def p_yes() -> str:
                p = fn(judge_messages(claim), YES_NO_CHOICES)
                return f"{p[0] + p[1]:.6f}"
            return float(self._cached("filter_p", instruction, claim, p_yes))

        try:
            return self._each(op, claims, one)
        except LLMOutputError:  # an endpoint without log-probabilities: generated yes/no from now on
            self.split = False
            return None


class FilterTable(TableBase):
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
        out = type(self)(self.columns, kept, self.engine)
        self._record("filter", instruction, len(self.rows), len(distinct), t0, c0)
        return out
