"""Questions across databases (``--method cross``) with a scripted LLM: the plan, the sub-queries, the
DuckDB join (equal values, and values the LM matches), errors, the Session and the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import tagql
from tagql.config import load_settings
from tagql.cross import (
    CrossPlanError,
    JoinFailed,
    SubQueryFailed,
    SubResult,
    UnknownDatabase,
    answer_across,
    join_results,
    match_values,
    parse_plan,
)
from tagql.db import open_database
from tagql.llm.scripted import ScriptedLLM
from tagql.routing.collection import Collection
from tagql.tag.cache import OpCache
from tagql.tag.operators import SemEngine

NATIONALITY = {"Spanish": "Spain", "Argentine": "Argentina", "British": "United Kingdom", "Mexican": "Mexico",
               "German": "Germany", "Brazilian": "Brazil"}
PLAN = json.dumps({"key": "country", "parts": [
    {"database": "racing", "question": "List the id and nationality of every driver"},
    {"database": "geo", "question": "List the names of countries whose language is Spanish"}]})
RACING_SQL = "SELECT driverId, nationality AS join_key FROM drivers"
GEO_SQL = "SELECT Name AS join_key FROM country WHERE Language = 'Spanish'"
FINAL_SQL = "SELECT COUNT(DISTINCT driverId) FROM joined"
MERGED_SQL = ("SELECT COUNT(*) FROM drivers AS d JOIN country AS c ON d.nationality = c.Name "
              "WHERE c.Language = 'Spanish'")


def matcher(messages) -> str:
    """The LM's side of a value match: each numbered item -> the allowed value it means (the free naming
    pass first, :func:`namer`)."""
    if is_naming(messages):
        return namer(messages)
    items = re.findall(r"(\d+)\. <item>(.*?)</item>", messages[-1].content)
    allowed = re.search(r"allowed answers are these values:\n(.*)\n", messages[0].content).group(1).split("; ")
    back = {v: k for k, v in NATIONALITY.items()}
    out = {}
    for n, v in items:
        want = NATIONALITY.get(v) or back.get(v)
        out[n] = want if want in allowed else "none"
    return json.dumps(out)


def is_naming(messages) -> bool:
    return messages[0].content.startswith("You name the")


def words(messages) -> list[str]:
    """The words a free naming prompt lists."""
    return messages[-1].content.split("Words:\n", 1)[1].split("\n\n", 1)[0].splitlines()


def named(mapping: dict[str, str], messages) -> str:
    """The free naming pass's reply: 'word -> name' lines, 'none' for a word ``mapping`` lacks."""
    return "\n".join(f"{w} -> {mapping.get(w, 'none')}" for w in words(messages))


def namer(messages) -> str:
    """The LM's side of the free naming pass: each word -> the country it means (a name stays itself)."""
    return named({w: NATIONALITY.get(w, w) for w in words(messages)}, messages)


def scripted(plan: str = PLAN, racing: str = RACING_SQL, geo: str = GEO_SQL, final: str = FINAL_SQL,
             pick: str = '"racing + geo"', merged: str = MERGED_SQL) -> ScriptedLLM:
    def reply(messages) -> str:
        head = messages[0].content
        if head.startswith("You split a question"):
            return plan
        if head.startswith("You pick the databases"):
            return pick
        if "CREATE TABLE drivers" in head and "CREATE TABLE country" in head:
            return merged
        if head.startswith("You match names") or is_naming(messages):
            return matcher(messages)
        if "CREATE TABLE joined" in head:
            return final
        if "CREATE TABLE drivers" in head:
            return racing
        if "CREATE TABLE country" in head:
            return geo
        return "SELECT 1"
    return ScriptedLLM(reply)


def engine_for(llm, cache: OpCache | None = None) -> SemEngine:
    return SemEngine(llm, cache=cache if cache is not None else OpCache(None), max_calls=50)


# -- the plan ------------------------------------------------------------------------------------------

def test_plan_is_parsed_checked_against_the_candidates_and_merged():
    plan = parse_plan(PLAN, ["racing", "geo", "music"], "How many drivers are from Spanish-speaking countries?")
    assert plan.databases == ["racing", "geo"] and plan.key == "country"
    assert plan.parts[1].question == "List the names of countries whose language is Spanish"
    one = parse_plan('{"key": "", "parts": [{"database": "geo", "question": "x"}, {"database": "geo", "question": "y"}]}',
                     ["geo"], "How many countries?")
    assert one.databases == ["geo"] and one.parts[0].question == "How many countries?"  # one database: as asked
    with pytest.raises(CrossPlanError, match="not among the routed ones"):
        parse_plan('{"key": "x", "parts": [{"database": "nowhere", "question": "q"}]}', ["geo"], "q")
    with pytest.raises(CrossPlanError, match="not JSON"):
        parse_plan("I think racing and geo", ["geo"], "q")
    with pytest.raises(CrossPlanError, match="names no database"):
        parse_plan('{"key": "x", "parts": []}', ["geo"], "q")


# -- the join ------------------------------------------------------------------------------------------

