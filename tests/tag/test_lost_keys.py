"""A join over a key the database does not have: the LM re-derives the link by choosing among the far
table's stored names (``LM_CHOOSE``), or, when it cannot, the far side becomes facts the LM gives (plan.py
``orphaned_joins``, ``unjoinable`` and the planner's use of them; udf.py ``LM_CHOOSE``)."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest

from tagql.db.connection import open_database
from tagql.llm.scripted import ScriptedLLM
from tagql.tag.cache import OpCache
from tagql.tag.operators import SemEngine
from tagql.errors import TagqlError
from tagql.tag import udf
from tagql.tag.plan import (Plan, PlanError, Planner, guessed_links, inline_self_subqueries, invented_fact_columns,
                            orphaned_joins, run_plan, unjoinable)
from tagql.tag.udf import execute_with_lm, register_lm_functions

BOOKS = {  # title -> author; the book table does not say who wrote it
    "One Hundred Years of Solitude": "Gabriel Garcia Marquez",
    "Love in the Time of Cholera": "Gabriel Garcia Marquez",
    "Hamlet": "William Shakespeare",
    "Don Quixote": "Miguel de Cervantes",
}


@pytest.fixture
def library(tmp_path):
    """Books that lost their author key; authors still link to their nation by a declared key."""
    path = tmp_path / "library.sqlite"
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE nation (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE author (id INTEGER PRIMARY KEY, name TEXT, birth_year INTEGER,
                             nation_id INTEGER REFERENCES nation(id));
        CREATE TABLE book (id INTEGER PRIMARY KEY, title TEXT, pages INTEGER);
        CREATE TABLE shelf (id INTEGER PRIMARY KEY, label TEXT, book_id INTEGER REFERENCES book(id));
        INSERT INTO nation VALUES (1, 'Colombia'), (2, 'England'), (3, 'Spain');
        INSERT INTO author VALUES (1, 'Gabriel Garcia Marquez', 1927, 1), (2, 'William Shakespeare', 1564, 2),
                                  (3, 'Miguel de Cervantes', 1547, 3);
    """)
    con.executemany("INSERT INTO book (title, pages) VALUES (?, ?)", [(t, 100 + i) for i, t in enumerate(BOOKS)])
    con.executemany("INSERT INTO shelf (label, book_id) VALUES (?, ?)", [("A", 1), ("B", 3)])
    con.commit()
    con.close()
    return open_database(str(path))


CHOSEN = "a.name = LM_CHOOSE('the author of {title}', b.title, 'author.name')"


@pytest.mark.parametrize("sql, expected", [
    # the lost key is chosen; the rest of the query (condition, further join) runs as written
    ("SELECT COUNT(*) FROM book AS b JOIN author AS a ON b.author_id = a.id JOIN nation AS n ON a.nation_id = n.id "
     "WHERE n.name = 'Colombia'",
     f"SELECT COUNT(*) FROM book AS b JOIN author AS a ON {CHOSEN} JOIN nation AS n ON a.nation_id = n.id "
     "WHERE n.name = 'Colombia'"),
    # written from the far side, and with another condition in the same ON
    ("SELECT a.name, COUNT(*) FROM author AS a JOIN book AS b ON a.id = b.author_id AND b.pages > 50 GROUP BY a.id",
     f"SELECT a.name, COUNT(*) FROM author AS a JOIN book AS b ON {CHOSEN} AND b.pages > 50 GROUP BY a.id"),
    # tables listed with commas, the key compared in WHERE
    ("SELECT COUNT(*) FROM book AS b, author AS a WHERE b.author_id = a.id AND a.name = 'Hamlet'",
     f"SELECT COUNT(*) FROM book AS b CROSS JOIN author AS a WHERE {CHOSEN} AND a.name = 'Hamlet'"),
    # a lookup of the key in a subquery: read as the join first
    ("SELECT title FROM book WHERE author_id IN (SELECT id FROM author WHERE name = 'William Shakespeare')",
     "SELECT title FROM book JOIN author AS author ON author.name = LM_CHOOSE('the author of {title}', book.title, "
     "'author.name') WHERE author.name = 'William Shakespeare'"),
])
def test_a_join_over_a_lost_key_is_chosen_among_the_far_tables_names(library, sql, expected):
    plan = Plan(sql)
    notes = orphaned_joins(plan, library)
    assert plan.sql == expected
    assert "the LM chooses among the 3 stored author.name" in notes[-1]


