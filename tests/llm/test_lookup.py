"""Prompt-lookup decoding: drafts come from earlier text; verified output equals plain greedy output."""

from __future__ import annotations

import numpy as np
import pytest

from tagql.llm.lookup import SEPARATOR, RecentOutputs, find_draft, looping, next_draft_length


def draft_tokens(history, **kw) -> list[int]:
    return find_draft(history, **kw)[1]


def test_draft_continues_the_latest_match_of_the_longest_suffix() -> None:
    history = np.array([5, 6, 7, 8, 9, 1, 6, 7, 2, 3, 5, 6, 7])
    # suffix (5, 6, 7) occurred at the start and was followed by 8, 9, 1, ...
    assert draft_tokens(history, max_draft=3) == [8, 9, 1]


def test_draft_prefers_longer_ngrams_over_more_recent_shorter_ones() -> None:
    history = np.array([1, 2, 3, 40, 41, 9, 2, 3, 50, 1, 2, 3])
    # (1, 2, 3) matches at 0 -> 40, 41; the 2-gram (2, 3) also matches later (-> 50) but is shorter
    assert draft_tokens(history, max_draft=2) == [40, 41]


def test_no_draft_without_a_match_of_min_ngram() -> None:
    assert draft_tokens(np.array([1, 2, 3, 4, 5]), min_ngram=2) == []
    assert draft_tokens(np.array([7]), min_ngram=2) == []


def test_draft_is_capped() -> None:
    history = np.array([1, 2, 3, 4, 5, 6, 7, 8, 1, 2])
    assert draft_tokens(history, min_ngram=2, max_draft=4) == [3, 4, 5, 6]
    assert draft_tokens(history, min_ngram=2, max_draft=0) == []


@pytest.mark.parametrize(
    ("current", "drafted", "accepted", "expected"),
    [
        (4, 4, 4, 8),   # all accepted: double
        (8, 8, 8, 10),  # ... up to the cap
        (8, 8, 2, 3),   # partly: one more than the accepted run
        (8, 8, 1, 3),   # ... but never below MIN_DRAFT (a 2-token batch costs nearly as much as 4)
        (8, 8, 0, 4),   # rejected at once: halve
        (4, 4, 0, 3),   # ... never below MIN_DRAFT
        (4, 0, 0, 4),   # no draft this step: unchanged
    ],
)
def test_draft_length_follows_acceptance(current, drafted, accepted, expected) -> None:
    assert next_draft_length(current, drafted, accepted, max_draft=10) == expected


def test_draft_stops_at_a_separator_between_remembered_outputs() -> None:
    history = np.array([1, 2, 3, 4, SEPARATOR, 9, 9, 1, 2, 3])
    assert draft_tokens(history, max_draft=5) == [4]


def test_recent_outputs_are_kept_per_prompt_and_bounded() -> None:
    recent = RecentOutputs(keep=2, max_prompts=2)
    for out in ([1, 2], [3], [4, 5]):
        recent.add([7, 7], out)
    recent.add([8], [6])
    assert recent.history([7, 7]) == [3, SEPARATOR, 4, 5, SEPARATOR]  # the oldest output dropped
    assert recent.history([8]) == [6, SEPARATOR]
    recent.add([9], [1])  # a third prompt evicts the least recently used one
    assert recent.history([7, 7]) == [] and recent.history([8]) == [6, SEPARATOR]
    RecentOutputs(keep=0).add([1], [2])  # keep=0 remembers nothing (and does not fail)


