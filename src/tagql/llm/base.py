"""The one small interface every language model backend implements.

Chat messages in, text out; optionally constrained to a JSON schema (or a GBNF grammar on
llama.cpp). Every call is accounted (calls, tokens, seconds) so answers can report their cost.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class Message:
    role: Role
    content: str


def system(text: str) -> Message:
    return Message("system", text)


def user(text: str) -> Message:
    return Message("user", text)


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float


@dataclass
class Usage:
    """Running totals; ``snapshot()`` then ``since(snap)`` gives the cost of one question."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, c: Completion) -> None:
        with self._lock:
            self.calls += 1
            self.prompt_tokens += c.prompt_tokens
            self.completion_tokens += c.completion_tokens
            self.seconds += c.seconds

    def snapshot(self) -> Usage:
        return Usage(self.calls, self.prompt_tokens, self.completion_tokens, self.seconds)

    def since(self, before: Usage) -> dict[str, float]:
        return {
            "calls": self.calls - before.calls,
            "prompt_tokens": self.prompt_tokens - before.prompt_tokens,
            "completion_tokens": self.completion_tokens - before.completion_tokens,
            "seconds": round(self.seconds - before.seconds, 3),
        }


@runtime_checkable
class LLM(Protocol):
    """What the pipeline needs from a model.

    Optional abilities are declared by every backend, never probed:

    * ``supports_choice_probs``: the backend has ``choice_probs(messages, choices) -> list[float]``, the
      probability of each choice (a single token, e.g. ``yes`` / ``no``) as the reply, renormalised over
      the choices (:class:`ChoiceProbs`; the filter's split verdicts read it);
    * ``supports_digit_probs``: the backend has ``digit_probs(messages, *, slots=1) -> list[list[float]]``,
      per reply slot the probabilities of the digits 0-9 (:class:`DigitProbs`; top-k's expected scores);
    * ``supports_stream``: the backend has ``stream(messages, *, on_text, ...) -> Completion``, which is
      :meth:`complete` handing the reply's text to ``on_text`` piece by piece as it is generated; an exception
      raised by ``on_text`` stops the generation at once and propagates (:class:`Streams`; answer tokens
      over SSE, and stopping the model when the client goes away);
    * ``supports_samples``: the backend has ``sample(messages, *, n, max_tokens, temperature, ...) ->
      list[Completion]``, ``n`` replies drawn at a temperature in one go (:class:`Samples`; the local backend
      decodes them as parallel sequences over one evaluated prompt, an endpoint with ``"n": n``), for
      execution-guided SQL candidates.

    ``parallel_calls`` (optional; absent means 1) is how many calls the backend serves at once from
    different threads: 1 for one model in this process or one endpoint (calls wait for each other),
    ``concurrency`` x endpoints for a pool of servers (:mod:`tagql.llm.pool`); the LM operators run that
    many of their calls at once (:func:`parallel_calls`).
    """

    name: str
    usage: Usage
    supports_choice_probs: bool
    supports_digit_probs: bool
    supports_stream: bool
    supports_samples: bool

    def complete(
        self,
        messages: list[Message],
        *,
        max_tokens: int = 256,
        json_schema: dict[str, Any] | None = None,
        grammar: str | None = None,
        stop: list[str] | None = None,
    ) -> Completion:
        """Return the model's reply. ``json_schema`` / ``grammar`` constrain the output where the
        backend supports it (llama.cpp: both; OpenAI-compatible: ``json_schema``)."""
        ...


class ChoiceProbs(Protocol):
    """An LLM that declares ``supports_choice_probs = True``."""

    def choice_probs(self, messages: list[Message], choices: list[str]) -> list[float]: ...


class DigitProbs(Protocol):
    """An LLM that declares ``supports_digit_probs = True``."""

    def digit_probs(self, messages: list[Message], *, slots: int = 1) -> list[list[float]]: ...


class Streams(Protocol):
    """An LLM that declares ``supports_stream = True``.

    ``on_text(piece)`` is called from the generating thread with each new piece of the reply, in order (their
    concatenation is the reply's text so far, stop strings included until they are recognised: the returned
    :class:`Completion` has the final text). A piece may be empty: a backend may call ``on_text("")`` while it
    computes (the local one does every 50 ms, from a watcher thread) to learn whether to go on.
    Raising from it is how a caller stops a generation within a step; nothing is accounted for a stopped
    generation."""

    def stream(self, messages: list[Message], *, on_text: Callable[[str], None], max_tokens: int = 256,
               stop: list[str] | None = None) -> Completion: ...


def parallel_calls(llm: object) -> int:
    """How many calls ``llm`` serves at once: its ``parallel_calls`` (a pool of servers), else 1."""
    return max(1, int(getattr(llm, "parallel_calls", 1)))


class Samples(Protocol):
    """An LLM that declares ``supports_samples = True``.

    ``sample`` returns ``n`` replies to ``messages`` drawn at ``temperature`` (nucleus ``top_p``), in a
    deterministic order for a given ``seed`` (default: the backend's). Each is accounted as a call."""

    def sample(self, messages: list[Message], *, n: int, max_tokens: int = 256, temperature: float = 0.7,
               top_p: float = 0.95, seed: int | None = None, stop: list[str] | None = None) -> list[Completion]: ...
