"""Fine-tuning the router's encoder on (synonym question, plain question) pairs: the real step on tiny
data (seconds), and the build / load / update plumbing of a router that carries its own encoder."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tagql.embeddings import SentenceTransformerEmbedder, make_embedder, minilm_dir
from tagql.routing.collection import Collection
from tagql.routing.finetune import finetune_encoder, load_pairs, mine_pairs
from tagql.routing.ours import ENCODER_DIR, BuildConfig, GraphRouter

PAIRS = [
    ("How many vocalists are there?", "How many singers are there?"),
    ("List the nation of every vocalist.", "List the country of every singer."),
    ("Show the names of all pupils.", "Show the names of all students."),
    ("What is the mean age of the pupils?", "What is the average age of the students?"),
    ("Which automobile makers are from Germany?", "Which car makers are from Germany?"),
    ("Count the flights of each air carrier.", "Count the flights of each airline."),
    ("Find the stadium with the greatest capacity.", "Find the stadium with the largest capacity."),
    ("List all pets owned by pupils older than 20.", "List all pets owned by students older than 20."),
]


def test_shipped_pairs_are_train_only(shared_data: Path) -> None:
    pairs = load_pairs()
    assert len(pairs) > 4000 and all(p != s for _, p, s in pairs)
    dev_dbs = {e["db_id"] for e in __import__("json").loads((shared_data / "spider" / "dev.json").read_text())}
    assert not dev_dbs & {d for d, _, _ in pairs}  # Spider's train and dev databases are disjoint
    mined = mine_pairs(shared_data / "spider_syn" / "train_spider.json")
    assert [tuple(x) for x in mined] == pairs  # the shipped file is what the miner makes of the train split


def test_finetune_pulls_synonym_questions_to_their_plain_versions(tmp_path: Path) -> None:
    base = SentenceTransformerEmbedder(str(minilm_dir()))
    info = finetune_encoder(PAIRS, tmp_path / "enc", epochs=2, batch_size=4, lr=1e-4, seed=0)
    assert info["steps"] == 4 and info["pairs"] == len(PAIRS)
    ft = SentenceTransformerEmbedder(str(tmp_path / "enc"))
    syn, plain = [s for s, _ in PAIRS], [p for _, p in PAIRS]
    before = np.sum(base.embed(syn) * base.embed(plain), 1)
    target = base.embed(plain)
    after = np.sum(ft.embed(syn) * target, 1)
    assert after.mean() > before.mean() + 0.01  # synonym versions moved towards the plain ones
    # plain questions stay where the original encoder put them (distillation keeps the rest of the memory)
    assert np.sum(ft.embed(plain) * target, 1).mean() > 0.97
    other = ["What is the capital of France?", "Sort the products by price."]
    assert np.sum(ft.embed(other) * base.embed(other), 1).min() > 0.9
    # deterministic: the same seed gives the same encoder
    finetune_encoder(PAIRS, tmp_path / "enc2", epochs=2, batch_size=4, lr=1e-4, seed=0)
    again = SentenceTransformerEmbedder(str(tmp_path / "enc2"))
    assert np.allclose(again.embed(syn), ft.embed(syn), atol=1e-5)


@pytest.fixture(scope="module")
def ft_collection(spider_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Collection:
    c = Collection.create("ft", path=tmp_path_factory.mktemp("ft") / "ft")
    c.add_spider(spider_dir / "tables.json", only=["concert_singer", "pets_1", "car_1"])
    c.save()
    return c


def test_build_with_finetuned_encoder_load_update_and_rebuild(ft_collection: Collection, spider_dir: Path,
                                                              tmp_path: Path) -> None:
    c = ft_collection
    stages = set()
    cfg = BuildConfig(questions_per_table=4, finetune=True, finetune_pairs=64, seed=0)
    torch_emb = make_embedder(backend="torch")  # fine-tuning starts from MiniLM fp32 on torch (the embed extra)
    r = GraphRouter.build(c, cfg, progress=lambda stage, done, total: stages.add(stage), embedder=torch_emb)
    enc = c.path / "router" / ENCODER_DIR
    assert (enc / "modules.json").exists() and "fine-tuning the encoder" in stages
    assert r.meta["finetune"]["pairs"] == 64 and r.meta["finetune"]["finetune_s"] > 0
    assert r.meta["build_s"] >= r.meta["finetune"]["finetune_s"]
    # load() uses the stored encoder (and so `tagql route` / `ask --collection`)
    again = GraphRouter.load(c)
    assert Path(again.emb.model_dir).resolve() == enc.resolve()
    q = "How many singers do we have?"
    assert [x.to_dict() for x in again.route(q)] == [x.to_dict() for x in r.route(q)]
    assert again.route(q)[0].database == "concert_singer"
    # incremental updates embed the new database with the stored encoder
    c2 = Collection.create("ft2", path=tmp_path / "ft2")
    shutil.copytree(c.path, c2.path, dirs_exist_ok=True)
    c2 = Collection.load("ft2", path=c2.path)
    c2.add_spider(spider_dir / "tables.json", only=["wrestler"])
    c2.save()
    r2 = GraphRouter.load(c2)
    assert Path(r2.emb.model_dir).resolve() == (c2.path / "router" / ENCODER_DIR).resolve()
    info = r2.update()
    assert info["added_or_changed"] == ["wrestler"] and info["new_questions"] > 0
    new = [i for i, s in enumerate(r2.syn) if s.schema.database == "wrestler"]
    assert np.allclose(r2.syn_vecs[new[:5]], r2.emb.embed([r2.syn[i].question for i in new[:5]]), atol=1e-4)
    assert GraphRouter.load(c2).route("Which wrestlers were eliminated by Orton?")[0].database == "wrestler"
    # a full build without fine-tuning drops the stored encoder and its vectors
    assert not BuildConfig().finetune  # opt-in (tagql route index --finetune)
    plain = GraphRouter.build(c2, BuildConfig(questions_per_table=4, seed=0, finetune=False), embedder=torch_emb)
    assert not (c2.path / "router" / ENCODER_DIR).exists() and "finetune" not in plain.meta
    assert GraphRouter.load(c2, torch_emb).emb.name == "all-minilm-l6-v2"