@pytest.mark.parametrize("sql, expected, notes", [
    # too many names to choose among: the lost link and what hangs only off it (nation) are dropped; the
    # condition is the link's fact
    ("SELECT COUNT(*) FROM book AS b JOIN author AS a ON b.author_id = a.id JOIN nation AS n ON a.nation_id = n.id "
     "WHERE n.name = 'Colombia'",
     "SELECT COUNT(*) FROM book AS b WHERE LM_FILTER('the nation of {title} is Colombia', b.title)",
     ["dropped author, nation: joined over b.author_id = a.id, a key the database does not have",
      "n.name = 'Colombia' -> LM_FILTER('the nation of {title} is Colombia', b.title)"]),
    # the FROM table is the dropped one: the book becomes the FROM; a kept join stays
    ("SELECT s.label FROM author AS a JOIN book AS b ON a.id = b.author_id JOIN shelf AS s ON s.book_id = b.id "
     "WHERE a.name IN ('Hamlet', 'X') AND b.pages > 50",
     "SELECT s.label FROM book AS b JOIN shelf AS s ON s.book_id = b.id WHERE LM_FILTER('the author of {title} "
     "is one of: Hamlet, X', b.title) AND b.pages > 50",
     None),
    # selected and grouped: a map kept under the column's name; the key groups by the same fact
    ("SELECT a.name, COUNT(*) FROM book JOIN author AS a ON book.author_id = a.id GROUP BY a.id",
     "SELECT LM_MAP('the author of {title}', book.title) AS name, COUNT(*) FROM book "
     "GROUP BY LM_MAP('the author of {title}', book.title)",
     None),
    # a column of the dropped table that is not what names it; an order wants a number
    ("SELECT b.title FROM book AS b JOIN author AS a ON b.author_id = a.id ORDER BY a.birth_year",
     "SELECT b.title FROM book AS b ORDER BY LM_NUMBER('the birth year of the author of {title}', b.title)", None),
    # the same key looked up in a subquery is read as the join
    ("SELECT title FROM book WHERE author_id = (SELECT id FROM author WHERE name = 'William Shakespeare')",
     "SELECT title FROM book WHERE LM_FILTER('the author of {title} is William Shakespeare', book.title)",
     ["book.author_id = (SELECT author.id FROM author WHERE author.name = 'William Shakespeare') -> "
      "JOIN author AS author ON book.author_id = author.id",
      "dropped author: joined over book.author_id = author.id, a key the database does not have",
      "author.name = 'William Shakespeare' -> LM_FILTER('the author of {title} is William Shakespeare', "
      "book.title)"]),
])
def test_without_names_to_choose_among_the_far_side_becomes_the_fact_it_meant(library, monkeypatch, sql, expected,
                                                                               notes):
    monkeypatch.setattr(udf, "CHOICES_MAX", 2)  # the library's 3 authors are too many now
    plan = Plan(sql)
    got = orphaned_joins(plan, library)
    assert plan.sql == expected
    if notes is not None:
        assert got == notes


@pytest.mark.parametrize("sql", [
    "SELECT a.name FROM author AS a JOIN nation AS n ON a.nation_id = n.id WHERE n.name = 'Spain'",  # real key
    "SELECT title FROM book WHERE pages > 100",  # no join
    "SELECT title FROM book WHERE id IN (SELECT book_id FROM shelf)",  # a lookup over a key that exists
    "SELECT x.title FROM (SELECT * FROM book) AS x JOIN author AS a ON x.author_id = a.id",  # a derived table
    # a wrong join between tables a declared key links (shelf.book_id): not a lost key, the hint names the key
    "SELECT s.label FROM shelf AS s JOIN book AS b ON s.volume_id = b.id WHERE b.title = 'Hamlet'",
])
def test_queries_without_a_lost_key_are_left_alone(library, sql):
    plan = Plan(sql)
    assert orphaned_joins(plan, library) == []
    assert plan.sql == sql


def test_a_guessed_value_stored_in_an_unlinked_table_joins_it_by_a_choice(library):
    """``title = 'Colombia'``: the model guessed the nation among the titles; 'Colombia' is stored in
    nation.name, which no key links to book, so the question is about that lost link."""
    plan = Plan("SELECT COUNT(*) FROM book WHERE title IN ('colombia', 'Spain')")
    notes = guessed_links(plan, library, "How many books are from Colombia or Spain?")
    assert plan.sql == ("SELECT COUNT(*) FROM book JOIN nation AS nation ON nation.name = LM_CHOOSE('the nation of "
                        "{title}', book.title, 'nation.name') WHERE nation.name IN ('Colombia', 'Spain')")
    assert notes and "no key links book to it" in notes[0]
    for sql in ["SELECT COUNT(*) FROM book WHERE title = 'Atlantis'",  # stored nowhere: left to the filters
                "SELECT COUNT(*) FROM shelf WHERE label = 'Hamlet'"]:  # stored in book, which shelf's key reaches
        plan = Plan(sql)
        assert guessed_links(plan, library, "How many?") == [] and plan.sql == sql


