"""Query preparation for plans: LM functions that SQL can decide by itself."""

import pytest

from tagql.db import open_database
from tagql.text2sql.query import prepare_sql


@pytest.fixture(scope="module")
def club_db(shared_data):
    return open_database(shared_data / "bird" / "dev_databases" / "student_club" / "student_club.sqlite")


@pytest.mark.parametrize("call, expected", [
    ("LM_FILTER('{type} is ''Guest Speaker''', type)", "type = 'Guest Speaker'"),
    ("LM_FILTER('{event.type} = \"guest speaker\".', event.type)", "event.type = 'Guest Speaker'"),
])
def test_an_lm_filter_that_only_compares_with_a_constant_becomes_sql(club_db, call, expected):
    notes: list[str] = []
    sql = prepare_sql(f"SELECT event_name FROM event WHERE {call}", club_db, repairs=notes)
    assert expected in sql and "LM_FILTER" not in sql
    assert len(club_db.execute(sql).rows) == 7  # the seven 'Guest Speaker' events
    assert notes[0].endswith("(an equality: SQL decides it exactly)")


@pytest.mark.parametrize("call", ["LM_FILTER('{type} is a kind of game', type)",
                                  "LM_FILTER('{event_name} is ''Guest Speaker''', type)"])
def test_an_lm_filter_that_judges_stays(club_db, call):
    notes: list[str] = []
    sql = prepare_sql(f"SELECT event_name FROM event WHERE {call}", club_db, repairs=notes)
    assert "LM_FILTER" in sql and not any("equality" in n for n in notes)
