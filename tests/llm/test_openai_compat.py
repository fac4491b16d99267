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
    assert tq.llm().name == "openai:qwen-small"
    answer = tq.ask("How many superheroes are there?")
    assert answer.values == [750], answer.sql
    # the SQL is the endpoint's; a count is said as it is, without a second call (answer.one_column_answer)
    assert answer.answer == "750" and answer.tokens["calls"] == 1 and answer.tokens["prompt_tokens"] > 500


@pytest.mark.model
def test_openai_backend_json_schema_output(server: str) -> None:
    llm = make_llm(LLMSettings(backend="openai", base_url=server, openai_model="qwen-small"))
    schema = {"type": "object", "properties": {"answer": {"type": "boolean"}}, "required": ["answer"]}
    reply = llm.complete([user("Is Paris in France? Reply in JSON.")], json_schema=schema, max_tokens=20)
    import json

    assert json.loads(reply.text) in ({"answer": True}, {"answer": False})


def _endpoint(reply: dict) -> "OpenAICompatLLM":  # noqa: F821 - imported inside
    """The backend talking to an in-process transport that answers every request with ``reply``."""
    import httpx

    from tagql.llm.openai_compat import OpenAICompatLLM

    llm = OpenAICompatLLM("http://endpoint.test/v1", "m")
    llm._client = httpx.Client(base_url=llm.base_url,
                               transport=httpx.MockTransport(lambda request: httpx.Response(200, json=reply)))
    return llm


def test_choice_probs_read_the_first_tokens_log_probabilities() -> None:
    import math

    top = [{"token": "No", "logprob": math.log(0.6)}, {"token": "Yes", "logprob": math.log(0.3)},
           {"token": " yes", "logprob": math.log(0.05)}, {"token": "The", "logprob": math.log(0.05)}]
    llm = _endpoint({"choices": [{"message": {"content": "No"}, "logprobs": {"content": [{"top_logprobs": top}]}}],
                     "usage": {"prompt_tokens": 12}})
    p = llm.choice_probs([user("Is it?")], ["yes", "Yes", "no", "No"])
    assert [round(x, 4) for x in p] == [0.0526, 0.3158, 0.0, 0.6316]  # renormalised over the four
    assert llm.usage.calls == 1 and llm.usage.prompt_tokens == 12


def test_an_endpoint_without_log_probabilities_makes_filters_generate() -> None:
    from tagql.errors import LLMOutputError
    from tagql.tag.operators import SemEngine, SemTable

    llm = _endpoint({"choices": [{"message": {"content": "yes"}}]})
    with pytest.raises(LLMOutputError, match="no log-probabilities"):
        llm.choice_probs([user("Is it?")], ["yes", "no"])
    engine = SemEngine(llm, cascade="off")
    kept = SemTable(["x"], [("a",), ("b",), ("c",)], engine).sem_filter("{x} is a letter")
    assert len(kept.rows) == 3 and engine.split is False  # read from the generated "yes"


@pytest.mark.model
def test_openai_backend_gives_choice_probabilities(server: str) -> None:
    llm = make_llm(LLMSettings(backend="openai", base_url=server, openai_model="qwen-small"))
    from tagql.tag.operators import YES_NO_CHOICES, judge_messages

    yes = llm.choice_probs(judge_messages("Paris is a city in France"), YES_NO_CHOICES)
    no = llm.choice_probs(judge_messages("Paris is a city in Japan"), YES_NO_CHOICES)
    assert abs(sum(yes) - 1) < 1e-6 and yes[0] + yes[1] > no[0] + no[1]