def test_a_made_up_column_named_like_an_unlinked_tables_column_joins_it_by_a_choice(library):
    """After validation rejected ``name`` on book: author.name stores the constant, and no key links book
    to author, so the comparison is the lost link."""
    plan = Plan("SELECT title FROM book WHERE name <> 'william shakespeare'")
    assert guessed_links(plan, library, "", unplaced=True)
    assert plan.sql == ("SELECT title FROM book JOIN author AS author ON author.name = LM_CHOOSE('the author of "
                        "{title}', book.title, 'author.name') WHERE NOT author.name = 'William Shakespeare'")
    plan = Plan("SELECT title FROM book WHERE genre = 'Drama'")  # no table has a genre column
    assert guessed_links(plan, library, "", unplaced=True) == [] and plan.sql.endswith("genre = 'Drama'")


def test_a_made_up_column_inside_a_subquery_joins_the_unlinked_table_there(library):
    """The same column rejected in a nested lookup (the 1.5B model writes chains of ``IN (SELECT ...)``):
    the subquery that reads it gets the chosen join, the outer query stays as written."""
    plan = Plan("SELECT label FROM shelf WHERE book_id IN (SELECT id FROM book WHERE name = 'william shakespeare')")
    notes = guessed_links(plan, library, "", unplaced=True)
    assert plan.sql == ("SELECT label FROM shelf WHERE book_id IN (SELECT book.id FROM book JOIN author AS author ON "
                        "author.name = LM_CHOOSE('the author of {title}', book.title, 'author.name') "
                        "WHERE author.name = 'William Shakespeare')")
    assert len(notes) == 1 and "no key links book to it" in notes[0]
    # a guess (a stored column compared with a value another, unlinked table stores) is read there too
    plan = Plan("SELECT label FROM shelf WHERE book_id IN (SELECT id FROM book WHERE title = 'william shakespeare')")
    notes = guessed_links(plan, library, "How many?")
    assert len(notes) == 1 and "LM_CHOOSE('the author of {title}', book.title, 'author.name')" in plan.sql
    assert plan.sql.startswith("SELECT label FROM shelf WHERE book_id IN (SELECT book.id FROM book JOIN author")


def test_a_guess_names_the_stored_value_holding_its_words_and_asks_about_a_name_not_an_address(offices):
    """'United States' is stored as 'United States of America' in a table no key reaches (the location's
    country key is lost); the choice asks about the location's city, since its street address is no name
    and no key leads up from it. Nested lookups get the join in the SELECT that compares."""
    db = offices
    plan = Plan("SELECT COUNT(*) FROM staff WHERE location_id IN (SELECT id FROM locations WHERE city = 'United States')")
    notes = guessed_links(plan, db, "How many staff work in the United States?")
    assert plan.sql == ("SELECT COUNT(*) FROM staff WHERE location_id IN (SELECT locations.id FROM locations JOIN "
                        "countries AS "
                        "countries ON countries.country_name = LM_CHOOSE('the country of {city}', locations.city, "
                        "'countries.country_name') WHERE countries.country_name = 'United States of America')")
    runs = plan.sql.replace("LM_CHOOSE('the country of {city}', locations.city, 'countries.country_name')",
                            "'United States of America'")  # every office placed there: the SQL runs (no ambiguous id)
    assert len(notes) == 1 and db.execute(runs).rows == [(4,)]
    # a value two stored ones hold ('United') names neither: no join is guessed
    plan = Plan("SELECT COUNT(*) FROM locations WHERE city = 'United'")
    assert guessed_links(plan, db, "") == [] and plan.sql == "SELECT COUNT(*) FROM locations WHERE city = 'United'"


