"""The knowledge store in shared SQL tables (SQLite file or PostgreSQL): the file store's behaviour, and
two openers (two engines, as two processes or replicas) see each other's statements through their live
retrievers; stores of different databases share the tables without seeing each other."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from tagql.knowledge.shared import SharedKnowledgeBase, create_tables
from tagql.knowledge.store import KnowledgeBase, KnowledgeStoreError

from .conftest import TOX

Q = "In the molecule containing sodium atoms, how many are non-carcinogenic?"


def sqlite_engines(tmp_path: Path) -> tuple[sa.Engine, sa.Engine]:
    url = f"sqlite:///{tmp_path / 'state.sqlite'}"
    first = sa.create_engine(url)
    with first.begin() as conn:
        create_tables(conn)
    return first, sa.create_engine(url)


@pytest.fixture()
def postgres_engines(pg_schema_url: str) -> tuple[sa.Engine, sa.Engine]:
    first, second = sa.create_engine(pg_schema_url), sa.create_engine(pg_schema_url)
    with first.begin() as conn:
        create_tables(conn)
    yield first, second
    first.dispose()
    second.dispose()


def two_stores(engines: tuple[sa.Engine, sa.Engine], schema, embedder) -> tuple[SharedKnowledgeBase, ...]:
    return tuple(SharedKnowledgeBase.open_shared(e, "toxicology", schema=schema, embedder=embedder) for e in engines)


def shared_behaves_like_a_file(a: SharedKnowledgeBase, b: SharedKnowledgeBase) -> None:
    ids = a.add_structured(TOX + ["'colour' refers to molecule.colour"], status="proposed")
    assert "colour" in b.get(ids[-1]).reason and b.count() == {"proposed": 6, "approved": 0, "rejected": 0}
    r = b.retriever("hybrid")
    assert r.retrieve(Q, 2) == []  # nothing approved yet
    for i in ids[:5]:
        a.approve(i)
    assert {s.text for s in r.retrieve(Q, 2)} == {"sodium atoms", "non-carcinogenic"}
    loaded = r.reindexed_rows
    a.edit(ids[2], text="atoms of sodium", sql="atom.element = 'na'")
    a.delete(ids[0])
    got = r.retrieve(Q, 2)
    assert r.reindexed_rows == loaded + 1  # incremental: only the edited row came again
    assert "non-carcinogenic" not in {s.text for s in got} and "atoms of sodium" in {s.text for s in got}
    b.reject(ids[1], "duplicate")
    assert (a.get(ids[1]).status, a.get(ids[1]).reason) == ("rejected", "duplicate")
    assert [st.id for st in a.list("approved")] == ids[2:5]
    with pytest.raises(KnowledgeStoreError, match=f"no statement with id {ids[0]}"):
        b.get(ids[0])
    assert a.schema.table("molecule") is not None and b.revision == a.revision


def test_shared_sqlite_two_openers(tmp_path: Path, tox_schema, embedder) -> None:
    shared_behaves_like_a_file(*two_stores(sqlite_engines(tmp_path), tox_schema, embedder))


@pytest.mark.postgres
def test_shared_postgres_two_openers(postgres_engines, tox_schema, embedder) -> None:
    shared_behaves_like_a_file(*two_stores(postgres_engines, tox_schema, embedder))


def test_databases_stay_apart_and_a_file_store_imports(tmp_path: Path, tox_schema, embedder) -> None:
    engine, _ = sqlite_engines(tmp_path)
    tox = SharedKnowledgeBase.open_shared(engine, "toxicology", schema=tox_schema, embedder=embedder)
    other = SharedKnowledgeBase.open_shared(engine, "heroes", embedder=embedder)
    tox.add_structured(TOX[:2], status="approved")
    assert other.list() == [] and other.retriever("bm25").retrieve(Q, 3) == [] and other.revision == 0
    file = KnowledgeBase.open(tmp_path / "heroes.kb", create=True, db_id="heroes", embedder=embedder)
    file.add("tall heroes", "superhero.height_cm > 200", status="approved", author="erin")
    file.add("heavy heroes", "superhero.weight_kg > 100", status="rejected", reason="no")
    assert other.import_rows(file) == 2
    assert [(s.text, s.status, s.author) for s in other.list()] == [
        ("tall heroes", "approved", "erin"), ("heavy heroes", "rejected", "")]
    assert [s.text for s in other.retriever("hybrid").retrieve("Which tall heroes?", 1)] == ["tall heroes"]
    with pytest.raises(KnowledgeStoreError, match="has no shared knowledge tables"):
        SharedKnowledgeBase.open_shared(sa.create_engine(f"sqlite:///{tmp_path / 'empty.sqlite'}"), "x")
