"""A collection of ONE wide database (issue 37 item 2): it indexes, routes its tables, and the database-level
models step aside (no choice between databases) until a second database is added."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.routing.wide import SEP, merge_schemas
from tagql.db.schema import Schema
from tagql.models import RouteCandidate
from tagql.routing.collection import Collection, read_values
from tagql.routing.linking import capped_tables
from tagql.routing.metrics import Gold, gold_tables, summarize
from tagql.routing.ours import ONE_DATABASE, BuildConfig, GraphRouter

MERGED = ["concert_singer", "pets_1", "car_1", "employee_hire_evaluation", "museum_visit"]


@pytest.fixture(scope="module")
def spider_entries(spider_dir: Path) -> dict[str, dict]:
    return {e["db_id"]: e for e in json.loads((spider_dir / "tables.json").read_text())}


@pytest.fixture(scope="module")
def wide(spider_dir: Path, spider_entries, tmp_path_factory: pytest.TempPathFactory, embedder):
    """Five Spider databases merged into one (tables renamed ``<db>__<table>``, with their values)."""
    schemas = [Schema.from_spider(spider_entries[d]) for d in MERGED]
    values = {s.name: read_values(str(spider_dir / "database" / s.name / f"{s.name}.sqlite"), s) for s in schemas}
    merged, vals = merge_schemas("merged", schemas, values)
    coll = Collection.create("one", path=tmp_path_factory.mktemp("one") / "one")
    coll.add(merged, kind="ddl", target=None, values=vals)
    coll.save()
    router = GraphRouter.build(coll, BuildConfig(questions_per_table=8, seed=0), embedder=embedder)
    return coll, router


def test_one_database_indexes_without_a_database_scorer(wide) -> None:
    coll, router = wide
    assert coll.databases == ["merged"] and len(coll.schema("merged").tables) == 20
    assert router.meta["db_scorer"] == ONE_DATABASE
    assert router.db_weights.tolist() == router.db_prior().tolist()


def test_one_database_routes_its_tables(wide, spider_dir: Path) -> None:
    coll, router = wide
    dev = [e for e in json.loads((spider_dir / "dev.json").read_text()) if e["db_id"] in MERGED][::3]
    names = coll.schema("merged").table_names
    golds = [Gold("merged", frozenset(f"{e['db_id']}{SEP}{t}" for t in gold_tables(
        e["query"], [n.split(SEP, 1)[1] for n in names if n.startswith(e["db_id"] + SEP)]))) for e in dev]
    res = summarize(router.route_many([e["question"] for e in dev], k=5), golds)
    assert res["n"] >= 60
    assert res["table_r@5"] >= 90.0 and res["table_r@15"] >= 97.0, res
    cands = router.route("How many singers are there in each concert?", k=5)
    assert len(cands) == 1 and cands[0].database == "merged"
    assert {"concert_singer__singer_in_concert", "concert_singer__concert"} <= set(cands[0].tables[:3])
    assert cands[0].confidence == pytest.approx(1.0)


def test_the_router_scores_every_table_it_lists_for_the_wide_cap(wide) -> None:
    coll, router = wide
    question = "What is the average weight of the dogs of each breed?"
    cand = router.route(question, k=1)[0]
    assert set(cand.table_scores) == set(cand.tables) and len(cand.tables) > 3
    logits = router.logits([question])[0]
    for table, score in cand.table_scores.items():
        assert score == pytest.approx(float(logits[router.key_pos[("merged", table)]]), abs=1e-5)
    picked = capped_tables(coll.schema("merged"), cand.tables, 3, wide_above=10, scores=cand.table_scores)
    assert len(picked) == 3 and set(picked) <= set(cand.tables) and picked[0].startswith("pets_1__")
    shown = RouteCandidate.of(cand)
    assert shown.table_scores == cand.table_scores and "table_scores" not in shown.model_dump()  # not in JSON


def test_one_database_still_flags_off_topic_questions(wide) -> None:
    _coll, router = wide
    assert router.route("What will the weather be like in Paris tomorrow?", k=5)[0].confidence < 0.2


def test_adding_a_second_database_fits_the_database_scorer(wide, spider_entries, spider_dir: Path, embedder) -> None:
    coll, _router = wide
    s = Schema.from_spider(spider_entries["flight_2"])
    coll.add(s, kind="spider", target=str(spider_dir / "database" / "flight_2" / "flight_2.sqlite"))
    coll.save()
    try:
        r = GraphRouter.load(coll, embedder)
        info = r.update()
        assert info["refitted"] and info["added_or_changed"] == ["flight_2"]
        assert r.meta["db_scorer"] == "fitted" and "build_s" in r.meta
        again = GraphRouter.load(coll, embedder)
        assert again.db_weights.tolist() == r.db_weights.tolist()
        assert again.route("Which airlines have flights departing from the airport with code AHD?", k=2)[0].database == "flight_2"
        assert again.route("How many singers are there in each concert?", k=2)[0].database == "merged"
    finally:
        coll.remove("flight_2")
        coll.save()


def test_scorer_training_with_bounded_memory_matches(small_collection, small_router, monkeypatch: pytest.MonkeyPatch) -> None:
    """Large collections recompute the held-out features for the second fit and use smaller batches
    (ours.HELD_BYTES / CHUNK_BYTES); the fitted scorers are the same."""
    from tagql.routing import ours

    r = GraphRouter(small_collection, small_router.cfg, small_router.emb)
    syn, vecs = list(small_router.syn), small_router.syn_vecs.copy()
    r.train(syn, vecs=vecs)
    w, dw = r.weights.copy(), r.db_weights.copy()
    monkeypatch.setattr(ours, "HELD_BYTES", 0)
    monkeypatch.setattr(ours, "CHUNK_BYTES", 40 * len(r.keys) * len(ours.FEATURES) * 4)  # 40 questions a batch
    assert r._chunk(256) == 40
    r.train(syn, vecs=vecs)
    assert r.meta["db_scorer"] == "fitted"
    assert np.allclose(r.weights, w, atol=2e-3) and np.allclose(r.db_weights, dw, atol=2e-3), (r.weights - w, r.db_weights - dw)
