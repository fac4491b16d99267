"""Hybrid plans (validation before running) and the five methods, scripted LM, real SQLite DB."""

from __future__ import annotations

import json
import re

import pytest

from tagql.config import load_settings
from tagql.errors import InvalidQuery
from tagql.db.connection import open_database
from tagql.llm.scripted import ScriptedLLM
from tagql.pipeline import TagQL
from tagql.methods import METHODS, answer, is_aggregation, parse_list
from tagql.tag.operators import SemEngine
from tagql.tag.plan import Plan, PlanError, Planner, both_options, run_plan, validate_plan

PEOPLE = {"George Lucas", "J. K. Rowling", "J. R. R. Tolkien"}


@pytest.fixture
def superhero(shared_data):
    return open_database(shared_data / "bird" / "dev_databases" / "superhero" / "superhero.sqlite")


def judge(messages):
    m = re.search(r"<statement>(.*?)</statement>", messages[-1].content)
    return "yes" if m and m.group(1).split(" is ")[0] in PEOPLE else "no"


HYBRID = {
    "sql": "SELECT p.publisher_name, COUNT(*) AS heroes FROM superhero s JOIN publisher p "
           "ON s.publisher_id = p.id GROUP BY p.publisher_name ORDER BY heroes DESC",
    "operators": [{"op": "filter", "instruction": "{publisher_name} is a person, not a company"},
                  {"op": "limit", "n": 1}, {"op": "columns", "columns": ["publisher_name"]}],
}


def test_run_hybrid_plan(superhero):
    eng = SemEngine(ScriptedLLM(judge))
    run = run_plan(Plan.from_obj(json.loads(json.dumps(HYBRID))), superhero, eng)
    assert run.result.columns == ["publisher_name"]
    assert run.result.rows[0][0] in PEOPLE
    assert [t["step"] for t in run.trace] == ["sql", "filter", "limit", "columns"]


@pytest.mark.parametrize("bad, msg", [
    ({"sql": "SELECT nope FROM superhero", "operators": []}, "SQL is invalid"),
    ({"sql": "DELETE FROM superhero", "operators": []}, "SQL is invalid"),
    ({"sql": "SELECT superhero_name FROM superhero", "operators": [{"op": "explode"}]}, "unknown operator"),
    ({"sql": "SELECT superhero_name FROM superhero",
      "operators": [{"op": "filter", "instruction": "{full_name} is a woman"}]}, "references column 'full_name'"),
    ({"sql": "SELECT superhero_name FROM superhero",
      "operators": [{"op": "count"}, {"op": "filter", "instruction": "{superhero_name} is cool"}]},
     "references column 'superhero_name'"),
    ({"sql": "SELECT superhero_name FROM superhero",
      "operators": [{"op": "agg", "instruction": "Summarize"}, {"op": "count"}]}, "must be the last"),
    ({"sql": "SELECT superhero_name FROM superhero", "operators": [{"op": "topk", "instruction": "{superhero_name}"}]},
     "k >= 1"),
])
def test_invalid_plans_rejected_before_any_lm_call(superhero, bad, msg):
    llm = ScriptedLLM([])
    with pytest.raises(PlanError, match=msg):
        validate_plan(Plan.from_obj(bad), superhero, SemEngine(llm))
    assert llm.usage.calls == 0


def test_planner_repairs_an_invalid_plan(superhero):
    bad = json.dumps({"sql": "SELECT superhero_name FROM superhero",
                      "operators": [{"op": "filter", "instruction": "{name} is a woman"}]})
    llm = ScriptedLLM(["yes", bad, json.dumps(HYBRID)])
    plan, attempts = Planner(superhero, llm, SemEngine(llm)).make("Which person publisher has most heroes?")
    assert plan.operators[0]["op"] == "filter"
    assert attempts[0]["needs_lm_operators"] is True
    assert attempts[0]["similar_questions"] == ["Which record companies are named after a person?",
                                                ("Which maker has more models: the maker of the Corvette or the "
                                                 "maker of the Mustang? Give the maker's full name.")]
    assert "Solved questions of a similar shape" in llm.prompts[1][-1].content  # shown before the question
    assert llm.prompts[1][-1].content.index("Which record companies") < llm.prompts[1][-1].content.index(
        "Question: Which person publisher")
    assert attempts[1]["error"] and "name" in attempts[1]["error"] and attempts[2]["error"] is None
    assert "This question needs the language model" in llm.prompts[1][-1].content
    assert llm.prompts[0][0] == llm.prompts[1][0]  # the yes/no question shares the plan's system prefix
    assert "invalid" in llm.prompts[2][-1].content


def session(db, fn):
    return TagQL(db, ScriptedLLM(fn), settings=load_settings(cache_dir="/nonexistent-unused"))


def test_tag_method_end_to_end(superhero, tmp_path):
    def fn(messages):
        if "Does answering" in messages[-1].content:
            return "yes"
        if "Question:" in messages[-1].content and "plan" in messages[0].content:
            return json.dumps(HYBRID)
        return judge(messages)

    s = TagQL(superhero, ScriptedLLM(fn), settings=load_settings(cache_dir=str(tmp_path)))
    a = answer(s, "Which publisher that is a person has the most heroes?", "tag")
    assert a.method == "tag" and a.values and a.values[0] in PEOPLE
    assert a.plan.operators[0]["op"] == "filter" and not a.plan.relational
    # plan + filter calls in heroes-count order until the first person passes (filter + limit 1 stops early)
    assert 2 < a.tokens["calls"] < 2 + 25
    d = a.to_dict()
    assert d["plan"]["sql"].startswith("SELECT") and d["tokens"]["calls"] == a.tokens["calls"]
    assert json.loads(json.dumps(d))["method"] == "tag"  # the --json output is serialisable
    # a second run hits the persistent operator cache: only the plan call
    a2 = answer(s, "Which publisher that is a person has the most heroes?", "tag")
    assert a2.tokens["calls"] == 2 and a2.values == a.values  # classify + plan


def test_relational_question_is_plain_sql(superhero, tmp_path):
    plan = {"sql": "SELECT COUNT(*) FROM superhero", "operators": []}
    s = TagQL(superhero, ScriptedLLM(["no", json.dumps(plan)]), settings=load_settings(cache_dir=str(tmp_path)))
    a = answer(s, "How many superheroes are there?", "tag")
    assert a.values == [750] and a.plan.relational and a.tokens["calls"] == 2


def test_baselines(superhero, tmp_path):
    st = load_settings(cache_dir=str(tmp_path))
    sql = "SELECT superhero_name FROM superhero WHERE height_cm > 250 ORDER BY superhero_name"
    a = answer(TagQL(superhero, ScriptedLLM([sql]), settings=st), "Which heroes are taller than 250 cm?", "text2sql")
    assert a.values and a.tokens["calls"] == 1
    llm = ScriptedLLM([sql, '["Galactus", "Ymir"]'])
    a = answer(TagQL(superhero, llm, settings=st), "Which heroes are taller than 250 cm?", "text2sql_lm")
    assert a.values == ["Galactus", "Ymir"] and a.tokens["calls"] == 2
    assert "evaluatable in Python" in llm.prompts[1][0].content


def test_rag_and_retrieval_rank(superhero, tmp_path, monkeypatch):
    import numpy as np

    import tagql.methods as m

    texts = [f"Table publisher:\n- publisher_name: P{i}" for i in range(40)]

    class FakeEmb:  # the session's embedder, passed in (no process-wide default is fetched)
        name, dim = "fake", 40

        def embed(self, t, batch_size=128):
            return np.eye(40)[:1]

    monkeypatch.setitem(m._ROW_INDEX, (str(superhero.path), "fake"), (texts, np.eye(40)))
    st = load_settings(cache_dir=str(tmp_path))
    llm = ScriptedLLM(['["P0"]'])
    a = answer(TagQL(superhero, llm, settings=st, embedder=FakeEmb()), "Which publisher is first?", "rag")
    assert a.values == ["P0"] and a.tokens["calls"] == 1 and len(a.rows) == 10
    llm = ScriptedLLM(lambda msgs: "5" if "Score" in msgs[-1].content else '["P3"]')
    a = answer(TagQL(superhero, llm, settings=st, embedder=FakeEmb()), "Which publisher is first?", "retrieval_rank")
    assert a.values == ["P3"] and a.tokens["calls"] == 31  # 30 re-scores + answer


def test_helpers():
    assert parse_list('["a", 2]') == ["a", 2] and parse_list("[]") == [] and parse_list("[a, b]") == ["a", "b"]
    assert is_aggregation("Summarize the comments on the post") and not is_aggregation("How many heroes?")
    assert set(METHODS) == {"tag", "text2sql", "rag", "retrieval_rank", "text2sql_lm"}


def test_tag_falls_back_to_text2sql_lm_without_a_valid_plan(superhero, tmp_path):
    sql = "SELECT superhero_name FROM superhero WHERE height_cm > 250"
    llm = ScriptedLLM(["no", "not json", "still not json", sql, '["Galactus"]'])
    s = TagQL(superhero, llm, settings=load_settings(cache_dir=str(tmp_path)))
    a = answer(s, "Which heroes are taller than 250 cm?", "tag")
    assert a.values == ["Galactus"] and a.plan.fallback == "text2sql_lm" and "no valid plan" in a.notes[0]


