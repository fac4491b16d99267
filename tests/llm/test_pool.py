"""The pooled OpenAI-compatible backend (tagql.llm.pool) against scripted servers on loopback: requests
spread over the endpoints within the concurrency bound, 429/503 are retried, a dead endpoint's requests go
to the others, the call budget stops with one line and loses nothing, and make_llm wires it from settings."""

from __future__ import annotations


import pytest

from tagql.config import LLMSettings, load_settings
from tagql.errors import LLMUnavailable
from tagql.llm import make_llm, user
from tagql.llm.openai_compat import OpenAICompatLLM
from tagql.llm.pool import LLMCallBudgetExceeded, PooledOpenAILLM
from tagql.tag.cache import OpCache
from tagql.tag.operators import SemEngine, SemTable
from tests.openai_double import OpenAIDouble, yes_no_reply

COUNTRIES = [f"Country{i:02d}" for i in range(12)]


def _even(claim: str) -> bool:
    return int(claim.split("Country")[1][:2]) % 2 == 0


def _filter(llm, cache=None) -> list[str]:
    engine = SemEngine(llm, cache=cache, cascade="off", concurrency=llm.parallel_calls)
    table = SemTable(["country"], [(c,) for c in COUNTRIES], engine)
    return [r[0] for r in table.sem_filter("{country} has an even number").rows]


def test_requests_spread_over_endpoints_within_the_concurrency_bound():
    with OpenAIDouble(yes_no_reply(_even), delay_s=0.15) as a, OpenAIDouble(yes_no_reply(_even), delay_s=0.15) as b:
        pool = PooledOpenAILLM([a.base_url, b.base_url], "m", concurrency=2)
        assert pool.parallel_calls == 4
        kept = _filter(pool)
    assert kept == [c for c in COUNTRIES if _even(c)]
    assert a.peak_in_flight <= 2 and b.peak_in_flight <= 2  # the bound per endpoint
    assert pool.peak_in_flight == 4  # and it is used
    # spread: the least busy endpoint takes the next call, so neither is left idle; the exact split depends on
    # which reply lands first (a loaded CI machine gave 7/5), so only the sum and a fair share are fixed
    assert a.requests + b.requests == 12 and min(a.requests, b.requests) >= 4
    assert pool.usage.calls == 12


def test_serial_and_concurrent_operators_give_the_same_verdicts():
    with OpenAIDouble(yes_no_reply(_even)) as a:
        serial = _filter(OpenAICompatLLM(a.base_url, "m"))
        pooled = _filter(PooledOpenAILLM([a.base_url, a.base_url], "m", concurrency=3))
    assert serial == pooled == [c for c in COUNTRIES if _even(c)]


@pytest.mark.parametrize("statuses", [[429], [503], [429, 503]])
def test_rate_limits_and_unavailable_servers_are_retried(statuses):
    with OpenAIDouble(lambda body: "hello") as a:
        a.fail_next, a.retry_after = list(statuses), "0"
        pool = PooledOpenAILLM([a.base_url], "m")
        assert pool.complete([user("hi")]).text == "hello"
        assert a.requests == len(statuses) + 1


def test_an_endpoint_that_goes_down_leaves_its_requests_to_the_others():
    with OpenAIDouble(yes_no_reply(_even)) as a, OpenAIDouble(yes_no_reply(_even)) as b:
        pool = PooledOpenAILLM([a.base_url, b.base_url], "m", concurrency=1)
        b.stop()
        kept = _filter(pool)
        assert kept == [c for c in COUNTRIES if _even(c)]
        assert a.requests == 12
        status = pool.status()
        assert status[1]["down"] and not status[0]["down"] and status[0]["served"] == 12


def test_an_endpoint_still_failing_after_its_retries_hands_over():
    with OpenAIDouble(lambda body: "from a") as a, OpenAIDouble(lambda body: "from b") as b:
        a.fail_next, a.retry_after = [503] * 3, "0"  # all of a's tries fail
        pool = PooledOpenAILLM([a.base_url, b.base_url], "m")
        assert pool.complete([user("hi")]).text == "from b"
        assert pool.status()[0]["down"]