@pytest.mark.parametrize("sql, expected", [
    ("SELECT COUNT(*) FROM book WHERE title IN (SELECT title FROM book WHERE genre = 'Drama')",
     "SELECT COUNT(*) FROM book WHERE genre = 'Drama'"),
    ("SELECT COUNT(*) FROM book AS b WHERE b.id IN (SELECT x.id FROM book AS x WHERE x.pages > 1 OR x.genre = 'D') "
     "AND b.pages < 900",
     "SELECT COUNT(*) FROM book AS b WHERE (b.pages > 1 OR b.genre = 'D') AND b.pages < 900"),
    # left alone: another table, another column, a subquery that groups, a query with joins
    ("SELECT COUNT(*) FROM book WHERE id IN (SELECT book_id FROM shelf WHERE label = 'A')", None),
    ("SELECT COUNT(*) FROM book WHERE id IN (SELECT pages FROM book WHERE pages > 1)", None),
    ("SELECT COUNT(*) FROM book WHERE id IN (SELECT id FROM book GROUP BY id HAVING COUNT(*) > 1)", None),
])
def test_a_subquery_over_the_same_table_and_column_is_its_condition(library, sql, expected):
    plan = Plan(sql)
    notes = inline_self_subqueries(plan, library)
    assert plan.sql == (expected or sql) and bool(notes) == (expected is not None)


def test_unjoinable_means_no_declared_key_reaches_the_column(library):
    assert unjoinable("name", "SELECT COUNT(*) FROM book", library)  # author/nation: no key from book
    assert not unjoinable("title", "SELECT label FROM shelf", library)  # shelf -> book by its key
    assert not unjoinable("name", "SELECT name FROM author", library)  # the query has it
    assert not unjoinable("colour", "SELECT COUNT(*) FROM book", library)  # no table has it


def _planner_llm(plan: dict, authors: dict[str, str], prompts: list[str]) -> ScriptedLLM:
    def fn(messages):
        last = messages[-1].content
        prompts.append(last)
        if "Does answering" in last:
            return "no"  # the question looks relational: the lost key still makes it the LM's
        if "The options are:" in messages[0].content:  # LM_CHOOSE: one of the stored names
            listed = re.findall(r"(\d+)\. <record>the \w+ of (.*?)</record>", last)
            if listed:  # several records in one call: one numbered line each
                return "\n".join(f"{n}: {authors.get(title, 'Nobody')}" for n, title in listed)
            title = re.search(r"<record>the \w+ of (.*?)</record>", last).group(1)
            return authors.get(title, "Nobody")
        return json.dumps(plan)

    return ScriptedLLM(fn)


def test_the_planner_answers_through_the_lost_link_instead_of_asking_again(library):
    """The model joins over the key it expects; validation says the column does not exist; the plan is
    rewritten once, with no second plan from the model, and the LM chooses each book's author."""
    wrote = {"sql": "SELECT COUNT(*) FROM book AS T1 JOIN author AS T2 ON T1.author_id = T2.id "
                    "WHERE T2.name = 'Gabriel Garcia Marquez'", "operators": []}
    prompts: list[str] = []
    llm = _planner_llm(wrote, BOOKS, prompts)
    planner = Planner(library, llm, SemEngine(llm))
    plan, attempts = planner.make("How many books did Gabriel Garcia Marquez write?")
    assert sum(isinstance(c, dict) for c in llm.constraints) == 1  # one plan asked for (JSON-constrained)
    assert len(llm.constraints) == 2  # and the needs-LM question: the rewrite itself costs no LM call
    assert {"lost_key_to_lm": [
        "T1.author_id = T2.id -> T2.name = LM_CHOOSE('the author of {title}', T1.title, 'author.name') (a key the "
        "database does not have: the LM chooses among the 3 stored author.name)"]} in attempts
    engine = SemEngine(llm)
    assert run_plan(plan, library, engine).result.rows == [(2,)]
    chose = [c for c in llm.constraints if isinstance(c, dict) and "answer" in c.get("properties", {})]
    assert len(chose) == 4  # one choice per book, constrained to the three stored names
    assert chose[0]["properties"]["answer"]["enum"] == ["Gabriel Garcia Marquez", "Miguel de Cervantes",
                                                        "William Shakespeare"]


def test_a_choice_that_is_none_of_the_names_joins_nothing(library):
    """An endpoint's JSON answer is read; a reply outside the stored names is NULL (no join), never a guess."""
    replies = {"One Hundred Years of Solitude": '{"answer": "gabriel garcia marquez"}',
               "Love in the Time of Cholera": "Borges", "Hamlet": "William Shakespeare", "Don Quixote": "{broken"}
    llm = _planner_llm({}, replies, [])
    sql = ("SELECT b.title, a.name FROM book AS b JOIN author AS a ON a.name = LM_CHOOSE('the author of {title}', "
           "b.title, 'author.name') ORDER BY b.title")
    engine = SemEngine(llm)
    register_lm_functions(library, engine)
    rows = execute_with_lm(library, sql, engine).rows
    assert rows == [("Hamlet", "William Shakespeare"), ("One Hundred Years of Solitude", "Gabriel Garcia Marquez")]