def test_when_plan_and_fallback_both_fail_the_error_keeps_what_the_planner_tried(superhero, tmp_path):
    bad = "SELECT superhero_name FROM superhero WHERE no_such_column > 250"
    llm = ScriptedLLM(["no", "not json", "still not json", bad, bad])
    s = TagQL(superhero, llm, settings=load_settings(cache_dir=str(tmp_path)))
    with pytest.raises(InvalidQuery) as err:
        answer(s, "Which heroes are taller than 250 cm?", "tag")
    assert [a.sql for a in err.value.attempts] == [bad, bad]  # the SQL fallback's tries
    tried = err.value.plan_attempts  # and the planner's, before it
    assert [t.get("plan") for t in tried[1:]] == ["not json", "still not json"]
    assert all(t["error"] for t in tried[1:])
    assert "not valid JSON" in err.value.plan_error or "no JSON plan" in err.value.plan_error  # and why


def test_summary_question_without_agg_operator_is_summarised(superhero, tmp_path):
    plan = {"sql": "SELECT superhero_name FROM superhero WHERE height_cm > 900", "operators": []}
    llm = ScriptedLLM(["no", json.dumps(plan), "Two giants: Godzilla and Galactus."])
    s = TagQL(superhero, llm, settings=load_settings(cache_dir=str(tmp_path)))
    a = answer(s, "Summarize the heroes taller than 9 m.", "tag")
    assert a.answer.startswith("Two giants") and "Data Point 1" in llm.prompts[2][-1].content


def test_guessed_value_lists_on_judged_columns_are_dropped(superhero):
    from tagql.tag.plan import relax_guessed_values

    plan = Plan.from_obj({"sql": "SELECT element FROM atom WHERE element IN ('Na', 'K') AND molecule_id = 'TR1'",
                          "operators": [{"op": "filter", "instruction": "{element} is an alkali metal"}]})
    removed = relax_guessed_values(plan)
    assert removed == ["element IN ('Na', 'K')"]
    assert "IN" not in plan.sql and "molecule_id = 'TR1'" in plan.sql
    keep = Plan.from_obj({"sql": "SELECT element FROM atom WHERE element IN ('Na', 'K')", "operators": []})
    assert relax_guessed_values(keep) == [] and "IN" in keep.sql


def test_guessed_single_value_on_judged_column_is_dropped():
    from tagql.tag.plan import relax_guessed_values

    plan = Plan.from_obj({"sql": "SELECT m.first_name, z.state FROM member m JOIN zip_code z ON m.zip = z.zip_code "
                                 "WHERE z.state = 'CA' AND m.position = 'Member'",
                          "operators": [{"op": "filter", "instruction": "{state} is on the Pacific coast"}]})
    assert relax_guessed_values(plan) == ["z.state = 'CA'"]
    assert "'CA'" not in plan.sql and "m.position = 'Member'" in plan.sql


@pytest.mark.parametrize("instruction, columns, expected", [
    ("element is a halogen", ["element", "n"], "{element} is a halogen"),
    ("{T1.element} is a halogen", ["element"], "{element} is a halogen"),
    ("{atom.element} is a halogen", ["element"], "{element} is a halogen"),
    ("is a halogen", ["element"], "{element}: is a halogen"),
    ("the statement is true", ["first_name", "state"], "the statement is true"),  # 'state' only inside a word
    ("{state} is western", ["state"], "{state} is western"),
    ("{Department} is 'Foreign Languages'}", ["Department"], "{Department} is 'Foreign Languages'"),
    ("{{T1.state} is western", ["state"], "{state} is western"),
    ("{state is western", ["state"], "{state} is western"),  # the lone brace goes, then the word gets braces
])
def test_column_references_small_models_get_wrong_are_normalised(instruction, columns, expected):
    from tagql.tag.plan import normalize_instruction

    assert normalize_instruction(instruction, columns) == expected


def test_validated_plan_shows_the_normalised_instruction(superhero):
    plan = Plan.from_obj({"sql": "SELECT superhero_name FROM superhero",
                          "operators": [{"op": "filter", "instruction": "superhero_name is a woman"}]})
    validate_plan(plan, superhero, SemEngine(ScriptedLLM([])))
    assert plan.operators[0]["instruction"] == "{superhero_name} is a woman"


EMPTY = {"sql": "SELECT superhero_name FROM superhero WHERE height_cm > 100000",
         "operators": [{"op": "filter", "instruction": "{superhero_name} is a woman"}]}
FULL = {"sql": "SELECT superhero_name FROM superhero WHERE height_cm > 900",
        "operators": [{"op": "filter", "instruction": "{superhero_name} is a woman"}]}


def test_plan_whose_sql_finds_nothing_is_repaired(superhero):
    llm = ScriptedLLM(["yes", json.dumps(EMPTY), json.dumps(FULL)])
    plan, attempts = Planner(superhero, llm, SemEngine(llm)).make("Which giant heroes are women?")
    assert plan.sql == FULL["sql"]
    assert "returns no rows" in attempts[1]["error"] and "returns no rows" in llm.prompts[2][-1].content


def test_plan_that_stays_empty_is_kept_rather_than_dropped(superhero):
    llm = ScriptedLLM(["yes", json.dumps(EMPTY), "not a plan"])
    plan, attempts = Planner(superhero, llm, SemEngine(llm)).make("Which giant heroes are women?")
    assert plan.sql == EMPTY["sql"] and attempts[-1]["empty_result"] is True


ON_GENDER = {"sql": "SELECT s.superhero_name FROM superhero AS s JOIN gender AS g ON s.gender_id = g.id "
                    "WHERE LM_FILTER('{gender} is a publisher named after a person', g.gender)", "operators": []}
ON_PUBLISHER = {"sql": "SELECT s.superhero_name FROM superhero AS s JOIN publisher AS p ON s.publisher_id = p.id "
                       "WHERE LM_FILTER('{publisher_name} is named after a person', p.publisher_name)",
                "operators": []}


def scripted_planner(db, plans, *, column="superhero.full_name", check=2000):
    """A planner whose LM says operators are needed, writes ``plans`` in turn, judges a statement true only
    of the people in :data:`PEOPLE`, picks ``column`` when asked which column can tell, and states a
    criterion on a column as "{column} is named after a person"."""
    replies = ["yes", *(json.dumps(p) for p in plans)]

    def reply(messages):
        last = messages[-1].content
        if "<statement>" in last:
            return judge(messages)
        if last.endswith("Column:"):
            return column
        m = re.search(r"Column: \w+\.(\w+) \(values look like[^\n]*\nStatement:$", last)
        if m:
            return "{%s} is named after a person" % m.group(1)
        return replies.pop(0)

    llm = ScriptedLLM(reply)
    return Planner(db, llm, SemEngine(llm, max_calls=5000, cascade="off"), filter_check_inputs=check), llm


def test_a_filter_false_for_every_value_of_its_column_moves_to_a_column_that_can_tell(superhero):
    planner, llm = scripted_planner(superhero, [ON_GENDER], column="superhero.full_name", check=50)
    plan, attempts = planner.make("Which heroes come from a publisher named after a person?")
    # the gender join only the wrong column read is gone; full_name's 400+ values are over the check's bound
    assert plan.sql == ("SELECT s.superhero_name FROM superhero AS s "
                        "WHERE LM_FILTER('{full_name} is named after a person', s.full_name)")
    assert attempts[1]["filter_moved"] == [
        "LM_FILTER('{gender} is a publisher named after a person', g.gender) -> "
        "LM_FILTER('{full_name} is named after a person', s.full_name)", "dropped the join of gender"]
    choice = next(p[-1].content for p in llm.prompts if p[-1].content.endswith("Column:"))
    assert "false for every value of g.gender" in choice and "superhero.full_name (values look like: " in choice
    assert 'root ::= "superhero.superhero_name" | "superhero.full_name"' in llm.constraints


def test_a_filter_still_passing_none_goes_back_to_the_model_with_the_columns_to_judge(superhero):
    planner, llm = scripted_planner(superhero, [ON_GENDER, ON_PUBLISHER])
    plan, attempts = planner.make("Which heroes come from a publisher named after a person?")
    assert plan.sql == ON_PUBLISHER["sql"]
    assert "filter_moved" in attempts[1]
    error = attempts[2]["error"]  # the moved filter judged every full name false too
    assert "LM_FILTER('{full_name} is named after a person', s.full_name) is false for all" in error
    assert "judge a column that does instead; superhero: superhero_name" in error
    calls = llm.usage.calls
    run = run_plan(plan, superhero, planner.engine)  # the verdicts judged while planning are the statement's
    assert llm.usage.calls == calls and {r[0] for r in run.result.rows} and run.result.rows


def test_a_filter_passing_none_is_kept_when_the_check_is_off_or_the_column_too_varied(superhero):
    for check in (0, 2):  # off, or gender's 3 values over the bound: the plan stands as written
        planner, llm = scripted_planner(superhero, [ON_GENDER], check=check)
        plan, attempts = planner.make("Which heroes come from a publisher named after a person?")
        assert plan.sql == ON_GENDER["sql"] and len(attempts) == 2 and llm.usage.calls == 2


def test_a_filter_passing_none_on_every_try_keeps_the_first_plan(superhero):
    planner, _ = scripted_planner(superhero, [ON_GENDER, ON_GENDER, ON_GENDER])
    plan, attempts = planner.make("Which heroes come from a publisher named after a person?")
    assert plan.sql == ON_GENDER["sql"] and attempts[-1]["empty_result"] is True