def test_equal_values_join_in_duckdb_without_the_lm():
    left = SubResult("music", ["id", "citizenship"], [(1, "Spain"), (2, "Germany"), (3, "Japan"), (4, "spain ")])
    right = SubResult("geo", ["Name", "Continent"], [("Spain", "Europe"), ("Germany", "Europe")])
    out = join_results(left, right, key="country", engine=None)
    assert (out.left_key, out.right_key, out.exact, out.lm_matched) == ("citizenship", "Name", 2, {})
    assert sorted(r[0] for r in out.rows) == [1, 2, 4]  # case and blanks aside
    assert out.columns == ["id", "citizenship", "Name", "Continent"]


def test_values_written_differently_are_matched_by_the_lm_batched_and_cached(tmp_path: Path):
    left = SubResult("racing", ["driverId", "nationality"], [(i, n) for i, _, n in _drivers()])
    right = SubResult("geo", ["Name"], [("Spain",), ("Argentina",), ("Mexico",)])
    llm = ScriptedLLM(matcher)
    cache = OpCache(tmp_path / "ops.sqlite")
    out = join_results(left, right, key="country", engine=engine_for(llm, cache))
    # the side with fewer unmatched values (geo: 3) is matched into the other's values: named freely first
    # (a country name is no adjective: no hit; one batch, then each alone), then one constrained call
    assert out.lm_side == "geo" and llm.usage.calls == 1 + 3 + 1
    assert out.lm_matched == {"Spanish": "Spain", "Argentine": "Argentina", "Mexican": "Mexico"}
    assert sorted(r[0] for r in out.rows) == [1, 2, 3, 5]
    # the reply is constrained to the other side's values or none
    schema = llm.constraints[-1]
    assert schema["properties"]["1"]["enum"][-1] == "none" and "Spanish" in schema["properties"]["1"]["enum"]
    again = ScriptedLLM(matcher)
    assert join_results(left, right, key="country", engine=engine_for(again, cache)).lm_matched == out.lm_matched
    assert again.usage.calls == 0  # cached


def test_match_values_batches_and_ignores_answers_outside_the_options():
    values = [f"v{i}" for i in range(10)]
    def reply(m) -> str:  # the free naming pass names nothing that is an option; the constrained one picks
        if is_naming(m):
            return named(dict.fromkeys(words(m), "Zed"), m)
        return json.dumps({n: ("A" if n == "1" else "Zed") for n in re.findall(r"(\d+)\. <item>", m[-1].content)})
    llm = ScriptedLLM(reply)
    found = match_values(values, ["A", "B"], "thing", engine_for(llm), batch=8)
    # two batches, each of the 10 alone, "Zed" named in turn (once), two constrained batches; "Zed" is no
    # option: no match
    assert llm.usage.calls == 2 + 10 + 1 + 2 and found == {"v0": "A", "v8": "A"}
    # a value the free pass names as an option is not asked again
    llm = ScriptedLLM(lambda m: named(dict.fromkeys(words(m), "the B"), m))
    assert match_values(values, ["A", "B"], "thing", engine_for(llm), batch=8) == dict.fromkeys(values, "B")
    assert llm.usage.calls == 2


def test_join_of_an_empty_sub_result_is_one_line():
    with pytest.raises(JoinFailed, match="returned no rows"):
        join_results(SubResult("geo", ["Name"], []), SubResult("music", ["citizenship"], [("Spain",)]))


# -- end to end on two SQLite databases ----------------------------------------------------------------

def _drivers():
    from tests.cross.conftest import DRIVERS
    return DRIVERS


def _open(two_dbs):
    return lambda name: open_database(two_dbs[name], name=name) if name in two_dbs else _missing(name)


def _missing(name):
    from tagql.routing.errors import DatabaseGone
    raise DatabaseGone(f"database '{name}' is not in collection 'test'")


def test_answer_across_two_sqlite_databases(two_dbs):
    llm = scripted()
    out = answer_across("How many drivers are from countries whose language is Spanish?",
                        [("racing", None), ("geo", None)], llm=llm, open_db=_open(two_dbs), engine=engine_for(llm),
                        strategy="decompose")
    assert out.result.rows == [(4,)]  # Alonso, Sainz, Fangio, Perez
    assert [s.database for s in out.steps] == ["racing", "geo", "joined"]
    assert out.steps[0].sql.startswith("SELECT driverId") and out.sql == FINAL_SQL
    assert out.join.lm_matched == {"Spanish": "Spain", "Argentine": "Argentina", "Mexican": "Mexico"}
    # each sub-question asks for the shared entity as join_key; the final one says the parts hold already
    assert any("column named join_key" in m.content for p in llm.prompts for m in p)
    assert {"plan_s", "subqueries_s", "join_s", "final_s", "total_s"} <= set(out.timings)


def test_a_question_on_one_database_is_answered_there(two_dbs):
    plan = '{"key": "", "parts": [{"database": "racing", "question": "How many drivers?"}]}'
    llm = scripted(plan=plan, racing="SELECT COUNT(*) FROM drivers")
    out = answer_across("How many drivers are there?", [("racing", None), ("geo", None)], llm=llm,
                        open_db=_open(two_dbs), strategy="decompose")
    assert out.result.rows == [(7,)] and out.join is None and [s.database for s in out.steps] == ["racing"]


def test_a_failing_sub_query_is_one_line(two_dbs):
    llm = scripted(racing="SELECT nationalty FROM drivers")  # a typo, every try
    with pytest.raises(SubQueryFailed, match="the query on 'racing' failed") as err:
        answer_across("How many drivers are from Spanish-speaking countries?", [("racing", None), ("geo", None)],
                      llm=llm, open_db=_open(two_dbs), strategy="decompose")
    assert "\n" not in str(err.value)


