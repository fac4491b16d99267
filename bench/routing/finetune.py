"""Tuning the router's encoder fine-tuning on Spider **train** only (never dev).

    python -m bench.routing.finetune [--configs distill:1:2e-5,mnrl:1:2e-5] [--questions 800]

The 140 train databases are split in two halves (seeded); the encoder is fine-tuned on the Spider-Syn
pairs of half A and measured on train questions of half B (plain and synonym versions), against the
166-database collection ``spider-bench`` (its table documents and a sample of its router's synthetic
questions; no router rebuild): database R@1 of dense retrieval over table documents (max per database)
and of a kNN vote over the synthetic questions, syn -> plain pair retrieval R@1 among half B, and how far
plain questions drift from the original encoder (mean cosine). Writes ``bench/results/routing/finetune.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

import numpy as np

from bench.routing.spider_train_halves import spider_train_halves

from tagql.config import load_settings
from tagql.embeddings import SentenceTransformerEmbedder, minilm_dir
from tagql.routing.collection import Collection
from tagql.routing.finetune import finetune_encoder, load_pairs
from tagql.routing.retrieval import table_doc

from bench import common

OUT = common.result_path("routing", "finetune")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="distill:1:2e-5,mnrl:1:2e-5",
                    help="loss:epochs:lr, comma-separated (base encoder always measured)")
    ap.add_argument("--collection", default="spider-bench")
    ap.add_argument("--questions", type=int, default=800, help="half-B train questions measured")
    ap.add_argument("--memory", type=int, default=5000, help="synthetic questions sampled for the kNN vote")
    ap.add_argument("--anchors", type=int, default=0,
                    help="also hold the table documents and this many other synthetic questions at their original vectors")
    ap.add_argument("--skip-base", action="store_true")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)

    rng = random.Random(0)
    _, half_a, test = spider_train_halves(args.questions, rng)
    pairs = [(s, p) for d, p, s in load_pairs() if d in half_a]

    coll = Collection.load(args.collection, load_settings())
    keys, docs = [], []
    for name in coll.databases:
        s = coll.schema(name)
        for t in s.tables:
            keys.append(name)
            docs.append(table_doc(s, t, with_db=True))
    key_db = np.array([coll.databases.index(k) for k in keys])
    syn_path = coll.path / "router" / "synthetic.jsonl"
    memory = [json.loads(x) for x in syn_path.read_text().splitlines()]
    rng.shuffle(memory)
    anchor_q = ([m["question"] for m in memory[args.memory: args.memory + args.anchors]] + docs) if args.anchors else []
    memory = memory[: args.memory]
    mem_q = [m["question"] for m in memory]
    dbi = {d: i for i, d in enumerate(coll.databases)}
    mem_db = np.array([dbi.get(m["database"]) for m in memory])
    gold = np.array([coll.databases.index(e["db_id"]) for e in test])
    plain_q = [e["SpiderQuestion"] for e in test]
    syn_q = [e["SpiderSynQuestion"] for e in test]

    def measure(model_dir: str, base: SentenceTransformerEmbedder | None) -> dict:
        emb = SentenceTransformerEmbedder(model_dir)
        dv, mv = emb.embed(docs), emb.embed(mem_q)
        out = {}
        pv, sv = emb.embed(plain_q), emb.embed(syn_q)
        for name, qv in (("plain", pv), ("syn", sv)):
            sims = qv @ dv.T
            best = np.full((len(qv), len(coll.databases)), -9.0)
            for i in range(len(qv)):
                np.maximum.at(best[i], key_db, sims[i])
            out[f"{name}_dense_r1"] = round(100 * float(np.mean(best.argmax(1) == gold)), 2)
            ms = qv @ mv.T
            votes = np.zeros_like(best)
            top = np.argsort(-ms, axis=1)[:, :40]
            for i in range(len(qv)):
                w = np.exp((ms[i, top[i]] - ms[i, top[i]].max()) / 0.05)
                np.add.at(votes[i], mem_db[top[i]], w / w.sum())
            out[f"{name}_knn_r1"] = round(100 * float(np.mean(votes.argmax(1) == gold)), 2)
        out["syn_to_plain_r1"] = round(100 * float(np.mean((sv @ pv.T).argmax(1) == np.arange(len(sv)))), 2)
        if base is not None:
            out["plain_drift_cos"] = round(float(np.mean(np.sum(pv * base.embed(plain_q), 1))), 4)
        return out

    results = {"pairs_half_a": len(pairs), "questions_half_b": len(test), "memory_sample": len(mem_q), "runs": {}}
    base = SentenceTransformerEmbedder(str(minilm_dir()))
    if not args.skip_base:
        results["runs"]["base"] = measure(str(minilm_dir()), None)
        print("base", results["runs"]["base"], file=sys.stderr)
    for cfg in args.configs.split(","):
        loss, epochs, lr = cfg.split(":")
        t = time.perf_counter()
        info = finetune_encoder(pairs, "/tmp/tagql_ft_tune", epochs=int(epochs), lr=float(lr), loss=loss, anchors=anchor_q)
        r = measure("/tmp/tagql_ft_tune", base) | {"finetune": info, "seconds": round(time.perf_counter() - t, 1)}
        results["runs"][cfg + (f"+anchors{args.anchors}" if anchor_q else "")] = r
        print(cfg, r, file=sys.stderr)
        run.save(args.out, results, indent=2)
    run.save(args.out, results, indent=2)


if __name__ == "__main__":
    main()
