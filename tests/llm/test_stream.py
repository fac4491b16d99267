"""Streaming (``supports_stream``): the OpenAI-compatible backend reads server-sent deltas and hands them out
as they come; an exception from ``on_text`` closes the response (the server stops generating) and
propagates; the local backend streams the very tokens ``complete`` returns (real model)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from tagql.llm.base import user
from tagql.llm.openai_compat import OpenAICompatLLM


class Stop(Exception):
    pass


def sse_endpoint(words: list[str], sent: list[str]) -> httpx.MockTransport:
    def chunks() -> Iterator[bytes]:
        for w in words:
            sent.append(w)
            yield f"data: {json.dumps({'choices': [{'delta': {'content': w}}]})}\n\n".encode()
        yield b'data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}\n\n'
        yield b"data: [DONE]\n\n"

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert body["stream"] is True and body["max_tokens"] == 20
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=ByteStream(chunks()))

    return httpx.MockTransport(handle)


class ByteStream(httpx.SyncByteStream):
    def __init__(self, it: Iterator[bytes]) -> None:
        self.it = it

    def __iter__(self) -> Iterator[bytes]:
        yield from self.it

    def close(self) -> None:
        self.it.close()  # type: ignore[attr-defined]


def backend(transport: httpx.MockTransport) -> OpenAICompatLLM:
    llm = OpenAICompatLLM("http://endpoint/v1", "m")
    llm._client = httpx.Client(base_url=llm.base_url, transport=transport)
    return llm


def test_openai_compat_streams_deltas() -> None:
    sent: list[str] = []
    llm = backend(sse_endpoint(["There ", "are ", "750."], sent))
    pieces: list[str] = []
    c = llm.stream([user("How many?")], on_text=pieces.append, max_tokens=20)
    assert pieces == ["There ", "are ", "750."] and c.text == "There are 750."
    assert (c.prompt_tokens, c.completion_tokens, llm.usage.calls) == (7, 3, 1)


def test_openai_compat_stops_reading_when_on_text_raises() -> None:
    sent: list[str] = []
    llm = backend(sse_endpoint([f"w{i} " for i in range(100)], sent))

    def on_text(piece: str) -> None:
        if piece == "w2 ":
            raise Stop

    with pytest.raises(Stop):
        llm.stream([user("How many?")], on_text=on_text, max_tokens=20)
    assert len(sent) <= 4 and llm.usage.calls == 0  # the response was closed, nothing accounted


@pytest.mark.model
def test_local_model_streams_what_it_completes_and_stops_at_once() -> None:
    from tagql.config import load_settings
    from tagql.llm import make_llm

    llm = make_llm(load_settings(), backend="local")
    messages = [user("Count from one to thirty in words, separated by commas.")]
    whole = llm.complete(messages, max_tokens=120).text
    pieces: list[str] = []
    streamed = llm.stream(messages, on_text=pieces.append, max_tokens=120)
    assert streamed.text == whole and "".join(pieces).startswith(whole.strip()[:20]) and len(pieces) > 3
    seen: list[float] = []

    def stop_after_three(piece: str) -> None:
        if not piece:  # the watcher's poll ("go on?") runs on its own 50 ms clock: only text pieces count
            return
        seen.append(time.perf_counter())
        if len(seen) == 3:
            raise Stop

    with pytest.raises(Stop):
        llm.stream(messages, on_text=stop_after_three, max_tokens=120)
    assert len(seen) == 3 and all(seen)
    assert llm.complete(messages, max_tokens=120).text == whole  # the KV cache was left consistent

    # a stop asked for during a long prompt evaluation aborts it inside llama.cpp (on_text("") polls)
    long = [user("Add these numbers: " + " + ".join(str(i) for i in range(1500)))]
    llm.forget_cached_prompts()
    deadline = time.perf_counter() + 0.3
    polls: list[str] = []

    def stop_soon(piece: str) -> None:
        polls.append(piece)
        if time.perf_counter() > deadline:
            raise Stop

    with pytest.raises(Stop):
        llm.stream(long, on_text=stop_soon, max_tokens=20)
    late = time.perf_counter() - deadline
    assert polls and polls[0] == "" and late < 1.0, f"stopped {late:.2f} s after the deadline"
    assert llm.complete(messages, max_tokens=120).text == whole  # and the model still answers as before