def test_unknown_database_is_one_line(two_dbs):
    with pytest.raises(UnknownDatabase, match="cannot open database 'nowhere'"):
        answer_across("q?", [("nowhere", None)], llm=scripted(), open_db=_open(two_dbs))


# -- the merged strategy (the default): one query over both databases' tables ---------------------------

def test_merged_query_joins_values_written_differently(two_dbs, tmp_path: Path):
    llm = scripted()
    out = answer_across("How many drivers are from countries whose language is Spanish?",
                        [("racing", None), ("geo", None), ("music", None)], llm=llm, open_db=_open(two_dbs),
                        engine=engine_for(llm), workdir=tmp_path / "w")
    assert out.plan.databases == ["racing", "geo"] and out.result.rows == [(4,)]
    (vj,) = out.value_joins
    assert vj["rewritten"] == "drivers" and vj["lm_matched"]["Argentine"] == "Argentina"
    # the pick was constrained to the joinable pairs and the single databases
    assert llm.constraints[0]["enum"] == ["racing + geo", "racing"]  # the best-routed one, joined or alone
    prompt = next(p[0].content for p in llm.prompts if "CREATE TABLE drivers" in p[0].content)
    assert "CREATE TABLE country" in prompt
    # the merged copies are reused: a second question copies nothing again
    files = sorted(p.name for p in (tmp_path / "w").iterdir())
    answer_across("How many drivers are from countries whose language is Spanish?",
                  [("racing", None), ("geo", None)], llm=scripted(), open_db=_open(two_dbs), workdir=tmp_path / "w")
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == files


def test_the_matching_prompt_names_the_entity_the_columns_hold():
    from tagql.cross.merged import entity_of

    assert entity_of("nationality", "Name", "drivers", "country") == "country"
    assert entity_of("Hometown", "City") == "city" and entity_of("code", "id") == "entity"


def test_merged_pick_of_one_database_answers_there(two_dbs, tmp_path: Path):
    llm = scripted(pick='"racing"', racing="SELECT COUNT(*) FROM drivers")
    out = answer_across("How many drivers are there?", [("racing", None), ("geo", None)], llm=llm,
                        open_db=_open(two_dbs), workdir=tmp_path)
    assert out.plan.databases == ["racing"] and out.result.rows == [(7,)]


def test_cross_equalities_are_found_through_aliases(two_dbs, tmp_path: Path):
    from tagql.cross.merged import cross_equalities, merge

    dbs = [open_database(two_dbs["racing"], name="racing"), open_database(two_dbs["geo"], name="geo")]
    m = merge(dbs, tmp_path)
    assert cross_equalities(MERGED_SQL, m) == [(("drivers", "nationality"), ("country", "Name"))]
    assert cross_equalities("SELECT * FROM drivers AS a JOIN drivers AS b ON a.driverId = b.driverId", m) == []
    assert cross_equalities("SELECT COUNT(*) FROM drivers WHERE nationality IN (SELECT Name FROM country)", m) == [
        (("drivers", "nationality"), ("country", "Name"))]
    # T1 is drivers outside and country inside: each alias resolves in its own SELECT
    nested = ("SELECT COUNT(*) FROM drivers AS T1 WHERE T1.nationality IN "
              "(SELECT T1.Name FROM country AS T1 WHERE T1.Language = 'Spanish')")
    assert cross_equalities(nested, m) == [(("drivers", "nationality"), ("country", "Name"))]
    assert cross_equalities("SELECT COUNT(*) FROM drivers WHERE surname IN (SELECT surname FROM drivers)", m) == []


# -- the Session and the CLI ---------------------------------------------------------------------------

@pytest.fixture()
def collection(two_dbs, tmp_path: Path) -> Collection:
    coll = Collection.create("crosstest", path=tmp_path / "collections" / "crosstest")
    for name in ("racing", "geo", "music"):
        coll.add_database(str(two_dbs[name]))
    coll.save()
    return coll


def test_session_ask_method_cross(collection, monkeypatch):
    monkeypatch.setenv("TAGQL_TAG__CACHE", "false")
    llm = scripted()
    session = tagql.connect(collection=collection, llm=llm, settings=load_settings(), route_method="bm25")
    events: list[str] = []
    a = session.ask("How many drivers are from countries whose language is Spanish?", method="cross",
                    on_event=lambda name, data: events.append(name))
    assert a.values == [4] and a.method == "cross" and set(a.database.split(" + ")) == {"racing", "geo"}
    assert a.sql == MERGED_SQL and a.tokens["calls"] == 3  # pick, SQL, one batch of value matches
    assert a.plan.model_dump()["cross"]["value_joins"][0]["rewritten"] == "drivers"
    assert events[0] == "routed" and events[-2:] == ["answer", "done"] and "plan" in events
    assert a.answer == "Answer: 4."