@pytest.mark.parametrize("source, error", [("author.nickname", "is not a column"), ("author", "'table.column'")])
def test_lm_choose_names_a_real_column_of_options(library, source, error):
    llm = _planner_llm({}, {}, [])
    engine = SemEngine(llm)
    register_lm_functions(library, engine)
    with pytest.raises(TagqlError, match=error):
        execute_with_lm(library, f"SELECT LM_CHOOSE('the author of {{title}}', title, '{source}') FROM book", engine)
    assert not llm.prompts  # no LM call before the error


def test_without_the_setting_the_error_goes_back_to_the_model(library):
    wrote = {"sql": "SELECT COUNT(*) FROM book AS T1 JOIN author AS T2 ON T1.author_id = T2.id", "operators": []}
    llm = _planner_llm(wrote, {}, [])
    with pytest.raises(PlanError, match="author_id"):
        Planner(library, llm, SemEngine(llm), unplaced_columns_to_lm=False).make("How many books have an author?")


COUNT_BY_AUTHOR = ("SELECT a.name, COUNT(*) FROM book AS b JOIN author AS a ON a.name = LM_CHOOSE('the author of "
                   "{title}', b.title, 'author.name') WHERE a.name <> 'Nobody' AND b.pages > 0 GROUP BY a.name "
                   "ORDER BY a.name")
BY_AUTHOR = [("Gabriel Garcia Marquez", 2), ("Miguel de Cervantes", 1), ("William Shakespeare", 1)]


def test_a_choice_over_more_rows_than_the_call_cap_stops_before_the_first_call(library):
    """Four books, a cap of three calls: row by row the join spent the whole cap, then stopped; the rows are
    counted first, so it stops with no call spent and says what to do."""
    llm = _planner_llm({}, BOOKS, [])
    engine = SemEngine(llm, max_calls=3)
    register_lm_functions(library, engine)
    with pytest.raises(TagqlError, match="an LM call for each of 4 rows; 3 of the 3 calls") as err:
        execute_with_lm(library, COUNT_BY_AUTHOR, engine)
    assert "TAGQL_TAG__MAX_LM_CALLS" in err.value.one_line()
    assert engine.stats.lm_calls == 0 and not llm.prompts


def test_a_lost_link_within_its_own_budget_runs_beside_the_questions_cap(library):
    """The link is derived once per database, so up to ``max_link_calls`` choices come on top of the cap:
    the four books are chosen for with a cap of three, and the question still has its three calls."""
    llm = _planner_llm({}, BOOKS, [])
    engine = SemEngine(llm, max_calls=3, max_link_calls=4)
    register_lm_functions(library, engine)
    assert execute_with_lm(library, COUNT_BY_AUTHOR, engine).rows == BY_AUTHOR
    assert engine.stats.lm_calls == 4 and engine.max_calls - engine.stats.lm_calls == 3


def test_a_lost_link_over_its_own_budget_stops_before_the_first_call(library):
    llm = _planner_llm({}, BOOKS, [])
    engine = SemEngine(llm, max_calls=3, max_link_calls=2)
    register_lm_functions(library, engine)
    with pytest.raises(TagqlError, match="4 rows; 3 of the 3 calls .* a lost link may take 2") as err:
        execute_with_lm(library, COUNT_BY_AUTHOR, engine)
    assert "TAGQL_TAG__MAX_LINK_CALLS" in err.value.one_line()
    assert engine.stats.lm_calls == 0 and not llm.prompts


def test_choices_already_cached_do_not_count_against_the_cap(library):
    llm = _planner_llm({}, BOOKS, [])
    cache = OpCache(None)
    register_lm_functions(library, SemEngine(llm, cache=cache))
    execute_with_lm(library, COUNT_BY_AUTHOR, SemEngine(llm, cache=cache))
    engine = SemEngine(llm, cache=cache, max_calls=3)
    register_lm_functions(library, engine)
    assert execute_with_lm(library, COUNT_BY_AUTHOR, engine).rows == BY_AUTHOR
    assert engine.stats.lm_calls == 0


def test_records_packed_into_one_call_each_get_a_line(library):
    """``per_call`` (measured by bench/tag/choose_batch.py, not the default): numbered records, one
    grammar-forced option per line."""
    prompts: list[str] = []
    llm = _planner_llm({}, BOOKS, prompts)
    engine = SemEngine(llm)
    items = [f"the author of {t}" for t in BOOKS]
    chosen = engine.choose_many("the author of {title}", items, sorted(set(BOOKS.values())), per_call=4)
    assert chosen == list(BOOKS.values())
    assert engine.stats.lm_calls == 1 and "4. <record>the author of Don Quixote</record>" in prompts[0]
    assert llm.constraints[0].startswith("root ::= ")