def test_guessed_values_become_lm_filters_on_hybrid_plans(superhero):
    guess = {"sql": "SELECT publisher_name FROM publisher WHERE publisher_name IN ('Lucasfilm', 'Rowling Books')",
             "operators": [{"op": "count"}]}
    llm = ScriptedLLM(["yes", json.dumps(guess), "{publisher_name} is named after a person"])
    plan, attempts = Planner(superhero, llm, SemEngine(llm)).make("How many publishers are named after a person?")
    assert plan.sql == ("SELECT publisher_name FROM publisher "
                        "WHERE LM_FILTER('{publisher_name} is named after a person', publisher_name)")
    assert attempts[1]["guesses_to_lm_filter"][0].startswith("publisher_name IN ('Lucasfilm', 'Rowling Books') ->")
    assert "publisher.publisher_name" in llm.prompts[2][-1].content  # the criterion call names the column


def test_a_guessed_not_like_becomes_a_negated_lm_filter(shared_data):
    club = open_database(shared_data / "bird" / "dev_databases" / "student_club" / "student_club.sqlite")
    sql = ("SELECT SUM(CASE WHEN zip_code.state LIKE '%Atlantic Coast%' THEN 1 ELSE 0 END) AS atlantic, "
           "SUM(CASE WHEN zip_code.state NOT LIKE '%Atlantic Coast%' THEN 1 ELSE 0 END) AS other "
           "FROM member JOIN zip_code ON member.zip = zip_code.zip_code")
    guess = {"sql": sql, "operators": []}
    llm = ScriptedLLM(["yes", json.dumps(guess), "{state} is an Atlantic coast state",
                       "{state} is an Atlantic coast state"])
    plan, _ = Planner(club, llm, SemEngine(llm), exemplars=0).make(
        "Do more members live in Atlantic coast states or in other states?")
    f = "LM_FILTER('{state} is an Atlantic coast state', zip_code.state)"
    assert f"CASE WHEN {f} THEN 1" in plan.sql and f"CASE WHEN NOT {f} THEN 1" in plan.sql


@pytest.mark.parametrize("where, question", [
    ("superhero_name = 'Batman'", "What is Batman's full name?"),  # named in the question and stored
    ("superhero_name IN ('Batman', 'Superman')", "Who is heavier, Batman or Superman?"),
    ("full_name = 'Bruce Wayne'", "Which hero is the best?"),  # one stored value: SQL can decide it
    ("publisher_id = 'unknown'", "Which heroes are from an unknown publisher?"),  # an id: not for the LM
])
def test_values_the_question_or_data_supports_are_not_guesses(superhero, where, question):
    from tagql.tag.plan import guessed_comparisons

    assert guessed_comparisons(f"SELECT superhero_name FROM superhero WHERE {where}", superhero, question) == []


def test_fallback_sql_whose_judged_guess_passes_none_moves_the_filter(superhero, tmp_path):
    sql = ("SELECT DISTINCT p.publisher_name FROM publisher AS p JOIN superhero AS s ON s.publisher_id = p.id "
           "JOIN gender AS g ON s.gender_id = g.id WHERE g.gender = 'Person'")

    def reply(messages):
        last = messages[-1].content
        if "<statement>" in last:
            return judge(messages)
        if last.endswith("Column:"):
            return "publisher.publisher_name"
        m = re.search(r"Column: \w+\.(\w+) \(values look like[^\n]*\nStatement:$", last)
        return "{%s} is a person" % m.group(1) if m else replies.pop(0)

    replies = ["yes", "no plan", "still no plan", sql, '["George Lucas"]']
    s = TagQL(superhero, ScriptedLLM(reply), settings=load_settings(cache_dir=str(tmp_path)))
    a = answer(s, "Which publishers of heroes are people?", "tag")
    assert a.plan.fallback == "text2sql_lm" and "g.gender" not in a.sql and "JOIN gender" not in a.sql
    assert a.plan.guesses_to_lm_filter[1:] == [
        "LM_FILTER('{gender} is a person', g.gender) -> LM_FILTER('{publisher_name} is a person', p.publisher_name)",
        "dropped the join of gender"]
    assert {r[0] for r in a.rows} == PEOPLE and not replies


def test_guessed_like_pattern_on_a_judged_column_is_dropped():
    from tagql.tag.plan import relax_guessed_values

    plan = Plan.from_obj({"sql": "SELECT element FROM atom WHERE element LIKE 'alkali%'",
                          "operators": [{"op": "filter", "instruction": "{element} is an alkali metal"}]})
    assert relax_guessed_values(plan) == ["element LIKE 'alkali%'"] and "LIKE" not in plan.sql


def test_fallback_sql_of_a_hybrid_question_judges_instead_of_guessing(superhero, tmp_path):
    sql = "SELECT publisher_name FROM publisher WHERE publisher_name IN ('Lucasfilm', 'Rowling Books')"
    def reply(messages):
        if "<statement>" in messages[-1].content:
            return judge(messages)
        return replies.pop(0)

    replies = ["yes", "no plan", "still no plan", sql, "{publisher_name} is a person", '["George Lucas"]']
    llm = ScriptedLLM(reply)
    s = TagQL(superhero, llm, settings=load_settings(cache_dir=str(tmp_path)))
    a = answer(s, "Which publishers are people?", "tag")
    assert a.plan.fallback == "text2sql_lm" and "LM_FILTER" in a.sql
    assert a.plan.guesses_to_lm_filter and a.values == ["George Lucas"]
    assert {r[0] for r in a.rows} == PEOPLE  # the filter judged every stored publisher


def test_a_plan_that_fails_when_it_runs_falls_back_instead_of_failing(superhero, tmp_path):
    """The LM-call cap stops the plan's filter: the question is still answered (text2sql_lm), the failed
    plan and the reason are kept, and the spent cap is not used again for guessed values."""
    plan = {"sql": "SELECT superhero_name FROM superhero",
            "operators": [{"op": "filter", "instruction": "{superhero_name} is a villain"}]}
    sql = "SELECT superhero_name FROM superhero WHERE height_cm > 900"

    def reply(messages):
        if "<statement>" in messages[-1].content:
            return "no"
        return replies.pop(0)

    replies = ["yes", json.dumps(plan), sql, '["Galactus"]']
    st = load_settings(cache_dir=str(tmp_path))
    st.tag.max_lm_calls = 3
    a = answer(TagQL(superhero, ScriptedLLM(reply), settings=st), "Which heroes are villains?", "tag")
    assert a.values == ["Galactus"] and a.sql == sql and not replies
    assert a.plan.fallback == "text2sql_lm" and "stopped after 3 LM calls" in a.plan.error
    assert a.plan.failed_plan["operators"][0]["op"] == "filter"
    assert a.notes[0].startswith("the plan failed (")


def test_double_quoted_guesses_are_read_as_sqlite_reads_them(superhero):
    """SQLite reads "Lucasfilm" as a string when no column has that name; so does the guess detection."""
    guess = {"sql": 'SELECT publisher_name FROM publisher WHERE publisher_name IN ("Lucasfilm", "Rowling Books")',
             "operators": [{"op": "count"}]}
    llm = ScriptedLLM(["yes", json.dumps(guess), "{publisher_name} is named after a person"])
    plan, _ = Planner(superhero, llm, SemEngine(llm)).make("How many publishers are named after a person?")
    assert "LM_FILTER('{publisher_name} is named after a person', publisher_name)" in plan.sql


def test_guesses_are_read_after_validation_adds_a_missing_join(shared_data):
    """``budget.category`` without ``budget`` in FROM has no owner until the join repair adds it."""
    db = open_database(shared_data / "bird" / "dev_databases" / "student_club" / "student_club.sqlite")
    guess = {"sql": "SELECT COUNT(*) FROM expense WHERE budget.category IN ('Food', 'Drinks')",
             "operators": [{"op": "count"}]}
    llm = ScriptedLLM(["yes", json.dumps(guess), "{category} is food or drink"])
    plan, attempts = Planner(db, llm, SemEngine(llm)).make("How many expense records were spent on food or drinks?")
    assert "JOIN budget" in plan.sql and "LM_FILTER('{category} is food or drink'" in plan.sql
    assert any("guesses_to_lm_filter" in a for a in attempts)


def test_value_question_with_a_trailing_agg_answers_with_the_values(superhero, tmp_path):
    plan = {"sql": "SELECT COUNT(*) FROM superhero WHERE height_cm > 900",
            "operators": [{"op": "agg", "instruction": "Summarize the count"}]}
    llm = ScriptedLLM(["no", json.dumps(plan)])
    s = TagQL(superhero, llm, settings=load_settings(cache_dir=str(tmp_path)))
    a = answer(s, "How many heroes are taller than 9 m?", "tag")
    gold = superhero.execute("SELECT COUNT(*) FROM superhero WHERE height_cm > 900").rows[0][0]
    assert a.values == [gold] and a.plan.operators == []
    assert any("dropped" in x for x in a.plan.attempts) and llm.usage.calls == 2  # no summary call


def test_an_operator_over_an_identifier_column_is_refused_before_it_runs(shared_data):
    db = open_database(shared_data / "bird" / "dev_databases" / "toxicology" / "toxicology.sqlite")
    bad = {"sql": "SELECT atom_id2 FROM connected", "operators": [
        {"op": "filter", "instruction": "{atom_id2} is a unique identifier for atoms in a molecule"}]}
    good = {"sql": "SELECT element FROM atom", "operators": [{"op": "filter", "instruction": "{element} is a halogen"}]}
    llm = ScriptedLLM(["yes", json.dumps(bad), json.dumps(good)])
    plan, attempts = Planner(db, llm, SemEngine(llm)).make("How many atoms are halogens?")
    assert plan.sql == good["sql"] and "identifier column" in attempts[1]["error"]
    assert llm.usage.calls == 3  # refused by validation: not one judgement over the 24,758 ids


