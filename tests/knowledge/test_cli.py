from __future__ import annotations

import json

from typer.testing import CliRunner

from tagql.cli.knowledge import app

from .conftest import TOX

runner = CliRunner()


def _store(tmp_path, shared_data):
    store = tmp_path / "tox.kb"
    tables = str(shared_data / "bird" / "dev_tables.json")
    r = runner.invoke(app, ["add", "--db", tables, "--db-id", "toxicology", "--store", str(store),
                            "--structured", "--approved", *TOX])
    assert r.exit_code == 0, r.output
    return store, tables


def test_add_list_retrieve_jsonl(tmp_path, shared_data):
    store, tables = _store(tmp_path, shared_data)
    r = runner.invoke(app, ["list", "--store", str(store), "--json"])
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(rows) == len(TOX) and all(x["status"] == "approved" for x in rows)
    qs = ["How many triple bonds are there?", "In the molecule containing sodium atoms, how many are non-carcinogenic?"]
    stdin = "\n".join(json.dumps({"question": q, "id": i}) for i, q in enumerate(qs)) + "\n"
    for method in ("sbr", "bm25", "hybrid"):
        r = runner.invoke(app, ["retrieve", "--store", str(store), "--method", method, "--k", "2", "--jsonl"], input=stdin)
        assert r.exit_code == 0, r.output
        out = [json.loads(x) for x in r.stdout.splitlines()]
        assert [o["question"] for o in out] == qs
        assert out[0]["statements"][0] == {"text": "triple bond", "sql": "bond.bond_type = '#'",
                                           "score": out[0]["statements"][0]["score"]}
        assert {s["text"] for s in out[1]["statements"]} == {"sodium atoms", "non-carcinogenic"}


def test_review_flow_and_errors(tmp_path, shared_data):
    store, tables = _store(tmp_path, shared_data)
    r = runner.invoke(app, ["add", "--store", str(store), "--db", tables, "--db-id", "toxicology", "--structured",
                            "'shiny' refers to molecule.shine = 1"])
    assert r.exit_code == 0 and "proposed" in r.stdout and "shine" in r.stdout
    new_id = len(TOX) + 1
    r = runner.invoke(app, ["review", "--store", str(store), "--edit", str(new_id), "--sql", "molecule.label = '+'"])
    assert r.exit_code == 0 and "proposed" in r.stdout
    r = runner.invoke(app, ["review", "--store", str(store), "--approve", str(new_id)])
    assert "[approved]" in r.stdout
    # interactive: reject the next proposed one
    runner.invoke(app, ["add", "--store", str(store), "--db", tables, "--db-id", "toxicology", "--structured",
                        "'atoms' refers to atom.atom_id"])
    r = runner.invoke(app, ["review", "--store", str(store)], input="r\nnot needed\n")
    assert r.exit_code == 0 and "[rejected]" in r.stdout
    # bad input: one-line errors, exit 2, store intact
    for args, msg in [
        (["retrieve", "--store", str(store), "--method", "magic", "--jsonl"], "unknown retrieval method"),
        (["retrieve", "--store", str(tmp_path / "nope.kb"), "--jsonl"], "does not exist"),
        (["list", "--store", str(store), "--status", "maybe"], "unknown status"),
        (["add", "--store", str(store), "--db", tables, "--db-id", "toxicology", "--structured", "no mapping"],
         "not a structured statement"),
        (["add", "--store", str(store), "--db", tables, "--db-id", "nosuchdb", "--structured", "'a' refers to b"],
         "no database 'nosuchdb'"),
    ]:
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert "error:" in r.output and msg in r.output, r.output
    r = runner.invoke(app, ["retrieve", "--store", str(store), "--jsonl"], input="not json\n")
    assert r.exit_code == 2 and "input line 1" in r.output
    r = runner.invoke(app, ["list", "--store", str(store), "--json"])
    assert len(r.stdout.splitlines()) == len(TOX) + 2


def test_import_paper_structured(tmp_path, shared_data):
    r = runner.invoke(app, ["import-paper", "--data", str(shared_data), "--out", str(tmp_path), "--only", "toxicology"])
    assert r.exit_code == 0, r.output
    from tagql.knowledge.store import KnowledgeBase

    kb = KnowledgeBase.open(tmp_path / "toxicology.kb")
    n = kb.count()["approved"]
    assert n >= 100 and kb.db_id == "toxicology"
    # the screened statements stay approved; those whose snippet does not validate say why
    reasons = {s.text: s.reason for s in kb.list()}
    assert reasons["non-carcinogenic"] == ""
    assert "unknown table 'T'" in reasons["count of molecules that are carcinogenic"]
    # idempotent: importing again adds nothing
    runner.invoke(app, ["import-paper", "--data", str(shared_data), "--out", str(tmp_path), "--only", "toxicology"])
    assert kb.count()["approved"] == n


def test_check_against_a_live_database(tmp_path, shared_data):
    store, tables = _store(tmp_path, shared_data)
    r = runner.invoke(app, ["add", "--db", tables, "--db-id", "toxicology", "--store", str(store),
                            "--structured", "--approved", "'iodine atoms' refers to atom.element = 'iodine'"])
    assert r.exit_code == 0, r.output
    # a tables.json is a schema without data: nothing to say about constants
    r = runner.invoke(app, ["check", "--db", tables, "--db-id", "toxicology", "--store", str(store)])
    assert r.exit_code == 0, r.output
    assert "0 reason(s) changed" in r.output and "against the schema only" in r.output
    sqlite = str(shared_data / "bird" / "dev_databases" / "toxicology" / "toxicology.sqlite")
    r = runner.invoke(app, ["check", "--db", sqlite, "--store", str(store)])
    assert r.exit_code == 0, r.output
    assert "the data holds no 'iodine' in atom.element" in r.output
    assert "1 reason(s) changed; 1 approved statement(s) held back" in " ".join(r.output.split())
    r = runner.invoke(app, ["check", "--db", str(tmp_path / "missing.sqlite"), "--store", str(store)])
    assert r.exit_code != 0 and "Traceback" not in r.output


def test_add_against_a_live_database_checks_only_what_it_adds(tmp_path, shared_data, embedder):
    store, _ = _store(tmp_path, shared_data)
    from tagql.knowledge.store import KnowledgeBase

    kb = KnowledgeBase.open(store, embedder=embedder)
    stale = kb.add_structured(["'iodine atoms' refers to atom.element = 'iodine'"], status="approved")[0]
    assert kb.get(stale).reason == ""  # added by schema only: nobody looked at the data yet
    sqlite = str(shared_data / "bird" / "dev_databases" / "toxicology" / "toxicology.sqlite")
    r = runner.invoke(app, ["add", "--db", sqlite, "--store", str(store), "--structured", "--approved",
                            "'gold atoms' refers to atom.element = 'gold'"])
    assert r.exit_code == 0, r.output
    assert "the data holds no 'gold' in atom.element" in " ".join(r.output.split())
    assert kb.get(stale).reason == ""  # the rest of the store is `check`'s job, not add's
