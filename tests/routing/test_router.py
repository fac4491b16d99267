"""Routers on a small Spider collection: accuracy, graph validity of candidates, updates, errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tagql.routing.collection import Collection
from tagql.routing.errors import DatabaseGone, EmptyCollection, IndexMissing
from tagql.routing.metrics import Gold, gold_tables, summarize
from tagql.routing.ours import GraphRouter
from tagql.routing.sampling import QuerySchema
from tagql.routing.synth import keep_question

from .conftest import DBS


@pytest.fixture(scope="module")
def dev(spider_dir: Path) -> list[dict]:
    return [e for e in json.loads((spider_dir / "dev.json").read_text()) if e["db_id"] in DBS][::4]


def _score(router, collection, dev) -> dict:
    golds = [Gold(e["db_id"], gold_tables(e["query"], collection.schema(e["db_id"]).table_names)) for e in dev]
    return summarize(router.route_many([e["question"] for e in dev], k=8), golds)


def test_ours_routes_dev_questions_and_beats_bm25(small_router, small_collection, dev) -> None:
    ours = _score(small_router, small_collection, dev)
    bm25 = _score(small_collection.router("bm25"), small_collection, dev)
    assert ours["n"] > 60
    assert ours["db_r@1"] >= 90.0, ours
    assert ours["table_r@5"] >= 90.0, ours
    assert ours["db_r@1"] >= bm25["db_r@1"], (ours, bm25)


def test_every_candidate_is_a_trail(small_router, small_collection, dev) -> None:
    g = small_collection.graph
    for cands in small_router.route_many([e["question"] for e in dev[:40]], k=5):
        assert len({c.database for c in cands}) == len(cands) == 5  # one candidate per database
        assert [c.score for c in cands] == sorted((c.score for c in cands), reverse=True)
        for c in cands:
            assert c.trails
            for trail in c.trails:
                assert g.is_trail(c.database, trail), (c.database, trail)
            assert 0.0 <= c.confidence <= 1.0


def test_synthetic_questions_pass_filter(small_router, small_collection) -> None:
    syn = small_router.syn
    assert len(syn) > 200
    s = small_collection.schema("concert_singer")
    assert not keep_question("What is the weather like today?", s, QuerySchema("concert_singer", ("singer",)))
    assert keep_question("How many singers are from France?", s, QuerySchema("concert_singer", ("singer",)))


def test_router_persists_and_reloads(small_router, small_collection, embedder) -> None:
    again = GraphRouter.load(small_collection, embedder)
    q = "Show the stadium name and the number of concerts in each stadium."
    assert [c.to_dict() for c in again.route(q)] == [c.to_dict() for c in small_router.route(q)]
    assert again.route(q)[0].database == "concert_singer"


def test_incremental_update_add_and_remove(small_collection, small_router, spider_dir, tmp_path, embedder) -> None:
    c = Collection.create("upd", path=tmp_path / "upd")
    shutil.copytree(small_collection.path, c.path, dirs_exist_ok=True)
    c = Collection.load("upd", path=c.path)
    r = GraphRouter.load(c, embedder)
    q = "What are the names of the wrestlers who were eliminated by Orton?"
    assert r.route(q)[0].database != "wrestler"
    c.add_spider(spider_dir / "tables.json", only=["wrestler"])
    c.remove("pets_1")
    c.save()
    r = GraphRouter.load(c, embedder)
    info = r.update()
    assert info["added_or_changed"] == ["wrestler"] and info["removed"] == ["pets_1"]
    assert info["new_questions"] > 0
    top = r.route(q)[0]
    assert top.database == "wrestler" and "Elimination" in top.tables
    assert all(cand.database != "pets_1" for cand in r.route("How many pets are owned by students?", k=8))
    # a reload sees the same state; nothing else was re-synthesized
    r2 = GraphRouter.load(c, embedder)
    assert len(r2.syn) == len(r.syn)
    assert r2.update()["added_or_changed"] == []


def test_bad_input(tmp_path: Path, small_collection) -> None:
    empty = Collection.create("empty", path=tmp_path / "empty")
    with pytest.raises(EmptyCollection):
        empty.router("bm25")
    c = Collection.create("gone", path=tmp_path / "gone")
    src = Path(small_collection.target("pets_1"))
    copy = tmp_path / "pets_1.sqlite"
    shutil.copy(src, copy)
    c.add_database(str(copy))
    c.save()
    assert c.open("pets_1").execute("SELECT count(*) FROM Student").rows[0][0] > 0
    copy.unlink()
    with pytest.raises(DatabaseGone, match="disappeared"):
        Collection.load("gone", path=c.path).open("pets_1")
    with pytest.raises(IndexMissing):
        c.router("ours")


OFF_TOPIC = ["What will the weather be like in Paris tomorrow?", "What is a good recipe for sourdough bread?",
             "Who painted the Mona Lisa?", "How do I reset my wifi router password?"]


def test_question_about_none_of_the_databases_gets_low_confidence(small_router, dev) -> None:
    from tagql.routing.hitl import confidence_note

    for q in OFF_TOPIC:
        note = confidence_note(small_router.route(q))
        assert note and "none of the databases" in note, (q, small_router.route(q)[0].to_dict())
    flagged = sum(confidence_note(c) is not None for c in small_router.route_many([e["question"] for e in dev]))
    assert flagged <= 0.1 * len(dev), flagged


def test_table_lists_start_with_a_trail_and_do_not_depend_on_k(small_router, small_collection, dev) -> None:
    g = small_collection.graph
    qs = [e["question"] for e in dev[:30]]
    wide = small_router.route_many(qs, k=8)
    for q, cands in zip(qs, wide):
        narrow = small_router.route(q, k=3)
        assert [(c.database, c.tables) for c in narrow] == [(c.database, c.tables) for c in cands[:3]]
        for c in cands:
            first = c.trails[0]
            assert c.tables[: len(first)] == first  # the best trail leads
            assert all(set(t) <= set(c.tables) for t in c.trails)
            for i in range(1, len(c.tables)):  # later tables join the earlier ones where the graph allows
                reach = {n for t in c.tables[:i] for n in g.neighbours(c.database, t)} - set(c.tables[:i])
                assert not reach or c.tables[i] in reach, (c.database, c.tables)


def test_copies_of_a_table_share_a_group_whatever_their_names(tmp_path: Path) -> None:
    """``same_rows``: the scorers' training never takes a copy of the question's table as a negative."""
    from tagql.db.schema import Column, Schema, Table
    from tagql.routing.collection import Collection
    from tagql.routing.ours import same_rows

    def table(name: str, a: str, b: str) -> Table:
        return Table(name, [Column(a, "TEXT"), Column(b, "INTEGER")])

    singers = {("singer", "name"): ["Joe", "Ann"], ("singer", "age"): [31, 40]}
    c = Collection("copies", tmp_path / "copies")
    c.add(Schema("music", [table("singer", "name", "age"), table("empty", "x", "y")]), kind="ddl", target=None,
          values=singers)
    c.add(Schema("fragment_00001", [table("vocalist", "title", "years")]), kind="ddl", target=None,
          values={("vocalist", "title"): ["Joe", "Ann"], ("vocalist", "years"): [31, 40]})
    c.add(Schema("other", [table("singer", "name", "age"), table("empty", "x", "y")]), kind="ddl", target=None,
          values={("singer", "name"): ["Joe", "Bo"], ("singer", "age"): [31, 40]})
    # without stored values: the same layout and most column names make a copy, whatever the table is called
    c.add(Schema("bare", [table("void", "x", "y"), Table("wide", [Column("x", "TEXT"), Column("y", "TEXT")]),
                          table("unlike", "p", "q")]), kind="ddl", target=None)
    c.add(Schema("bare_renamed", [Table("hollow", [Column("x", "TEXT"), Column("why", "INTEGER"),
                                                   Column("z", "INTEGER")])]), kind="ddl", target=None)
    keys = [("music", "singer"), ("music", "empty"), ("fragment_00001", "vocalist"), ("other", "singer"),
            ("other", "empty"), ("bare", "void"), ("bare", "wide"), ("bare_renamed", "hollow"), ("bare", "unlike")]
    g = same_rows(c, keys)
    assert g[0] == g[2]  # the renamed copy with the same rows
    assert len({g[0], g[1], g[3]}) == 3  # other rows, or no rows: not copies of the stored singers
    assert g[1] == g[4] == g[5]  # no rows, same types and column names
    assert len({g[1], g[6], g[7], g[8]}) == 4  # other column types; another column count; other names


def test_training_votes_skip_copies_of_the_question_tables_in_other_databases(tmp_path: Path, embedder) -> None:
    """A held-out synthetic question's neighbour votes never come from a copy of its tables in another
    database, nor from its own table set; its own database's questions over other table sets still vote."""
    from tagql.db.schema import Column, Schema, Table
    from tagql.routing.ours import BuildConfig, same_rows
    from tagql.routing.synth import SyntheticQuestion

    rows = {"name": ["Joe", "Ann"], "age": [31, 40]}
    c = Collection("copies", tmp_path / "copies")
    singer = Table("singer", [Column("name", "TEXT"), Column("age", "INTEGER")])
    concert = Table("concert", [Column("title", "TEXT"), Column("year", "INTEGER")])
    c.add(Schema("music", [singer, concert]), kind="ddl", target=None,
          values={("singer", k): v for k, v in rows.items()} | {("concert", "title"): ["Live"], ("concert", "year"): [1999]})
    c.add(Schema("fragment_00001", [Table("vocalist", [Column("title", "TEXT"), Column("years", "INTEGER")])]),
          kind="ddl", target=None, values={("vocalist", "title"): rows["name"], ("vocalist", "years"): rows["age"]})
    c.add(Schema("shop", [Table("item", [Column("label", "TEXT")])]), kind="ddl", target=None,
          values={("item", "label"): ["pen"]})
    r = GraphRouter(c, BuildConfig(), embedder)
    tables = [("music", ("singer",)), ("music", ("singer", "concert")), ("music", ("concert",)),
              ("fragment_00001", ("vocalist",)), ("music", ("singer",)), ("shop", ("item",))]
    syn = [SyntheticQuestion(f"question {i}", QuerySchema(db, ts), "template") for i, (db, ts) in enumerate(tables)]
    r._set_memory(syn, np.zeros((len(syn), r.doc_vecs.shape[1]), dtype=np.float32))
    hide = r._copies_hider(same_rows(c, r.keys))
    assert sorted(hide(0)) == [0, 3, 4]  # its own table set, and the copy's question in another database
    assert sorted(hide(3)) == [0, 1, 3, 4]  # every question of another database touching the copied table
    assert sorted(hide(5)) == [5]