@pytest.mark.parametrize("name, is_id", [("atom_id2", True), ("molecule_id", True), ("element", False),
                                         ("label", False)])
def test_identifier_columns_are_keys_named_like_ids(shared_data, name, is_id):
    from tagql.tag.plan import identifier_columns

    db = open_database(shared_data / "bird" / "dev_databases" / "toxicology" / "toxicology.sqlite")
    assert (name in identifier_columns(db)) is is_id


# -- sort, SQL-only plans for hybrid questions, offered answers ----------------------------------------------

@pytest.mark.parametrize("values, desc, expected", [
    (["39.5 million", "29", "8,336,817", None, "about 3 thousand"], True,
     ["39.5 million", "8,336,817", "about 3 thousand", "29", None]),
    (["39.5 million", "29", "8,336,817", None, "about 3 thousand"], False,
     ["29", "about 3 thousand", "8,336,817", "39.5 million", None]),
    ([3, "Washington", 1.5, "apple"], True, [3, 1.5, "Washington", "apple"]),
    ([3, "Washington", 1.5, "apple"], False, [1.5, 3, "apple", "Washington"]),
])
def test_sort_orders_numbers_as_numbers_then_text_then_missing(values, desc, expected):
    from tagql.tag.plan import sort_rows

    assert [r[0] for r in sort_rows(["x"], [(v,) for v in values], "x", desc=desc)] == expected


def test_map_then_sort_plan_ranks_by_the_mapped_number(superhero):
    plan = Plan.from_obj({"sql": "SELECT publisher_name FROM publisher WHERE publisher_name IN "
                                 "('DC Comics', 'Marvel Comics', 'Image Comics')",
                          "operators": [{"op": "map", "instruction": "the founding year of {publisher_name}",
                                         "column": "year"},
                                        {"op": "sort", "column": "YEAR"},
                                        {"op": "columns", "columns": ["publisher_name"]}]})
    years = {"DC Comics": "1934", "Marvel Comics": "founded in 1939", "Image Comics": "1992"}
    def founded(messages):
        record = re.search(r"<record>(.*?)</record>", messages[-1].content).group(1)
        return next(year for name, year in years.items() if name in record)

    eng = SemEngine(ScriptedLLM(founded))
    run = run_plan(plan, superhero, eng)
    assert [r[0] for r in run.result.rows] == ["DC Comics", "Marvel Comics", "Image Comics"]
    assert plan.operators[1] == {"op": "sort", "column": "year", "desc": False}  # validated: the real name


def test_sort_on_a_missing_column_is_refused_before_any_lm_call(superhero):
    plan = Plan.from_obj({"sql": "SELECT superhero_name FROM superhero",
                          "operators": [{"op": "sort", "column": "height"}]})
    llm = ScriptedLLM([])
    with pytest.raises(PlanError, match="'column' to sort by"):
        validate_plan(plan, superhero, SemEngine(llm))
    assert llm.prompts == []


SQL_ONLY = {"sql": "SELECT superhero_name FROM superhero ORDER BY LENGTH(superhero_name) LIMIT 3", "operators": []}


def test_a_plan_uses_the_language_model_through_an_operator_or_an_lm_function():
    from tagql.tag.plan import uses_language_model

    assert not uses_language_model(Plan.from_obj(SQL_ONLY))
    assert uses_language_model(Plan.from_obj({"sql": "SELECT SUM(LM_FILTER('{a} is x', a)) FROM t", "operators": []}))


def test_a_missing_date_part_is_read_from_the_stored_date(shared_data):
    """``ORDER BY T1.month`` on ``event``: STRFTIME over ``event_date``, not a fact asked of the LM; a
    date part used elsewhere goes back to the LLM with the same advice."""
    club = open_database(shared_data / "bird" / "dev_databases" / "student_club" / "student_club.sqlite")
    ordered = {"sql": "SELECT T1.event_name FROM event AS T1 ORDER BY T1.month", "operators": []}
    llm = ScriptedLLM(["yes", json.dumps(ordered)])
    plan, attempts = Planner(club, llm, SemEngine(llm)).make("List the meetings in calendar-month order.")
    assert plan.sql == "SELECT T1.event_name FROM event AS T1 ORDER BY STRFTIME('%m', T1.event_date)"
    assert attempts[1] == {"invented_to_lm_number": ["T1.month -> STRFTIME('%m', T1.event_date)"]}
    compared = {"sql": "SELECT event_name FROM event WHERE month = 10", "operators": []}
    fixed = {"sql": "SELECT event_name FROM event WHERE STRFTIME('%m', event_date) = '10'", "operators": []}
    llm = ScriptedLLM(["yes", json.dumps(compared), json.dumps(fixed)])
    plan, _ = Planner(club, llm, SemEngine(llm)).make("Which events were held in October?")
    assert "STRFTIME('%m', event.event_date)" in llm.prompts[2][-1].content
    assert "LM_NUMBER" not in llm.prompts[2][-1].content and plan.sql == fixed["sql"]


def test_sql_only_plan_for_a_hybrid_question_is_kept_and_marked(superhero):
    llm = ScriptedLLM(["yes", json.dumps(SQL_ONLY)])
    plan, attempts = Planner(superhero, llm, SemEngine(llm)).make("Which three heroes have the shortest names?")
    assert plan.sql == SQL_ONLY["sql"] and attempts[-1]["no_lm"] is True and llm.usage.calls == 2


def test_a_hybrid_plan_naming_a_missing_column_is_told_to_map_the_fact(superhero):
    invented = {"sql": "SELECT publisher_name, founding_year FROM publisher", "operators": []}
    mapped = {"sql": "SELECT publisher_name FROM publisher",
              "operators": [{"op": "map", "instruction": "the founding year of {publisher_name}", "column": "year"},
                            {"op": "sort", "column": "year"}]}
    llm = ScriptedLLM(["yes", json.dumps(invented), json.dumps(mapped)])
    plan, attempts = Planner(superhero, llm, SemEngine(llm), unplaced_columns_to_lm=False).make(
        "List the publishers from oldest to newest.")
    assert "founding_year" in attempts[1]["error"] and "LM_NUMBER(" in llm.prompts[2][-1].content
    assert plan.operators[1]["op"] == "sort"
    # a relational question's missing column is only reported
    llm = ScriptedLLM(["no", json.dumps(invented), json.dumps(SQL_ONLY)])
    _, attempts = Planner(superhero, llm, SemEngine(llm)).make("List the publishers by founding year.")
    assert "LM_NUMBER" not in llm.prompts[2][-1].content


@pytest.mark.parametrize("question, choices", [
    ("Are there more halogen atoms or alkali metal atoms? Answer 'halogen' or 'alkali metal'.",
     ["halogen", "alkali metal"]),
    ('Which is bigger? Reply with "a", "b" or "c".', ["a", "b", "c"]),
    ("Which publisher has more superheroes? Give the publisher name.", []),
])
def test_offered_choices(question, choices):
    from tagql.methods import offered_choices

    assert offered_choices(question) == choices


def test_comparison_plan_result_is_turned_into_the_offered_answer(superhero, tmp_path):
    counts = {"sql": "SELECT SUM(LM_FILTER('{publisher_name} is a person', publisher_name)) AS people, "
                     "SUM(1 - LM_FILTER('{publisher_name} is a person', publisher_name)) AS companies FROM publisher",
              "operators": []}

    def fn(messages):
        last = messages[-1].content
        if "Does answering" in last:
            return "yes"
        if "offers its possible answers" in messages[0].content:
            assert "people: 3" in last and "companies: " in last  # the LM reads the counts it compares
            assert re.search(r"From largest to smallest: companies \(\d+\), people \(3\)", last)
            return '"companies"'
        if "plan" in messages[0].content:
            return json.dumps(counts)
        return judge(messages)

    s = TagQL(superhero, ScriptedLLM(fn), settings=load_settings(cache_dir=str(tmp_path)))
    # no "more"/"fewer": the numbers do not say which way the question compares, so the LM decides
    a = answer(s, "Are publishers mostly people or companies? Answer 'people' or 'companies'.", "tag")
    assert a.values == ["companies"] and a.plan.chose == {"from": ["people", "companies"], "picked": "companies"}


def test_rows_labelled_with_the_offered_answers_are_tallied_for_the_chooser(superhero, tmp_path):
    """A plan that labels each hero instead of counting (seen on the dev set): the chooser is told how many
    rows carry each offered answer, most first, including an answer no row carries."""
    labels = {"sql": "SELECT CASE WHEN superhero_name LIKE '% %' THEN 'several words' ELSE 'one word' END AS kind "
                     "FROM superhero", "operators": []}
    n_multi = superhero.execute("SELECT COUNT(*) FROM superhero WHERE superhero_name LIKE '% %'").rows[0][0]
    n_one = superhero.execute("SELECT COUNT(*) FROM superhero").rows[0][0] - n_multi
    assert n_one > n_multi > 0
    seen = []

    def fn(messages):
        last = messages[-1].content
        if "Does answering" in last:
            return "no"
        if "offers its possible answers" in messages[0].content:
            seen.append(last)
            return '"one word"'
        return json.dumps(labels)

    s = TagQL(superhero, ScriptedLLM(fn), settings=load_settings(cache_dir=str(tmp_path)))
    q = "Do heroes mostly have a one-word name, a name of several words, or no name? Answer 'one word', 'several words' or 'none'."
    a = answer(s, q, "tag")
    assert a.values == ["one word"]
    # asked with "more", the tally itself decides, without the LM
    a = answer(s, q.replace("Do heroes mostly have", "Do more heroes have"), "tag")
    assert a.values == ["one word"] and len(seen) == 1
    assert f"Rows per answer, from most to fewest: one word ({n_one}), several words ({n_multi}), none (0)" in seen[0]