def test_choices_that_fit_under_the_cap_stay_one_record_per_call(library):
    llm = _planner_llm({}, BOOKS, [])
    engine = SemEngine(llm)
    register_lm_functions(library, engine)
    assert execute_with_lm(library, COUNT_BY_AUTHOR, engine).rows == BY_AUTHOR
    assert engine.stats.lm_calls == 4
    assert [op["op"] for op in engine.stats.per_operator][0] == "lm_choose (chosen before the statement)"


def test_the_inputs_chosen_up_front_are_those_the_rest_of_the_query_leaves(library):
    """Only the books on a shelf are chosen for; a condition on the chosen table itself does not narrow them."""
    prompts: list[str] = []
    llm = _planner_llm({}, BOOKS, prompts)
    engine = SemEngine(llm)
    register_lm_functions(library, engine)
    sql = ("SELECT b.title FROM shelf AS s JOIN book AS b ON s.book_id = b.id JOIN author AS a ON a.name = "
           "LM_CHOOSE('the author of {title}', b.title, 'author.name') WHERE a.name = 'William Shakespeare'")
    assert udf.prefetch_choices(library, sql, engine) == 0  # the options are not loaded yet
    assert execute_with_lm(library, sql, engine).rows == [("Hamlet",)]
    asked = sorted(re.search(r"<record>the author of (.*?)</record>", p).group(1) for p in prompts)
    assert asked == ["Hamlet", "One Hundred Years of Solitude"]


def test_a_batch_reply_missing_a_record_is_an_error_not_a_guess():
    engine = SemEngine(ScriptedLLM(lambda messages: "1: William Shakespeare"))
    with pytest.raises(TagqlError, match="no option for record 2"):
        engine.choose_many("the author of {title}", ["the author of Hamlet", "the author of Don Quixote"],
                           sorted(set(BOOKS.values())), per_call=2)


TOWN_REGION = {"Leeds": "North", "York": "North", "Bath": "South"}


@pytest.fixture
def depots(tmp_path):
    """Depots named by street addresses, each in a town; towns lost their region key."""
    return _database(tmp_path / "depots.sqlite", """
        CREATE TABLE region (id INTEGER PRIMARY KEY, region TEXT);
        CREATE TABLE town (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE depot (id INTEGER PRIMARY KEY, street TEXT, town_id INTEGER REFERENCES town(id));
        INSERT INTO region VALUES (1, 'North'), (2, 'South');
        INSERT INTO town VALUES (1, 'Leeds'), (2, 'York'), (3, 'Bath');
        INSERT INTO depot VALUES (1, '12 Mill Road', 1), (2, '4 Station Street', 1), (3, '88 High Street', 2),
                                 (4, '7 Abbey Lane', 3), (5, '15 Quay Road', 3);
    """)


def _database(path, script: str):
    """A SQLite file made by ``script``, opened."""
    con = sqlite3.connect(path)
    con.executescript(script)
    con.commit()
    con.close()
    return open_database(str(path))


@pytest.mark.parametrize("sql, repair, expected", [
    # a column no table of the query has, stored by the unlinked region table
    ("SELECT COUNT(*) FROM depot WHERE region = 'north'", lambda p, db: guessed_links(p, db, "", unplaced=True),
     "SELECT COUNT(*) FROM depot JOIN town AS town ON town.id = depot.town_id JOIN region AS region ON region.region = "
     "LM_CHOOSE('the region of {name}', town.name, 'region.region') WHERE region.region = 'North'"),
    # a join over the key the depot does not have: the town is joined before it
    ("SELECT COUNT(*) FROM depot AS d JOIN region AS r ON d.region_id = r.id WHERE r.region = 'North'", orphaned_joins,
     "SELECT COUNT(*) FROM depot AS d JOIN town AS town ON town.id = d.town_id JOIN region AS r ON r.region = "
     "LM_CHOOSE('the region of {name}', town.name, 'region.region') WHERE r.region = 'North'"),
    # the query reads the town already: its alias is the subject's
    ("SELECT COUNT(*) FROM depot AS d JOIN town AS t ON t.id = d.town_id WHERE region = 'North'",
     lambda p, db: guessed_links(p, db, "", unplaced=True), None),
])
def test_a_link_asks_about_the_town_of_a_row_named_by_its_street_address(depots, sql, repair, expected):
    """"The region of {12 Mill Road}" is not askable; the depot's one key up reaches a table named by
    names, so the link asks "the region of {Leeds}" -- one choice per town, shared by every depot in it."""
    plan = Plan(sql)
    assert repair(plan, depots)
    if expected is None:  # no second town joined
        assert plan.sql.count("JOIN town") == 1 and "LM_CHOOSE('the region of {name}', t.name, 'region.region')" in plan.sql
        assert plan.sql.endswith("WHERE region.region = 'North'")
    else:
        assert plan.sql == expected
    asked: list[str] = []

    def fn(messages):
        town = re.search(r"<record>the region of (.*?)</record>", messages[-1].content).group(1)
        asked.append(town)
        return TOWN_REGION[town]

    engine = SemEngine(ScriptedLLM(fn))
    register_lm_functions(depots, engine)
    assert execute_with_lm(depots, plan.sql, engine).rows == [(3,)]
    assert sorted(asked) == ["Bath", "Leeds", "York"]  # one call per town, not per depot