def test_table_scorer_as_a_ranking_fit(small_router, small_collection, dev) -> None:
    """``BuildConfig.table_fit = "softmax"`` (opt-in): the table scorer ranked per gold table against hard
    and random others, calibrated on the logistic's rows; it routes as well, with other weights."""
    import dataclasses

    r = GraphRouter(small_collection, dataclasses.replace(small_router.cfg, table_fit="softmax"), small_router.emb)
    r.train(list(small_router.syn), vecs=small_router.syn_vecs.copy())
    assert not np.allclose(r.weights, small_router.weights, atol=0.05)
    scored = _score(r, small_collection, dev)
    assert scored["db_r@1"] >= 90.0 and scored["table_r@5"] >= 90.0, scored
    assert scored["db_r@1"] >= _score(small_router, small_collection, dev)["db_r@1"] - 3.0
    with pytest.raises(ValueError, match="table_fit must be one of logistic, softmax, not 'Softmax'"):
        dataclasses.replace(small_router.cfg, table_fit="Softmax")


def test_features_do_not_depend_on_how_many_rows_are_scored_at_once(small_router, dev, monkeypatch) -> None:
    """The neighbour votes and nearness are computed a few questions at a time (``ROWS_AT_ONCE``) to bound
    the (questions x memory) temporaries; one row at a time and all at once give the same features."""
    from tagql.routing import ours

    qs = [e["question"] for e in dev[:20]]
    monkeypatch.setattr(ours, "ROWS_AT_ONCE", 1)
    one, near_one = small_router._features(qs)
    monkeypatch.setattr(ours, "ROWS_AT_ONCE", 10_000)
    every, near_every = small_router._features(qs)
    assert one[:, :, ours.FEATURES.index("knn_table")].any()  # the votes are there to compare
    np.testing.assert_array_equal(one, every)
    np.testing.assert_array_equal(near_one, near_every)