def test_flag_columns_are_totalled_for_the_chooser():
    """A plan that marks each row 1/0 per answer instead of counting (seen on the dev set: `single` and
    `double` flags over a molecule's 25 bonds): the chooser is told each column's total, largest first."""
    from tagql.db.connection import Result
    from tagql.methods import magnitudes

    flags = Result(sql="", columns=["single", "double"], rows=[(1, 0)] * 21 + [(0, 1)] * 4)
    assert magnitudes(flags, ["single", "double"]) == \
        "\nTotals over the 25 rows, from largest to smallest: single (21), double (4)"
    # ids or measurements are not flags: nothing is added
    assert magnitudes(Result(sql="", columns=["id", "single"], rows=[(7, 1), (8, 0)]), ["single", "double"]) == ""


@pytest.mark.parametrize("question, columns, rows, expected", [
    # two counts named after the answers, one row (seen on the dev set: the 1.5B model picked "double")
    ("Are there more single bonds or double bonds? Answer 'single' or 'double'.",
     ["single_bonds", "double_bonds"], [(41, 3)], "single"),
    ("Are there fewer single bonds or double bonds? Answer 'single' or 'double'.",
     ["single_bonds", "double_bonds"], [(41, 3)], "double"),
    # 0/1 flags per row: their totals
    ("Are there more single or double bonds? Answer 'single' or 'double'.",
     ["single", "double"], [(1, 0)] * 3 + [(0, 1)] * 5, "double"),
    # rows labelled with the answers: how many carry each
    ("Do more heroes have a one-word name or several words? Answer 'one word' or 'several words'.",
     ["kind"], [("one word",)] * 4 + [("several words",)] * 2, "one word"),
    # one row per answer with its number (a GROUP BY over the labels)
    ("Which category spent more: food or parking? Answer 'food' or 'parking'.",
     ["category", "total"], [("Parking", 120.5), ("Food", 80.0)], "parking"),
    ("Which is heavier? Answer 'transition metals' or 'metalloids'.",
     ["metalloids_count", "transition_metals_count"], [(7, 2)], "metalloids"),
    # aliases that say the answers in other words: the column sharing most of each answer's words
    ("Were more bridges built in northern towns before 1900 or in southern towns after 1950? "
     "Answer 'Northern, before 1900' or 'Southern, after 1950'.",
     ["north_before_1900", "south_after_1950"], [(2, 9)], "Southern, after 1950"),
    ("Were more bridges built in northern towns before 1900 or in southern towns after 1950? "
     "Answer 'Northern, before 1900' or 'Southern, after 1950'.",
     ["NorthBefore1900", "SouthAfter1950"], [(2, 9)], "Southern, after 1950"),  # camelCase aliases
])
def test_numbers_that_decide_an_offered_answer_decide_it(question, columns, rows, expected):
    from tagql.db.connection import Result
    from tagql.methods import compared_choice

    choices = re.findall(r"'([^']+)'", question.split("Answer")[1])
    assert compared_choice(question, Result("", columns, rows), choices) == expected


@pytest.mark.parametrize("question, columns, rows", [
    ("Are publishers mostly people or companies? Answer 'people' or 'companies'.", ["people", "companies"], [(3, 9)]),
    ("Is more less? Answer 'people' or 'companies'.", ["people", "companies"], [(3, 9)]),  # both directions
    ("Are there more people or companies? Answer 'people' or 'companies'.", ["people", "companies"], [(4, 4)]),  # tie
    ("Are there more people or companies? Answer 'people' or 'companies'.", ["n"], [(4,)]),  # one number
    ("Are there more metals or transition metals? Answer 'metals' or 'transition metals'.",
     ["transition_metals"], [(4,)]),  # one column fits both answers
    ("Are there more red cars or red trucks? Answer 'red cars' or 'red trucks'.",
     ["red_count", "blue_count"], [(4, 1)]),  # the closest column is the same one for both answers
])
def test_numbers_that_do_not_decide_are_left_to_the_lm(question, columns, rows):
    from tagql.db.connection import Result
    from tagql.methods import compared_choice

    choices = re.findall(r"'([^']+)'", question.split("Answer")[1])
    assert compared_choice(question, Result("", columns, rows), choices) is None


def test_an_answer_outside_the_offered_ones_is_an_error(superhero, tmp_path):
    from tagql.db.connection import Result
    from tagql.errors import LLMOutputError
    from tagql.methods import choose

    s = TagQL(superhero, ScriptedLLM(['"maybe"']), settings=load_settings(cache_dir=str(tmp_path)))
    with pytest.raises(LLMOutputError, match="none of the offered answers"):
        choose(s, "Yes or no? Answer 'yes' or 'no'.", Result("", ["n"], [(3,)]), ["yes", "no"])


@pytest.mark.parametrize("where, question, guess", [
    ("element IN ('cl', 'c', 'h')", "How many molecules contain at least one halogen atom?", True),  # 'c' in "contain"
    ("element IN ('cl', 'c', 'h')", "How many atoms are c or cl?", False),  # named as words
    # a pattern no stored value matches is the category written into the SQL (seen on the dev set) ...
    ("element LIKE '%alkali metal%'", "Which alkali metals occur in the molecules?", True),
    # ... one that matches stored values is the data's own spelling
    ("element LIKE 'c%'", "How many atoms are c or cl?", False),
])
def test_a_value_counts_as_named_only_as_a_word_of_the_question(shared_data, where, question, guess):
    from tagql.tag.plan import guessed_comparisons

    db = open_database(shared_data / "bird" / "dev_databases" / "toxicology" / "toxicology.sqlite")
    assert bool(guessed_comparisons(f"SELECT COUNT(*) FROM atom WHERE {where}", db, question)) is guess


def test_an_invented_order_column_becomes_a_fact_the_lm_gives(superhero):
    invented = {"sql": "SELECT id, publisher_name FROM publisher WHERE publisher_name IN ('DC Comics', 'Image Comics') "
                       "ORDER BY founding_year DESC", "operators": []}
    years = {"DC Comics": "1934", "Image Comics": "1992"}

    def fn(messages):
        last = messages[-1].content
        if "Does answering" in last:
            return "yes"
        if "<record>" in last:
            return next(v for k, v in years.items() if k in last)
        return json.dumps(invented)

    llm = ScriptedLLM(fn)
    plan, attempts = Planner(superhero, llm, SemEngine(llm)).make("Which is newer, DC Comics or Image Comics?")
    assert attempts[1] == {"invented_to_lm_number": [
        "founding_year -> LM_NUMBER('the founding year of {publisher_name}', publisher_name)"]}  # not the id
    run = run_plan(plan, superhero, SemEngine(llm))
    assert [r[1] for r in run.result.rows] == ["Image Comics", "DC Comics"]
    # a relational question's invented column is left for validation to report
    llm = ScriptedLLM(["no", json.dumps(invented), json.dumps(invented)])
    with pytest.raises(PlanError, match="founding_year"):
        Planner(superhero, llm, SemEngine(llm)).make("Which is newer, DC Comics or Image Comics?")


def test_domain_statements_reach_the_plan_and_their_values_are_not_guesses(superhero):
    """An expert's statement lists the values of a category: the plan prompts show it, and a plan that
    uses its list keeps it (the guess-to-LM_FILTER rewrite is for the model's own lists)."""
    from tagql.knowledge import ScoredStatement

    stmt = ScoredStatement("publishers named after a person", "publisher.publisher_name IN ('George Lucas', "
                           "'J. K. Rowling', 'J. R. R. Tolkien')", 0.9)
    expert = {"sql": "SELECT COUNT(*) FROM publisher WHERE publisher_name IN ('George Lucas', 'J. K. Rowling', "
                     "'J. R. R. Tolkien')", "operators": []}
    llm = ScriptedLLM(["yes", json.dumps(expert)])
    question = "How many publishers are named after a person?"
    plan, attempts = Planner(superhero, llm, SemEngine(llm)).make(question, [stmt])
    assert "LM_FILTER" not in plan.sql and not any("guesses_to_lm_filter" in a for a in attempts)
    for prompt in llm.prompts:  # the needs-operators question and the plan both see the statement
        assert "'publishers named after a person' refers to publisher.publisher_name IN" in prompt[-1].content
        assert prompt[-1].content.index("Domain knowledge") < prompt[-1].content.rindex("Question:")
    # without the statement the same SQL is the model's guess, judged by the LM instead
    llm = ScriptedLLM(["yes", json.dumps(expert), "{publisher_name} is named after a person"])
    plan, _ = Planner(superhero, llm, SemEngine(llm)).make(question)
    assert "LM_FILTER" in plan.sql and "Domain knowledge" not in llm.prompts[1][-1].content


def test_every_sql_method_gets_the_databases_domain_statements(superhero, tmp_path):
    from tagql.knowledge import ScoredStatement, StaticStatements

    stmt = ScoredStatement("giants", "superhero.height_cm > 250", 0.8)
    sql = "SELECT superhero_name FROM superhero WHERE height_cm > 250 ORDER BY superhero_name"
    plan = {"sql": sql, "operators": []}
    question = "Which heroes are giants?"
    st = load_settings(cache_dir=str(tmp_path))
    for method, replies in [("text2sql", [sql]), ("text2sql_lm", [sql, '["Galactus", "Ymir"]']),
                            ("tag", ["no", json.dumps(plan)])]:
        llm = ScriptedLLM(replies)
        s = TagQL(superhero, llm, settings=st, knowledge=StaticStatements([stmt]))
        a = answer(s, question, method)
        assert "'giants' refers to superhero.height_cm > 250" in llm.prompts[0][-1].content, method
        assert [(s.text, s.sql) for s in a.statements] == [(stmt.text, stmt.sql)] and a.to_dict()["statements"], method
        assert "Galactus" in a.values, method