def test_the_merged_query_gets_the_statements_and_stored_values_of_both_databases(collection, tmp_path, monkeypatch):
    monkeypatch.setenv("TAGQL_TAG__CACHE", "false")
    settings = load_settings()
    settings.knowledge_dir = tmp_path / "kb"
    settings.cache_dir = tmp_path / "cache"
    settings.answer.cross_value_hints = True  # off by default
    llm = scripted()
    session = tagql.connect(collection=collection, llm=llm, settings=settings, route_method="bm25",
                            knowledge_method="bm25")
    kb = session.knowledge_base("geo", create=True)
    kb.add("language is Spanish", "country.Language = 'Spanish'", status="approved")
    session.reload_knowledge("geo")
    a = session.ask("How many drivers are from countries whose language is Spanish?", method="cross")
    assert a.values == [4]
    (prompt,) = [m for m in llm.prompts if "CREATE TABLE drivers" in m[0].content
                 and "CREATE TABLE country" in m[0].content]
    asked = prompt[-1].content
    assert "-- External Knowledge: 'language is Spanish' refers to country.Language = 'Spanish'" in asked
    assert "-- Values found in the database:" in asked and "'Spanish'" in asked.split("Values found")[1]
    settings.answer.cross_value_hints = False
    llm.prompts.clear()
    session.ask("How many drivers are from countries whose language is Spanish?", method="cross")
    (prompt,) = [m for m in llm.prompts if "CREATE TABLE drivers" in m[0].content
                 and "CREATE TABLE country" in m[0].content]
    assert "Values found" not in prompt[-1].content and "External Knowledge" in prompt[-1].content


def test_method_cross_needs_a_collection(two_dbs):
    session = tagql.connect(two_dbs["racing"], llm=scripted(), settings=load_settings())
    with pytest.raises(tagql.api.UsageError, match="across the databases of a collection"):
        session.ask("How many drivers?", method="cross")


def test_cli_ask_method_cross(collection, monkeypatch):
    from typer.testing import CliRunner

    from tagql.cli import app

    monkeypatch.setenv("TAGQL_COLLECTIONS_DIR", str(collection.path.parent))
    monkeypatch.setenv("TAGQL_TAG__CACHE", "false")
    monkeypatch.setattr("tagql.api.make_llm", lambda *a, **k: scripted())
    args = ["ask", "How many drivers are from countries whose language is Spanish?", "--collection", "crosstest",
            "--method", "cross", "--route-method", "bm25"]
    js = CliRunner().invoke(app, [*args, "--json"])
    assert js.exit_code == 0, js.output
    got = json.loads(js.stdout.splitlines()[-1])
    assert got["method"] == "cross" and got["values"] == [4] and set(got["database"].split(" + ")) == {"racing", "geo"}
    text = CliRunner().invoke(app, args)
    assert text.exit_code == 0 and "answer: Answer: 4." in text.output, text.output
    one = CliRunner().invoke(app, ["ask", "How many?", "--db", str(collection.target("racing")), "--method", "cross"])
    assert one.exit_code == 2 and "collection" in one.output


# -- the benchmark set -----------------------------------------------------------------------------------

def test_every_gold_answer_of_the_cross_set_is_reproduced_by_its_sql(shared_data: Path):
    from bench.ask.cross import SPIDER_DBS, exact_match, gold_rows, questions

    items = questions()
    assert len(items) >= 30 and {q["split"] for q in items} == {"dev", "test"}
    assert all(len(q["databases"]) == 2 for q in items)
    for q in items:
        got = gold_rows(q, shared_data / "spider" / "database")
        assert got and exact_match(q["answer"], ["v"], [[v] for v in got]), q["id"]
    assert SPIDER_DBS.name == "database"


def test_exact_match_compares_sets_numbers_and_text():
    from bench.ask.cross import exact_match

    assert exact_match([56], ["COUNT(*)"], [[56]]) and exact_match([44.3], ["s"], [[44.30000001]])
    assert exact_match(["a", "B"], ["id", "name"], [[1, "b"], [2, "A "]])  # some column, as a set
    assert not exact_match(["a", "b"], ["name"], [["a"]]) and not exact_match([56], ["n"], [])
    assert exact_match(["Argentina"], ["country", "n"], [["Argentina", 24]])  # one row holding the value


