"""Honest abstention (text2sql/abstain.py): each signal, the decision, the pipeline's abstained Answer and how
the CLI and the service show it. Scripted models; the real-model test is tests/test_abstain_local_model.py."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tagql.config import load_settings
from tagql.db import open_database
from tagql.llm.base import Message
from tagql.llm.scripted import ScriptedLLM
from tagql.pipeline import TagQL
from tagql.text2sql.abstain import (
    Thresholds,
    answerable_messages,
    answerable_probability,
    database_vocabulary,
    decide,
    schema_vocabulary,
    uncovered_terms,
)


@pytest.fixture()
def club(tmp_path: Path):
    path = tmp_path / "club.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE member (member_id TEXT PRIMARY KEY, first_name TEXT, last_name TEXT, "
                    "position TEXT, t_shirt_size TEXT)")
        con.executemany("INSERT INTO member VALUES (?, ?, ?, ?, ?)",
                        [("m1", "Angela", "Sanders", "President", "Medium"),
                         ("m2", "Grant", "Gilmour", "Member", "Large")])
    return open_database(path)


def probs(p_yes: float):
    """A model whose yes/no reads P(yes) = ``p_yes``; it must never be asked to write anything."""
    def choice(messages: list[Message], options: list[str]) -> list[float]:
        assert options == ["yes", "no"]
        return [p_yes, 1 - p_yes]
    return choice


# -- schema coverage ---------------------------------------------------------------------------------------

def test_uncovered_terms_name_what_the_schema_lacks(club) -> None:
    vocab = database_vocabulary(club)
    assert uncovered_terms("What is the average salary of the club members?", vocab) == ["salary"]
    assert uncovered_terms("Which member has the highest GPA?", vocab) == ["gpa"]
    # column names (split and stemmed), question words and stored values are all covered
    assert uncovered_terms("How many members have a large t-shirt size?", vocab) == []
    assert uncovered_terms("What is the position of Angela Sanders?", vocab) == []
    assert uncovered_terms("List the first names of the presidents.", vocab) == []


def test_measures_misspellings_and_names(club) -> None:
    vocab = schema_vocabulary(club.schema)
    assert vocab.covers("large") and not vocab.covers("tallest")  # no height column here
    vocab.add("height_cm")
    assert vocab.covers("tallest") and vocab.covers("shortest")  # a measure under another name
    assert vocab.covers("presidnet") and not vocab.covers("sise")  # a long word misspelt; not a short one
    vocab.add("intelligence")
    assert vocab.covers("intellegence") and not vocab.covers("intelligences_and_more")
    vocab.add_name("Ages Brookside")  # a many-valued column's value: covers a capitalised word only
    assert not vocab.covers("ages") and vocab.covers("ages", capitalised=True)


def test_stored_values_and_statements_count_as_covered(club) -> None:
    import copy

    schema = copy.deepcopy(club.schema)
    for t in schema.tables:
        for c in t.columns:
            c.samples = []
    bare = schema_vocabulary(schema)  # names and descriptions only: the name is unknown
    assert uncovered_terms("What size does Gilmour wear?", bare) == ["gilmour", "wear"]
    assert uncovered_terms("What size does Gilmour wear?", database_vocabulary(club)) == ["wear"]
    assert uncovered_terms("How many officers are there?", bare) == ["officers"]
    assert uncovered_terms("How many officers are there?", bare,
                           ["'officers' refers to position != 'Member'"]) == []


# -- the model's yes/no ------------------------------------------------------------------------------------

def test_answerable_probability_asks_after_the_sql_system_message(club) -> None:
    llm = ScriptedLLM([], choice_probs=probs(0.03))
    from tagql.text2sql.query import QuerySynthesizer

    system_message = QuerySynthesizer(club, llm).system_message()
    assert answerable_probability(llm, system_message, "What is the weather in Paris?") == pytest.approx(0.03)
    seen = llm.prompts[-1]
    assert seen[0] == system_message  # the schema prefix the SQL prompt evaluated already
    assert "What is the weather in Paris?" in seen[1].content and "Answerable:" in seen[1].content
    assert answerable_messages(system_message, "q")[0] is system_message


def test_the_prompt_shows_worked_examples_and_the_other_way_round_reads_p_no(club) -> None:
    llm = ScriptedLLM([], choice_probs=probs(0.2))
    system_message = Message("system", "schema")
    assert answerable_probability(llm, system_message, "q?") == pytest.approx(0.2)
    assert "Answerable: no (" in llm.prompts[-1][1].content  # few-shot: the bare question got "yes" always
    assert llm.prompts[-1][1].content.endswith("Question: q?\nAnswerable:")
    # asked whether something is missing, P(yes) = 0.2 means P(answerable) = P(no) = 0.8
    assert answerable_probability(llm, system_message, "q?", variant="answerable_missing") == pytest.approx(0.8)
    assert "not stored in any table" in llm.prompts[-1][1].content
    with pytest.raises(ValueError):
        answerable_probability(llm, system_message, "q?", variant="nope")


def test_without_token_probabilities_there_is_no_probability(club) -> None:
    llm = ScriptedLLM([])  # supports_choice_probs is False
    assert answerable_probability(llm, Message("system", "schema"), "anything?") is None
    assert llm.prompts == []


# -- the decision ------------------------------------------------------------------------------------------

def test_decide_combines_probability_and_coverage() -> None:
    th = Thresholds(p_alone=0.05, p_with_gap=0.5, min_uncovered=1)
    assert decide(0.01, [], th).abstain  # the model is sure on its own
    assert not decide(0.3, [], th).abstain  # unsure, and every word matches the schema
    assert decide(0.3, ["salary"], th, database="club").abstain  # unsure, and a word matches nothing
    assert not decide(0.9, ["tallest"], th).abstain  # sure it can: an unknown word alone does not refuse
    v = decide(0.2, ["salary", "bonus"], th, database="club")
    assert v.reason == ("This database (club) does not hold that: nothing in its tables, columns or values "
                        "matches 'salary', 'bonus'.")
    assert decide(0.01, [], th, database="club").reason == "This database (club) does not hold that."


def test_decide_without_probability_uses_coverage_only_when_configured() -> None:
    assert not decide(None, ["salary", "bonus"], Thresholds()).abstain  # default: never on coverage alone
    th = Thresholds(coverage_alone=2)
    assert decide(None, ["salary", "bonus"], th).abstain and not decide(None, ["salary"], th).abstain
    # with a probability too: enough unmatched words abstain even when the model says it can answer
    assert decide(0.99, ["salary", "bonus"], th).abstain and not decide(0.99, ["salary"], th).abstain


# -- the pipeline and the Answer ---------------------------------------------------------------------------

def _settings(abstain: bool, *, p_alone: float = 0.05, p_with_gap: float = 0.5, coverage_alone: int = 0):
    """Abstention on or off, with thresholds that read the model's probability (the shipped defaults decide on
    coverage alone: tested below and in test_cli_prints_and_serialises_the_abstention)."""
    settings = load_settings()
    settings.answer.abstain = abstain
    a = settings.answer
    a.abstain_p_alone, a.abstain_p_with_gap, a.abstain_coverage_alone = p_alone, p_with_gap, coverage_alone
    return settings


def test_an_unanswerable_question_gets_an_abstained_answer_and_no_sql(club) -> None:
    llm = ScriptedLLM([], choice_probs=probs(0.02))  # no replies: writing SQL would fail the test
    a = TagQL(club, llm, settings=_settings(True)).ask("What is the average salary of the club members?")
    assert a.abstained and a.sql == "" and a.rows == []
    assert a.answer == a.abstain_reason
    assert "does not hold that" in a.answer and "'salary'" in a.answer
    assert a.tokens["calls"] == 1 and "abstain_s" in a.timings
    assert a.to_dict()["abstained"] is True


def test_an_answerable_question_is_answered_as_before(club) -> None:
    sql = "SELECT COUNT(*) FROM member"
    llm = ScriptedLLM(lambda m: sql if "CREATE TABLE" in m[0].content else "There are 2 members.",
                      choice_probs=probs(0.9))
    a = TagQL(club, llm, settings=_settings(True)).ask("How many members are there?")
    assert not a.abstained and a.abstain_reason == "" and a.values == [2]
    assert a.tokens["calls"] == 2  # the yes/no and the SQL (a count is said without the model)


def test_off_by_default_and_then_no_check_and_the_same_prompts(club) -> None:
    sql = "SELECT COUNT(*) FROM member"
    asked: list[str] = []

    def choice(messages, options):
        asked.append(messages[-1].content)
        return [0.0, 1.0]

    llm = ScriptedLLM(lambda m: sql if "CREATE TABLE" in m[0].content else "2.", choice_probs=choice)
    a = TagQL(club, llm, settings=_settings(False)).ask("What is the weather in Paris?")
    assert not a.abstained and asked == [] and a.sql == sql
    assert all("Answerable:" not in m.content for p in llm.prompts for m in p)


def test_a_follow_up_is_not_judged_on_its_own(club) -> None:
    from tagql.text2sql.context import Turn

    sql = "SELECT COUNT(*) FROM member"
    llm = ScriptedLLM(lambda m: sql if "CREATE TABLE" in m[0].content else "2.", choice_probs=probs(0.0))
    a = TagQL(club, llm, settings=_settings(True)).ask("And for them?", history=[Turn("How many members?", sql)])
    assert not a.abstained and a.values == [2]


def test_a_backend_without_probabilities_answers_unless_coverage_alone_is_set(club) -> None:
    sql = "SELECT COUNT(*) FROM member"
    llm = ScriptedLLM(lambda m: sql if "CREATE TABLE" in m[0].content else "2.")
    settings = _settings(True)
    a = TagQL(club, llm, settings=settings).ask("What is the average salary bonus of members?")
    assert not a.abstained
    settings.answer.abstain_coverage_alone = 2
    a = TagQL(club, llm, settings=settings).ask("What is the average salary bonus of members?")
    assert a.abstained and "'salary', 'bonus'" in a.answer and "coverage" in a.notes[0]


# -- interfaces: the CLI and the service show the one Answer ------------------------------------------------

def test_cli_prints_and_serialises_the_abstention(demo_db_path: Path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from tagql.cli import app

    llm = ScriptedLLM([])  # the shipped thresholds: two unmatched words decide, no model call
    monkeypatch.setattr("tagql.api.make_llm", lambda *a, **k: llm)
    monkeypatch.setenv("TAGQL_ANSWER__ABSTAIN", "true")
    runner = CliRunner()
    args = ["ask", "Which superhero has the most Instagram followers?", "--db", str(demo_db_path)]
    js = runner.invoke(app, [*args, "--json"])
    assert js.exit_code == 0, js.output
    got = json.loads(js.stdout.splitlines()[-1])
    assert got["abstained"] is True and got["sql"] == "" and "'instagram', 'followers'" in got["abstain_reason"]
    assert got["tokens"]["calls"] == 0 and llm.prompts == []
    text = runner.invoke(app, args)
    assert text.exit_code == 0, text.output
    assert "answer: This database (superhero) does not hold that" in " ".join(text.output.split())


@pytest.fixture()
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_service_answer_json_carries_the_abstention(tmp_path: Path, demo_db_path: Path, monkeypatch) -> None:
    import httpx

    from tagql.service.app import create_app
    from tagql.service.state import StateStore

    monkeypatch.setenv("TAGQL_ANSWER__ABSTAIN", "true")
    monkeypatch.setenv("TAGQL_ANSWER__ABSTAIN_P_ALONE", "0.05")  # the model's yes/no decides this one
    settings = load_settings(knowledge_dir=tmp_path / "knowledge")
    assert settings.answer.abstain
    settings.service.databases = {"superhero": str(demo_db_path)}
    app = create_app(settings, llm=ScriptedLLM([], choice_probs=probs(0.01)),
                     store=StateStore(f"sqlite:///{tmp_path / 'state.sqlite'}"), host="127.0.0.1")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://tagql") as c:
        r = await c.post("/v1/ask", json={"database": "superhero", "question": "What is the weather in Paris?"})
    body = r.json()
    assert r.status_code == 200 and body["ok"] and body["abstained"] is True
    assert body["answer"].startswith("This database (superhero) does not hold that") and body["sql"] == ""


def test_the_model_is_asked_only_when_its_answer_can_change_the_decision(club) -> None:
    from tagql.text2sql.abstain import check_question

    llm = ScriptedLLM([], choice_probs=probs(0.99))
    system_message = Message("system", "schema")
    # two words match nothing: abstain on coverage, no call
    v = check_question("What is the salary bonus of Angela?", club, llm, system_message,
                       thresholds=Thresholds(p_alone=0.05, coverage_alone=2))
    assert v.abstain and v.p_answerable is None and llm.prompts == []
    # the probability thresholds are 0: never read
    v = check_question("What is Angela's salary?", club, llm, system_message,
                       thresholds=Thresholds(p_alone=0.0, p_with_gap=0.0, coverage_alone=2))
    assert not v.abstain and v.uncovered == ["salary"] and llm.prompts == []
    # otherwise it is asked
    v = check_question("What is Angela's salary?", club, llm, system_message, thresholds=Thresholds())
    assert v.p_answerable == pytest.approx(0.99) and len(llm.prompts) == 1


# -- ids and codes, the value index ---------------------------------------------------------------------------

def test_ids_and_codes_the_question_quotes_are_literals_not_words(club) -> None:
    vocab = database_vocabulary(club)
    # the letter runs of a token that mixes letters and digits are not content words
    assert uncovered_terms('What is the position of member id "rec4BLdZHS2Blfp4v"?', vocab) == []
    assert uncovered_terms("Which member has code TR001_10_11 and the LD50 salary?", vocab) == ["salary"]
    # a plain word next to a number stays a word
    assert uncovered_terms("What is the salary in 2019?", vocab) == ["salary"]


def test_the_vocabulary_reads_the_value_index_and_a_capped_column_in_full(club, tmp_path: Path) -> None:
    from tagql.db.values import ValueIndex
    from tagql.text2sql.abstain import index_values

    with sqlite3.connect(club.path) as con:
        con.execute("CREATE TABLE zip_code (city TEXT)")
        con.executemany("INSERT INTO zip_code VALUES (?)", [(f"Town{i:04d}",) for i in range(300)]
                        + [("Lincolnton",)])
    db = open_database(club.path)
    index = ValueIndex.build(db, max_distinct=250)  # the city column is capped: Lincolnton is past the cap
    assert any(c.capped for c in index.columns if c.column == "city")
    assert "Lincolnton" not in [v for _, v in index.values]
    categories, names = index_values(db, index)
    assert "Medium" in categories and "Lincolnton" in names  # the capped column was read in full
    vocab = database_vocabulary(db, index)
    assert uncovered_terms("Which member lives in Lincolnton and wears Medium?", vocab) == ["lives", "wears"]
    assert uncovered_terms("Who wears medium?", vocab) == ["wears"]


def test_the_pipeline_passes_its_value_index_to_the_gate(club, monkeypatch) -> None:
    from tagql.db import values

    built = []
    real = values.value_index

    def spy(db, cache_dir, **kw):
        built.append(db.name)
        return real(db, cache_dir, **kw)

    monkeypatch.setattr(values, "value_index", spy)
    settings = _settings(True)
    settings.answer.value_hints = False  # only the gate reads the index
    settings.answer.abstain_coverage_alone = 2
    a = TagQL(club, ScriptedLLM([]), settings=settings).ask("What is the average salary bonus of members?")
    assert a.abstained and built == [club.name]
