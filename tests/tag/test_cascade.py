"""The cheap-first filter cascade: proxy text, sampling, decisions, and the engine's modes (scripted LM,
a controlled embedder), then real MiniLM embeddings with the real local model."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tagql.errors import TagqlError
from tagql.llm.scripted import ScriptedLLM
from tagql.tag.cascade import claim_values, decide, heavy_indexes, predicate, sample_indexes
from tagql.tag.operators import LMCallLimitExceeded, SemEngine, SemTable

INSTRUCTION = "{name} is a villain"
# value i has proxy score SCORE[i]; the true villains are the 10 best-scoring of 60, the proxy is right
SCORE = {f"hero{i:02d}": 1.0 - i / 60 for i in range(60)}
VILLAINS = {f"hero{i:02d}" for i in range(10)}


class ControlledEmbedder:
    """Predicate -> e0; a value -> the unit vector at the angle whose cosine with e0 is its score."""
    name, dim = "controlled", 2

    def embed(self, texts, batch_size=128):
        out = []
        for t in texts:
            s = SCORE.get(t)
            out.append([1.0, 0.0] if s is None else [s, float(np.sqrt(max(0.0, 1 - s * s)))])
        return np.asarray(out, dtype=np.float32)


def villain_judge(messages) -> str:
    claim = re.search(r"<statement>(.*?)</statement>", messages[-1].content).group(1)
    return "yes" if claim.split(" is ")[0] in VILLAINS else "no"


def heroes(llm, **kw) -> SemTable:
    eng = SemEngine(llm, embedder=ControlledEmbedder(), **kw)
    return SemTable(["name"], [(n,) for n in SCORE], eng)


def test_proxy_text_is_the_values_against_the_predicate():
    assert predicate("{state} is a US state that borders Canada") == "a US state that borders Canada"
    assert predicate("{publisher_name} is named after an individual person") == "named after an individual person"
    assert claim_values("{state} is a US state that borders Canada", "New York is a US state that borders Canada") \
        == "New York"
    assert claim_values("{city}, {country} is big", "Lyon, France is big") == "Lyon, France"
    assert claim_values("{city} is big", "something else entirely") == "something else entirely"


def test_sample_takes_the_top_third_and_spreads_the_rest():
    scores = np.linspace(1, 0, 30)
    idx = sample_indexes(scores, 9)
    assert idx[:3] == [0, 1, 2] and idx[-1] == 29 and len(idx) == 9 == len(set(idx))
    assert sample_indexes(scores[:5], 9) == [0, 1, 2, 3, 4]


def test_decide_keeps_one_sampled_point_of_margin_and_needs_both_labels():
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1])
    got = decide(scores, {0: True, 2: True, 4: False, 6: False, 8: False})
    # "no" below 0.5 (the highest sampled "no" under the lowest "yes", 0.7), "yes" above 0.7 (the lowest
    # sampled "yes" over the highest "no", 0.5): 0.6 lies between a sampled "no" and "yes", the LM judges it
    assert got == {1: True, 5: False, 7: False}
    assert decide(scores, {0: False, 4: False, 8: False}) == {}  # no "yes" seen: the proxy showed nothing


def test_cascade_on_judges_fewer_inputs_with_the_same_result():
    llm = ScriptedLLM(villain_judge)
    out = heroes(llm).sem_filter(INSTRUCTION)  # "on" is the default
    assert {r[0] for r in out.rows} == VILLAINS
    assert llm.usage.calls < 40 and out.engine.stats.cascade_decided == 60 - llm.usage.calls


def test_inputs_that_stand_for_many_rows_are_always_judged_by_the_lm():
    assert heavy_indexes([1] * 50) == [] and heavy_indexes([]) == []
    assert heavy_indexes([1, 1, 1, 1, 1, 1, 1, 1, 1, 12]) == [9]
    # hero59 scores lowest, so the proxy would call it "no"; it stands for 40 of the rows, so the LM judges it
    VILLAINS.add("hero59")
    try:
        llm = ScriptedLLM(villain_judge)
        rows = [(n,) for n in SCORE] + [("hero59",)] * 39
        out = SemTable(["name"], rows, SemEngine(llm, embedder=ControlledEmbedder())).sem_filter(INSTRUCTION)
        assert sum(r[0] == "hero59" for r in out.rows) == 40
        claims = [re.search(r"<statement>(.*?)</statement>", m[-1].content).group(1) for m in llm.prompts]
        assert "hero59 is a villain" in claims
    finally:
        VILLAINS.discard("hero59")


def test_cascade_auto_only_when_the_cap_would_stop_the_filter():
    llm = ScriptedLLM(villain_judge)
    t = heroes(llm, cascade="auto")  # cap 200: 60 calls fit, no cascade
    assert {r[0] for r in t.sem_filter(INSTRUCTION).rows} == VILLAINS and llm.usage.calls == 60
    llm = ScriptedLLM(villain_judge)
    t = heroes(llm, max_calls=45, cascade="auto")  # 60 would not fit: the proxy decides the sure ones
    assert {r[0] for r in t.sem_filter(INSTRUCTION).rows} == VILLAINS and llm.usage.calls <= 45
    llm = ScriptedLLM(villain_judge)
    with pytest.raises(LMCallLimitExceeded):
        heroes(llm, max_calls=45, cascade="off").sem_filter(INSTRUCTION)


def test_cascade_reuses_cached_verdicts_and_rejects_unknown_modes(tmp_path):
    from tagql.tag.cache import OpCache

    llm = ScriptedLLM(villain_judge)
    cache = OpCache(tmp_path / "c.sqlite")
    heroes(llm, cache=cache, cascade="off").sem_filter(INSTRUCTION)
    llm2 = ScriptedLLM(villain_judge)
    out = heroes(llm2, cache=cache, cascade="on").sem_filter(INSTRUCTION)
    assert {r[0] for r in out.rows} == VILLAINS and llm2.usage.calls == 0
    with pytest.raises(TagqlError, match="unknown cascade mode"):
        SemEngine(llm, cascade="sometimes")


@pytest.mark.model
def test_cascade_with_real_embeddings_and_the_real_model():
    """52 US states, "on the Pacific coast", MiniLM as the proxy and the local 1.5B model as the judge."""
    from tagql.embeddings import make_embedder
    from tagql.llm import make_llm

    states = ["Alabama", "Alaska", "Arizona", "Arkansas", "California", "Colorado", "Connecticut", "Delaware",
              "Florida", "Georgia", "Hawaii", "Idaho", "Illinois", "Indiana", "Iowa", "Kansas", "Kentucky",
              "Louisiana", "Maine", "Maryland", "Massachusetts", "Michigan", "Minnesota", "Mississippi",
              "Missouri", "Montana", "Nebraska", "Nevada", "New Hampshire", "New Jersey", "New Mexico",
              "New York", "North Carolina", "North Dakota", "Ohio", "Oklahoma", "Oregon", "Pennsylvania",
              "Rhode Island", "South Carolina", "South Dakota", "Tennessee", "Texas", "Utah", "Vermont",
              "Virginia", "Washington", "West Virginia", "Wisconsin", "Wyoming"]
    llm = make_llm(backend="local")
    # split verdicts need every input judged, so the cascade runs where they are off (or unavailable)
    eng = SemEngine(llm, cascade="on", split=False, embedder=make_embedder())
    before = llm.usage.calls
    kept = {r[0] for r in SemTable(["state"], [(s,) for s in states], eng)
            .sem_filter("{state} is a state on the Pacific coast").rows}
    assert llm.usage.calls - before < len(states)  # the proxy decided some states without the LM
    assert eng.stats.cascade_decided > 0
    assert {"California", "Oregon"} <= kept and not kept & {"Texas", "Ohio", "Florida", "Kansas"}


def test_lm_filter_in_sql_is_judged_up_front_with_the_cascade(tmp_path):
    """SQLite calls a function row by row; the WHERE conjunct is judged before the statement instead, over
    the distinct inputs, so the cascade applies and the per-row calls find their verdicts."""
    import sqlite3

    from tagql.db.connection import open_database
    from tagql.tag.udf import execute_with_lm, register_lm_functions

    path = tmp_path / "heroes.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE hero (id INTEGER PRIMARY KEY, name TEXT, team TEXT)")
    con.executemany("INSERT INTO hero (name, team) VALUES (?, ?)",
                    [(n, "blue" if i % 2 else "red") for i, n in enumerate(SCORE)] * 2)
    con.commit()
    con.close()
    db = open_database(path)
    llm = ScriptedLLM(villain_judge)
    eng = SemEngine(llm, embedder=ControlledEmbedder())
    register_lm_functions(db, eng)
    r = execute_with_lm(db, "SELECT DISTINCT name FROM hero WHERE LM_FILTER('{name} is a villain', name) "
                        "ORDER BY name", eng)
    assert [x[0] for x in r.rows] == sorted(VILLAINS)
    assert llm.usage.calls < 40 and eng.stats.cascade_decided > 0

    # the other conjuncts narrow what is judged: 30 red heroes, below the cascade's 40, all judged once
    llm = ScriptedLLM(villain_judge)
    eng = SemEngine(llm, embedder=ControlledEmbedder())
    register_lm_functions(db, eng)
    r = execute_with_lm(db, "SELECT COUNT(*) FROM hero WHERE team = 'red' AND LM_FILTER('{name} is a villain', "
                        "name) = 1", eng)
    assert r.rows[0][0] == 2 * len([n for i, n in enumerate(SCORE) if n in VILLAINS and not i % 2])
    assert llm.usage.calls == 30 and eng.stats.cascade_decided == 0

    # a filter that is not a conjunct (under OR) runs row by row as before, with the same answer
    llm = ScriptedLLM(villain_judge)
    eng = SemEngine(llm, embedder=ControlledEmbedder())
    register_lm_functions(db, eng)
    r = execute_with_lm(db, "SELECT COUNT(DISTINCT name) FROM hero WHERE team = 'none' OR "
                        "LM_FILTER('{name} is a villain', name)", eng)
    assert r.rows[0][0] == len(VILLAINS) and llm.usage.calls == 60 and not eng.prejudged

    # LIMIT without ORDER BY stops at the first rows that pass: judged row by row, not up front
    llm = ScriptedLLM(villain_judge)
    eng = SemEngine(llm, embedder=ControlledEmbedder())
    register_lm_functions(db, eng)
    r = execute_with_lm(db, "SELECT name FROM hero WHERE LM_FILTER('{name} is a villain', name) LIMIT 1", eng)
    assert r.rows == [("hero00",)] and llm.usage.calls == 1


def _villain_probs(messages, choices):
    claim = re.search(r"<statement>(.*?)</statement>", messages[-1].content).group(1)
    # a "no"-leaning judge: villains 0.4, the others 0.05 (a 0.5 cut would find none)
    p = 0.4 if claim.split(" is ")[0] in VILLAINS else 0.05
    return [p, 0.0, 1 - p, 0.0]


def test_split_verdicts_judge_every_input_while_the_cap_allows():
    llm = ScriptedLLM([], choice_probs=_villain_probs)
    out = heroes(llm, cascade="on").sem_filter(INSTRUCTION)
    assert {r[0] for r in out.rows} == VILLAINS and llm.usage.calls == len(SCORE)  # no proxy decisions


def test_past_the_cap_the_cascade_cuts_its_sample_at_one_half():
    """The cascade judges a chosen part of the inputs, over which a gap says nothing: P(yes) is cut at
    0.5 there, as the generated replies would be. hero10-19 (P(yes) 0.3) stand apart from the rest
    (0.02) by a wide gap that split verdicts over all inputs would cut at; the cascade does not."""
    def probs(messages, choices):
        name = re.search(r"<statement>(.*?)</statement>", messages[-1].content).group(1).split(" is ")[0]
        p = 0.7 if name in VILLAINS else 0.3 if int(name[4:]) < 20 else 0.02
        return [p, 0.0, 1 - p, 0.0]

    llm = ScriptedLLM([], choice_probs=probs)
    table = heroes(llm, cascade="on", max_calls=59)
    out = table.sem_filter(INSTRUCTION)
    assert {r[0] for r in out.rows} == VILLAINS and table.engine.stats.cascade_decided > 0
    assert llm.usage.calls < len(SCORE)
    every = heroes(ScriptedLLM([], choice_probs=probs), cascade="on").sem_filter(INSTRUCTION)
    assert len(every.rows) == 20  # judged all, split at the wide gap: hero10-19 too
