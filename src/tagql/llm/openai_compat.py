"""Any OpenAI-compatible chat-completions endpoint: vLLM, Ollama, llama.cpp server, OpenAI."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

import httpx

from tagql.errors import LLMOutputError, LLMUnavailable
from tagql.llm.base import Completion, Message, Usage


class EndpointDown(LLMUnavailable):
    """The endpoint did not serve the request (nothing listens, it timed out, cut the connection, or still
    answered 429/5xx after the retries); a pool of endpoints (:mod:`tagql.llm.pool`) asks another one.
    A refused key or an unknown model stays a plain :class:`LLMUnavailable` (every endpoint would say so)."""


class OpenAICompatLLM:
    # ``logprobs``/``top_logprobs`` of the first reply token (an endpoint without them answers choice_probs
    # with an LLMOutputError, and callers read generated replies from then on); no per-slot digit reading
    supports_choice_probs = True
    supports_digit_probs = False
    supports_stream = True  # "stream": true, server-sent deltas; closing the response stops the server
    parallel_calls = 1  # one request at a time (a pool of endpoints, tagql.llm.pool, runs several)
    supports_samples = True  # "n": n choices in one request (more requests when a server returns fewer)

    def __init__(
        self, base_url: str, model: str, *, api_key: str | None = None, temperature: float = 0.0,
        seed: int = 0, timeout_s: float = 120.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = f"openai:{model}"
        self.temperature = temperature
        self.seed = seed
        self.usage = Usage()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s)

    _schema_style = "json_schema"

    def _response_format(self, schema: dict[str, Any]) -> dict[str, Any]:
        if self._schema_style == "json_object":
            return {"type": "json_object", "schema": schema}
        return {"type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": True}}

    # retried: rate limits and a server's transient failures (with Retry-After when the server sends one,
    # capped), and a connection cut mid-response; not a refused connection (nothing listens) nor a timeout
    # (a slow server would only be asked twice as long). A completion request has no side effect to repeat.
    RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
    max_retries = 2
    retry_backoff_s = 1.0  # doubled each retry
    max_retry_after_s = 20.0

    def _post(self, body: dict[str, Any]) -> httpx.Response:
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                resp = self._client.post("/chat/completions", json=body)
            except httpx.TimeoutException as exc:
                raise EndpointDown(
                    f"the LLM endpoint {self.base_url} did not answer within {self._client.timeout.read:g} s",
                    "check the server's load or raise TAGQL_LLM__REQUEST_TIMEOUT_S",
                ) from exc
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
                if last:
                    raise EndpointDown(
                        f"the LLM endpoint {self.base_url} closed the connection mid-response "
                        f"({exc.__class__.__name__}, {attempt + 1} tries)", "check the server's log",
                    ) from exc
                time.sleep(self.retry_backoff_s * 2**attempt)
                continue
            except httpx.TransportError as exc:
                raise EndpointDown(
                    f"cannot reach the LLM endpoint {self.base_url}: {exc.__class__.__name__}",
                    "start the server or set TAGQL_LLM__BASE_URL",
                ) from exc
            if resp.status_code not in self.RETRY_STATUSES or last:
                if resp.status_code in self.RETRY_STATUSES and attempt:
                    resp.extensions["tagql_tries"] = attempt + 1
                return resp
            time.sleep(self._retry_delay(resp, attempt))
        raise AssertionError("unreachable")

    def _retry_delay(self, resp: httpx.Response, attempt: int) -> float:
        """Seconds before the next try: the server's Retry-After (seconds), capped, else exponential."""
        after = resp.headers.get("retry-after", "")
        try:
            return min(max(float(after), 0.0), self.max_retry_after_s)
        except ValueError:
            return self.retry_backoff_s * 2**attempt

    def _body(self, messages: list[Message], **fields: Any) -> dict[str, Any]:
        """A chat-completions request for ``messages`` with this backend's model and seed."""
        return {"model": self.model, "messages": [{"role": m.role, "content": m.content} for m in messages],
                "seed": self.seed, **fields}

    def _checked(self, resp: httpx.Response) -> dict[str, Any]:
        """The JSON body of a successful response; HTTP errors as one-line :class:`LLMUnavailable`."""
        if resp.status_code in (401, 403):
            raise LLMUnavailable(
                f"the LLM endpoint {self.base_url} refused the API key (HTTP {resp.status_code})",
                "set TAGQL_LLM__API_KEY or OPENAI_API_KEY",
            )
        if resp.status_code == 404:
            raise LLMUnavailable(
                f"the LLM endpoint {self.base_url} has no chat/completions or no model '{self.model}'",
                "check TAGQL_LLM__BASE_URL (usually ends in /v1) and TAGQL_LLM__OPENAI_MODEL",
            )
        tries = resp.extensions.get("tagql_tries")
        after = f" after {tries} tries" if tries else ""
        if resp.status_code == 429:
            raise EndpointDown(f"the LLM endpoint {self.base_url} is rate-limiting requests (HTTP 429{after})",
                                 "wait and ask again, or raise the endpoint's rate limit")
        if resp.status_code >= 400:
            raise (EndpointDown if resp.status_code in self.RETRY_STATUSES else LLMUnavailable)(
                f"the LLM endpoint {self.base_url} answered HTTP {resp.status_code}{after}: {_one_line(resp.text)!r}",
                "check the server's log",
            )
        try:
            data = resp.json()
        except ValueError as exc:
            raise LLMOutputError(
                f"the LLM endpoint returned a malformed response: {_one_line(resp.text)!r}",
                "is it OpenAI-compatible?",
            ) from exc
        if not isinstance(data, dict):
            raise LLMOutputError(f"the LLM endpoint returned a malformed response: {_one_line(resp.text)!r}",
                                 "is it OpenAI-compatible?")
        return data

    def choice_probs(self, messages: list[Message], choices: list[str]) -> list[float]:
        """The probabilities of each of ``choices`` as the first reply token, renormalised over them (one
        call, ``max_tokens=1`` with ``logprobs``/``top_logprobs``: OpenAI, vLLM and llama.cpp's server
        return them). A choice outside the returned top tokens counts 0; an endpoint that returns no
        log-probabilities, or none of the choices, is an :class:`LLMOutputError` (callers then read a
        generated reply instead)."""
        body = self._body(messages, temperature=0.0, max_tokens=1, logprobs=True, top_logprobs=20)
        start = time.perf_counter()
        data = self._checked(self._post(body))
        try:
            top = data["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
            found = [(str(t["token"]).strip(), float(t["logprob"])) for t in top]
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise LLMOutputError(f"the LLM endpoint {self.base_url} returned no log-probabilities",
                                 "filters read generated yes/no replies instead") from exc
        mass = [sum(math.exp(lp) for tok, lp in found if tok == c) for c in choices]
        total = sum(mass)
        if total <= 0:
            raise LLMOutputError(f"none of {choices} is among the endpoint's likeliest first tokens",
                                 "filters read generated yes/no replies instead")
        usage = data.get("usage") or {}
        self.usage.add(Completion("", int(usage.get("prompt_tokens") or 0), 1, time.perf_counter() - start))
        return [m / total for m in mass]

    def complete(
        self,
        messages: list[Message],
        *,
        max_tokens: int = 256,
        json_schema: dict[str, Any] | None = None,
        grammar: str | None = None,
        stop: list[str] | None = None,
    ) -> Completion:
        body = self._body(messages, temperature=self.temperature, max_tokens=max_tokens)
        if stop:
            body["stop"] = stop
        if json_schema is not None:
            body["response_format"] = self._response_format(json_schema)
        start = time.perf_counter()
        resp = self._post(body)
        if json_schema is not None and resp.status_code >= 400 and "response_format" in resp.text:
            # servers differ: OpenAI/vLLM take "json_schema", llama.cpp's server "json_object" + schema
            self._schema_style = "json_object"
            body["response_format"] = self._response_format(json_schema)
            resp = self._post(body)
        data = self._checked(resp)
        try:
            text = data["choices"][0]["message"]["content"] or ""
            if not isinstance(text, str):
                raise TypeError("content is not text")
        except (KeyError, IndexError, TypeError) as exc:
            raise LLMOutputError(
                f"the LLM endpoint returned a malformed response: {str(data)[:200]!r}",
                "is it OpenAI-compatible?",
            ) from exc
        usage = data.get("usage") or {}
        completion = Completion(
            text=text,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            seconds=time.perf_counter() - start,
        )
        self.usage.add(completion)
        return completion


    def sample(self, messages: list[Message], *, n: int, max_tokens: int = 256, temperature: float = 0.7,
               top_p: float = 0.95, seed: int | None = None, stop: list[str] | None = None) -> list[Completion]:
        """``n`` replies at ``temperature``: one request with ``"n": n`` (OpenAI, vLLM); a server that returns
        fewer choices (llama.cpp's server returns one) is asked again with the next seeds until ``n``."""
        base_seed = self.seed if seed is None else seed
        texts: list[str] = []
        start = time.perf_counter()
        prompt_tokens = completion_tokens = 0
        while len(texts) < n:
            body = self._body(messages, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                              n=n - len(texts), seed=base_seed + len(texts))
            if stop:
                body["stop"] = stop
            data = self._checked(self._post(body))
            try:
                got = [str(c["message"]["content"] or "") for c in data["choices"]]
            except (KeyError, IndexError, TypeError) as exc:
                raise LLMOutputError(f"the LLM endpoint returned a malformed response: {str(data)[:200]!r}",
                                     "is it OpenAI-compatible?") from exc
            if not got:
                raise LLMOutputError("the LLM endpoint returned no choices", "is it OpenAI-compatible?")
            texts += got[: n - len(texts)]
            usage = data.get("usage") or {}
            prompt_tokens += int(usage.get("prompt_tokens") or 0)
            completion_tokens += int(usage.get("completion_tokens") or 0)
        seconds = time.perf_counter() - start
        out = [Completion(t, prompt_tokens // n, completion_tokens // n, seconds / n) for t in texts]
        for c in out:
            self.usage.add(c)
        return out

    def stream(self, messages: list[Message], *, on_text: Callable[[str], None], max_tokens: int = 256,
               stop: list[str] | None = None) -> Completion:
        """:meth:`complete` with ``"stream": true``: each content delta goes to ``on_text`` as it arrives.
        An exception from ``on_text`` closes the connection (vLLM and llama.cpp's server stop generating
        for a client that went away) and propagates. Not retried once text went out."""
        body = self._body(messages, temperature=self.temperature, max_tokens=max_tokens, stream=True,
                          stream_options={"include_usage": True})
        if stop:
            body["stop"] = stop
        start = time.perf_counter()
        for attempt in range(self.max_retries + 1):
            text, usage, retry = _stream_body(self, body, on_text, attempt)
            if retry is None:
                break
            time.sleep(retry)
        completion = Completion(text=text, prompt_tokens=int(usage.get("prompt_tokens") or 0),
                                completion_tokens=int(usage.get("completion_tokens") or 0),
                                seconds=time.perf_counter() - start)
        self.usage.add(completion)
        return completion


def _stream_body(llm: OpenAICompatLLM, body: dict[str, Any], on_text: Callable[[str], None],
                 attempt: int) -> tuple[str, dict[str, Any], float | None]:
    """One streamed request: (text, usage, None), or (.., .., seconds to wait) for a transient refusal before
    any text went out (a 429/5xx answer, or a connection refused at once is not retried: nothing listens)."""
    text, usage = "", {}
    last = attempt == llm.max_retries
    try:
        with llm._client.stream("POST", "/chat/completions", json=body) as resp:
            if resp.status_code in llm.RETRY_STATUSES and not last:
                return "", {}, llm._retry_delay(resp, attempt)
            if resp.status_code >= 400:
                resp.read()
                if attempt:
                    resp.extensions["tagql_tries"] = attempt + 1
                llm._checked(resp)  # raises the one-line error
            if not resp.headers.get("content-type", "").startswith("text/event-stream"):
                resp.read()  # a server that ignores "stream": one ordinary completion
                data = llm._checked(resp)
                try:
                    text = data["choices"][0]["message"]["content"] or ""
                except (KeyError, IndexError, TypeError) as exc:
                    raise LLMOutputError(f"the LLM endpoint returned a malformed response: {str(data)[:200]!r}",
                                         "is it OpenAI-compatible?") from exc
                if text:
                    on_text(text)
                return text, data.get("usage") or {}, None
            for line in resp.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    chunk = json.loads(data)
                    choices = chunk.get("choices") or []
                    piece = (choices[0].get("delta") or {}).get("content") or "" if choices else ""
                except (ValueError, AttributeError, IndexError) as exc:
                    raise LLMOutputError(f"the LLM endpoint streamed a malformed event: {_one_line(data)!r}",
                                         "is it OpenAI-compatible?") from exc
                usage = chunk.get("usage") or usage
                if piece:
                    text += piece
                    on_text(piece)
    except httpx.TimeoutException as exc:
        raise EndpointDown(f"the LLM endpoint {llm.base_url} stopped streaming for "
                             f"{llm._client.timeout.read:g} s", "check the server's load") from exc
    except httpx.ConnectError as exc:
        raise EndpointDown(f"cannot reach the LLM endpoint {llm.base_url}: {exc.__class__.__name__}",
                             "start the server or set TAGQL_LLM__BASE_URL") from exc
    except httpx.TransportError as exc:
        if not text and not last:  # cut before any text went out: nothing was shown, ask again
            return "", {}, llm.retry_backoff_s * 2**attempt
        raise LLMUnavailable(f"the LLM endpoint {llm.base_url} failed mid-stream: {exc.__class__.__name__}",
                             "check the server's log") from exc
    return text, usage, None


def _one_line(text: str, limit: int = 200) -> str:
    """A server's body in an error message: whitespace runs folded (one line), cut at ``limit``."""
    return " ".join(text.split())[:limit]
