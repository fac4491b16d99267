"""The real local model on a handful of rows: grammar-constrained filter and score, digit probabilities
for top-k (few LM calls)."""

from __future__ import annotations

import pytest

from tagql.llm import make_llm
from tagql.tag.operators import SemEngine, SemTable

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def llm():
    return make_llm(backend="local")


def test_filter_with_real_model_dedupes_and_answers_booleans(llm):
    rows = [("Palo Alto",), ("Boston",), ("Palo Alto",), ("Fresno",), ("Boston",)]
    eng = SemEngine(llm)
    before = llm.usage.calls
    # A criterion with wide margins on every host: llama.cpp's CPU kernels differ by instruction set, and
    # the TAG paper's "{City} is a city in Silicon Valley" is a near tie for this 1.5B model (P(yes) for
    # Palo Alto above 0.5 on an AMD EPYC build, 0.22 on an AMX Xeon build); "... in California" is
    # 0.87 / 0.86 for Palo Alto / Fresno and 0.04 for Boston there.
    out = SemTable(["City"], rows, eng).sem_filter("{City} is a city in California")
    assert llm.usage.calls - before == 3  # three distinct cities
    assert [r[0] for r in out.rows] == ["Palo Alto", "Palo Alto", "Fresno"]


def test_score_with_real_model_returns_digits(llm):
    eng = SemEngine(llm)
    scores = eng.score_many("{element} is a halogen", ["chlorine is a halogen", "carbon is a halogen"])
    assert all(0 <= s <= 10 for s in scores) and scores[0] > scores[1]


def test_digit_probs_agree_with_grammar_constrained_decoding(llm):
    """The digits ``digit_probs`` reads are the ones greedy decoding under the same grammar writes (one
    digit, and numbered lines with the scaffold fed by hand); each distribution sums to 1; one call each."""
    import numpy as np

    from tagql.llm.base import system, user

    sys_msg = system("Answer with digits only.")
    one = [sys_msg, user("How many legs does a spider have?")]
    two = [sys_msg, user("1. How many legs does a cat have?\n2. How many wheels does a tricycle have?\n"
                         "Answer each numbered question, one per line as 'N: digit':")]
    before = llm.usage.calls
    p_one, p_two = llm.digit_probs(one), llm.digit_probs(two, slots=2)
    assert llm.usage.calls - before == 2
    assert all(abs(sum(p) - 1) < 1e-9 for p in p_one + p_two)
    assert str(int(np.argmax(p_one[0]))) == llm.complete(one, max_tokens=2, grammar="root ::= [0-9]").text
    greedy = llm.complete(two, max_tokens=12, grammar='root ::= "1: " [0-9] "\\n" "2: " [0-9]').text
    assert greedy == f"1: {int(np.argmax(p_two[0]))}\n2: {int(np.argmax(p_two[1]))}"


def test_choice_probs_read_the_judges_yes_no(llm):
    """``choice_probs`` over the filter judge's replies: the most likely choice is what the grammar-
    constrained judge answers, and a true claim gets a higher P(yes) than a false one."""
    from tagql.tag.operators import YES_NO_GRAMMAR, judge_messages

    choices = ["yes", "Yes", "no", "No"]
    true_claim, false_claim = judge_messages("Paris is a city in France"), judge_messages("Paris is a city in Japan")
    p_true, p_false = llm.choice_probs(true_claim, choices), llm.choice_probs(false_claim, choices)
    assert abs(sum(p_true) - 1) < 1e-9 and abs(sum(p_false) - 1) < 1e-9
    assert p_true[0] + p_true[1] > 0.5 > p_false[0] + p_false[1]
    for msgs, p in ((true_claim, p_true), (false_claim, p_false)):
        best = choices[max(range(4), key=p.__getitem__)]
        assert llm.complete(msgs, max_tokens=2, grammar=YES_NO_GRAMMAR).text.strip() == best


def test_topk_with_token_probabilities_on_real_model(llm):
    """Eight cities in one batched call: continuous scores (no ties, no comparison calls).

    Not asserted: which cities come first. The 1.5B model rates the first record of a batch highest
    (Graz 4.8, Tokyo 2.1, Shanghai 2.0 here; one record per call rates them all 5.7-6.4), so ranking
    quality is measured by bench/tag/operator_lotus.py, not promised by this test."""
    rows = [("Graz, Austria",), ("Tokyo, Japan",), ("Reno, USA",), ("Lyon, France",), ("Shanghai, China",),
            ("Tartu, Estonia",), ("Aarhus, Denmark",), ("Split, Croatia",)]
    criterion = "{city} is one of the most populous cities in the world"
    eng = SemEngine(llm, batch_size=8)
    before = llm.usage.calls
    scores = eng.rank_scores(criterion, [criterion.replace("{city}", r[0]) for r in rows])  # what sem_topk asks
    assert llm.usage.calls - before == 1 and len(set(scores)) == len(rows)
    top = SemTable(["city"], rows, eng).sem_topk(criterion, 2)
    assert llm.usage.calls - before == 1  # cached scores, no tie-break calls
    assert len(top.rows) == 2 and top.rows[0][0] == rows[max(range(len(rows)), key=scores.__getitem__)][0]