@pytest.mark.parametrize("question, columns, rows, ordered, expected", [
    # seen on the dev set: the name asked for, beside the count the plan compared by
    ("Which publisher has more superheroes: A or B? Give the publisher name.",
     ["publisher_name", "COUNT(*)"], [("George Lucas", 15)], True, ["George Lucas"]),
    # full names: both name columns stay (the scorer joins a row's values)
    ("Which members live in Ohio? List their full names.",
     ["first_name", "last_name", "zip"], [("Ann", "Lee", 43004)], False, [["Ann", "Lee"]]),
    # nothing asks for names: every column stays
    ("Which heroes weigh most, and how much?", ["superhero_name", "weight_kg"], [("Groot", 900)], True,
     [["Groot", 900]]),
    # a ranking repeated by a join (no DISTINCT): each value once, at its first place
    ("Rank the elements by electronegativity.", ["element"], [("f",), ("f",), ("o",), ("f",), ("n",)], True,
     ["f", "o", "n"]),
    # an unordered list keeps its rows as they are
    ("Which elements occur?", ["element"], [("f",), ("f",)], False, ["f", "f"]),
    # seen on the pool's dev split: a code naming the same row beside its name
    ("List the circuits in Wales.", ["circuitRef", "name"], [("pembrey", "Pembrey")], False, ["Pembrey"]),
    # ... unless the question asks for the code
    ("Give the code of each airport in Wales.", ["code", "name"], [("CWL", "Cardiff")], False,
     [["CWL", "Cardiff"]]),
    # numbers are not collapsed (two heroes can weigh the same)
    ("List the five largest weights.", ["weight_kg"], [(90,), (90,), (80,)], True, [90, 90, 80]),
])
def test_list_answers_keep_what_the_question_asks_for(question, columns, rows, ordered, expected):
    from tagql.db.connection import Result
    from tagql.methods import answer_values

    assert answer_values(question, Result("", columns, rows), ordered=ordered) == expected


_BY_MONTH = "SELECT event_name, event_date FROM event ORDER BY STRFTIME('%m', event_date)"


@pytest.mark.parametrize("question, sql, expected", [
    # seen on the dev set: the date the SQL sorted by is not part of the answer
    ("List the monthly club meetings in calendar-month order, January first.", _BY_MONTH,
     ["January Meeting", "March Meeting"]),
    # the question names the sorted column, or asks for an amount: it stays
    ("List the meetings with their date, in date order.", _BY_MONTH,
     [["January Meeting", "2020-01-14"], ["March Meeting", "2020-03-10"]]),
    ("List the meetings by date and the date of each.", _BY_MONTH,
     [["January Meeting", "2020-01-14"], ["March Meeting", "2020-03-10"]]),
    # a column that is not sorted by stays
    ("List the meetings.", "SELECT event_name, event_date FROM event ORDER BY event_name",
     [["January Meeting", "2020-01-14"], ["March Meeting", "2020-03-10"]]),
])
def test_a_column_the_sql_only_sorts_by_is_not_part_of_a_list_answer(question, sql, expected):
    from tagql.db.connection import Result
    from tagql.methods import answer_values

    rows = [("January Meeting", "2020-01-14"), ("March Meeting", "2020-03-10")]
    assert answer_values(question, Result(sql, ["event_name", "event_date"], rows), ordered=True) == expected


@pytest.mark.parametrize("question, expected", [
    # seen on the pool's dev split: "with the highest ..." picks the rows, it does not ask for the measure
    ("List the 2 circuits in the United Kingdom with the highest latitude, highest first.", ["Aintree", "Donington Park"]),
    ("List the 2 circuits in the United Kingdom with their latitude, highest first.",
     [["Aintree", 53.48], ["Donington Park", 52.83]]),
    ("List the 2 circuits in the United Kingdom and the latitude of each, highest first.",
     [["Aintree", 53.48], ["Donington Park", 52.83]]),
])
def test_a_superlative_measure_is_not_part_of_a_list_answer(question, expected):
    from tagql.db.connection import Result
    from tagql.methods import answer_values

    result = Result("SELECT circuitRef, name, lat FROM circuits ORDER BY lat DESC LIMIT 2", ["circuitRef", "name", "lat"],
                    [("aintree", "Aintree", 53.48), ("donington", "Donington Park", 52.83)])
    assert answer_values(question, result, ordered=True) == expected


def test_a_plan_cut_off_while_listing_a_category_is_told_to_judge_the_column(shared_data):
    """Seen on the dev set: "transition metals" written as an IN list that repeats until the reply is cut
    off; the retry is told to let LM_FILTER judge the stored values instead."""
    tox = open_database(shared_data / "bird" / "dev_databases" / "toxicology" / "toxicology.sqlite")
    looping = "SELECT COUNT(*) FROM atom WHERE element IN (" + ", ".join(["'Ti'", "'V'", "'Cr'"] * 4)
    judged = {"sql": "SELECT COUNT(*) FROM atom WHERE LM_FILTER('{element} is a transition metal', element)",
              "operators": []}
    llm = ScriptedLLM(["yes", json.dumps({"sql": looping, "operators": []}), json.dumps(judged)])
    plan, attempts = Planner(tox, llm, SemEngine(llm), exemplars=0).make("How many transition metal atoms are there?")
    assert "do not enumerate the members of a category" in llm.prompts[2][-1].content
    assert plan.sql == judged["sql"] and "does not parse" in attempts[1]["error"]


@pytest.mark.parametrize("question, where, aimed_at", [
    # 'New England' is a real city (one zip code in North Dakota), but the question asks for a kind of state
    ("How many club members live in a New England state?", "T2.city = 'New England'", "T2.state"),
    # Texas is a common state, so "a Texas city" compared on the state is what the SQL meant (Texas City exists)
    ("How many club members live in a Texas city?", "T2.state = 'Texas'", None),
    ("How many club members live in Texas?", "T2.state = 'Texas'", None),
])
def test_a_stored_value_used_as_a_category_of_another_column_is_a_guess_about_that_column(
        shared_data, question, where, aimed_at):
    from tagql.tag.plan import guessed_comparisons

    db = open_database(shared_data / "bird" / "dev_databases" / "student_club" / "student_club.sqlite")
    sql = f"SELECT COUNT(*) FROM member AS T1 JOIN zip_code AS T2 ON T1.zip = T2.zip_code WHERE {where}"
    assert [g.column.sql() for g in guessed_comparisons(sql, db, question)] == ([aimed_at] if aimed_at else [])


def test_a_category_guess_is_judged_on_the_column_the_question_names(shared_data):
    db = open_database(shared_data / "bird" / "dev_databases" / "student_club" / "student_club.sqlite")
    llm = ScriptedLLM(["{state} is a New England state"])
    planner = Planner(db, llm, SemEngine(llm))
    plan = Plan("SELECT COUNT(*) FROM member WHERE zip IN (SELECT zip_code FROM zip_code WHERE city = 'New England')")
    notes = planner.guesses_to_filters(plan, "How many club members live in a New England state?")
    assert notes == ["city = 'New England' -> LM_FILTER('{state} is a New England state', state)"]
    assert "LM_FILTER('{state} is a New England state', state)" in plan.sql and "city" not in plan.sql


def test_a_plan_cut_off_inside_a_list_of_category_members_is_told_not_to_enumerate(shared_data):
    db = open_database(shared_data / "bird" / "dev_databases" / "student_club" / "student_club.sqlite")
    states = ", ".join(f"\\'{s}\\'" for s in ["Maine", "New York", "New Jersey", "Delaware", "Maryland", "Virginia",
                                              "North Carolina"])
    cut = '{"sql": "SELECT COUNT(*) FROM zip_code WHERE state IN (' + states + ", \\'South"
    llm = ScriptedLLM(["yes", cut, "{state} is on the Atlantic coast",
                       '{"sql": "SELECT COUNT(*) FROM zip_code", "operators": []}'])
    plan, attempts = Planner(db, llm, SemEngine(llm), exemplars=0).make("How many zip codes are on the Atlantic coast?")
    assert plan.sql == "SELECT COUNT(*) FROM zip_code"
    assert "do not enumerate the members of a category" in attempts[1]["error"]
    retry = llm.prompts[-1]
    assert len(retry) == len(llm.prompts[1])  # a fresh prompt: its own looping reply is not shown again
    retry = retry[-1].content
    assert "Note: a plan that lists values until the reply is cut off" in retry and "New Jersey" not in retry
    assert "do not enumerate the members of a category" in retry
    # made concrete: the filter to write, its statement written for the listed column of zip_code
    assert "here: LM_FILTER('{state} is on the Atlantic coast', state) instead of state IN (...)" in retry
    assert "zip_code.state" in llm.prompts[2][-1].content