def test_without_duckdb_the_error_says_how_to_install_it(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_duckdb(name, *args, **kwargs):
        if name == "duckdb":
            raise ImportError("No module named 'duckdb'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_duckdb)
    with pytest.raises(JoinFailed, match="need DuckDB") as err:
        join_results(SubResult("a", ["c"], [("x",)]), SubResult("b", ["c"], [("x",)]))
    assert 'pip install -e ".[duckdb]"' in str(err.value)


def test_a_join_on_a_code_column_is_matched_by_what_each_code_stands_for(tmp_path: Path):
    import sqlite3

    racing, geo = tmp_path / "racing.sqlite", tmp_path / "geo.sqlite"
    with sqlite3.connect(racing) as con:
        con.execute("CREATE TABLE drivers (driverId INTEGER PRIMARY KEY, nationality TEXT)")
        # more distinct nationalities (5) than codes (3): the codes are still the side matched into
        con.executemany("INSERT INTO drivers VALUES (?, ?)", [(1, "Spanish"), (2, "German"), (3, "Spanish"),
                                                              (4, "Japanese"), (5, "Italian"), (6, "French")])
    with sqlite3.connect(geo) as con:
        con.execute("CREATE TABLE country (Code TEXT PRIMARY KEY, Name TEXT, Continent TEXT)")
        con.execute("CREATE TABLE lang (CountryCode TEXT REFERENCES country(Code), Language TEXT)")
        con.executemany("INSERT INTO country VALUES (?, ?, ?)",
                        [("ESP", "Spain", "Europe"), ("DEU", "Germany", "Europe"), ("JPN", "Japan", "Asia")])
        con.executemany("INSERT INTO lang VALUES (?, ?)", [("ESP", "Spanish"), ("DEU", "German"), ("JPN", "Japanese")])
    seen, asked = [], []

    def reply(messages) -> str:
        head = messages[0].content
        if head.startswith("You pick"):
            return '"racing + geo"'
        items = re.findall(r"(\d+)\. <item>(.*?)</item>", messages[-1].content)
        if is_naming(messages):  # the free pass names two of them
            asked.extend(words(messages))
            return named({"Japanese": "Japan", "Italian": "Italy"}, messages)
        if head.startswith("You match names"):
            seen.append(head)
            names = {"Spanish": "Spain", "German": "Germany"}
            return json.dumps({n: names.get(v, "none") for n, v in items})
        return "SELECT COUNT(*) FROM drivers AS T1 JOIN lang AS T2 ON T1.nationality = T2.CountryCode WHERE T2.Language = 'Spanish'"
    llm = ScriptedLLM(reply)
    dbs = {"racing": racing, "geo": geo}
    out = answer_across("How many drivers come from Spanish-speaking countries?", [("racing", None), ("geo", None)],
                        llm=llm, open_db=lambda n: open_database(dbs[n], name=n), engine=engine_for(llm),
                        workdir=tmp_path / "w")
    assert out.result.rows == [(2,)]
    # the LM chooses among the codes' names (through the foreign key), never the codes themselves
    assert "Spain" in seen[0] and "Germany" in seen[0] and "ESP" not in seen[0]
    # the names are matched (in one list, then those left each alone)
    assert sorted(asked[:5]) == ["French", "German", "Italian", "Japanese", "Spanish"]
    assert sorted(asked[5:9]) == ["French", "German", "Italian", "Spanish"]
    assert asked[9:] == ["Italy"]  # the name written for Italian (no option) is named in turn
    (join,) = out.value_joins
    assert join["rewritten"] == "drivers" and join["lm_matched"] == {
        "Spanish": "ESP", "German": "DEU", "Japanese": "JPN"}  # Italy is no option: no code


def test_values_matched_to_codes_by_name_equal_names_need_no_lm():
    labels = {"ESP": "Spain", "GBR": "United Kingdom", "AUT": "Austria", "AUS": "Australia", "XXX": ""}
    asked: list[list[str]] = []

    def reply(messages) -> str:
        if is_naming(messages):
            asked.append(("free", words(messages)))
            return named({"UK": "the United Kingdom."}, messages)
        items = re.findall(r"(\d+)\. <item>(.*?)</item>", messages[-1].content)
        asked.append(("constrained", [v for _, v in items]))
        assert "AUS" not in messages[0].content and "Australia" in messages[0].content
        return json.dumps({n: {"Austrian": "Austria"}.get(v, "AUS") for n, v in items})
    llm = ScriptedLLM(reply)
    found = match_values(["spain ", "UK", "Austrian", "Atlantis"], list(labels), "country", engine_for(llm),
                         labels=labels)
    # "spain " equals a name: no LM; the LM's names map back to codes; a code given as the reply is no option
    assert found == {"spain ": "ESP", "UK": "GBR", "Austrian": "AUT"}
    assert asked == [("free", ["UK", "Austrian", "Atlantis"]), ("free", ["Austrian"]), ("free", ["Atlantis"]),
                     ("constrained", ["Austrian", "Atlantis"])]


def test_a_database_whose_keys_duckdb_refuses_is_copied_without_them(tmp_path: Path):
    import sqlite3

    from tagql.cross.merged import merge

    cars = tmp_path / "cars.sqlite"  # car_1's shape: a TEXT column referencing an INTEGER key
    with sqlite3.connect(cars) as con:
        con.execute("CREATE TABLE countries (CountryId INTEGER PRIMARY KEY, CountryName TEXT)")
        con.execute("CREATE TABLE car_makers (Id INTEGER PRIMARY KEY, Maker TEXT, Country TEXT "
                    "REFERENCES countries(CountryId))")
        con.executemany("INSERT INTO countries VALUES (?, ?)", [(1, "usa"), (2, "germany")])
        con.executemany("INSERT INTO car_makers VALUES (?, ?, ?)", [(1, "amc", "1"), (2, "bmw", "2")])
    with pytest.raises(Exception, match="incompatible types"):  # what DuckDB says to the keyed copy
        from tagql.db.duck import copy_sqlite_to_duckdb
        copy_sqlite_to_duckdb(cars, tmp_path / "keyed.duckdb")
    m = merge([open_database(cars, name="cars")], tmp_path / "w")
    merged = open_database(m.path, name="m")
    assert merged.execute("SELECT COUNT(*) FROM car_makers").rows == [(2,)]
    assert m.schema.table("car_makers").foreign_keys  # the prompt still shows the key


def _circuits_and_countries(tmp_path: Path) -> dict[str, Path]:
    import sqlite3

    racing, geo = tmp_path / "racing.sqlite", tmp_path / "geo.sqlite"
    with sqlite3.connect(racing) as con:
        con.execute("CREATE TABLE circuits (circuitId INTEGER PRIMARY KEY, name TEXT, country TEXT)")
        con.executemany("INSERT INTO circuits VALUES (?, ?, ?)", [(1, "Catalunya", "Spain"), (2, "Silverstone", "UK"),
                                                                   (3, "Monte Carlo", "Monaco"), (4, "Suzuka", "Japan")])
    with sqlite3.connect(geo) as con:
        con.execute("CREATE TABLE country (Code TEXT PRIMARY KEY, Name TEXT, Continent TEXT)")
        con.executemany("INSERT INTO country VALUES (?, ?, ?)", [
            ("ESP", "Spain", "Europe"), ("MCO", "Monaco", "Europe"), ("GBR", "United Kingdom", "Europe"),
            ("JPN", "Japan", "Asia"), ("BRA", "Brazil", "South America")])
    return {"racing": racing, "geo": geo}


def test_columns_sharing_values_are_declared_as_keys_of_the_merged_schema(tmp_path: Path):
    dbs = _circuits_and_countries(tmp_path)
    prompts, written = [], [
        # the model forgot the circuits table: the link lets the repair join it
        "SELECT COUNT(T1.circuitId) FROM country AS T1 WHERE T1.Continent = 'Europe'"]

    def reply(messages) -> str:
        head = messages[0].content
        if head.startswith("You pick"):
            return '"racing + geo"'
        if is_naming(messages):
            return named({"UK": "United Kingdom"}, messages)
        if head.startswith("You match names"):
            return json.dumps({n: "none" for n in re.findall(r"(\d+)\. <item>", messages[-1].content)})
        prompts.append(head)
        return written.pop(0)
    llm = ScriptedLLM(reply)
    out = answer_across("How many circuits are in European countries?", [("racing", None), ("geo", None)],
                        llm=llm, open_db=lambda n: open_database(dbs[n], name=n), engine=engine_for(llm),
                        workdir=tmp_path / "w")
    assert out.links == ["circuits.country -> country.Name"]  # 3 of circuits' 4 countries are names in geo
    assert "FOREIGN KEY (country) REFERENCES country(Name)" in prompts[0]
    assert out.sql == ("SELECT COUNT(T2.circuitId) FROM country AS T1 JOIN circuits AS T2 ON T1.Name = T2.country "
                       "WHERE T1.Continent = 'Europe'")
    assert out.result.rows == [(3,)]  # UK matched to United Kingdom by the free naming pass


def test_the_free_naming_pass_reads_word_arrow_name_lines():
    options = ["United Kingdom", "Netherlands", "Monaco", "Peru"]
    replies = {("British", "Dutch", "Monegasque"):
               "Here you go:\n1. british -> The United Kingdom.\n- Dutch -> Netherlands\nMonegasque -> Atlantis",
               ("Peruvian",): "Briton -> Peru"}  # a word rewritten ("Briton"), but one line for one word: its order holds
    llm = ScriptedLLM(lambda m: replies.get(tuple(words(m)), "x -> none") if is_naming(m) else json.dumps(
        {n: "none" for n in re.findall(r"(\d+)\. <item>", m[-1].content)}))
    found = match_values(["British", "Dutch", "Monegasque", "Peruvian"], options, "country", engine_for(llm), batch=3)
    assert found == {"British": "United Kingdom", "Dutch": "Netherlands", "Peruvian": "Peru"}
    assert "Examples:\nPeruvian -> Peru" in llm.prompts[0][-1].content  # worked examples for countries


def test_a_merged_query_that_reads_one_database_only_goes_back_to_the_model(tmp_path: Path):
    dbs = _circuits_and_countries(tmp_path)
    written = ["SELECT Continent FROM country GROUP BY Continent ORDER BY COUNT(*) DESC LIMIT 1",
               "SELECT T2.Continent FROM circuits AS T1 JOIN country AS T2 ON T1.country = T2.Name "
               "GROUP BY T2.Continent ORDER BY COUNT(*) DESC LIMIT 1"]
    repairs = []

    def reply(messages) -> str:
        head = messages[0].content
        if head.startswith("You pick"):
            return '"racing + geo"'
        if is_naming(messages):
            return named({}, messages)
        if head.startswith("You match names"):
            return json.dumps({n: "none" for n in re.findall(r"(\d+)\. <item>", messages[-1].content)})
        repairs.append(messages[-1].content)
        return written.pop(0)
    llm = ScriptedLLM(reply)
    out = answer_across("Which continent has the most circuits?", [("racing", None), ("geo", None)],
                        llm=llm, open_db=lambda n: open_database(dbs[n], name=n), engine=engine_for(llm),
                        workdir=tmp_path / "w")
    assert ("the query reads only tables of geo, but the question needs geo and racing: join a table of racing "
            "(they join on circuits.country = country.Name)") in repairs[1]
    assert out.result.rows == [("Europe",)]


def test_a_name_that_is_no_option_is_named_in_turn():
    names = {"British": "England", "England": "United Kingdom"}  # what the 1.5B model wrote, alone
    llm = ScriptedLLM(lambda m: named(names, m) if is_naming(m) else json.dumps(
        {n: "none" for n in re.findall(r"(\d+)\. <item>", m[-1].content)}))
    assert match_values(["British"], ["United Kingdom", "Ireland"], "country", engine_for(llm)) == {
        "British": "United Kingdom"}
    # a list of one is already alone (the same cached call), then the name in turn
    assert [words(m) for m in llm.prompts] == [["British"], ["England"]]


def test_a_join_on_the_wrong_column_of_a_linked_table_moves_onto_the_link(tmp_path: Path):
    import sqlite3

    racing, geo = tmp_path / "racing.sqlite", tmp_path / "geo.sqlite"
    with sqlite3.connect(racing) as con:
        con.execute("CREATE TABLE circuits (circuitId INTEGER PRIMARY KEY, name TEXT, country TEXT)")
        con.executemany("INSERT INTO circuits VALUES (?, ?, ?)", [
            (1, "Monza", "Italy"), (2, "Jerez", "Spain"), (3, "Suzuka", "Japan"), (4, "Imola", "Italy"),
            (5, "Zolder", "Belgium")])
    with sqlite3.connect(geo) as con:
        con.execute("CREATE TABLE country (Code TEXT PRIMARY KEY, Name TEXT, Population INTEGER)")
        con.executemany("INSERT INTO country VALUES (?, ?, ?)", [
            ("ITA", "Italy", 57_000_000), ("ESP", "Spain", 40_000_000), ("JPN", "Japan", 126_000_000),
            ("BEL", "Belgium", 10_000_000)])
    prompts: list[str] = []

    def reply(messages) -> str:
        head = messages[0].content
        prompts.append(head)
        if head.startswith("You pick"):
            return '"racing + geo"'
        if "CREATE TABLE circuits" in head:  # names joined to three-letter codes
            return ("SELECT COUNT(*) FROM circuits AS T1 JOIN country AS T2 ON T1.country = T2.Code "
                    "WHERE T2.Population > 50000000")
        return "none"
    dbs = {"racing": racing, "geo": geo}
    llm = ScriptedLLM(reply)
    out = answer_across("How many circuits are in countries of more than 50 million people?",
                        [("racing", None), ("geo", None)], llm=llm,
                        open_db=lambda n: open_database(dbs[n], name=n), engine=engine_for(llm),
                        workdir=tmp_path / "w")
    assert out.result.rows == [(3,)]  # Monza, Imola, Suzuka
    assert "T1.country = T2.Name" in out.sql
    assert out.notes[0] == ("joined on the value link: country.Code -> country.Name "
                            "(the data links circuits.country to country.Name)")
    (join,) = out.value_joins
    assert join["exact_matches"] == 4 and join["lm_matched"] == {}
    assert not [p for p in prompts if p.startswith(("You match", "You name"))]  # equal names need no LM


def test_joins_on_links_leaves_linked_and_unlinked_comparisons_alone(two_dbs, tmp_path: Path):
    from tagql.cross.merged import joins_on_links, merge

    dbs = [open_database(two_dbs["racing"], name="racing"), open_database(two_dbs["geo"], name="geo")]
    m = merge(dbs, tmp_path)
    links = [(("drivers", "nationality"), ("country", "Name"))]
    assert joins_on_links(MERGED_SQL, m, links) == (MERGED_SQL, [])  # already on the link
    assert joins_on_links(MERGED_SQL, m, []) == (MERGED_SQL, [])  # no link found in the data
    other = "SELECT COUNT(*) FROM drivers AS d JOIN country AS c ON d.driverId = c.Language"
    assert joins_on_links(other, m, links) == (other, [])  # driverId is no linked column


def _offices_and_geo(tmp_path: Path) -> dict[str, Path]:
    import sqlite3

    offices, geo = tmp_path / "offices.sqlite", tmp_path / "geo.sqlite"
    with sqlite3.connect(offices) as con:
        con.executescript("""
            CREATE TABLE regions (region_id INTEGER PRIMARY KEY, region_name TEXT);
            CREATE TABLE countries (country_id TEXT PRIMARY KEY, country_name TEXT,
                                    region_id INTEGER REFERENCES regions(region_id));
            CREATE TABLE sites (site_id INTEGER PRIMARY KEY, city TEXT, country_id TEXT REFERENCES countries(country_id));
            CREATE TABLE teams (team_id INTEGER PRIMARY KEY, team_name TEXT, site_id INTEGER);  -- key not declared
            INSERT INTO regions VALUES (1, 'Europe'), (2, 'Americas');
            INSERT INTO countries VALUES ('UK', 'United Kingdom', 1), ('DE', 'Germany', 1), ('US', 'United States', 2);
            INSERT INTO sites VALUES (10, 'Oxford', 'UK'), (20, 'Seattle', 'US');
            INSERT INTO teams VALUES (1, 'Sales', 10), (2, 'Research', 20), (3, 'Support', 20);
        """)
    with sqlite3.connect(geo) as con:
        con.execute("CREATE TABLE country (Code TEXT PRIMARY KEY, Name TEXT, Continent TEXT)")
        con.executemany("INSERT INTO country VALUES (?, ?, ?)", [
            ("GBR", "United Kingdom", "Europe"), ("DEU", "Germany", "Europe"), ("USA", "United States", "North America")])
    return {"offices": offices, "geo": geo}


def test_a_merged_query_follows_a_key_the_database_never_declared(tmp_path: Path):
    dbs = _offices_and_geo(tmp_path)

    def reply(messages) -> str:
        if messages[0].content.startswith("You pick"):
            return '"offices + geo"'
        # teams joined to countries by region: each team with every country of its region
        return ("SELECT COUNT(*) FROM teams AS T1 JOIN countries AS T2 ON T1.region_id = T2.region_id "
                "JOIN country AS T3 ON T2.country_name = T3.Name WHERE T3.Continent = 'Europe'")
    llm = ScriptedLLM(reply)
    out = answer_across("How many teams work at sites in European countries?", [("offices", None), ("geo", None)],
                        llm=llm, open_db=lambda n: open_database(dbs[n], name=n), workdir=tmp_path / "w")
    # the merged copy kept the primary keys, so teams.site_id -> sites.site_id is read from the names
    assert "sites AS" in out.sql and out.result.rows == [(1,)]  # Sales, in Oxford


def test_a_merged_join_of_a_number_with_a_text_goes_back_to_the_model_with_the_link(tmp_path: Path):
    dbs = _offices_and_geo(tmp_path)
    bad = ("SELECT T1.city FROM sites AS T1 JOIN country AS T2 ON T1.site_id = T2.Name "
           "WHERE T2.Continent = 'Europe'")
    good = ("SELECT T1.city FROM sites AS T1 JOIN countries AS T3 ON T1.country_id = T3.country_id "
            "JOIN country AS T2 ON T3.country_name = T2.Name WHERE T2.Continent = 'Europe'")
    sqls = iter([bad, good])

    def reply(messages) -> str:
        return '"offices + geo"' if messages[0].content.startswith("You pick") else next(sqls)
    out = answer_across("Which sites are in European countries?", [("offices", None), ("geo", None)],
                        llm=ScriptedLLM(reply), open_db=lambda n: open_database(dbs[n], name=n),
                        workdir=tmp_path / "w")
    error = out.steps[-1].attempts[0]["error"]
    assert error.startswith("sites.site_id holds numbers and country.Name text: joined, they never match")
    assert "countries.country_name = country.Name" in error  # the value link found in the data
    assert out.result.rows == [("Oxford",)]


def test_two_tables_linked_by_codes_and_by_names_keep_one_link(tmp_path: Path):
    import sqlite3

    from tagql.cross.merged import merge, text_values, value_links

    hr, geo = tmp_path / "hr.sqlite", tmp_path / "geo.sqlite"
    with sqlite3.connect(hr) as con:
        con.execute("CREATE TABLE countries (COUNTRY_ID TEXT PRIMARY KEY, COUNTRY_NAME TEXT)")
        con.executemany("INSERT INTO countries VALUES (?, ?)", [
            ("DE", "Germany"), ("FR", "France"), ("IT", "Italy"), ("US", "United States of America")])
    with sqlite3.connect(geo) as con:
        con.execute("CREATE TABLE country (Code TEXT PRIMARY KEY, Code2 TEXT, Name TEXT)")
        con.executemany("INSERT INTO country VALUES (?, ?, ?)", [
            ("DEU", "DE", "Germany"), ("FRA", "FR", "France"), ("ITA", "IT", "Italy"), ("USA", "US", "United States")])
    dbs = [open_database(hr, name="hr"), open_database(geo, name="geo")]
    merged = merge(dbs, tmp_path / "w")
    links = value_links({d.name: text_values(d) for d in dbs}, merged)
    # the codes share 4 of 4, the names 3 of 4: one relation, one link
    assert links == [(("countries", "COUNTRY_ID"), ("country", "Code2"))]


def test_a_rewritten_key_is_rewritten_where_its_own_database_joins_it_too(tmp_path: Path):
    import sqlite3

    from tagql.cross.merged import ValueJoin, merge, rewritten_copy

    hr, geo = tmp_path / "hr.sqlite", tmp_path / "geo.sqlite"
    with sqlite3.connect(hr) as con:
        con.executescript("""
            CREATE TABLE countries (COUNTRY_ID TEXT PRIMARY KEY, COUNTRY_NAME TEXT);
            CREATE TABLE locations (LOCATION_ID INTEGER PRIMARY KEY, COUNTRY_ID TEXT REFERENCES countries(COUNTRY_ID));
            CREATE TABLE departments (DEPARTMENT_ID INTEGER PRIMARY KEY, LOCATION_ID INTEGER);
            INSERT INTO countries VALUES ('UK', 'United Kingdom'), ('DE', 'Germany');
            INSERT INTO locations VALUES (1, 'UK'), (2, 'DE');
            INSERT INTO departments VALUES (10, 1), (20, 2);
        """)
    with sqlite3.connect(geo) as con:
        con.execute("CREATE TABLE country (Code2 TEXT PRIMARY KEY, Continent TEXT)")
        con.executemany("INSERT INTO country VALUES (?, ?)", [("GB", "Europe"), ("DE", "Europe")])
    dbs = [open_database(hr, name="hr"), open_database(geo, name="geo")]
    merged = merge(dbs, tmp_path / "w")
    copy = rewritten_copy(merged, [ValueJoin(("countries", "COUNTRY_ID"), ("country", "Code2"), exact=1,
                                             matched={"UK": "GB"}, side="countries")], tmp_path / "m.duckdb")
    db = open_database(copy, name="m")
    sql = ("SELECT COUNT(*) FROM departments AS d JOIN locations AS l ON d.LOCATION_ID = l.LOCATION_ID "
           "JOIN countries AS c ON l.COUNTRY_ID = c.COUNTRY_ID JOIN country AS w ON c.COUNTRY_ID = w.Code2 "
           "WHERE w.Continent = 'Europe'")
    assert db.execute(sql).rows == [(2,)]  # the UK department still reaches its country
    assert db.execute("SELECT Code2 FROM country ORDER BY 1").rows == [("DE",), ("GB",)]  # the other side as is