def test_every_endpoint_down_is_a_one_line_error():
    with OpenAIDouble(lambda body: "x") as a, OpenAIDouble(lambda body: "x") as b:
        pool = PooledOpenAILLM([a.base_url, b.base_url], "m")
        a.stop()
        b.stop()
        with pytest.raises(LLMUnavailable, match="cannot reach the LLM endpoint") as info:
            pool.complete([user("hi")])
    assert "\n" not in str(info.value)


def test_the_call_budget_stops_with_one_line_and_loses_nothing(tmp_path):
    cache_path = tmp_path / "ops.sqlite"
    with OpenAIDouble(yes_no_reply(_even)) as a:
        pool = PooledOpenAILLM([a.base_url], "m", max_calls=5)
        with pytest.raises(LLMCallBudgetExceeded, match="budget of 5 calls") as info:
            _filter(pool, OpCache(cache_path))
        assert "\n" not in str(info.value) and "TAGQL_LLM__MAX_CALLS" in str(info.value)
        assert a.requests == 5
        assert len(OpCache(cache_path)) == 5  # the five answers paid for are kept
        again = PooledOpenAILLM([a.base_url], "m", max_calls=7)
        assert _filter(again, OpCache(cache_path)) == [c for c in COUNTRIES if _even(c)]
        assert a.requests == 12 and again.calls == 7  # the re-run paid only for the other seven


def test_the_budget_holds_under_concurrency(tmp_path):
    with OpenAIDouble(yes_no_reply(_even), delay_s=0.05) as a:
        pool = PooledOpenAILLM([a.base_url, a.base_url], "m", concurrency=2, max_calls=6)
        with pytest.raises(LLMCallBudgetExceeded):
            _filter(pool, OpCache(tmp_path / "c.sqlite"))
        assert a.requests == 6 and len(OpCache(tmp_path / "c.sqlite")) == 6


def test_make_llm_wires_a_pool_from_settings(monkeypatch):
    llm = make_llm(LLMSettings(backend="openai", base_url="http://a:1/v1, http://b:2/v1", openai_model="m"))
    assert isinstance(llm, PooledOpenAILLM) and llm.parallel_calls == 2
    assert [e.base_url for e in llm.endpoints] == ["http://a:1/v1", "http://b:2/v1"] and llm.name == "openai:m"
    monkeypatch.setenv("TAGQL_LLM__ENDPOINTS", '["http://a:1/v1", "http://b:2/v1", "http://c:3/v1"]')
    monkeypatch.setenv("TAGQL_LLM__CONCURRENCY", "2")
    monkeypatch.setenv("TAGQL_LLM__MAX_CALLS", "100")
    llm = make_llm(load_settings(), backend="openai")
    assert isinstance(llm, PooledOpenAILLM) and llm.parallel_calls == 6 and llm.max_calls == 100
    single = make_llm(LLMSettings(backend="openai", base_url="http://a:1/v1"))
    assert isinstance(single, OpenAICompatLLM) and single.parallel_calls == 1


def test_a_concurrency_below_one_is_a_config_error(monkeypatch):
    from tagql.errors import ConfigError

    monkeypatch.setenv("TAGQL_LLM__CONCURRENCY", "0")
    with pytest.raises(ConfigError, match="llm.concurrency"):
        load_settings()


def test_every_backend_declares_how_many_calls_it_serves_at_once():
    from tagql.llm.base import LLM, parallel_calls
    from tagql.llm.local import LocalLLM
    from tagql.llm.scripted import ScriptedLLM

    assert parallel_calls(LocalLLM) == 1 and OpenAICompatLLM.parallel_calls == 1  # the local model: serial
    assert ScriptedLLM([]).parallel_calls == 1 and isinstance(ScriptedLLM([], parallel_calls=3), LLM)
    assert parallel_calls(PooledOpenAILLM(["http://a:1/v1", "http://b:1/v1"], "m", concurrency=2)) == 4


def test_a_stream_goes_through_the_pool():
    with OpenAIDouble(lambda body: "one two") as a:
        pool = PooledOpenAILLM([a.base_url, a.base_url], "m")
        pieces = []
        assert pool.stream([user("hi")], on_text=pieces.append).text == "one two"
        assert "".join(pieces) == "one two" and pool.usage.calls == 1
