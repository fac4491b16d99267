"""A pool of OpenAI-compatible endpoints (vLLM, llama.cpp servers, ...) behind the one :class:`~tagql.llm.base.LLM`
interface.

    llm = PooledOpenAILLM(["http://10.0.0.5:8080/v1", "http://10.0.0.6:8080/v1"], "qwen", concurrency=1,
                          max_calls=5000)

* **spread**: each request goes to the least busy endpoint that is up (ties: the one used longest ago, so
  equal endpoints take turns);
* **bounded**: at most ``concurrency`` requests in flight per endpoint; a caller waits for a free slot.
  ``parallel_calls`` (= ``concurrency`` x endpoints) tells the LM operators how many of their calls to run at
  once (threads; :class:`~tagql.tag.operators.SemEngine` ``concurrency=``);
* **retries**: each endpoint is an :class:`~tagql.llm.openai_compat.OpenAICompatLLM`, which retries 429/5xx
  and cut connections with backoff (and honours Retry-After); a request that still fails there
  (:class:`~tagql.llm.openai_compat.EndpointDown`: nothing listens, a timeout, 429/5xx after its retries) is
  sent to another endpoint, and the failed one is left out for ``down_s`` seconds. Only when every endpoint
  failed the request does the error reach the caller (the last endpoint's one-line error);
* **budget**: ``max_calls`` LM calls for the life of this object (one run, one service process); the call
  after the last one raises :class:`LLMCallBudgetExceeded` before anything is sent. Calls already answered
  are kept by their callers (the operator cache writes each verdict as it comes), so a re-run with a new
  budget pays only for what is left.

All endpoints must serve the same model under the same name: the pool's ``name`` is the single endpoint's
(``openai:<model>``), so operator caches are shared between a pool and one server of the same model.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tagql.errors import ConfigError, LLMUnavailable, TagqlError
from tagql.llm.base import Completion, Message, Usage
from tagql.llm.openai_compat import EndpointDown, OpenAICompatLLM

T = TypeVar("T")


class LLMCallBudgetExceeded(TagqlError):
    """The run's LM-call budget (``llm.max_calls``) is spent."""


