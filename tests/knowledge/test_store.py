from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading

import pytest

from tagql.knowledge.statements import StatementError
from tagql.knowledge.store import KnowledgeBase, KnowledgeStoreError

from .conftest import TOX

Q = "In the molecule containing sodium atoms, how many are non-carcinogenic?"


@pytest.fixture
def kb(tmp_path, tox_schema, embedder):
    return KnowledgeBase.open(tmp_path / "tox.kb", create=True, db_id="toxicology", schema=tox_schema,
                              embedder=embedder)


def test_add_list_and_validation(kb):
    ids = kb.add_structured(TOX + ["'colour' refers to molecule.colour"], status="proposed")
    rows = {s.id: s for s in kb.list()}
    assert [rows[i].status for i in ids] == ["proposed"] * 6
    bad = rows[ids[-1]]
    assert "colour" in bad.reason and bad.nl == "'colour' refers to molecule.colour"
    assert rows[ids[0]].text == "non-carcinogenic" and rows[ids[0]].sql == "molecule.label = '-'"
    # invalid snippets stay proposed even when the batch asks for proposed->approved via review later
    assert kb.count() == {"proposed": 6, "approved": 0, "rejected": 0}


def test_only_approved_are_retrieved_and_index_is_incremental(kb):
    ids = kb.add_structured(TOX, status="proposed")
    r = kb.retriever("hybrid")
    assert r.retrieve(Q, 2) == []  # nothing approved yet
    assert {s.text for s in kb.retriever("hybrid", statuses=("approved", "proposed")).retrieve(Q, 2)} == {
        "sodium atoms", "non-carcinogenic"}
    for i in ids:
        kb.approve(i)
    assert {s.text for s in r.retrieve(Q, 2)} == {"sodium atoms", "non-carcinogenic"}
    loaded = r.reindexed_rows
    # edit one statement: the live retriever reloads that row only, and sees the new text
    kb.edit(ids[2], text="atoms of sodium", sql="atom.element = 'na'")
    kb.delete(ids[0])
    got = r.retrieve(Q, 2)
    assert r.reindexed_rows == loaded + 1
    assert "non-carcinogenic" not in {s.text for s in got} and "atoms of sodium" in {s.text for s in got}
    kb.reject(ids[1], "duplicate")
    assert kb.get(ids[1]).status == "rejected" and kb.get(ids[1]).reason == "duplicate"


def test_prompt_retrieval_holds_back_snippets_naming_missing_tables_or_columns(kb):
    """An approved statement whose snippet names a table or column the schema lacks is left out when
    the retriever picks K for a prompt (the model would copy it into a failing query); a borrowed
    alias (``T.label``) is not held back; an explicit K still sees everything; fixing it brings it back."""
    ids = kb.add_structured([
        "'sodium atoms' refers to atom.elemnt = 'na'",                      # misspelt column
        "'non-carcinogenic' refers to T.label = '-'",                       # alias, no table
        "'carcinogenic' refers to molecule.label = '+'",
    ], status="approved")
    assert all(s.status == "approved" for s in kb.list())
    r = kb.retriever("bm25")
    assert {s.text for s in r.retrieve(Q)} == {"non-carcinogenic", "carcinogenic"}
    assert "sodium atoms" in {s.text for s in r.retrieve(Q, 3)}
    kb.edit(ids[0], sql="atom.element = 'na'")
    assert "sodium atoms" in {s.text for s in r.retrieve(Q)}


def test_edit_revalidates(kb):
    (i,) = kb.add_structured(["'sodium' refers to atom.element = 'na'"], status="proposed")
    s = kb.edit(i, sql="atom.elemnt = 'na'")
    assert "elemnt" in s.reason
    assert kb.edit(i, sql="atom.element = 'na'").reason == ""


