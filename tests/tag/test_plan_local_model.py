"""The real local model writing whole TAG plans: a domain statement from the database's experts steers the
plan, and the answer it computes is the verified one (the dev set's labels, bench/tag/devset.py)."""

from __future__ import annotations

import pytest

from tagql.llm import make_llm

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def llm():
    return make_llm(backend="local")


@pytest.fixture()
def toxicology(shared_data):
    from tagql.db import open_database

    return open_database(shared_data / "bird" / "dev_databases" / "toxicology" / "toxicology.sqlite")


def test_a_domain_statement_reaches_the_real_models_plan_and_fixes_its_answer(llm, toxicology, tmp_path):
    """'double bonds' is stored as bond_type '=': told so by a statement, the SQL counts the right bonds.
    Without the misplaced-value check the 1.5B model's plan counted `connected.atom_id = 'TR006'` (an
    atom id column) and answered 0."""
    from tagql.config import load_settings
    from tagql.knowledge import ScoredStatement, StaticStatements
    from tagql.methods import answer
    from tagql.pipeline import TagQL

    statement = ScoredStatement("double bonds", "bond.bond_type = '='", 1.0)
    expected = toxicology.execute("SELECT COUNT(*) FROM bond WHERE molecule_id = 'TR006' AND bond_type = '='").rows[0][0]
    session = TagQL(toxicology, llm, settings=load_settings(cache_dir=str(tmp_path)),
                    knowledge=StaticStatements([statement]))
    a = answer(session, "How many double bonds does molecule TR006 have?", "tag")
    assert [(s.text, s.sql) for s in a.statements] == [(statement.text, statement.sql)]
    assert "bond_type = '='" in a.sql and "'TR006'" in a.sql
    # the plan or, when the model cannot repair its plan, the text2sql_lm fallback (the LM reads the count,
    # so it may come back as text) computes it
    assert [str(v) for v in a.values] == [str(expected)] and expected == 6
