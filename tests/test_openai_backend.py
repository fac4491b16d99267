"""The OpenAI-compatible backend against a real server: llama.cpp's own OpenAI-compatible server
(``python -m llama_cpp.server``, started by :class:`tagql.llm.llama_server.LlamaServer`) serving the small
embedded model on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import tagql
from tagql.config import LLMSettings, load_settings
from tagql.errors import LLMUnavailable
from tagql.llm import make_llm, user
from tagql.llm.llama_server import LlamaServer, free_port
from tagql.llm.model_pack import PACKS, ensure_model


def test_unreachable_endpoint_is_a_one_line_error() -> None:
    llm = make_llm(LLMSettings(backend="openai", base_url=f"http://127.0.0.1:{free_port()}/v1"))
    with pytest.raises(LLMUnavailable, match="cannot reach the LLM endpoint") as info:
        llm.complete([user("hi")])
    assert "\n" not in str(info.value) and "TAGQL_LLM__BASE_URL" in str(info.value)


def test_llama_server_that_cannot_start_is_a_one_line_error(tmp_path) -> None:
    with pytest.raises(LLMUnavailable, match="exited during start-up") as info:
        LlamaServer(tmp_path / "missing.gguf", start_timeout_s=60)
    assert "\n" not in str(info.value)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    settings = load_settings()
    model = ensure_model(PACKS["qwen2.5-0.5b"], settings.cache_dir)
    with LlamaServer(model, alias="qwen-small", n_ctx=4096) as srv:
        yield srv.base_url


@pytest.mark.model
def test_openai_backend_answers_through_a_real_server(server: str, demo_db_path: Path) -> None:
    settings = load_settings(llm=LLMSettings(backend="openai", base_url=server, openai_model="qwen-small"))
    tq = tagql.connect(demo_db_path, settings=settings)
    assert tq.llm.name == "openai:qwen-small"
    answer = tq.ask("How many superheroes are there?")
    assert answer.values == [750], answer.sql
    assert answer.tokens["calls"] == 2 and answer.tokens["prompt_tokens"] > 500


@pytest.mark.model
def test_openai_backend_json_schema_output(server: str) -> None:
    llm = make_llm(LLMSettings(backend="openai", base_url=server, openai_model="qwen-small"))
    schema = {"type": "object", "properties": {"answer": {"type": "boolean"}}, "required": ["answer"]}
    reply = llm.complete([user("Is Paris in France? Reply in JSON.")], json_schema=schema, max_tokens=20)
    import json

    assert json.loads(reply.text) in ({"answer": True}, {"answer": False})
