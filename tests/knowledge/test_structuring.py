from __future__ import annotations

import pytest

from tagql.knowledge.statements import Structured
from tagql.knowledge.store import KnowledgeBase
from tagql.knowledge.structuring import (
    DEFAULT_EXEMPLARS,
    NOT_APPLICABLE,
    Structurer,
    build_messages,
    canonicalise_structured,
)
from tagql.llm.scripted import ScriptedLLM


def test_prompt_has_schema_exemplars_and_statement(tox_schema):
    msgs = build_messages("na means sodium", tox_schema.to_prompt(), "toxicology", DEFAULT_EXEMPLARS)
    assert msgs[0].role == "system" and "database toxicology" in msgs[0].content
    assert "CREATE TABLE" in msgs[0].content and "atom" in msgs[0].content
    assert len(msgs) == 2 + 2 * len(DEFAULT_EXEMPLARS) and len(DEFAULT_EXEMPLARS) == 8
    assert [m.role for m in msgs[1:3]] == ["user", "assistant"]
    assert msgs[2].content == DEFAULT_EXEMPLARS[0].structured
    assert msgs[-1].role == "user"
    assert msgs[-1].content == "Domain Statement: na means sodium\nTemplatized Domain Statement:"


def test_constants_are_canonicalised_in_text_and_snippet():
    s = canonicalise_structured(Structured("patients born after 1992", "STRFTIME('%Y', Patient.Birthday) > '1992'"))
    assert s.text == "patients born after 100"
    assert s.sql == "STRFTIME('%Y', Patient.Birthday) > '100'"
    # a number that is not in the text (a business threshold) stays
    s = canonicalise_structured(Structured("normal C3", "Laboratory.C3 > 35"))
    assert s.sql == "Laboratory.C3 > 35"


def test_structurer_parses_validates_and_flags(tox_schema):
    llm = ScriptedLLM([
        "'sodium atoms' refers to atom.element = 'na'\n",
        "Templatized Domain Statement: 'red molecules' refers to molecule.colour = 'red'",
        NOT_APPLICABLE,
        "I don't know",
    ])
    st = Structurer(llm, tox_schema)
    ok = st.structure("na is the element sodium")
    assert (ok.text, ok.sql, ok.valid) == ("sodium atoms", "atom.element = 'na'", True)
    bad = st.structure("red molecules have colour red")
    assert not bad.valid and "colour" in bad.problem
    off = st.structure("the CEO's birthday is in May")
    assert not off.valid and "not about this database" in off.problem
    junk = st.structure("something")
    assert not junk.valid and junk.sql == "" and "could not structure" in junk.problem
    assert len(llm.prompts) == 4


def test_add_nl_keeps_invalid_ones_proposed(tmp_path, tox_schema, embedder):
    kb = KnowledgeBase.open(tmp_path / "t.kb", create=True, db_id="toxicology", schema=tox_schema, embedder=embedder)
    llm = ScriptedLLM(["'sodium atoms' refers to atom.element = 'na'", "'x' refers to nosuch.col = 1"])
    ids = kb.add_nl(["na is sodium", "x is in nosuch"], Structurer(llm, kb.schema), approve_valid=True)
    a, b = kb.get(ids[0]), kb.get(ids[1])
    assert (a.status, a.nl, a.structured) == ("approved", "na is sodium", "'sodium atoms' refers to atom.element = 'na'")
    assert b.status == "proposed" and "nosuch" in b.reason


@pytest.mark.model
def test_real_model_structures_a_statement(tox_schema):
    """End to end with the local Qwen2.5-Coder-1.5B (2 LLM calls)."""
    from tagql.config import load_settings
    from tagql.llm import make_llm

    llm = make_llm(load_settings())
    st = Structurer(llm, tox_schema)
    r = st.structure("non-carcinogenic molecules are those whose label is '-'")
    assert r.valid, r
    assert "label" in r.sql and "'-'" in r.sql and "carcinogenic" in r.text.lower()
    r2 = st.structure("molecules made after 1995 are recent")  # nothing in the schema stores dates
    assert r2.text and (r2.problem or r2.sql)  # a clear outcome either way: a snippet, or a reason