def test_a_row_named_by_a_name_is_asked_about_itself(library):
    """An unqualified column no table of the query has is the top table's (shelf -> book: the book's), and
    book titles are names (no digits): the link asks about the book, with no walk up its keys."""
    plan = Plan("SELECT COUNT(*) FROM shelf AS s JOIN book AS b ON b.id = s.book_id WHERE name = 'william shakespeare'")
    assert guessed_links(plan, library, "", unplaced=True)
    assert "LM_CHOOSE('the author of {title}', b.title, 'author.name')" in plan.sql


def test_a_fact_no_table_stores_is_asked_about_the_town_of_a_depot(depots):
    """The same walk for a made-up column (a fact the LM gives): the climate of a town, not of a street."""
    plan = Plan("SELECT street FROM depot WHERE climate = 'wet'")
    assert invented_fact_columns(plan, depots)
    assert plan.sql == ("SELECT street FROM depot JOIN town AS town ON town.id = depot.town_id "
                        "WHERE LM_FILTER('the climate of {name} is wet', town.name)")


def test_a_fact_is_asked_of_the_row_name_not_of_a_selected_category(tmp_path):
    """``region`` is selected but names groups of countries (2 values over 4 rows): "the year of
    independence of {region}" cannot be answered, "... of {name}" can."""
    nations = _database(tmp_path / "nations.sqlite",
                        "CREATE TABLE country (code TEXT PRIMARY KEY, name TEXT, region TEXT);"
                        "INSERT INTO country VALUES ('A', 'Chile', 'South America'), ('B', 'Peru', 'South America'),"
                        "('C', 'India', 'Asia'), ('D', 'Laos', 'Asia');")
    plan = Plan("SELECT region, COUNT(*) FROM country WHERE YearOfIndependence > 1900 GROUP BY region")
    assert invented_fact_columns(plan, nations)
    assert plan.sql == ("SELECT region, COUNT(*) FROM country WHERE LM_NUMBER('the year of independence of "
                        "{name}', country.name) > 1900 GROUP BY region")


@pytest.mark.parametrize("use, call", [
    ("YearOfIndependence BETWEEN 1801 AND 1900", "LM_NUMBER"),
    ("(YearOfIndependence) <= 1900", "LM_NUMBER"),
    ("YearOfIndependence + 1 > 1900", "LM_NUMBER"),
    ("YearOfIndependence > '1900'", "LM_MAP"),  # text against text: compared as written
    ("YearOfIndependence IS NOT NULL", "LM_MAP"),
])
def test_a_made_up_column_read_as_a_number_is_asked_as_one(library, use, call):
    """As LM_MAP text, ``> 1900`` let every row through: SQLite orders any text above any number."""
    plan = Plan(f"SELECT title FROM book WHERE {use}")
    assert invented_fact_columns(plan, library)
    assert f"{call}('the year of independence of {{title}}', book.title)" in plan.sql, plan.sql


def test_a_chain_of_key_lookups_ending_in_a_lost_key_becomes_joins(library):
    """Seen on the pool's test split (sakila without ``city.country_id``): the 1.5B model nests lookups over
    primary keys down to the lost one; each is the join it means, and the lost one is chosen by the LM."""
    plan = Plan("SELECT s.label FROM shelf AS s WHERE s.book_id IN (SELECT id FROM book WHERE author_id = "
                "(SELECT id FROM author WHERE name = 'William Shakespeare'))")
    notes = orphaned_joins(plan, library)
    assert plan.sql == ("SELECT s.label FROM shelf AS s JOIN book AS book ON s.book_id = book.id JOIN author AS author "
                        "ON author.name = LM_CHOOSE('the author of {title}', book.title, 'author.name') "
                        "WHERE author.name = 'William Shakespeare'")
    assert len(notes) == 3 and "a key the database does not have" in notes[-1]
    # without a lost key further in, a lookup over a key that exists is left as written
    for sql in ["SELECT s.label FROM shelf AS s WHERE s.book_id IN (SELECT id FROM book WHERE pages > 5)",
                "SELECT s.label FROM shelf AS s WHERE s.book_id IN (SELECT id FROM book WHERE id IN "
                "(SELECT book_id FROM shelf WHERE label = 'A'))"]:
        plan = Plan(sql)
        assert orphaned_joins(plan, library) == [] and plan.sql == sql