def test_lm_filter_udf_on_duckdb_with_real_model(llm, tmp_path, demo_db_path):
    """LM_FILTER inside DuckDB SQL (a DuckDB file built here from the demo database): one vector of 30
    hero rows, one grammar-constrained call per distinct publisher."""
    from tagql.db import open_database
    from tagql.db.duck import copy_sqlite_to_duckdb
    from tagql.tag.udf import execute_with_lm, register_lm_functions

    path = tmp_path / "heroes.duckdb"
    copy_sqlite_to_duckdb(demo_db_path, path, tables=["superhero", "publisher"])
    db = open_database(path)
    eng = SemEngine(llm)
    register_lm_functions(db, eng)
    before = llm.usage.calls
    r = execute_with_lm(db, "SELECT s.superhero_name, p.publisher_name, LM_FILTER('{publisher} is a comic book "
                        "publisher', p.publisher_name) AS keep FROM superhero s JOIN publisher p "
                        "ON s.publisher_id = p.id WHERE s.id <= 30 ORDER BY s.id", eng)
    publishers = {row[1] for row in r.rows}
    assert len(r.rows) > len(publishers) > 3
    assert llm.usage.calls - before == len(publishers)  # deduplicated within DuckDB's vector
    verdict = {pub: keep for _, pub, keep in r.rows}
    assert all(keep in (0, 1) for _, _, keep in r.rows)
    assert verdict["Marvel Comics"] == 1 and verdict["NBC - Heroes"] == 0  # a TV series, not a publisher


def test_map_then_sort_orders_by_what_the_real_model_computes(llm):
    """A ranking the data cannot do (calendar order of month names) as a plan's map + sort."""
    from tagql.tag.plan import sort_rows

    rows = [("October Meeting",), ("January Meeting",), ("March Meeting",), ("September Meeting",)]
    mapped = SemTable(["event_name"], rows, SemEngine(llm)).sem_map(
        "the month number (1-12) of the month named in {event_name}", "month")
    ordered = sort_rows(mapped.columns, mapped.rows, "month", desc=False)
    assert [r[0] for r in ordered] == ["January Meeting", "March Meeting", "September Meeting", "October Meeting"]


def test_offered_answer_is_picked_from_the_compared_counts_by_the_real_model(llm, tmp_path, demo_db_path):
    from tagql.config import load_settings
    from tagql.db.connection import Result, open_database
    from tagql.methods import choose
    from tagql.pipeline import TagQL

    session = TagQL(open_database(demo_db_path), llm, settings=load_settings(cache_dir=str(tmp_path)))
    # no "more"/"fewer" in the question, so the numbers alone do not decide and the model reads them
    question = "In molecule TR001, are the bonds mostly single or double? Answer 'single' or 'double'."
    for counts, expected in [((41, 3), "single"), ((2, 17), "double")]:
        result = Result("", ["single_bonds", "double_bonds"], [counts])
        assert choose(session, question, result, ["single", "double"]) == expected


def test_lm_number_in_sql_orders_rows_by_what_the_real_model_reads(llm, shared_data):
    """``ORDER BY LM_NUMBER(...)``: calendar order of the 'Speaker' events, which the data cannot give
    (their dates span two years); one call per distinct name, each a number under a JSON schema."""
    from tagql.db.connection import open_database
    from tagql.tag.udf import execute_with_lm, register_lm_functions

    db = open_database(shared_data / "bird" / "dev_databases" / "student_club" / "student_club.sqlite")
    eng = SemEngine(llm)
    register_lm_functions(db, eng)
    sql = ("SELECT event_name FROM event WHERE event_name IN ('October Speaker', 'January Speaker', 'March Speaker') "
           "ORDER BY LM_NUMBER('the month number (1-12) of the month named in {event_name}', event_name)")
    out = execute_with_lm(db, sql, eng)
    assert [r[0] for r in out.rows] == ["January Speaker", "March Speaker", "October Speaker"]
    assert eng.stats.lm_calls == 3


def test_value_glosses_let_the_real_model_judge_stored_codes(llm):
    """toxicology's element symbols: bare, the model judged 'cl is a halogen' false and 'zn is a halogen'
    true; glossed from domain statements ('cl (Chlorine)') and, for symbols no statement covers, by the
    model itself from the known glosses ('k' -> Potassium), it keeps exactly the halogens."""
    glossary = {"element": {"na": "Sodium", "c": "Carbon", "cl": "Chlorine", "h": "Hydrogen", "o": "Oxygen",
                            "s": "Sulfur", "n": "Nitrogen", "br": "Bromine", "f": "Fluorine", "i": "Iodine"}}
    eng = SemEngine(llm, glossary=glossary, code_columns={"element"})
    rows = [("cl",), ("c",), ("k",), ("br",), ("zn",), ("o",), ("i",)]
    kept = SemTable(["element"], rows, eng).sem_filter("{element} is a halogen")
    assert [r[0] for r in kept.rows] == ["cl", "br", "i"]
    assert eng.glossary["element"]["k"] == "Potassium" and eng.glossary["element"]["zn"] == "Zinc"
