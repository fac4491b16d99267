"""Execution-guided SQL candidates: the result most candidates agree on wins (text2sql/candidates.py), wired
through QuerySynthesizer with a scripted model that samples; the local model's parallel sampling (real model)."""

from __future__ import annotations

import json

import httpx
import pytest

from tagql.db.connection import Result
from tagql.llm.base import system, user
from tagql.llm.openai_compat import OpenAICompatLLM
from tagql.llm.scripted import ScriptedLLM
from tagql.text2sql.candidates import Candidate, choose, result_key
from tagql.text2sql.query import QuerySynthesizer

COUNT_MARVEL = ("SELECT COUNT(*) FROM superhero AS T1 JOIN publisher AS T2 ON T1.publisher_id = T2.id "
                "WHERE T2.publisher_name = 'Marvel Comics'")
COUNT_MARVEL_BY_ID = ("SELECT COUNT(T1.id) FROM superhero AS T1 JOIN publisher AS T2 ON T1.publisher_id = T2.id "
                      "WHERE T2.publisher_name = 'Marvel Comics'")
COUNT_WRONG = "SELECT COUNT(*) FROM superhero WHERE publisher_id = 4"  # not Marvel (13)
COUNT_EMPTY = "SELECT id FROM superhero WHERE superhero_name = 'Nobody At All'"


def res(*rows) -> Result:
    return Result("q", ["x"], [tuple(r) for r in rows])


def test_agreement_is_on_results_not_sql_text() -> None:
    assert result_key(res([1 / 3])) == result_key(res([0.333333333333]))
    assert result_key(res([1], [2])) == result_key(res([2], [1]))
    assert result_key(res([1])) != result_key(res([2]))


def test_majority_wins_and_a_tie_goes_to_the_greedy_candidate() -> None:
    pool = [Candidate("g", res([1]), greedy=True), Candidate("a", res([2])), Candidate("b", res([2]))]
    assert choose(pool) == (1, 2)
    tie = [Candidate("g", res([1]), greedy=True), Candidate("a", res([2])), Candidate("b", res([1])),
           Candidate("c", res([2]))]
    assert choose(tie) == (0, 2)


def test_failed_candidates_have_no_vote_and_none_ran_is_none() -> None:
    pool = [Candidate("g", error="no such column", greedy=True), Candidate("a", error="x"), Candidate("b", res([3]))]
    assert choose(pool) == (2, 1)
    assert choose([Candidate("g", error="e", greedy=True)]) is None


def test_majority_nonempty_sets_empty_results_aside() -> None:
    pool = [Candidate("g", res([5]), greedy=True), Candidate("a", res()), Candidate("b", res())]
    assert choose(pool, "majority") == (1, 2)
    assert choose(pool, "majority_nonempty") == (0, 1)
    empty = [Candidate("g", res(), greedy=True), Candidate("a", res())]
    assert choose(empty, "majority_nonempty") == (0, 2)


def test_fallback_keeps_the_greedy_candidate_unless_it_failed() -> None:
    pool = [Candidate("g", res([1]), greedy=True), Candidate("a", res([2])), Candidate("b", res([2]))]
    assert choose(pool, "fallback") == (0, 1)
    failed = [Candidate("g", error="e", greedy=True), Candidate("a", res([2])), Candidate("b", res([2]))]
    assert choose(failed, "fallback") == (1, 2)
    with pytest.raises(ValueError, match="unknown candidate policy"):
        choose(pool, "vote")  # type: ignore[arg-type]


def synthesizer(hero, greedy: list[str], samples: list[str], n: int, **kw) -> tuple[QuerySynthesizer, ScriptedLLM]:
    llm = ScriptedLLM(greedy, samples=lambda messages, k: samples[:k])
    return QuerySynthesizer(hero, llm, candidates=n, **kw), llm


def test_the_result_most_candidates_share_replaces_the_greedy_one(hero) -> None:
    q, llm = synthesizer(hero, [COUNT_WRONG], [COUNT_MARVEL, COUNT_MARVEL_BY_ID, "SELECT COUNT(*) FROM superhero"], n=4)
    out = q.run("How many superheroes are published by Marvel Comics?")
    assert out.sql.startswith("SELECT COUNT(*) FROM superhero AS T1") and out.result.rows[0][0] > 300
    assert len(out.candidates) == 4 and out.candidates[0].greedy
    assert any("2 of 4 SQL candidates returned this result" in n for n in out.result.notes)
    # the samples came from the very prompt the greedy query was written from
    assert llm.prompts[1] == llm.prompts[0]