def test_the_lost_key_read_out_of_its_scope_is_rewritten_not_sent_back(tmp_path):
    """The pool's test question 531 as the 1.5B model planned it: ``country_id`` in a lookup nested under the
    city's is "country's column used where country is not in FROM" to validation, not a missing one; the
    planner still reads the lost link (no second plan), and ``country.name`` is the naming column."""
    shop = _database(tmp_path / "shop.sqlite", """
        CREATE TABLE country (country_id INTEGER PRIMARY KEY, country TEXT);
        CREATE TABLE city (city_id INTEGER PRIMARY KEY, city TEXT);
        CREATE TABLE address (address_id INTEGER PRIMARY KEY, address TEXT, city_id INTEGER REFERENCES city);
        CREATE TABLE customer (customer_id INTEGER PRIMARY KEY, first_name TEXT, address_id INTEGER REFERENCES address);
        INSERT INTO country VALUES (1, 'Germany'), (2, 'Japan');
        INSERT INTO city VALUES (1, 'Hamburg'), (2, 'Osaka'), (3, 'Bonn');
        INSERT INTO address VALUES (1, '1 Elbe Way', 1), (2, '2 Port Road', 2), (3, '3 Rhine Road', 3);
        INSERT INTO customer VALUES (1, 'ALMA', 1), (2, 'KEN', 2), (3, 'RUTH', 3);
    """)
    wrote = {"sql": "SELECT c.first_name FROM customer c WHERE c.address_id IN (SELECT address_id FROM address "
                    "WHERE city_id IN (SELECT city_id FROM city WHERE country_id = (SELECT country_id FROM country "
                    "WHERE name = 'Germany'))) ORDER BY c.first_name", "operators": []}
    llm = _planner_llm(wrote, {"Hamburg": "Germany", "Osaka": "Japan", "Bonn": "Germany"}, [])
    planner = Planner(shop, llm, SemEngine(llm))
    plan, attempts = planner.make("Which customers live in a city in Germany?")
    assert sum(isinstance(c, dict) for c in llm.constraints) == 1  # no second plan asked for
    assert any("lost_key_to_lm" in a for a in attempts)
    assert "LM_CHOOSE('the country of {city}', city.city, 'country.country')" in plan.sql
    assert "country.country = 'Germany'" in plan.sql  # name: the country's naming column
    assert run_plan(plan, shop, SemEngine(llm)).result.rows == [("ALMA",), ("RUTH",)]


def test_repairs_made_before_a_validation_error_stay_in_the_plan(library):
    """``b.name`` is the book's title (a repair); ``author_id`` is still missing: the error speaks of the
    repaired SQL, and the plan the rewrites then read is that SQL, not the model's."""
    from tagql.tag.plan import validate_plan

    plan = Plan("SELECT b.name FROM book AS b WHERE b.author_id = 3")
    with pytest.raises(PlanError, match="author_id") as caught:
        validate_plan(plan, library, SemEngine(ScriptedLLM(lambda _m: "x")), hybrid=True)
    assert caught.value.missing_column == "author_id"
    assert plan.sql == "SELECT b.title FROM book AS b WHERE b.author_id = 3"


@pytest.mark.parametrize("sql", [
    "SELECT title FROM book ORDER BY COUNT(model_id) DESC",
    "SELECT title FROM book WHERE RegionID IN (SELECT id FROM nation WHERE name = 'Spain')",
    "SELECT title, AuthorId FROM book",
])
def test_a_made_up_column_named_like_a_key_is_not_asked_of_the_lm(library, sql):
    """An id is nothing the LM knows (a train plan asked "the model id of {maker}" and counted the replies):
    such a column stays a validation error, whose hint names the join."""
    from tagql.tag.plan import invented_order_columns

    plan = Plan(sql)
    assert invented_order_columns(plan, library) == []
    assert invented_fact_columns(plan, library, unplaced=True) == []
    assert plan.sql == sql
    # a fact named like a word that ends in "id" is still a fact
    plan = Plan("SELECT title FROM book WHERE paid > 3")
    assert invented_fact_columns(plan, library, unplaced=True)