def test_bad_input_is_rejected_and_data_survives(kb, tmp_path):
    kb.add_structured(TOX[:2], status="approved")
    with pytest.raises(StatementError):
        kb.add_structured(["'ok' refers to atom.element = 'c'", "not structured at all"])
    with pytest.raises(StatementError):
        kb.add("", "atom.element")
    with pytest.raises(StatementError):
        kb.add("x", "y", status="maybe")
    with pytest.raises(KnowledgeStoreError):
        kb.get(999)
    assert len(kb.list()) == 2  # the failed batch added nothing, nothing was lost
    with pytest.raises(KnowledgeStoreError, match="belongs to database 'toxicology'"):
        KnowledgeBase.open(kb.path, create=True, db_id="superhero")
    with pytest.raises(KnowledgeStoreError, match="does not exist"):
        KnowledgeBase.open(tmp_path / "missing.kb")
    junk = tmp_path / "junk.kb"
    junk.write_text("hello")
    with pytest.raises(KnowledgeStoreError, match="not a knowledge store"):
        KnowledgeBase.open(junk)


def test_concurrent_thread_writers_lose_nothing(kb, embedder):
    errors = []

    def writer(n: int) -> None:
        try:
            mine = KnowledgeBase.open(kb.path, embedder=embedder)
            for j in range(15):
                mine.add(f"statement {n}-{j}", "atom.element = 'c'", status="approved")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    ts = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert len(kb.list()) == 60 and kb.revision >= 60


WRITER = r"""
import sys, hashlib, numpy as np
from tagql.knowledge.store import KnowledgeBase
class HashEmbedder:  # the store, not the model, is under test here
    name, dim = "hash", 8
    def embed(self, texts, batch_size=128):
        v = np.array([[b for b in hashlib.sha256(t.encode()).digest()[:8]] for t in texts], dtype=np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)
kb = KnowledgeBase.open(sys.argv[1], embedder=HashEmbedder())
for j in range(40):
    kb.add(f"proc {sys.argv[2]} statement {j}", "atom.element = 'c'", status="approved")
"""


def test_concurrent_process_writers_lose_nothing(kb):
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(kb.path), str(n)]) for n in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    texts = {s.text for s in kb.list()}
    assert len(texts) == 120 and all(f"proc {n} statement {j}" in texts for n in range(3) for j in range(40))


def test_exemplars_roundtrip(kb, tmp_path):
    from tagql.knowledge.structuring import DEFAULT_EXEMPLARS, Exemplar

    assert len(kb.exemplars()) == len(DEFAULT_EXEMPLARS)
    kb.set_exemplars([Exemplar("na is sodium", "'sodium' refers to atom.element = 'na'")])
    assert [e.nl for e in kb.exemplars()] == ["na is sodium"]


def test_retriever_for_database(tmp_path, kb, embedder):
    from tagql.config import load_settings
    from tagql.knowledge.store import retriever_for

    settings = load_settings(knowledge_dir=tmp_path)
    # no store: the embedder (a factory here) is never loaded
    assert retriever_for("nostore", settings=settings, embedder=lambda: pytest.fail("loaded")) is None
    kb.add_structured(TOX, status="approved")
    r = retriever_for("tox", settings=settings, k=2, embedder=lambda: embedder)  # the fixture's store: tmp_path/tox.kb
    assert {s.text for s in r.retrieve(Q)} == {"sodium atoms", "non-carcinogenic"}
    with pytest.raises(KnowledgeStoreError):
        retriever_for("x", store=tmp_path / "missing.kb")


def test_hybrid_static_store_retriever_is_incremental(kb):
    ids = kb.add_structured(TOX, status="approved")
    r = kb.retriever("hybrid-static")
    assert {s.text for s in r.retrieve(Q, 2)} == {"sodium atoms", "non-carcinogenic"}
    assert r.prepared == len(TOX)
    kb.edit(ids[2], text="atoms of sodium", sql="atom.element = 'na'")
    got = r.retrieve(Q, 2)
    assert r.prepared == len(TOX) + 1  # only the edited text was embedded again
    assert "atoms of sodium" in {s.text for s in got}


