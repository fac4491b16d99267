"""Value glosses from domain statements: which statements gloss a value, and which columns hold codes."""

from __future__ import annotations

import sqlite3

import pytest

from tagql.db.connection import open_database
from tagql.knowledge import ScoredStatement, StaticStatements
from tagql.knowledge.glossary import code_columns, gloss, glossary_of, value_glossary


def test_equality_statements_gloss_their_value_with_the_shortest_text():
    g = value_glossary([
        ("Chlorine", "atom.element = 'cl'"),
        ("atoms with chlorine element", "atom.element = 'cl'"),
        ("non-carcinogenic", "molecule.label = '-'"),
        ("sodium atoms", "'na' = element"),  # constant first, column unqualified
    ])
    assert g == {"element": {"cl": "Chlorine", "na": "sodium atoms"}, "label": {"-": "non-carcinogenic"}}


@pytest.mark.parametrize("text, sql", [
    ("molecule TR060", "molecule.molecule_id = 'TR060'"),  # the text only repeats the value
    ("heroes who are aliens", "race.race = 'Alien'"),  # ... in the plural
    ("carcinogenic molecules", "molecule.label IN ('+')"),  # not one equality
    ("percentage of carbon atoms in double-bond molecules", "atom.element = 'c'"),  # a query, not a name
    ("first molecules", "molecule.molecule_id BETWEEN 'TR000' and 'TR099'"),
    ("bond count", "COUNT(bond.bond_id) = 3"),
    ("garbled", "element = = 'x'"),
])
def test_statements_that_do_not_name_a_value_give_no_gloss(text, sql):
    assert value_glossary([(text, sql)]) == {}


def test_a_single_letter_code_is_glossed_by_a_word_containing_it():
    # 'c' occurs inside "carbon": only whole words count as repeating the value
    assert value_glossary([("carbon", "atom.element = 'c'")]) == {"element": {"c": "carbon"}}


def test_gloss_lookup_by_field_name_and_glossary_of_fixed_statements():
    kn = StaticStatements([ScoredStatement("Chlorine", "atom.element = 'cl'")])
    g = glossary_of(kn)
    assert gloss(g, "atom.element", "cl") == "Chlorine" and gloss(g, "Element", "cl") == "Chlorine"
    assert gloss(g, "element", "br") is None and gloss(g, "element", 7) is None
    assert glossary_of(None) == {}


def test_code_columns_are_mostly_glossed_columns_with_few_values(tmp_path):
    path = tmp_path / "chem.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE atom (atom_id TEXT, element TEXT, note TEXT)")
    rows = [(f"a{i}", e, f"note {i}") for i, e in enumerate(["cl", "na", "c", "k", "cl", "na"])]
    con.executemany("INSERT INTO atom VALUES (?, ?, ?)", rows)
    con.commit()
    con.close()
    g = {"element": {"cl": "Chlorine", "na": "Sodium", "c": "Carbon"}, "note": {"note 1": "the first"},
         "missing": {"x": "y"}}
    db = open_database(path)
    assert code_columns(g, db) == {"element"}  # 3 of 4 symbols glossed; 1 of 6 notes; no such column
    assert code_columns(g, db, min_share=0.8) == set()
