"""A scripted LLM double for unit tests of prompt plumbing and parsing (never used in production).

It replies from a list (or a function of the messages) and records every prompt it saw. With
``digit_probs`` (a function of the messages and the number of slots) or ``choice_probs`` (of the messages
and the choices) it also offers the local backend's token probabilities
(:meth:`tagql.llm.local.LocalLLM.digit_probs`, :meth:`~tagql.llm.local.LocalLLM.choice_probs`) and
declares it (``supports_digit_probs`` / ``supports_choice_probs``); without them, it does not. With
``stream_s`` (seconds per piece, 0 for none) it streams each reply word by word (``supports_stream``).
With ``samples`` (a function of the messages and ``n``, returning ``n`` texts) it draws candidates
(``supports_samples``).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from tagql.llm.base import Completion, Message, Usage


class ScriptedLLM:
    name = "scripted"

    def __init__(
        self, replies: Iterable[str] | Callable[[list[Message]], str],
        digit_probs: Callable[[list[Message], int], list[list[float]]] | None = None,
        choice_probs: Callable[[list[Message], list[str]], list[float]] | None = None,
        stream_s: float | None = None, parallel_calls: int = 1,
        samples: Callable[[list[Message], int], list[str]] | None = None,
    ) -> None:
        self.parallel_calls = parallel_calls  # >1: callers may call from that many threads at once
        self._record_lock = threading.Lock()
        self._samples = samples
        self.supports_samples = samples is not None
        self.stream_s = stream_s
        self.supports_stream = stream_s is not None
        self.streamed: list[str] = []  # the pieces handed to on_text, across calls
        self._fn = replies if callable(replies) else None
        self._replies = [] if callable(replies) else list(replies)
        self.prompts: list[list[Message]] = []
        self.constraints: list[dict[str, Any] | str | None] = []  # each call's json_schema or grammar
        self.usage = Usage()
        self.supports_digit_probs = digit_probs is not None
        self.supports_choice_probs = choice_probs is not None
        self.digit_probs: Callable[..., list[list[float]]] | None = None
        if digit_probs is not None:
            def probs(messages: list[Message], *, slots: int = 1) -> list[list[float]]:
                self.prompts.append(list(messages))
                out = digit_probs(messages, slots)
                self.usage.add(Completion("", sum(len(m.content) // 4 for m in messages), 2 * slots, 0.0))
                return out
            self.digit_probs = probs
        self.choice_probs: Callable[..., list[float]] | None = None
        if choice_probs is not None:
            def choices(messages: list[Message], options: list[str]) -> list[float]:
                self.prompts.append(list(messages))
                out = choice_probs(messages, options)
                self.usage.add(Completion("", sum(len(m.content) // 4 for m in messages), 1, 0.0))
                return out
            self.choice_probs = choices

    def complete(
        self,
        messages: list[Message],
        *,
        max_tokens: int = 256,
        json_schema: dict[str, Any] | None = None,
        grammar: str | None = None,
        stop: list[str] | None = None,
    ) -> Completion:
        with self._record_lock:
            self.prompts.append(list(messages))
            self.constraints.append(json_schema if json_schema is not None else grammar)
            if self._fn is None:
                if not self._replies:
                    raise AssertionError("ScriptedLLM ran out of replies")
                text = self._replies.pop(0)
        if self._fn is not None:
            text = self._fn(messages)
        c = Completion(text, sum(len(m.content) // 4 for m in messages), len(text) // 4, 0.0)
        self.usage.add(c)
        return c

    def stream(self, messages: list[Message], *, on_text: Callable[[str], None], max_tokens: int = 256,
               stop: list[str] | None = None) -> Completion:
        """:meth:`complete`, its reply handed to ``on_text`` word by word (``stream_s`` apart). An exception
        from ``on_text`` stops it: the rest is never handed out and nothing is accounted."""
        if not self.supports_stream:
            raise AssertionError("this ScriptedLLM was made without stream_s")
        before = self.usage.snapshot()
        c = self.complete(messages, max_tokens=max_tokens, stop=stop)
        with self.usage._lock:  # accounted only once the whole reply went out
            self.usage.calls, self.usage.prompt_tokens = before.calls, before.prompt_tokens
            self.usage.completion_tokens, self.usage.seconds = before.completion_tokens, before.seconds
        for piece in re.findall(r"\S+\s*|\s+", c.text):
            if self.stream_s:
                time.sleep(self.stream_s)
            on_text(piece)
            self.streamed.append(piece)
        self.usage.add(c)
        return c

    def sample(self, messages: list[Message], *, n: int, max_tokens: int = 256, temperature: float = 0.7,
               top_p: float = 0.95, seed: int | None = None, stop: list[str] | None = None) -> list[Completion]:
        if self._samples is None:
            raise AssertionError("this ScriptedLLM was made without samples")
        self.prompts.append(list(messages))
        texts = self._samples(messages, n)
        assert len(texts) == n, f"the samples function returned {len(texts)} texts for n={n}"
        out = [Completion(t, sum(len(m.content) // 4 for m in messages), len(t) // 4, 0.0) for t in texts]
        for c in out:
            self.usage.add(c)
        return out
