"""Values from the data (tagql.text2sql.values): the question's candidate literals, their matches in a value
index, the SQL prompt's line of found values (absent, and the prompt byte-identical, when there are none),
and the pipeline plumbing (answer.value_hints) with a scripted LLM."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from tagql.config import load_settings
from tagql.db import open_database
from tagql.db import values as values_mod
from tagql.db.values import ValueIndex
from tagql.llm.scripted import ScriptedLLM
from tagql.pipeline import TagQL
from tagql.text2sql.prompts import sql_user_prompt
from tagql.text2sql.values import ValueMatch, match_values, question_phrases, render_values


def phrases(question: str) -> dict[str, str]:
    return {p.text: p.kind for p in question_phrases(question)}


def test_phrases_quoted_capitalised_and_ngrams() -> None:
    found = phrases('Which members attended "October Meeting" after the 2008 Australian Grand Prix?')
    assert found["October Meeting"] == "quoted"
    assert found["2008 Australian Grand Prix"] == "capitalised"
    assert "members attended" in found and "Meeting" in found
    assert not any(p.lower().startswith(("the ", "which ")) or p.lower().endswith(" the") for p in found)
    assert "the" not in {p.lower() for p in found} and "2008" not in found  # stop words, bare numbers
    assert phrases("Who wrote Ascent of Man?")["Ascent of Man"] == "capitalised"


def test_phrases_longest_first_and_capped_at_five_words() -> None:
    ps = question_phrases("one two three four five six seven")
    assert [len(p.text.split()) for p in ps][:1] == [5]
    assert all(len(p.text.split()) <= 5 for p in ps)


@pytest.fixture(scope="module")
def hero_index(demo_db_path: Path) -> ValueIndex:
    return ValueIndex.build(open_database(demo_db_path))


def test_exact_matches_first_and_longest_phrase_wins(hero_index: ValueIndex) -> None:
    matches = match_values("How many heroes with blue eyes are published by Marvel Comics?", hero_index)
    rendered = [m.render() for m in matches]
    assert rendered[:2] == ["publisher.publisher_name = 'Marvel Comics'", "colour.colour = 'Blue'"]
    assert all(m.score >= 0.9 for m in matches)
    # "Comics" alone is inside the exact "Marvel Comics": no 'DC Comics' or 'Dark Horse Comics'
    assert not any("Dark Horse" in r or "DC Comics" in r for r in rendered)


def test_a_word_of_a_value_finds_it_with_the_column_named(hero_index: ValueIndex) -> None:
    matches = match_values("How many superheroes were published by Marvel?", hero_index)
    assert matches[0].render() == "publisher.publisher_name = 'Marvel Comics'"
    assert matches[0].phrase == "Marvel"


def test_typo_and_schema_words(hero_index: ValueIndex) -> None:
    matches = match_values("List the heroes that have intellegence as their power.", hero_index)
    assert "superpower.power_name = 'Intelligence'" in [m.render() for m in matches]
    # "power" names the superpower table, it is no value: attribute.attribute_name = 'Power' is no hint
    assert not any(m.value == "Power" for m in matches)


def test_nothing_found_and_filters(hero_index: ValueIndex) -> None:
    assert match_values("What is the average height?", hero_index) == []
    q = "How many heroes with blue eyes are published by Marvel Comics?"
    assert [m.table for m in match_values(q, hero_index, tables=["colour"])] == ["colour"]
    assert len(match_values(q, hero_index, limit=1)) == 1


def test_prompt_line_present_only_with_values() -> None:
    q = "How many heroes are published by Marvel?"
    plain = sql_user_prompt(q, [])
    assert sql_user_prompt(q, [], values=()) == plain  # byte for byte
    assert "Values found" not in plain
    hint = ValueMatch("publisher", "publisher_name", "Marvel's Comics", 0.93, "Marvel")
    with_hint = sql_user_prompt(q, [], values=[hint])
    assert with_hint == ("-- Values found in the database: publisher.publisher_name = 'Marvel''s Comics'\n" + plain)
    assert render_values([hint, hint]).count(";") == 1


@pytest.fixture()
def db_file(tmp_path: Path, demo_db_path: Path) -> Path:
    dst = tmp_path / "superhero.sqlite"
    shutil.copy(demo_db_path, dst)
    return dst


def test_pipeline_shows_values_when_on_and_the_plain_prompt_when_off(db_file: Path, tmp_path: Path) -> None:
    values_mod.forget_loaded()
    question = "How many superheroes were published by Marvel?"
    sql = ("SELECT COUNT(*) FROM superhero JOIN publisher ON superhero.publisher_id = publisher.id "
           "WHERE publisher.publisher_name = 'Marvel Comics'")
    prompts = {}
    for on in (False, True):
        settings = load_settings(cache_dir=tmp_path / "cache")
        settings.answer.value_hints = on
        llm = ScriptedLLM([sql, "387"])
        answer = TagQL(open_database(db_file), llm, settings=settings).ask(question)
        assert answer.rows == [[387]]
        assert answer.notes[:1] == (["values found in the data: publisher.publisher_name = 'Marvel Comics'"] if on
                                    else [])
        prompts[on] = llm.prompts[0][1].content
    assert prompts[False] == sql_user_prompt(question, [])
    assert prompts[True] == ("-- Values found in the database: publisher.publisher_name = 'Marvel Comics'\n"
                             + prompts[False])
    assert list((tmp_path / "cache" / "values").glob("superhero-*.json"))  # built once, cached
    values_mod.forget_loaded()


def test_pipeline_keeps_values_of_the_prompts_tables(db_file: Path, tmp_path: Path) -> None:
    values_mod.forget_loaded()
    settings = load_settings(cache_dir=tmp_path / "cache")
    settings.answer.value_hints = True
    db = open_database(db_file)
    tq = TagQL(db, ScriptedLLM([]), settings=settings, prompt_schema=db.schema.subset(["superhero", "colour"]))
    assert [m.table for m in tq.values_for("Heroes with blue eyes published by Marvel Comics")] == ["colour"]
    values_mod.forget_loaded()


def test_values_off_reads_no_data(db_file: Path, tmp_path: Path) -> None:
    settings = load_settings(cache_dir=tmp_path / "cache")
    assert settings.answer.value_hints is True  # the default (bench/ask/values.py, dev split)
    settings.answer.value_hints = False
    assert TagQL(open_database(db_file), ScriptedLLM([]), settings=settings).values_for("Marvel") == []
    assert not (tmp_path / "cache" / "values").exists()


def test_sqlite_file_changed_between_sessions_gets_new_values(tmp_path: Path) -> None:
    values_mod.forget_loaded()
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE team (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO team VALUES (1, 'Red Sox')")
    con.commit()
    settings = load_settings(cache_dir=tmp_path / "cache")
    settings.answer.value_hints = True
    assert [m.value for m in TagQL(open_database(path), ScriptedLLM([]), settings=settings).values_for(
        "games of the red sox")] == ["Red Sox"]
    con.execute("INSERT INTO team VALUES (2, 'White Sox')")
    con.commit()
    con.close()
    assert [m.value for m in TagQL(open_database(path), ScriptedLLM([]), settings=settings).values_for(
        "games of the white sox")] == ["White Sox"]
    values_mod.forget_loaded()
