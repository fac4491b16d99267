"""The contrastive table encoder (BuildConfig.tuned_steps): the real training step on tiny data, and the
build / load plumbing of a router whose database scorer uses its similarities."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tagql.embeddings import SentenceTransformerEmbedder, make_embedder, minilm_dir
from tagql.routing.collection import Collection
from tagql.routing.finetune import contrastive_encoder
from tagql.routing.ours import DB_FEATURES, TUNED_DIR, BuildConfig, GraphRouter

PAIRS = [
    ("How many vocalists are there?", "concert singer: singer: singer id, name, country, age"),
    ("List every vocalist's nation.", "concert singer: singer: singer id, name, country, age"),
    ("Which pupils own a dog?", "pets 1: student: stu id, last name, first name, age"),
    ("Mean age of the pupils?", "pets 1: student: stu id, last name, first name, age"),
    ("Which automobile makers are German?", "car 1: car makers: id, maker, full name, country"),
    ("Count the makers of automobiles.", "car 1: car makers: id, maker, full name, country"),
]


def test_contrastive_encoder_pulls_questions_to_their_documents(tmp_path: Path) -> None:
    base = SentenceTransformerEmbedder(str(minilm_dir()))
    info = contrastive_encoder(PAIRS, tmp_path / "enc", steps=6, batch_size=4, lr=1e-4, seed=0)
    assert info["steps"] == 6 and info["pairs"] == len(PAIRS)
    tuned = SentenceTransformerEmbedder(str(tmp_path / "enc"))
    qs, docs = [q for q, _ in PAIRS], list(dict.fromkeys(d for _, d in PAIRS))
    gold = np.array([docs.index(d) for _, d in PAIRS])

    def margin(emb: SentenceTransformerEmbedder) -> float:
        sims = emb.embed(qs) @ emb.embed(docs).T
        own = sims[np.arange(len(qs)), gold]
        sims[np.arange(len(qs)), gold] = -1
        return float(np.mean(own - sims.max(1)))

    assert margin(tuned) > margin(base) + 0.01  # each question moved towards its own table's document
    with pytest.raises(ValueError):
        contrastive_encoder([], tmp_path / "none", steps=3)


def test_build_with_table_encoder_adds_database_features_and_loads(spider_dir: Path, tmp_path: Path) -> None:
    c = Collection.create("tuned", path=tmp_path / "tuned")
    c.add_spider(spider_dir / "tables.json", only=["concert_singer", "pets_1", "car_1"])
    c.save()
    stages: set[str] = set()
    torch_emb = make_embedder(backend="torch")  # the table encoder is fine-tuned on torch (the embed extra)
    r = GraphRouter.build(c, BuildConfig(questions_per_table=4, tuned_steps=3, seed=0),
                          progress=lambda stage, done, total: stages.add(stage), embedder=torch_emb)
    assert "fine-tuning the table encoder" in stages and (c.path / "router" / TUNED_DIR / "modules.json").exists()
    assert len(r.db_feature_names) == len(DB_FEATURES) + 2 and len(r.db_weights) == len(r.db_feature_names)
    assert set(r.meta["db_weights"]) >= {"tuned_db", "tuned_max"} and r.meta["table_encoder"]["steps"] == 3
    again = GraphRouter.load(c, torch_emb)
    assert again.tuned is not None
    q = "How many singers do we have?"
    assert [x.to_dict() for x in again.route(q)] == [x.to_dict() for x in r.route(q)]
    assert again.route(q)[0].database == "concert_singer"
    # without the setting nothing changes: no table encoder, the usual database features
    plain = GraphRouter.build(c, BuildConfig(questions_per_table=4, seed=0), embedder=torch_emb)
    assert plain.tuned is None and not (c.path / "router" / TUNED_DIR).exists()
    assert len(plain.db_weights) == len(DB_FEATURES)