class PooledOpenAILLM:
    supports_choice_probs = True
    supports_digit_probs = False
    supports_stream = True
    supports_samples = True  # one endpoint draws all n (an endpoint asks again when it returns fewer)

    def __init__(
        self, base_urls: Sequence[str], model: str, *, api_key: str | None = None, temperature: float = 0.0,
        seed: int = 0, timeout_s: float = 120.0, concurrency: int = 1, max_calls: int = 0, down_s: float = 30.0,
    ) -> None:
        urls = [u.strip().rstrip("/") for u in base_urls if u.strip()]
        if not urls:
            raise ConfigError("no LLM endpoint configured", "set llm.endpoints or llm.base_url")
        if concurrency < 1:
            raise ConfigError(f"llm.concurrency must be at least 1, got {concurrency}")
        self.model = model
        self.name = f"openai:{model}"
        self.usage = Usage()
        self.endpoints = [OpenAICompatLLM(u, model, api_key=api_key, temperature=temperature, seed=seed,
                                          timeout_s=timeout_s) for u in urls]
        for ep in self.endpoints:
            ep.usage = self.usage  # one running total (Usage is thread-safe)
        self.concurrency = concurrency
        self.parallel_calls = concurrency * len(self.endpoints)
        self.max_calls = max_calls
        self.down_s = down_s
        self.calls = 0  # requests started, against the budget
        self.served = [0] * len(self.endpoints)  # requests each endpoint answered
        self.peak_in_flight = 0
        self._busy = [0] * len(self.endpoints)
        self._down_until = [0.0] * len(self.endpoints)
        self._last_used = [0] * len(self.endpoints)
        self._ticket = 0
        self._cond = threading.Condition()

    # -- scheduling ---------------------------------------------------------------------------------------
    def _take_budget(self) -> None:
        with self._cond:
            if self.max_calls and self.calls >= self.max_calls:
                raise LLMCallBudgetExceeded(
                    f"stopped at the LM-call budget of {self.max_calls} calls for this run "
                    f"(answers so far are cached; a re-run pays only for the rest)",
                    "raise TAGQL_LLM__MAX_CALLS (llm.max_calls; 0 = no budget) or narrow the question")
            self.calls += 1

    def _acquire(self, tried: set[int]) -> int:
        """An endpoint not yet tried for this request with a free slot: up ones first, least busy, then the
        one used longest ago. Waits while every candidate is full."""
        with self._cond:
            while True:
                now = time.monotonic()
                free = [i for i in range(len(self.endpoints))
                        if i not in tried and self._busy[i] < self.concurrency]
                if free:
                    up = [i for i in free if self._down_until[i] <= now]
                    if up or not any(i not in tried and self._down_until[i] <= now and
                                     self._busy[i] >= self.concurrency for i in range(len(self.endpoints))):
                        # an up endpoint is free, or none is up and free: try a down one again rather than wait
                        pick = min(up or free, key=lambda i: (self._down_until[i] > now, self._busy[i],
                                                              self._last_used[i]))
                        self._busy[pick] += 1
                        self._ticket += 1
                        self._last_used[pick] = self._ticket
                        self.peak_in_flight = max(self.peak_in_flight, sum(self._busy))
                        return pick
                self._cond.wait()

    def _release(self, i: int, *, failed: bool) -> None:
        with self._cond:
            self._busy[i] -= 1
            if failed:
                self._down_until[i] = time.monotonic() + self.down_s
            else:
                self._down_until[i] = 0.0
                self.served[i] += 1
            self._cond.notify_all()

    def _run(self, call: Callable[[OpenAICompatLLM], T]) -> T:
        self._take_budget()
        tried: set[int] = set()
        while True:
            i = self._acquire(tried)
            try:
                out = call(self.endpoints[i])
            except EndpointDown:
                self._release(i, failed=True)
                tried.add(i)
                if len(tried) == len(self.endpoints):
                    raise
                continue
            except BaseException:
                self._release(i, failed=False)
                raise
            self._release(i, failed=False)
            return out

    # -- the LLM interface ---------------------------------------------------------------------------------
    def complete(self, messages: list[Message], *, max_tokens: int = 256, json_schema: dict[str, Any] | None = None,
                 grammar: str | None = None, stop: list[str] | None = None) -> Completion:
        return self._run(lambda ep: ep.complete(messages, max_tokens=max_tokens, json_schema=json_schema,
                                                grammar=grammar, stop=stop))

    def choice_probs(self, messages: list[Message], choices: list[str]) -> list[float]:
        return self._run(lambda ep: ep.choice_probs(messages, choices))

    def stream(self, messages: list[Message], *, on_text: Callable[[str], None], max_tokens: int = 256,
               stop: list[str] | None = None) -> Completion:
        sent = []

        def track(piece: str) -> None:
            sent.append(piece)
            on_text(piece)

        def once(ep: OpenAICompatLLM) -> Completion:
            try:
                return ep.stream(messages, on_text=track, max_tokens=max_tokens, stop=stop)
            except EndpointDown as exc:
                if sent:  # text went out already: another endpoint would repeat it
                    raise LLMUnavailable(exc.message, exc.hint) from exc
                raise
        return self._run(once)

    def sample(self, messages: list[Message], *, n: int, max_tokens: int = 256, temperature: float = 0.7,
               top_p: float = 0.95, seed: int | None = None, stop: list[str] | None = None) -> list[Completion]:
        return self._run(lambda ep: ep.sample(messages, n=n, max_tokens=max_tokens, temperature=temperature,
                                              top_p=top_p, seed=seed, stop=stop))

    def status(self) -> list[dict[str, Any]]:
        """Per endpoint: its URL, requests in flight and answered, and whether it is left out as down."""
        now = time.monotonic()
        with self._cond:
            return [{"base_url": ep.base_url, "in_flight": self._busy[i], "served": self.served[i],
                     "down": self._down_until[i] > now} for i, ep in enumerate(self.endpoints)]


def endpoint_urls(base_url: str, endpoints: Sequence[str]) -> list[str]:
    """The configured endpoints: ``llm.endpoints`` when given, else ``llm.base_url`` (comma-separated URLs
    are several endpoints)."""
    if endpoints:
        return [u.strip() for u in endpoints if u.strip()]
    return [u.strip() for u in base_url.split(",") if u.strip()]