def test_an_enumeration_of_no_known_column_keeps_the_general_hint(shared_data):
    db = open_database(shared_data / "bird" / "dev_databases" / "student_club" / "student_club.sqlite")
    values = ", ".join(f"\\'{v}\\'" for v in "abcdefgh")
    cut = '{"sql": "SELECT COUNT(*) FROM zip_code WHERE region IN (' + values + ", \\'i"
    llm = ScriptedLLM(["yes", cut, '{"sql": "SELECT COUNT(*) FROM zip_code", "operators": []}'])
    _, attempts = Planner(db, llm, SemEngine(llm), exemplars=0).make("How many zip codes are in the East?")
    assert attempts[1]["error"].endswith("LM_FILTER('{column} is a ...', column))")


def test_a_fallback_whose_judged_guesses_fail_keeps_its_sql(superhero, tmp_path):
    """No valid plan; the fallback SQL guesses publishers, and judging them instead runs into the
    LM-call cap: the question is still answered from the SQL as the model wrote it, and the plan says why."""
    sql = "SELECT publisher_name FROM publisher WHERE publisher_name IN ('Lucasfilm', 'Rowling Books')"

    def reply(messages):
        if "<statement>" in messages[-1].content:
            return "no"
        return replies.pop(0)

    replies = ["yes", "no plan", "still no plan", sql, "{publisher_name} is a person", '["nobody"]']
    st = load_settings(cache_dir=str(tmp_path))
    st.tag.max_lm_calls = 2
    a = answer(TagQL(superhero, ScriptedLLM(reply), settings=st), "Which publishers are people?", "tag")
    assert a.plan.fallback == "text2sql_lm" and a.sql == sql and a.rows == [] and not replies
    assert "stopped after 2 LM calls" in a.plan.guesses_kept and "guesses_to_lm_filter" not in a.plan


class _NamedLLM(ScriptedLLM):
    """A scripted model that says it is the configured local one (so a session may swap it for tag.model)."""

    def __init__(self, name: str, reply) -> None:
        super().__init__(reply)
        self.name = name


def test_the_tag_methods_load_the_tag_model_once_and_only_for_the_configured_local_model(superhero, monkeypatch, tmp_path):
    from tagql import pipeline

    settings = load_settings(cache_dir=str(tmp_path))
    loaded = []

    def fake_make_llm(s):
        loaded.append(s.llm.model)
        return _NamedLLM(s.llm.model, lambda messages: "SELECT COUNT(*) FROM superhero")

    monkeypatch.setattr(pipeline, "make_llm", fake_make_llm)
    default = TagQL(superhero, _NamedLLM(settings.llm.model, lambda m: "x"), settings=settings)
    a = answer(default, "How many heroes are there?", "text2sql")
    b = answer(default, "How many heroes are there?", "text2sql")
    assert loaded == [settings.tag.model] and a.model == b.model == settings.tag.model
    assert a.values == b.values == [superhero.execute("SELECT COUNT(*) FROM superhero").rows[0][0]]
    # a model passed in by the caller answers itself; so does any model when tag.model is empty
    passed = TagQL(superhero, ScriptedLLM(lambda m: "SELECT 1"), settings=settings)
    assert answer(passed, "one?", "text2sql").model == "scripted"
    same = TagQL(superhero, _NamedLLM(settings.llm.model, lambda m: "SELECT 1"),
                 settings=load_settings(cache_dir=str(tmp_path), tag={"model": ""}))
    assert answer(same, "one?", "text2sql").model == settings.llm.model and loaded == [settings.tag.model]


def test_a_streaming_caller_sees_the_plan_before_its_operators_run(demo_db_path, tmp_path):
    """The plan event comes when the plan is made, before any operator's progress, and again as it ran."""
    import tagql

    def fn(messages):
        if "Does answering" in messages[-1].content:
            return "yes"
        if "Question:" in messages[-1].content and "plan" in messages[0].content:
            return json.dumps(HYBRID)
        return judge(messages)

    events: list[tuple[str, dict]] = []
    session = tagql.connect(demo_db_path, llm=ScriptedLLM(fn), settings=load_settings(cache_dir=str(tmp_path)))
    a = session.ask("Which publisher that is a person has the most heroes?", method="tag",
                    on_event=lambda name, data: events.append((name, data)))
    names = [n for n, _ in events]
    assert a.values and a.values[0] in PEOPLE
    assert names.count("plan") == 2 and "progress" in names
    assert names.index("plan") < names.index("progress")
    first, last = (d for n, d in events if n == "plan")
    assert first["operators"][0]["op"] == "filter" and "trace" not in first and "trace" in last


def test_an_invented_column_becomes_a_fact_the_lm_judges_or_maps(superhero):
    """A column no table has, outside ORDER BY: a comparison with a constant becomes an LM_FILTER on the
    claim it makes, anything else an LM_MAP of the fact (a selected one keeps its name for GROUP BY)."""
    from tagql.tag.plan import invented_fact_columns

    p = Plan(sql="SELECT superhero_name FROM superhero WHERE home_planet = 'Krypton'", operators=[])
    assert invented_fact_columns(p, superhero) == [
        "home_planet = 'Krypton' -> LM_FILTER('the home planet of {superhero_name} is Krypton', "
        "superhero.superhero_name)"]
    p = Plan(sql="SELECT T1.home_planet, COUNT(*) FROM superhero AS T1 GROUP BY T1.home_planet", operators=[])
    invented_fact_columns(p, superhero)
    assert p.sql == ("SELECT LM_MAP('the home planet of {superhero_name}', T1.superhero_name) AS home_planet, "
                     "COUNT(*) FROM superhero AS T1 GROUP BY LM_MAP('the home planet of {superhero_name}', "
                     "T1.superhero_name)")
    # unqualified, GROUP BY reads the selected column's name
    p = Plan(sql="SELECT home_planet, COUNT(*) FROM superhero GROUP BY home_planet", operators=[])
    invented_fact_columns(p, superhero)
    assert p.sql == ("SELECT LM_MAP('the home planet of {superhero_name}', superhero.superhero_name) AS home_planet, "
                     "COUNT(*) FROM superhero GROUP BY home_planet")
    p = Plan(sql="SELECT superhero_name FROM superhero WHERE home_planet NOT IN ('Krypton', 'Mars')", operators=[])
    invented_fact_columns(p, superhero)
    assert p.sql.endswith("WHERE NOT LM_FILTER('the home planet of {superhero_name} is one of: Krypton, Mars', "
                          "superhero.superhero_name)")
    # a stored column, and one another table has (the join repair's case), are left alone
    for sql in ["SELECT superhero_name FROM superhero WHERE height_cm > 200",
                "SELECT superhero_name FROM superhero WHERE publisher_name = 'DC Comics'"]:
        p = Plan(sql=sql, operators=[])
        assert invented_fact_columns(p, superhero) == [] and p.sql == sql


def test_a_hybrid_plan_with_an_invented_column_runs_with_the_lm_judging_it(superhero):
    invented = {"sql": "SELECT superhero_name FROM superhero WHERE id BETWEEN 530 AND 670 AND home_planet = 'Krypton'",
                "operators": []}
    krypton = {"Supergirl", "Superman", "Power Girl"}

    def fn(messages):
        last = messages[-1].content
        if "Does answering" in last:
            return "yes"
        if last.rstrip().endswith("Statement:"):  # the question's condition, stated about a hero's name
            return "{superhero_name} comes from Krypton"
        claim = re.search(r"<statement>(.*?)</statement>", last)
        if claim:
            return "yes" if any(f"of {name} is Krypton" in claim.group(1) or claim.group(1).startswith(f"{name} comes")
                                for name in krypton) else "no"
        return json.dumps(invented)

    names = {r[0] for r in superhero.execute("SELECT superhero_name FROM superhero WHERE id BETWEEN 530 AND 670").rows}
    llm = ScriptedLLM(fn)
    plan, attempts = Planner(superhero, llm, SemEngine(llm), map_invented_columns=True).make(
        "Which heroes come from Krypton?")
    assert "invented_to_lm_map" in attempts[1] and "LM_FILTER(" in plan.sql
    run = run_plan(plan, superhero, SemEngine(llm, cascade="off"))  # the LM judges each of the 141 names
    assert {r[0] for r in run.result.rows} == krypton & names == krypton
    # off (the default), and so is the same rewrite after validation: the missing column is reported
    llm = ScriptedLLM(fn)
    with pytest.raises(PlanError, match="home_planet"):
        Planner(superhero, llm, SemEngine(llm), unplaced_columns_to_lm=False).make("Which heroes come from Krypton?")
    # after validation (on by default) it comes to the same plan
    llm = ScriptedLLM(fn)
    plan, attempts = Planner(superhero, llm, SemEngine(llm)).make("Which heroes come from Krypton?")
    assert "unplaced_to_lm" in attempts[1] and "LM_FILTER('{superhero_name} comes from Krypton'" in plan.sql
    run = run_plan(plan, superhero, SemEngine(llm, cascade="off"))
    assert {r[0] for r in run.result.rows} == krypton


def test_a_qualified_column_no_table_of_the_query_has_is_a_fact(superhero):
    from tagql.tag.plan import invented_fact_columns

    # colour.colour exists, but not on publisher, and colour is not in this query: the publisher's own fact
    p = Plan(sql="SELECT T1.publisher_name FROM publisher AS T1 WHERE T1.colour = 'red'", operators=[])
    assert invented_fact_columns(p, superhero) == [
        "T1.colour = 'red' -> LM_FILTER('the colour of {publisher_name} is red', T1.publisher_name)"]
    # a mis-aliased column that a joined table has is the join repair's
    sql = ("SELECT T1.superhero_name FROM superhero AS T1 JOIN publisher AS T2 ON T1.publisher_id = T2.id "
           "WHERE T1.publisher_name = 'DC Comics'")
    p = Plan(sql=sql, operators=[])
    assert invented_fact_columns(p, superhero) == [] and p.sql == sql


