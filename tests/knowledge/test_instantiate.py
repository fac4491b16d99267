"""Retrieved statements take the question's numbers before they reach the SQL prompt."""

from __future__ import annotations

import pytest

from tagql.knowledge import ScoredStatement
from tagql.knowledge.instantiate import for_question, instantiate


@pytest.mark.parametrize(("text", "sql", "question", "want_text", "want_sql"), [
    # a placeholder aligned with the question's number: text and snippet both take it
    ("paid more than {100} dollar", "expense.cost > 100",
     "Please provide links to events for members who have paid more than 50 dollar.",
     "paid more than 50 dollar", "expense.cost > 50"),
    ("molecules consisted more than {100} atoms", "COUNT(molecule.molecule_id) > 100",
     "Which non-carcinogenic molecules consisted more than 5 atoms?",
     "molecules consisted more than 5 atoms", "COUNT(molecule.molecule_id) > 5"),
    # an expert's own number (no placeholder) is instantiated the same way, inside a string too
    ("born after 1992", "patient.birthday > '1992'", "How many patients born after 1985 are there?",
     "born after 1985", "patient.birthday > '1985'"),
    ("in year {1000}", "SUBSTR(event.event_date, 1, 4) = '1000'", "How much was spent in year 2019?",
     "in year 2019", "SUBSTR(event.event_date, 1, 4) = '2019'"),
    # the same number: only the placeholder braces go
    ("weight less than {100}", "superhero.weight_kg < 100", "Heroes with weight less than 100?",
     "weight less than 100", "superhero.weight_kg < 100"),
])
def test_numbers_follow_the_question(text: str, sql: str, question: str, want_text: str, want_sql: str) -> None:
    got = instantiate(ScoredStatement(text, sql, 0.9), question)
    assert (got.text, got.sql, got.score) == (want_text, want_sql, 0.9)


@pytest.mark.parametrize(("text", "sql", "question"), [
    # the snippet uses the number twice: no safe reading, left as stored
    ("weight greater than the {100}% average weight", "w * 100 > (SELECT AVG(w) FROM s) * 100",
     "weight greater than the 79% average weight"),
    # the number sits inside a date literal
    ("Meeting on October {100}, {1000}", "event.event_date LIKE '1000-100-08%'",
     "Was the Meeting on October 8, 2019 approved?"),
    # the snippet does not hold the text's number at all
    ("height of 1 meter", "superhero.height_cm = 100", "heroes with height of 2 meter"),
    # a number aligned on its own (no neighbouring word agrees) is not evidence of the same slot
    ("{100} dollars", "expense.cost > 100", "Which 3 events cost the most dollars?"),
    # no SQL snippet: nothing to instantiate
    ("over {100} members", "", "clubs with over 20 members"),
])
def test_ambiguous_or_unaligned_numbers_stay(text: str, sql: str, question: str) -> None:
    s = ScoredStatement(text, sql, 0.5)
    assert instantiate(s, question) is s


def test_for_question_keeps_order_and_untouched_statements() -> None:
    stmts = [ScoredStatement("carcinogenic", "molecule.label = '+'", 1.2),
             ScoredStatement("more than {100} atoms", "COUNT(atom.atom_id) > 100", 1.1)]
    got = for_question("molecules with more than 7 atoms that are carcinogenic", stmts)
    assert got[0] is stmts[0]
    assert got[1] == ScoredStatement("more than 7 atoms", "COUNT(atom.atom_id) > 7", 1.1)
