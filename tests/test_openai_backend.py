"""The OpenAI-compatible backend against a real server: llama.cpp's own OpenAI-compatible server
(``python -m llama_cpp.server``) serving the small embedded model on loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import tagql
from tagql.config import LLMSettings, load_settings
from tagql.errors import LLMUnavailable
from tagql.llm import make_llm, user
from tagql.llm.model_pack import PACKS, ensure_model


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_endpoint_is_a_one_line_error() -> None:
    llm = make_llm(LLMSettings(backend="openai", base_url=f"http://127.0.0.1:{free_port()}/v1"))
    with pytest.raises(LLMUnavailable, match="cannot reach the LLM endpoint") as info:
        llm.complete([user("hi")])
    assert "\n" not in str(info.value) and "TAGQL_LLM__BASE_URL" in str(info.value)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    settings = load_settings()
    model = ensure_model(PACKS["qwen2.5-0.5b"], settings.cache_dir)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "4096", "--model_alias", "qwen-small", "--seed", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(240):
            try:
                if httpx.get(f"{base}/models", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                pytest.fail("llama_cpp.server exited during start-up")
            time.sleep(0.5)
        else:
            pytest.fail("llama_cpp.server did not start in 120 s")
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


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