def test_a_column_of_a_misspelled_table_is_not_a_fact_of_another_table(superhero):
    """``T2`` stands for a table the schema spells otherwise (``hero_powers`` for ``hero_power``): its
    columns are the table repair's, not facts about the FROM table's rows, even after validation."""
    from tagql.tag.plan import invented_fact_columns

    sql = ("SELECT T1.superhero_name FROM superhero AS T1 JOIN hero_powers AS T2 ON T1.id = T2.hero_id "
           "WHERE T2.power_id = 1")
    p = Plan(sql=sql, operators=[])
    assert invented_fact_columns(p, superhero, unplaced=True) == [] and p.sql == sql


def test_a_column_validation_cannot_join_becomes_a_fact_instead_of_a_second_identical_plan(superhero):
    """``colour`` is a column of colour, which superhero joins three ways (eye, hair, skin): validation
    cannot place it, and the model, asked again, wrote the same plan. For a question that needs the LM
    the column is a fact about the row instead, without a second plan."""
    invented = {"sql": "SELECT superhero_name FROM superhero WHERE id BETWEEN 1 AND 40 AND colour = 'red'",
                "operators": []}

    def fn(messages):
        last = messages[-1].content
        if "Does answering" in last:
            return "yes"
        if last.rstrip().endswith("Statement:"):  # the question's condition about the naming column
            criteria.append(last)
            return "{superhero_name} is a red hero"
        plans.append(last)
        return json.dumps(invented)

    plans: list[str] = []
    criteria: list[str] = []
    llm = ScriptedLLM(fn)
    plan, attempts = Planner(superhero, llm, SemEngine(llm)).make("Which heroes are red?")
    assert len(plans) == 1 and len(criteria) == 1
    assert "Question: Which heroes are red?\nColumn: superhero.superhero_name" in criteria[0]
    assert attempts[1] == {"unplaced_to_lm": [
        "colour = 'red' -> LM_FILTER('{superhero_name} is a red hero', superhero.superhero_name)"]}
    assert plan.sql.endswith("AND LM_FILTER('{superhero_name} is a red hero', superhero.superhero_name)")
    # two made-up columns compared: no one condition of the question fits both, so each states its own fact
    two = {"sql": "SELECT superhero_name FROM superhero WHERE colour = 'red' OR planet = 'Mars'", "operators": []}
    llm = ScriptedLLM(lambda m: "yes" if "Does answering" in m[-1].content else json.dumps(two))
    plan, attempts = Planner(superhero, llm, SemEngine(llm)).make("Which heroes are red or from Mars?")
    assert "LM_FILTER('the colour of {superhero_name} is red'" in plan.sql
    assert "LM_FILTER('the planet of {superhero_name} is Mars'" in plan.sql
    # off, or a question that does not need the LM while a key joins colour: the error goes back to the model
    for needs_lm, on in [("yes", False), ("no", True)]:
        llm = ScriptedLLM(lambda m, a=needs_lm: a if "Does answering" in m[-1].content else json.dumps(invented))
        with pytest.raises(PlanError, match="column 'colour' does not exist") as err:
            Planner(superhero, llm, SemEngine(llm), unplaced_columns_to_lm=on).make("Which heroes are red?")
        assert err.value.missing_column == "colour"
        assert ("LM_NUMBER" in err.value.hint) == (needs_lm == "yes")  # the LM hint only where the LM is wanted


def test_a_failed_plan_repeated_word_for_word_is_asked_once_more_from_the_first_prompt(shared_data):
    """Seen on the pool's dev split: told its table does not exist, the 1.5B model wrote the same plan again;
    the next try starts from the first prompt with the error as a note, not its own reply."""
    db = open_database(shared_data / "bird" / "dev_databases" / "student_club" / "student_club.sqlite")
    wrong = json.dumps({"sql": "SELECT COUNT(*) FROM members_list", "operators": []})
    right = json.dumps({"sql": "SELECT COUNT(*) FROM member", "operators": []})
    llm = ScriptedLLM(["no", wrong, " " + wrong, right])
    plan, attempts = Planner(db, llm, SemEngine(llm), exemplars=0, retries=1,
                             fresh_retry_on_repeat=True).make("How many members are there?")
    assert plan.sql == "SELECT COUNT(*) FROM member"
    assert [a.get("repeated", False) for a in attempts if "error" in a and a["error"]] == [False, True]
    retry = llm.prompts[-1]
    assert len(retry) == len(llm.prompts[1])  # the first prompt again, without the repeated reply
    assert "Note: an earlier plan for this question was invalid: " in retry[-1].content
    assert "members_list" in retry[-1].content  # the error names what was wrong


@pytest.mark.parametrize("fresh, calls", [(True, 4), (False, 3)])
def test_the_extra_try_comes_once_and_only_on_a_repeat(shared_data, fresh, calls):
    db = open_database(shared_data / "bird" / "dev_databases" / "student_club" / "student_club.sqlite")
    wrong = json.dumps({"sql": "SELECT COUNT(*) FROM members_list", "operators": []})
    llm = ScriptedLLM(["no", wrong, wrong, wrong, wrong, wrong])
    planner = Planner(db, llm, SemEngine(llm), exemplars=0, retries=1, fresh_retry_on_repeat=fresh)
    with pytest.raises(PlanError):
        planner.make("How many members are there?")
    assert len(llm.prompts) == calls  # yes/no + first try + retry (+ the one fresh try)
    other = json.dumps({"sql": "SELECT COUNT(*) FROM member_list", "operators": []})
    llm = ScriptedLLM(["no", wrong, other, wrong])
    with pytest.raises(PlanError):
        Planner(db, llm, SemEngine(llm), exemplars=0, retries=1, fresh_retry_on_repeat=fresh).make("How many members?")
    assert len(llm.prompts) == 3  # a different failed plan is not a repeat: no extra try


MARVEL = ("SELECT COUNT(*) FROM superhero AS s JOIN publisher AS p ON s.publisher_id = p.id "
          "WHERE p.publisher_name = 'Marvel Comics'")
MARVEL_OR_DC = ("Are there more superheroes published by Marvel Comics or by DC Comics? "
                "Answer 'Marvel Comics' or 'DC Comics'.")


def test_a_comparison_counted_for_one_answer_is_counted_for_both(superhero, tmp_path):
    """The plan counts Marvel's heroes only; the same count runs for DC Comics too and the two numbers
    decide, with no LM call to pick (before, the LM guessed the answer from one number)."""
    plan = {"sql": MARVEL, "operators": []}
    s = TagQL(superhero, ScriptedLLM(["no", json.dumps(plan)]), settings=load_settings(cache_dir=str(tmp_path)))
    a = answer(s, MARVEL_OR_DC, "tag")
    assert a.columns == ["Marvel Comics", "DC Comics"] and a.rows == [[387, 224]]
    assert a.values == ["Marvel Comics"] and a.tokens["calls"] == 2  # classify + plan: the numbers chose
    assert any("counts for 'Marvel Comics' only" in n for at in a.plan.attempts for n in at.get("both_options", []))


@pytest.mark.parametrize("sql, operators", [
    (MARVEL.replace("'Marvel Comics'", "'Marvel Comics' OR p.publisher_name = 'DC Comics'"), []),  # both named
    ("SELECT p.publisher_name, COUNT(*) FROM superhero AS s JOIN publisher AS p ON s.publisher_id = p.id "
     "WHERE p.publisher_name = 'Marvel Comics' GROUP BY p.publisher_name", []),  # not one number
    ("SELECT superhero_name FROM superhero WHERE superhero_name = 'Marvel Comics'", []),  # no aggregate
    (MARVEL, [{"op": "count"}]),  # operators run on the SQL's result
])
def test_plans_that_compare_already_or_give_no_single_number_are_left_alone(superhero, sql, operators):
    plan = Plan(sql, operators)
    assert both_options(plan, ["Marvel Comics", "DC Comics"], superhero) == [] and plan.sql == sql


def test_the_other_answer_is_spelled_as_stored_in_a_constant_and_as_asked_in_a_statement(superhero):
    plan = Plan("SELECT COUNT(*) FROM publisher WHERE publisher_name = 'Marvel Comics' "
                "AND LM_FILTER('{publisher_name} is not the Marvel Comics', publisher_name)")
    assert both_options(plan, ["Marvel Comics", "the DC Comics"], superhero)
    assert "publisher_name = 'DC Comics' AND LM_FILTER('{publisher_name} is not the DC Comics'" in plan.sql


def test_an_answer_spelled_like_a_table_does_not_rename_the_source_of_a_chosen_link(superhero):
    """Answers 'publisher' / 'superhero': the only constants naming 'publisher' are LM_CHOOSE's statement
    and source (the link: where its choices are stored), which is not the plan naming an answer."""
    sql = ("SELECT COUNT(*) FROM superhero AS s JOIN publisher AS p ON p.publisher_name = "
           "LM_CHOOSE('the publisher of {superhero_name}', s.superhero_name, 'publisher.publisher_name')")
    plan = Plan(sql)
    assert both_options(plan, ["publisher", "superhero"], superhero) == [] and plan.sql == sql
    named = Plan(sql + " WHERE p.publisher_name = 'publisher'")
    assert both_options(named, ["publisher", "superhero"], superhero)
    twin = named.sql.split('AS "publisher"')[1]
    assert "LM_CHOOSE('the publisher of {superhero_name}', s.superhero_name, 'publisher.publisher_name')" in twin
    assert "p.publisher_name = 'superhero'" in twin