def test_check_against_the_data_holds_back_constants_the_column_lacks(kb, shared_data):
    """``check`` with a connected database flags a constant its column does not hold (even up to case);
    that approved statement leaves auto-K prompts until an edit and a new check clear it; canonical
    templates ('100', 'X') and case-only differences are not problems; a rejection note survives."""
    from tagql.db import open_database

    db = open_database(shared_data / "bird" / "dev_databases" / "toxicology" / "toxicology.sqlite")
    ids = kb.add_structured([
        "'sodium atoms' refers to atom.element = 'sodium'",                 # the data says 'na'
        "'chlorine atoms' refers to atom.element = 'CL'",                   # 'cl' up to case: fine
        "'molecule with id X' refers to molecule.molecule_id = 'X'",        # a template constant
        "'carcinogenic' refers to molecule.label = '+'",
        "'old note' refers to molecule.label = 'nope'",
        "'the first molecules' refers to molecule.molecule_id = 'tr00'",    # part of stored ids: named
    ], status="approved")
    kb.reject(ids[4], "duplicate of #4")
    r = kb.retriever("bm25")
    assert "sodium atoms" in {s.text for s in r.retrieve(Q)}
    changed = kb.check(db)
    assert [(st.id, reason) for st, reason in changed] == [
        (ids[0], "the data holds no 'sodium' in atom.element"),
        (ids[5], "the data holds no 'tr00' in molecule.molecule_id (it holds 'TR000', 'TR001', 'TR002')"),
    ]
    assert kb.get(ids[0]).status == "approved" and kb.get(ids[4]).reason == "duplicate of #4"
    assert "sodium atoms" not in {s.text for s in r.retrieve(Q)}  # the live retriever saw the new reason
    seen: list[tuple[int, int]] = []
    assert kb.check(db, progress=lambda done, total: seen.append((done, total))) == []  # nothing changed since
    assert seen[-1] == (5, 5)  # the five statements that are not rejected, reported as they are checked
    kb.edit(ids[0], sql="atom.element = 'na'")
    assert kb.check(db) == [] and kb.get(ids[0]).reason == ""
    assert "sodium atoms" in {s.text for s in r.retrieve(Q)}


def test_check_ignores_the_order_of_a_reason_table_list(kb, shared_data):
    """A store made from a tables.json and checked against the live database: the same unknown-table
    reason, with the tables listed in another order, is not reported as a change."""
    from tagql.db import open_database

    db = open_database(shared_data / "bird" / "dev_databases" / "toxicology" / "toxicology.sqlite")
    (i,) = kb.add_structured(["'colour of atoms' refers to color.color"], status="approved")
    stored = kb.get(i).reason
    assert "unknown table 'color'" in stored
    head, _, tables = stored.partition("; the tables are: ")
    kb.set_status(i, "approved", f"{head}; the tables are: {', '.join(reversed(tables.split(', ')))}")
    assert kb.check(db) == []


class _FlakyBegin:
    """A connection whose first ``failures`` BEGINs fail the way a concurrent WAL set-up can."""

    def __init__(self, conn, failures: int) -> None:
        self.conn, self.failures = conn, failures

    def execute(self, sql, params=()):
        if sql == "BEGIN IMMEDIATE" and self.failures:
            self.failures -= 1
            raise sqlite3.OperationalError("disk I/O error")
        return self.conn.execute(sql, params)

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction


def test_a_transient_io_error_at_begin_is_retried_and_a_lasting_one_is_one_line(tmp_path):
    # seen once in CI: two service replicas writing one store, a BEGIN failed with "disk I/O error"
    from tagql.knowledge.store import _WriteTxn

    conn = sqlite3.connect(tmp_path / "s.kb", isolation_level=None)
    conn.execute("CREATE TABLE t (x)")
    with _WriteTxn(_FlakyBegin(conn, 2), tmp_path / "s.kb") as txn:
        txn.execute("INSERT INTO t VALUES (1)")
    assert conn.execute("SELECT x FROM t").fetchall() == [(1,)]
    with pytest.raises(KnowledgeStoreError, match="disk I/O error"):
        with _WriteTxn(_FlakyBegin(conn, 9), tmp_path / "s.kb") as txn:
            txn.execute("INSERT INTO t VALUES (2)")
    assert conn.execute("SELECT x FROM t").fetchall() == [(1,)]  # nothing of the failed write
