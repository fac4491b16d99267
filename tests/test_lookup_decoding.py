"""Prompt-lookup decoding: drafts come from earlier text; verified output equals plain greedy output."""

from __future__ import annotations

import numpy as np
import pytest

from tagql.llm.lookup import find_draft, looping, next_draft_length


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
        (4, 4, 0, 2),   # rejected at once: halve
        (1, 1, 0, 1),   # ... never below one
        (4, 0, 0, 4),   # no draft this step: unchanged
    ],
)
def test_draft_length_follows_acceptance(current, drafted, accepted, expected) -> None:
    assert next_draft_length(current, drafted, accepted, max_draft=10) == expected


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
            llm.lookup_decoding = False
            plain = llm.complete(messages, max_tokens=60)
            llm.lookup_decoding = True
            fast = llm.complete(messages, max_tokens=60)
            assert fast.text == plain.text
            assert fast.completion_tokens == plain.completion_tokens
    finally:
        llm.lookup_decoding = True
    assert llm.lookup.accepted > before  # the copied names were drafted and accepted


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
