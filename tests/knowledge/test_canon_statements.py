from __future__ import annotations

import pytest

from tagql.knowledge.canon import canonicalise, tokens, words
from tagql.knowledge.statements import StatementError, parse_structured
from tagql.knowledge.validate import holds_back, names_missing_schema_object, snippet_problem


def test_numbers_and_dates_share_one_placeholder():
    assert canonicalise("born after 1992") == canonicalise("born after 1985") == "born after 100"
    assert canonicalise("on 2013/09/22 at 10:30") == "on 100 at 100"
    # the paper's templated forms normalise to the same token
    assert canonicalise("born in year (100)") == canonicalise("born in year {1000}") == "born in year 100"
    assert words("Is it '+' (positive)?") == ["Is", "it", "'+'", "positive"] or "+" in " ".join(words("Is it + ?"))
    assert tokens("Patient's SEX = 'F'") == ["patient", "s", "sex", "f"]


@pytest.mark.parametrize(
    "raw, text, sql",
    [
        ("'female' refers to Patient.SEX = 'F'", "female", "Patient.SEX = 'F'"),
        ("patients 'who were born in year (100)' refers to STRFTIME('%Y', Patient.Birthday) = '100'",
         "patients who were born in year (100)", "STRFTIME('%Y', Patient.Birthday) = '100'"),
        ("'State their age' refres to AGE(x)", "State their age", "AGE(x)"),
        ("'List the long name of teams' to Team.team_long_name", "List the long name of teams", "Team.team_long_name"),
        ("\"Serra Angel\" refers to cards.name = 'Serra Angel'", "Serra Angel", "cards.name = 'Serra Angel'"),
        # an apostrophe written as it reads would leave the string open: it is doubled
        ("'the event Women's Soccer' refers to event.event_name = 'Women's Soccer'",
         "the event Women's Soccer", "event.event_name = 'Women''s Soccer'"),
        ("'O''Brien' refers to t.name = 'O''Brien'", "O''Brien", "t.name = 'O''Brien'"),
        ("'card Ancestor's Chosen' refers to cards.name = \"Ancestor's Chosen\"", "card Ancestor's Chosen",
         "cards.name = \"Ancestor's Chosen\""),
        # a snippet quoted as a whole loses the outer quotes; a literal with doubled quotes keeps them
        ("'t-shirt size is extra large' refers to 'member.t_shirt_size = 'X-Large''", "t-shirt size is extra large",
         "member.t_shirt_size = 'X-Large'"),
        ("'the quote' refers to 'it''s'", "the quote", "'it''s'"),
    ],
)
def test_parse_structured_variants(raw, text, sql):
    p = parse_structured(raw)
    assert (p.text, p.sql) == (text, sql)


@pytest.mark.parametrize("raw", ["", "   ", "just some words", "refers to x.y"])
def test_parse_structured_rejects(raw):
    with pytest.raises(StatementError):
        parse_structured(raw)


def test_snippet_validation(tox_schema):
    assert snippet_problem("molecule.label = '-'", tox_schema) is None
    assert snippet_problem("CAST(COUNT(atom.atom_id) AS REAL) / COUNT(DISTINCT atom.molecule_id)", tox_schema) is None
    assert snippet_problem("ORDER BY molecule.label DESC LIMIT 1", tox_schema) is None
    assert "colour" in snippet_problem("molecule.colour = 'red'", tox_schema)
    assert "unknown table" in snippet_problem("T1.element = 'na'", tox_schema)
    assert snippet_problem("", tox_schema) == "no SQL snippet"
    assert snippet_problem("DROP TABLE atom", tox_schema)  # not a valid read-only fragment


def test_which_validation_problems_name_missing_schema_objects(tox_schema):
    def missing(sql):
        return names_missing_schema_object(snippet_problem(sql, tox_schema) or "")

    assert missing("color.color") and missing("atom.elemnt = 'na'")
    assert not missing("T1.label = '+'")  # an alias borrowed from a query
    assert not missing("molecules with molecule.label = '+'")  # prose around valid SQL
    assert not missing("molecule.label = '+'")


def test_held_back_reasons():
    assert holds_back("unknown table 'color' (did you mean colour?)")
    assert holds_back("the data holds no 'Marvel' in publisher.publisher_name")
    assert not holds_back("unknown table 'T1'") and not holds_back("") and not holds_back("no SQL snippet")
