"""Query synthesis plumbing with a scripted LLM: prompt shape, SQL extraction, validation, retry."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from tagql.config import load_settings
from tagql.db import open_database
from tagql.errors import InvalidQuery, LLMOutputError, UnsafeQuery
from tagql.knowledge import ScoredStatement, StaticStatements
from tagql.llm.scripted import ScriptedLLM
from tagql.pipeline import TagQL
from tagql.text2sql.query import extract_sql


@pytest.fixture()
def db_file(tmp_path: Path, demo_db_path: Path) -> Path:
    dst = tmp_path / "superhero.sqlite"
    shutil.copy(demo_db_path, dst)
    return dst


def session(db_file: Path, replies: list[str], **kw) -> TagQL:
    return TagQL(open_database(db_file), ScriptedLLM(replies), settings=load_settings(), **kw)


def on_repeat() -> object:
    """Settings with the extra try after a repeated failed query (off by default)."""
    st = load_settings()
    st.answer.fresh_retry_on_repeat = True
    return st


@pytest.mark.parametrize(
    ("reply", "sql"),
    [
        ("SELECT 1", "SELECT 1"),
        ("```sql\nSELECT name FROM t;\n```", "SELECT name FROM t"),
        ("Here is the query:\n```\nSELECT a\nFROM t\n```\nThis returns a.", "SELECT a\nFROM t"),
        ("SELECT a FROM t; -- done\nThis query selects a.", "SELECT a FROM t"),
        ("```sql\nWITH x AS (SELECT 1) SELECT * FROM x", "WITH x AS (SELECT 1) SELECT * FROM x"),
        ("SELECT 'a;b' FROM t;", "SELECT 'a;b' FROM t"),
        ("The SQL is: select count(*) from superhero", "select count(*) from superhero"),
    ],
)
def test_extract_sql(reply: str, sql: str) -> None:
    assert extract_sql(reply) == sql


def test_extract_sql_keeps_a_second_statement_for_the_safety_check() -> None:
    assert extract_sql("SELECT 1; DROP TABLE t;") == "SELECT 1; DROP TABLE t"


def test_no_sql_in_reply() -> None:
    with pytest.raises(LLMOutputError, match="no SQL"):
        extract_sql("I am sorry, I cannot help with that.")


def test_prompt_has_schema_first_then_question_and_statements(db_file: Path) -> None:
    statements = StaticStatements([ScoredStatement("tall heroes", "superhero.height_cm > 200", 0.9)])
    tq = session(db_file, ["SELECT COUNT(*) FROM superhero WHERE height_cm > 200", "There are 69."],
                 knowledge=statements)
    tq.settings.answer.one_column_answer = "model"  # the sentence's prompt is checked below
    answer = tq.ask("How many tall heroes are there?")
    sql_prompt = tq.llm.prompts[0]
    assert sql_prompt[0].role == "system" and "CREATE TABLE superhero (" in sql_prompt[0].content
    # the statements come first, as BIRD's "External Knowledge" lines, then the question
    assert sql_prompt[1].content.startswith(
        "-- External Knowledge: 'tall heroes' refers to superhero.height_cm > 200\n"
        "-- Using valid SQLite and understanding External Knowledge, answer the following question for the "
        "tables provided above.\nQuery: How many tall heroes are there?\n")
    assert sql_prompt[0].content.endswith("generate a single SQL in SQLite format. Do not include any extra text, "
                                          "tag or information other than the SQL query itself.")
    assert sql_prompt[1].content.endswith("\nSQL:")
    # the answer prompt carries the rows as data points
    assert "Data Point 1:\n- COUNT(*): 69" in tq.llm.prompts[1][1].content
    assert answer.values == [69] and answer.answer == "There are 69."
    assert [s.text for s in answer.statements] == ["tall heroes"]
    assert answer.tokens["calls"] == 2


def test_paper_statement_style_lists_statements_after_the_question(db_file: Path) -> None:
    settings = load_settings()
    settings.answer.statement_style = "paper"
    statements = StaticStatements([ScoredStatement("tall heroes", "superhero.height_cm > 200", 0.9),
                                   ScoredStatement("blue eyes", "colour.colour = 'Blue'", 0.5)])
    llm = ScriptedLLM(["SELECT COUNT(*) FROM superhero WHERE height_cm > 200", "There are 69."])
    TagQL(open_database(db_file), llm, settings=settings, knowledge=statements).ask("How many tall heroes are there?")
    assert llm.prompts[0][1].content == (
        "Query: How many tall heroes are there?\n"
        "Domain Knowledge statements, some of which might or might not be useful to generate the query:\n"
        "- 'tall heroes' refers to superhero.height_cm > 200\n- 'blue eyes' refers to colour.colour = 'Blue'\nSQL:")


def test_without_statements_both_styles_ask_the_bare_question(db_file: Path) -> None:
    prompts = []
    for style in ("external", "paper"):
        settings = load_settings()
        settings.answer.statement_style = style
        llm = ScriptedLLM(["SELECT COUNT(*) FROM superhero", "There are 750."])
        TagQL(open_database(db_file), llm, settings=settings).ask("How many heroes are there?")
        prompts.append(llm.prompts[0][1].content)
    assert prompts == ["Query: How many heroes are there?\nSQL:"] * 2


def test_unknown_column_is_repaired_with_the_error_message(db_file: Path) -> None:
    # three foreign keys lead from superhero to colour (eye, hair, skin): no deterministic repair
    tq = session(db_file, [
        "SELECT colour FROM superhero WHERE superhero_name = 'Abomination'",
        ("SELECT c.colour FROM superhero s JOIN colour c ON s.eye_colour_id = c.id "
         "WHERE s.superhero_name = 'Abomination'"),
        "Green.",
    ])
    answer = tq.ask("What colour is Abomination?")  # eye, hair or skin: the question does not say
    repair = tq.llm.prompts[1][-1].content
    assert "column 'colour' does not exist" in repair and "join colour" in repair
    assert answer.values == ["Green"]
    assert [a.error is None for a in answer.attempts] == [False, True]


def test_unknown_table_twice_gives_a_clear_error(db_file: Path) -> None:
    tq = session(db_file, ["SELECT * FROM heroes", "SELECT * FROM heroes_table"])
    with pytest.raises(InvalidQuery, match="unknown table 'heroes_table'"):
        tq.ask("List all heroes")


def test_failing_tries_with_statements_fall_back_to_the_bare_question(db_file: Path) -> None:
    statement = ScoredStatement("eye colour", "colour.eye_colour", 1.0)  # misleads: no such column
    replies = ["SELECT colour.eye_colour FROM colour", "SELECT eye_colour FROM colour",
               "SELECT COUNT(*) FROM colour", "There are 35 colours."]
    tq = session(db_file, replies, knowledge=StaticStatements([statement]))
    answer = tq.ask("How many colours are there?")
    prompts = [p[1].content for p in tq.llm.prompts[:3]]
    assert "eye colour" in prompts[0] and "eye colour" not in prompts[2]  # the third try has no statement
    assert len(tq.llm.prompts[2]) == 2  # a fresh prompt (system + question), not the repair conversation
    assert [a.error is None for a in answer.attempts] == [False, False, True]
    assert answer.values == [35] and answer.statements == []  # the query that ran used none
    assert any("written from the question alone" in n for n in answer.notes)


def test_fallback_can_be_turned_off_and_needs_statements(db_file: Path) -> None:
    statement = ScoredStatement("eye colour", "colour.eye_colour", 1.0)
    tq = session(db_file, ["SELECT eye_colour FROM colour", "SELECT eye_colour FROM colour"],
                 knowledge=StaticStatements([statement]))
    tq.synthesizer.fallback_without_statements = False
    with pytest.raises(InvalidQuery, match="eye_colour"):
        tq.ask("How many colours are there?")
    # without statements there is nothing to fall back from: two tries, then the error
    tq = session(db_file, ["SELECT eye_colour FROM colour", "SELECT eye_colour FROM colour", "SELECT 1"])
    with pytest.raises(InvalidQuery, match="eye_colour"):
        tq.ask("How many colours are there?")
    assert len(tq.llm.prompts) == 2


def test_a_query_repeated_word_for_word_is_asked_once_more_from_the_first_prompt(db_file: Path) -> None:
    """Shown its failed SQL and the error, the 1.5B model mostly writes it again (135 of 149 failed BIRD
    questions): the extra try starts from the first prompt with the error as a note, not its own reply."""
    wrong = "SELECT COUNT(*) FROM heroes"
    llm = ScriptedLLM([wrong, wrong + "\n", "SELECT COUNT(*) FROM superhero", "There are 750."])
    tq = TagQL(open_database(db_file), llm, settings=on_repeat())
    answer = tq.ask("How many heroes are there?")
    assert answer.values == [750]
    fresh = tq.llm.prompts[2]
    assert len(fresh) == 2 and fresh[0].content == tq.llm.prompts[0][0].content  # system + question, no reply
    assert "-- Note: a query written earlier for this question failed: unknown table 'heroes'" in fresh[1].content
    assert fresh[1].content.index("-- Note:") < fresh[1].content.index("Query: How many heroes are there?")
    assert [a.error is None for a in answer.attempts] == [False, False, True]


def test_a_repeat_with_a_sampling_backend_samples_repairs_and_keeps_the_majority(db_file: Path) -> None:
    wrong = "SELECT COUNT(*) FROM heroes"
    drawn: list[tuple[list, int]] = []

    def samples(messages, n):
        drawn.append((messages, n))
        return [wrong, "SELECT COUNT(*) FROM superhero", "SELECT COUNT(id) FROM superhero", "SELECT 7"]

    llm = ScriptedLLM([wrong, wrong, "There are 750."], samples=samples)
    tq = TagQL(open_database(db_file), llm, settings=on_repeat())
    answer = tq.ask("How many heroes are there?")
    assert answer.values == [750]  # two of the three that ran agree on 750; 7 stands alone
    messages, n = drawn[0]
    assert n == 4
    assert [m.role for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]  # the repairs so far
    assert "unknown table 'heroes'" in messages[-1].content
    assert [a.error is None for a in answer.attempts] == [False, False, False, True]
    assert any("2 of 4 repairs sampled" in n for n in answer.notes)


def test_sampled_repairs_that_all_fail_keep_the_error(db_file: Path) -> None:
    wrong = "SELECT COUNT(*) FROM heroes"
    llm = ScriptedLLM([wrong, wrong], samples=lambda messages, n: ["SELECT nope FROM superhero"] * n)
    tq = TagQL(open_database(db_file), llm, settings=on_repeat())
    with pytest.raises(InvalidQuery, match="heroes"):
        tq.ask("How many heroes are there?")
    assert len(llm.prompts) == 3  # first try, repair, one sampling call


def test_the_extra_try_comes_once_and_is_off_by_default(db_file: Path) -> None:
    wrong = "SELECT COUNT(*) FROM heroes"
    tq = TagQL(open_database(db_file), ScriptedLLM([wrong] * 5), settings=on_repeat())
    with pytest.raises(InvalidQuery, match="heroes"):
        tq.ask("How many heroes are there?")
    assert len(tq.llm.prompts) == 3  # first try, repair, the one fresh try
    tq = session(db_file, [wrong] * 5)
    with pytest.raises(InvalidQuery, match="heroes"):
        tq.ask("How many heroes are there?")
    assert len(tq.llm.prompts) == 2


def test_reply_without_sql_is_retried_then_reported(db_file: Path) -> None:
    tq = session(db_file, ["Sorry, I can't.", "I really cannot."])
    with pytest.raises(LLMOutputError, match="no SQL"):
        tq.ask("How many heroes?")


@pytest.mark.parametrize(
    "evil",
    [
        "DROP TABLE superhero",
        "UPDATE superhero SET height_cm = 0",
        "ATTACH DATABASE 'x.db' AS x",
        "PRAGMA writable_schema = ON",
        "SELECT 1; DELETE FROM superhero",
    ],
)
def test_llm_written_writes_never_reach_the_file(db_file: Path, evil: str) -> None:
    before = hashlib.sha256(db_file.read_bytes()).hexdigest()
    tq = session(db_file, [evil, evil])
    with pytest.raises(UnsafeQuery):
        tq.ask("Please clean up the database")
    assert hashlib.sha256(db_file.read_bytes()).hexdigest() == before


def test_empty_result_is_said_without_inventing(db_file: Path) -> None:
    tq = session(db_file, ["SELECT superhero_name FROM superhero WHERE height_cm > 1000000"])
    answer = tq.ask("Which heroes are taller than a kilometre?")
    assert answer.rows == [] and "no rows" in answer.answer
    assert answer.tokens["calls"] == 1


def test_empty_question_is_a_user_error_without_an_llm_call(db_file: Path) -> None:
    from tagql.errors import TagqlError

    tq = session(db_file, [])
    with pytest.raises(TagqlError, match="the question is empty"):
        tq.ask("   ")
    assert tq.llm.prompts == []
