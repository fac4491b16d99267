"""A follow-up asked of the real model (issue 33): "And for DC Comics?" after a question about Marvel Comics
is answered from the conversation, with the first turn's SQL as context."""

from __future__ import annotations

from pathlib import Path

import pytest

import tagql

pytestmark = pytest.mark.model


def test_a_follow_up_on_the_demo_database_is_answered_with_context(demo_db_path: Path) -> None:
    conversation = tagql.connect(demo_db_path, llm="local").conversation()
    first = conversation.ask("How many superheroes are published by Marvel Comics?")
    assert first.rows == [[387]], first.sql
    follow = conversation.ask("And for DC Comics?")
    assert follow.context_turns == 1 and "DC Comics" in follow.sql and follow.rows == [[224]], follow.sql
    assert "224" in follow.answer and "Marvel" not in follow.answer, follow.answer
    for a in conversation.answers:  # shown with -s (docs/text2sql.md quotes it)
        print(f"\n{a.question}\n  sql:    {a.sql}\n  rows:   {a.rows}\n  answer: {a.answer}\n  "
              f"context_turns: {a.context_turns}; notes: {a.notes}; {a.timings}")
