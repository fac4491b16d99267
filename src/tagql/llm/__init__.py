"""Language models: one interface (:class:`LLM`), a local llama.cpp backend and an OpenAI-compatible one."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from tagql.config import LLMSettings, Settings, default_settings
from tagql.llm.base import LLM, Completion, Message, Usage, system, user
from tagql.llm.model_pack import PACKS, REQUANTIZED, resolve_model_path

__all__ = ["LLM", "PACKS", "Completion", "Message", "Usage", "make_llm", "system", "user"]


def make_llm(
    settings: Settings | LLMSettings | None = None,
    *,
    backend: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    cache_dir: os.PathLike[str] | str | None = None,
) -> LLM:
    """Build the configured model. ``backend`` overrides the configured one (``local`` / ``openai``).
    With no settings (or only ``LLMSettings``) the rest comes from the built-in defaults, not the
    environment: entry points pass ``load_settings()``."""
    full = settings if isinstance(settings, Settings) else default_settings()
    cfg = settings if isinstance(settings, LLMSettings) else full.llm
    chosen = backend or cfg.backend
    if chosen == "openai":
        from tagql.llm.openai_compat import OpenAICompatLLM
        from tagql.llm.pool import PooledOpenAILLM, endpoint_urls

        urls = endpoint_urls(cfg.base_url, cfg.endpoints)
        if len(urls) > 1 or cfg.concurrency > 1 or cfg.max_calls:
            return PooledOpenAILLM(
                urls, cfg.openai_model, api_key=cfg.api_key or os.environ.get("OPENAI_API_KEY"),
                temperature=cfg.temperature, seed=cfg.seed, timeout_s=cfg.request_timeout_s,
                concurrency=cfg.concurrency, max_calls=cfg.max_calls,
            )
        return OpenAICompatLLM(
            urls[0] if urls else cfg.base_url, cfg.openai_model, api_key=cfg.api_key or os.environ.get("OPENAI_API_KEY"),
            temperature=cfg.temperature, seed=cfg.seed, timeout_s=cfg.request_timeout_s,
        )
    if chosen == "local":
        from tagql.llm.local import LocalLLM

        path = resolve_model_path(cfg.model, cache_dir or full.cache_dir, progress)
        state_dir = Path(cache_dir or full.cache_dir).expanduser() / "kv" if cfg.persist_prefixes else None
        return LocalLLM(
            path, n_ctx=cfg.n_ctx, n_threads=cfg.n_threads, seed=cfg.seed, temperature=cfg.temperature,
            name=cfg.model if cfg.model in PACKS or cfg.model in REQUANTIZED else None, lookup_decoding=cfg.lookup_decoding,
            recent_outputs=cfg.recent_outputs, state_dir=state_dir, extra_buffers=cfg.extra_buffers,
        )
    from tagql.errors import ConfigError

    raise ConfigError(f"unknown LLM backend '{chosen}'", "use 'local' or 'openai'")
