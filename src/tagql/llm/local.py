"""In-process llama.cpp backend (``llama-cpp-python``), CPU only, temperature 0 by default.

llama.cpp keeps the KV cache of the previous call and reuses the longest common token prefix,
so prompts put the (long, per-database) schema first and the question last: the first question
on a database pays for the schema, later ones only for their own tokens.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from tagql.errors import LLMOutputError, LLMUnavailable
from tagql.llm.base import Completion, Message, Usage

PREFIX_CACHE_BYTES = 768 << 20
_MODELS: dict[tuple[str, int, int | None, int], Any] = {}
_MODELS_LOCK = threading.Lock()


_SILENCED = False


def _silence_llama_logs() -> None:
    """llama.cpp prints context warnings on stderr even with verbose=False; route them nowhere."""
    global _SILENCED
    if _SILENCED:
        return
    import ctypes

    import llama_cpp

    @llama_cpp.llama_log_callback
    def _noop(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        return None

    llama_cpp.llama_log_set(_noop, ctypes.c_void_p(0))
    globals()["_LOG_CALLBACK"] = _noop  # keep a reference so it is not garbage-collected
    _SILENCED = True


def _load(path: Path, n_ctx: int, n_threads: int | None, seed: int) -> Any:
    """Load a GGUF once per process (loading takes seconds and ~1 GB)."""
    try:
        from llama_cpp import Llama
    except ImportError as exc:
        raise LLMUnavailable(
            "the local backend needs llama-cpp-python", "install it with: pip install 'tagql[local]'"
        ) from exc
    _silence_llama_logs()
    key = (str(path), n_ctx, n_threads, seed)
    with _MODELS_LOCK:
        if key not in _MODELS:
            try:
                llama = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, seed=seed, verbose=False)
                # Keep processed prompt prefixes (e.g. each database's schema) across calls whose
                # prompts differ, so alternating SQL and answer prompts does not re-read the schema.
                from llama_cpp import LlamaRAMCache

                llama.set_cache(LlamaRAMCache(capacity_bytes=PREFIX_CACHE_BYTES))
                _MODELS[key] = llama
            except (ValueError, RuntimeError) as exc:
                raise LLMUnavailable(f"llama.cpp could not load {path}: {exc}", "check the GGUF file") from exc
        return _MODELS[key]


class LocalLLM:
    """A GGUF model run by llama.cpp in this process."""

    def __init__(
        self, model_path: Path, *, n_ctx: int = 8192, n_threads: int | None = None, seed: int = 0,
        temperature: float = 0.0, name: str | None = None,
    ) -> None:
        self.path = Path(model_path)
        self.name = name or self.path.stem
        self.temperature = temperature
        self.seed = seed
        self.usage = Usage()
        self._llama = _load(self.path, n_ctx, n_threads, seed)
        self._lock = threading.Lock()  # one llama context: one call at a time

    @property
    def n_ctx(self) -> int:
        return int(self._llama.n_ctx())

    def count_tokens(self, text: str) -> int:
        return len(self._llama.tokenize(text.encode(), add_bos=False, special=True))

    def complete(
        self,
        messages: list[Message],
        *,
        max_tokens: int = 256,
        json_schema: dict[str, Any] | None = None,
        grammar: str | None = None,
        stop: list[str] | None = None,
    ) -> Completion:
        kwargs: dict[str, Any] = {}
        if grammar is not None:
            from llama_cpp import LlamaGrammar

            kwargs["grammar"] = LlamaGrammar.from_string(grammar, verbose=False)
        elif json_schema is not None:
            kwargs["response_format"] = {"type": "json_object", "schema": json_schema}
        start = time.perf_counter()
        with self._lock:
            self._llama.set_seed(self.seed)
            try:
                out = self._llama.create_chat_completion(
                    messages=[{"role": m.role, "content": m.content} for m in messages],
                    temperature=self.temperature,
                    max_tokens=max_tokens,
                    stop=stop,
                    seed=self.seed,
                    **kwargs,
                )
            except ValueError as exc:  # e.g. prompt longer than the context window
                raise LLMOutputError(f"local model refused the prompt: {exc}", "raise TAGQL_LLM__N_CTX") from exc
        seconds = time.perf_counter() - start
        usage = out.get("usage", {})
        completion = Completion(
            text=out["choices"][0]["message"]["content"] or "",
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            seconds=seconds,
        )
        self.usage.add(completion)
        return completion
