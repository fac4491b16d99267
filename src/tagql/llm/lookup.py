"""Greedy decoding with prompt-lookup drafts (speculative decoding without a draft model).

SQL and answers copy a lot from their prompt: table and column names from the schema, values from
the result rows. At temperature 0 we guess the next tokens by finding the latest earlier occurrence
of the last few generated tokens in prompt + output and proposing what followed it, then verify the
guess in one batch. On this 2-core CPU one batch of 8 tokens costs about 2.5 single-token steps, so
an accepted run of tokens is nearly free but a rejected long draft is not: draft lengths adapt to
how the previous drafts fared. Greedy verification keeps the output the model's own argmax choice
at every position.

llama-cpp-python's built-in ``LlamaPromptLookupDecoding`` needs ``logits_all``, which allocates
``n_ctx x n_vocab`` floats (5 GB at 8k context) and copies logits for every prompt token; here only
the verified positions produce logits.

The history drafts are looked up in is the prompt and the output so far, preceded by the model's
recent outputs for the same system prompt (:class:`RecentOutputs`): the SQL for one database repeats
its join clauses and aliases from question to question (``member AS T1 INNER JOIN attendance AS T2
ON T1.member_id = T2.link_to_member``), which the schema's ``CREATE TABLE`` text never spells out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class LookupStats:
    """What one generation cost: decode batches run, draft tokens proposed and accepted."""

    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    trace: list[tuple[int, int, int]] | None = None  # (matched n-gram, drafted, accepted) when tracing

    def add(self, other: LookupStats) -> None:
        self.steps += other.steps
        self.drafted += other.drafted
        self.accepted += other.accepted
        if self.trace is not None and other.trace is not None:
            self.trace.extend(other.trace)


# 2-gram drafts had their first token accepted 30% of the time, 4-gram drafts 91% (bench/ask/decoding.py):
# a rejected draft costs a batch, so only 3-gram or longer matches are drafted.
MIN_NGRAM = 3
# Verify batches of 1, 2, 3, 4, 8 tokens took 45, 70, 73, 77, 97 ms here: the second token of a batch
# costs ~25 ms, each further one ~4 ms. A 1-token draft must be accepted more than half the time to
# pay, a 3-token one barely more, so drafts are never cut below this length.
MIN_DRAFT = 3
# how many recent outputs per system prompt are searched for drafts (offline replay of 90 SQL calls:
# 5 -> 1.14x, 20 -> 1.18x, 50 -> 1.18x faster SQL decoding than the prompt alone's 1.05x)
RECENT_OUTPUTS = 20
SEPARATOR = -1  # between remembered outputs in a history; never a token id, so drafts stop there


def find_draft(
    history: np.ndarray, *, max_ngram: int = 4, min_ngram: int = MIN_NGRAM, max_draft: int = 10,
) -> tuple[int, list[int]]:
    """(length of the matched n-gram, the tokens that followed the latest earlier occurrence of the
    longest matching suffix n-gram, up to a :data:`SEPARATOR`); (0, []) when nothing matches."""
    n_hist = len(history)
    for n in range(min(max_ngram, n_hist - 1), min_ngram - 1, -1):
        suffix = history[n_hist - n:]
        # candidate starts i where history[i:i+n] == suffix, excluding the suffix itself
        limit = n_hist - n
        match = history[:limit] == suffix[0]
        for j in range(1, n):
            match &= history[j: limit + j] == suffix[j]
        hits = np.flatnonzero(match)
        if hits.size:
            start = int(hits[-1]) + n
            draft = history[start: start + max_draft].tolist()
            return n, draft[: draft.index(SEPARATOR)] if SEPARATOR in draft else draft
    return 0, []


def next_draft_length(current: int, drafted: int, accepted: int, max_draft: int, min_draft: int = MIN_DRAFT) -> int:
    """Adapt the draft length to how drafts fare: every drafted token widens the verify batch (about
    +4 ms each here), so a long draft only pays where long runs get accepted (copied values, a
    repeated join clause). Fully accepted: double; partly: one more than what was accepted; rejected
    at once: halve; never below ``min_draft`` (see :data:`MIN_DRAFT`)."""
    if drafted == 0:
        return current
    if accepted == drafted:
        return min(max_draft, current * 2)
    if accepted:
        return max(min_draft, min(max_draft, accepted + 1))
    return max(min_draft, current // 2)


class RecentOutputs:
    """The last ``keep`` outputs per system prompt, as extra history for drafts (oldest first)."""

    def __init__(self, keep: int = RECENT_OUTPUTS, max_prompts: int = 32) -> None:
        self.keep = keep
        self.max_prompts = max_prompts
        self._by_prefix: dict[tuple[int, ...], list[list[int]]] = {}

    def history(self, prefix: list[int]) -> list[int]:
        """The remembered outputs for ``prefix``, each followed by a separator."""
        return [t for out in self._by_prefix.get(tuple(prefix), []) for t in (*out, SEPARATOR)]

    def add(self, prefix: list[int], output: list[int]) -> None:
        if self.keep <= 0 or not output:
            return
        key = tuple(prefix)
        outs = self._by_prefix.pop(key, [])  # re-inserted last: the dict's order is least recently used first
        self._by_prefix[key] = [*outs, list(output)][-self.keep:]
        while len(self._by_prefix) > self.max_prompts:
            del self._by_prefix[next(iter(self._by_prefix))]

    def clear(self) -> None:
        self._by_prefix.clear()


def looping(out: Any, *, max_period: int = 24, min_span: int = 32) -> bool:
    """Is the generation stuck in a loop? True when its last tokens are one block of ``p <= max_period``
    tokens repeated at least 4 times and over at least ``min_span`` tokens (``'Br', 'I', 'Br', 'I', ...``
    in a guessed IN-list, ``AND z.state = 'CA' AND z.state = 'CA' ...``). Greedy decoding never leaves
    such a loop on its own; under a JSON grammar each looping token costs ~4x a plain one."""
    n = len(out)
    for p in range(1, max_period + 1):
        span = max(4 * p, min_span)
        if span > n:
            break
        tail = list(out[n - span:])
        if all(tail[i] == tail[i - p] for i in range(p, span)):
            return True
    return False


def eval_prompt(llama: Any, prompt: list[int]) -> None:
    """Evaluate ``prompt`` into sequence 0 of ``llama``, reusing the common prefix already in its KV cache;
    always evaluate at least the last prompt token, so its logits exist for the first step."""
    current = llama.input_ids[: llama.n_tokens]
    common = 0
    limit = min(len(current), len(prompt) - 1)
    while common < limit and current[common] == prompt[common]:
        common += 1
    llama.n_tokens = common
    llama.eval(prompt[common:])


def greedy_generate(
    llama: Any, prompt: list[int], *, max_tokens: int, stop: list[str], max_draft: int = 10, min_ngram: int = MIN_NGRAM,
    stats: LookupStats | None = None, adaptive: bool = True, first_draft: int = 4, min_draft: int = MIN_DRAFT,
    recent: list[int] | None = None, on_step: Callable[[list[int]], None] | None = None,
) -> tuple[str, list[int], LookupStats]:
    """Generate greedily after ``prompt`` on ``llama`` (a ``llama_cpp.Llama``), reusing its KV cache.

    Returns the text (cut before the first stop string), the generated tokens and the drafting
    statistics. ``llama.input_ids``/``n_tokens`` are kept in step with the KV cache so the next call
    (or llama-cpp-python's own ``generate``) reuses the common prefix. With ``adaptive``, drafts start
    at ``first_draft`` tokens and follow :func:`next_draft_length`; otherwise every draft may be
    ``max_draft`` long. ``recent`` (earlier outputs, see :meth:`RecentOutputs.history`) is searched
    for drafts too, after the prompt and the output so far; it never enters the KV cache. ``on_step(out)``
    hears the tokens generated so far after each decoding step, with the KV cache and ``llama``'s token
    counters consistent: an exception from it ends the generation there and propagates.
    """
    import llama_cpp

    ctx = llama._ctx
    vocab = llama._model.vocab
    n_vocab = llama.n_vocab()

    eval_prompt(llama, prompt)

    def argmax(i: int) -> int:
        logits = np.ctypeslib.as_array(ctx.get_logits_ith(i), shape=(n_vocab,))
        return int(np.argmax(logits))

    stats = stats or LookupStats()
    stats.steps += 1
    recent = recent or []
    history = np.empty(len(recent) + len(prompt) + max_tokens + max_draft + 1, dtype=np.int64)
    history[: len(recent)] = recent
    history[len(recent): len(recent) + len(prompt)] = prompt
    n_hist = len(recent) + len(prompt)
    out: list[int] = []

    def commit(tok: int) -> bool:
        """Append a chosen token; False when generation must end before it (end of turn, budget)."""
        nonlocal n_hist
        if llama_cpp.llama_vocab_is_eog(vocab, tok) or len(out) >= max_tokens:
            return False
        out.append(tok)
        history[n_hist] = tok
        n_hist += 1
        return True

    def stopped() -> bool:
        return _first_stop(llama.detokenize(out).decode("utf-8", errors="ignore"), stop) is not None

    pending = argmax(-1)  # the next token: chosen, not yet in the KV cache
    draft_len = min(first_draft, max_draft) if adaptive else max_draft
    while commit(pending) and not stopped() and not looping(out) and llama.n_tokens + 2 < llama.n_ctx():
        room = min(draft_len, max_tokens - len(out), llama.n_ctx() - llama.n_tokens - 2)
        matched, draft = find_draft(history[:n_hist], max_draft=room, min_ngram=min_ngram) if room > 0 else (0, [])
        batch = [pending, *draft]
        n_past = llama.n_tokens
        llama._batch.set_batch(batch=batch, n_past=n_past, logits_all=True)
        ctx.decode(llama._batch)
        llama.input_ids[n_past: n_past + len(batch)] = batch
        stats.steps += 1
        stats.drafted += len(draft)
        accepted = 0
        pending = argmax(0)
        while accepted < len(draft) and draft[accepted] == pending:
            accepted += 1
            pending = argmax(accepted)
        stats.accepted += accepted
        if adaptive:
            draft_len = next_draft_length(draft_len, len(draft), accepted, max_draft, min_draft)
        if stats.trace is not None and draft:
            stats.trace.append((matched, len(draft), accepted))
        # the KV cache keeps the previous pending token and the accepted drafts, not the rejected ones
        keep = n_past + 1 + accepted
        ctx.kv_cache_seq_rm(0, keep, -1)  # sequence 0: the one generating
        llama.n_tokens = keep
        if not all(commit(tok) for tok in draft[:accepted]) or (accepted and stopped()):
            break
        if on_step is not None:
            on_step(out)
    text = llama.detokenize(out).decode("utf-8", errors="ignore")
    cut = _first_stop(text, stop)
    return (text if cut is None else text[:cut]), out, stats


def _first_stop(text: str, stop: list[str]) -> int | None:
    cuts = [i for s in stop if s and (i := text.find(s)) >= 0]
    return min(cuts) if cuts else None