def test_identical_sql_runs_once_and_a_failing_sample_does_not_vote(hero) -> None:
    q, _ = synthesizer(hero, [COUNT_MARVEL], [COUNT_MARVEL, "SELECT nope FROM superhero", COUNT_WRONG], n=4)
    calls = []
    real = hero.execute
    hero.execute = lambda sql, **kw: (calls.append(sql), real(sql, **kw))[1]  # type: ignore[method-assign]
    try:
        out = q.run("How many superheroes are published by Marvel Comics?")
    finally:
        del hero.execute
    assert out.candidates[0].greedy and out.sql == out.candidates[0].sql  # greedy + its copy: 2 votes
    ran = [c for c in calls if not c.startswith("SELECT 1 FROM")]  # (prepare_sql probes stored values)
    assert len(ran) == 2  # the greedy query and COUNT_WRONG; the copy was not run again, the bad one never ran
    assert out.candidates[2].error and "nope" in out.candidates[2].error


def test_a_sample_answers_when_every_greedy_try_failed(hero) -> None:
    q, _ = synthesizer(hero, ["SELECT nope FROM superhero", "SELECT nope2 FROM superhero"], [COUNT_MARVEL], n=2)
    out = q.run("How many superheroes are published by Marvel Comics?")
    assert out.sql.startswith("SELECT COUNT(*)") and [a.error is not None for a in out.attempts] == [True, True, False]
    assert any("the first query failed" in n for n in out.result.notes)


def test_one_candidate_never_samples(hero) -> None:
    llm = ScriptedLLM([COUNT_MARVEL], samples=lambda m, k: pytest.fail("sampled with candidates=1"))
    out = QuerySynthesizer(hero, llm).run("How many superheroes are published by Marvel Comics?")
    assert out.candidates == [] and llm.usage.calls == 1


def test_the_endpoint_is_asked_for_n_choices_and_again_when_it_returns_fewer() -> None:
    bodies: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        choices = [{"message": {"content": f"SELECT {body['seed']}"}}]  # like llama.cpp's server: one choice
        return httpx.Response(200, json={"choices": choices, "usage": {"prompt_tokens": 10, "completion_tokens": 3}})

    llm = OpenAICompatLLM("http://endpoint/v1", "m", seed=7)
    llm._client = httpx.Client(base_url=llm.base_url, transport=httpx.MockTransport(handler))
    out = llm.sample([user("q")], n=3, temperature=0.8)
    assert [c.text for c in out] == ["SELECT 7", "SELECT 8", "SELECT 9"]
    assert [(b["n"], b["seed"], b["temperature"]) for b in bodies] == [(3, 7, 0.8), (2, 8, 0.8), (1, 9, 0.8)]
    assert llm.usage.calls == 3


@pytest.mark.model
def test_local_model_samples_in_parallel_deterministically_and_greedy_is_unchanged() -> None:
    from tagql.config import load_settings
    from tagql.llm import make_llm

    llm = make_llm(load_settings(), backend="local")
    messages = [system("You write SQLite SQL.\nCREATE TABLE superhero(id INTEGER, superhero_name TEXT, "
                       "publisher_id INTEGER);\nCREATE TABLE publisher(id INTEGER, publisher_name TEXT);"),
                user("How many superheroes are published by Marvel Comics? Reply with SQL only.")]
    # greedy from an empty cache both times: reusing a cached prompt moves where its cells lie, and on some
    # CPUs that flips a near-tie token (COUNT(*) vs COUNT(id) here), which says nothing about sampling
    llm.forget_cached_prompts()
    greedy = llm.complete(messages, max_tokens=96).text
    first = llm.sample(messages, n=5, max_tokens=96, temperature=1.0)
    again = llm.sample(messages, n=5, max_tokens=96, temperature=1.0)
    assert [c.text for c in first] == [c.text for c in again]  # seeded from the model's seed and the prompt
    assert len({c.text for c in first}) >= 2  # at temperature 1 the five do not all coincide
    assert all("marvel comics" in c.text.lower() and "count" in c.text.lower() for c in first)
    # the KV cache was left as greedy needs it: sequence 0 holds exactly the prompt, the samplers' are empty
    import llama_cpp

    prompt = llm._prompt(messages, 96)[1]
    memory = llama_cpp.llama_get_memory(llm._llama._ctx.ctx)
    first_sampler = llm._prefixes.hot + 1
    assert llama_cpp.llama_memory_seq_pos_max(memory, 0) == len(prompt) - 1
    assert [llama_cpp.llama_memory_seq_pos_max(memory, s) for s in range(first_sampler, first_sampler + 5)] == [-1] * 5
    reused = llm.complete(messages, max_tokens=96).text  # reuses the cached prompt: a valid reply
    assert "marvel comics" in reused.lower() and "count" in reused.lower()
    llm.forget_cached_prompts()
    assert llm.complete(messages, max_tokens=96).text == greedy  # and nothing the samplers left changes greedy
