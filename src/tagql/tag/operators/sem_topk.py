"""``topk``: the k rows that best satisfy a criterion, best first (pointwise scores, expected digits from
token probabilities, finer re-scoring and pairwise comparisons for the ties that decide the top k)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, cast

from tagql.errors import LLMOutputError
from tagql.llm.base import DigitProbs, Message, system, user
from tagql.tag.operators.base import (
    PROMPTS,
    EngineBase,
    OperatorError,
    TableBase,
    _numbered,
    _one_cache_batch,
)

if TYPE_CHECKING:
    from tagql.tag.operators.table import SemTable


SCORE_GRAMMAR: str = PROMPTS["score_grammar"]
AB_GRAMMAR: str = PROMPTS["ab_grammar"]
PAIRWISE_MAX = 8  # top-k: a tied group up to this size is ordered by pairwise comparisons


def _expected_digit(p: Sequence[float]) -> float:
    """``sum(d * p[d])`` (not rounded: a near-certain "9" and a certain one still differ; JSON keeps
    floats exactly, so cached and fresh runs rank alike)."""
    total = sum(p) or 1.0
    return sum(d * q for d, q in enumerate(p)) / total


def _tied_groups(order: list[str], keys: dict[str, tuple[float, ...]]) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each run of equal keys in ``order``."""
    i = 0
    while i < len(order):
        j = i + 1
        while j < len(order) and keys[order[j]] == keys[order[i]]:
            j += 1
        yield i, j
        i = j


class TopKEngine(EngineBase):
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

        When the LM declares its token probabilities (``llm.supports_digit_probs``: the local llama.cpp
        backend), the score is the *expected* digit on a 0-9 scale, ``sum(d * p(d))`` over the ten digit
        tokens of the grammar-forced answer (probability-weighted scoring, as in G-EVAL / monoT5-style rerankers):
        two records the model both rates "9" still differ by how sure it is, so ties are practically
        gone at no extra call. Batches (``batch_size`` > 1) read each numbered line's digit the same
        way in one call. Without probabilities this is :meth:`score_many` (integer 0-10) and
        :meth:`SemTable.sem_topk` refines the ties that matter."""
        if not self.llm.supports_digit_probs:
            return [float(v) for v in self.score_many(instruction, items)]
        probs = cast(DigitProbs, self.llm).digit_probs
        sys_text = PROMPTS.render("digit_system", instruction=instruction)

        def expected(msgs: list[Message], slots: int) -> Callable[[], str]:
            return lambda: json.dumps([_expected_digit(p) for p in probs(msgs, slots=slots)])

        out: list[float] = []
        for chunk in self._chunks("topk", items, self.batch_size):
            if self.batch_size == 1:
                prompt = [system(sys_text), user(PROMPTS.render("digit_user", record=chunk[0]))]
                text = self._cached("score_p", instruction, chunk[0], expected(prompt, 1))
            else:
                ask = PROMPTS.render("numbered_user", listed=_numbered(chunk, "record"),
                                     ask=PROMPTS["digit_batch_ask"])
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


class TopKTable(TableBase):
    @_one_cache_batch
    def sem_topk(self, instruction: str, k: int, *, refine: bool = True) -> SemTable:
        """The ``k`` rows that best satisfy the criterion, best first (one row per distinct input).

        Ranking is pointwise: one score per distinct input (``batch_size`` inputs per call), i.e. n calls
        for n inputs (n / batch_size batched), where LOTUS's default quickselect compares every remaining
        row with a random pivot per round (about 2n pairwise calls for a small k). An integer 0-10 score
        alone ties badly: on world_1 cities most got the same score and the "top 10" was the first ten
        rows in row order (precision@10 0.3). So ties are broken, cheapest first:

        1. **Token probabilities** (an LM that declares ``supports_digit_probs``: the local llama.cpp
           backend): the score is the expected digit of a 0-9 answer (:meth:`SemEngine.rank_scores`), so
           two records both rated "9" still differ by how sure the model is. Same call count, no extra call; ties are
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
        return type(self)(self.columns, chosen, self.engine)

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