@pytest.mark.model
def test_lookup_decoding_matches_plain_greedy_on_the_real_model(demo_db_path) -> None:
    """Same prompts, same model: the verified drafts must not change a single character."""
    from tagql.config import load_settings
    from tagql.llm import make_llm, system, user

    llm = make_llm(load_settings(), backend="local")
    schema = "CREATE TABLE superhero (id INTEGER, superhero_name TEXT, full_name TEXT, height_cm INTEGER);"
    prompts = [
        [system(f"You write SQLite SQL for this schema:\n{schema}"),
         user("Names and full names of superheroes taller than 200 cm, tallest first. SQL only.")],
        [system("You answer from data points."),
         user("Data points: superhero_name: Spider-Man, full_name: Peter Parker; superhero_name: Batman, "
              "full_name: Bruce Wayne.\nQuestion: Repeat both full names exactly, comma separated.")],
    ]
    before = llm.lookup.accepted
    try:
        for messages in prompts:
            # both from an empty KV cache: what earlier tests left cached changes batch splits, which on
            # some CPUs flips near-tie tokens for either method alike
            llm.lookup_decoding = False
            llm.forget_cached_prompts()
            plain = llm.complete(messages, max_tokens=60)
            llm.lookup_decoding = True
            llm.forget_cached_prompts()
            fast = llm.complete(messages, max_tokens=60)
            assert fast.text == plain.text
            assert fast.completion_tokens == plain.completion_tokens
    finally:
        llm.lookup_decoding = True
    assert llm.lookup.accepted > before  # the copied names were drafted and accepted


@pytest.mark.model
def test_remembered_outputs_are_drafted_without_changing_the_output() -> None:
    """A second question on the same schema reuses the first SQL's join clause as drafts; the text is
    still exactly what plain greedy decoding writes."""
    from tagql.config import load_settings
    from tagql.llm import make_llm, system, user

    llm = make_llm(load_settings(), backend="local")
    schema = ("CREATE TABLE member (member_id TEXT PRIMARY KEY, first_name TEXT, link_to_major TEXT);\n"
              "CREATE TABLE major (major_id TEXT PRIMARY KEY, major_name TEXT, college TEXT);")
    head = system(f"You write SQLite SQL for this schema:\n{schema}\nUse the aliases T1 and T2. SQL only.")
    first = [head, user("Major name of the member named Angela.")]
    second = [head, user("College of the member named Luisa.")]
    try:
        llm.lookup_decoding = False
        plain = llm.complete(second, max_tokens=80).text
        llm.lookup_decoding = True
        llm.recent.clear()
        llm.complete(first, max_tokens=80)
        llm.lookup.trace = []
        remembered = llm.complete(second, max_tokens=80)
        accepted_with_memory = sum(a for _, _, a in llm.lookup.trace)
        llm.recent.clear()
        llm.lookup.trace = []
        alone = llm.complete(second, max_tokens=80)
        accepted_alone = sum(a for _, _, a in llm.lookup.trace)
    finally:
        llm.lookup_decoding = True
        llm.lookup.trace = None
    assert remembered.text == alone.text == plain
    assert "JOIN" in plain and accepted_with_memory > accepted_alone


@pytest.mark.parametrize(("tokens", "expected"), [
    ([1, 2] * 16, True),  # 'Br', 'I', 'Br', 'I', ... over 32 tokens
    ([9] * 32, True),
    ([5, 6, 7] + [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] * 4, True),  # a 10-token clause repeated 4 times
    ([1, 2] * 15, False),  # too short to call it a loop
    (list(range(40)), False),
    ([1, 2, 3] * 10 + [4, 5], False),  # the loop was left
    (list(range(30)) * 2, False),  # a period longer than max_period (a long list written twice)
])
def test_looping_detects_a_repeated_block_at_the_end(tokens, expected) -> None:
    assert looping(tokens) is expected


@pytest.mark.model
def test_a_looping_generation_stops_early_on_the_real_model() -> None:
    """Greedy decoding that falls into a loop stops after ~32 tokens, in both decoders and under a grammar."""
    from tagql.config import load_settings
    from tagql.llm import make_llm, user

    llm = make_llm(load_settings(), backend="local")
    messages = [user("Write the word ha 300 times, separated by spaces, and nothing else.")]
    try:
        for lookup in (True, False):
            llm.lookup_decoding = lookup
            reply = llm.complete(messages, max_tokens=200)
            assert reply.text.lower().count("ha") >= 8 and reply.completion_tokens < 60
        constrained = llm.complete(messages, max_tokens=200, grammar='root ::= ("ha" " ")+')
        assert constrained.completion_tokens < 60
    finally:
        llm.lookup_decoding = True
