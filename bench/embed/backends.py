"""The sentence-embedding backends side by side (issue 31): speed and fidelity to MiniLM fp32.

    nice -n 10 python -m bench.embed.backends [--texts 1000] [--single 100] [--distill-tokens 3000]

Per backend -- ``torch`` (MiniLM fp32, sentence-transformers on PyTorch's CPU wheel), ``onnx`` (MiniLM int8
ONNX on ONNX Runtime, the default) and ``static`` (the static token table distilled from the onnx model,
mean of token vectors, as ``hybrid-static`` uses it) -- on Spider dev questions: load time, batch encode
speed (texts/s), one-text latency (p50 ms), the cosine of each text's vector with torch fp32's (mean and
minimum) and how often the nearest other question is the same as torch's; for the transformer backends also
the time to distil the static table (``--distill-tokens`` tokens, extrapolated to the 30,522-token vocabulary).
With ``--routing-dbs N`` (bounded: the full Spider build takes ~8 min per backend on an idle 2-core host)
the ``ours`` router is built per backend (and for the static table used as a sentence embedder) over the
first N Spider databases that have dev questions (``--questions-per-table``, seed 0) and scored on those
databases' Spider and Spider-Syn dev questions (DB R@1 / R@5, table R@5), side by side.
The full-size figures per backend come from their own benchmarks, run with ``--backend``:
bench/knowledge/evidence_f1.py and bench/routing/spider.py. Writes ``bench/results/embed/backends.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from bench import common
from tagql.embeddings import make_embedder

DATA = common.DATA
OUT = common.result_path("embed", "backends")
VOCAB = 30522


def speed(emb, texts: list[str], single: int) -> dict:
    emb.embed(texts[:32])  # warm
    t = time.perf_counter()
    vecs = emb.embed(texts)
    batch_s = time.perf_counter() - t
    lat = []
    for q in texts[:single]:
        t = time.perf_counter()
        emb.embed([q])
        lat.append(1000 * (time.perf_counter() - t))
    return {"texts_per_s": round(len(texts) / batch_s, 1), "single_p50_ms": round(statistics.median(lat), 1),
            "vecs": vecs}


def fidelity(vecs: np.ndarray, ref: np.ndarray) -> dict:
    cos = (vecs * ref).sum(axis=1)
    nn = lambda v: np.argsort(-(v @ v.T - 2 * np.eye(len(v))), axis=1)[:, 0]  # noqa: E731
    return {"cos_mean": round(float(cos.mean()), 4), "cos_min": round(float(cos.min()), 4),
            "nn_agree": round(float(np.mean(nn(vecs) == nn(ref))), 4)}


def routing(embedders: dict, n_dbs: int, qpt: int, root: Path) -> dict:
    """DB/table recall of ``ours`` built with each embedder over the same N Spider databases."""
    import shutil

    from tagql.routing.collection import Collection
    from tagql.routing.metrics import Gold, gold_tables, summarize
    from tagql.routing.ours import BuildConfig, GraphRouter

    dev = json.loads((DATA / "spider" / "dev.json").read_text())
    syn = json.loads((DATA / "spider_syn" / "dev.json").read_text())
    dbs = list(dict.fromkeys(e["db_id"] for e in dev))[:n_dbs]
    out: dict = {"databases": dbs}
    for label, emb in embedders.items():
        path = root / f"routing-{label}"
        shutil.rmtree(path, ignore_errors=True)
        coll = Collection.create(f"routing-{label}", path=path)
        coll.add_spider(DATA / "spider" / "tables.json", only=dbs)
        coll.save()
        t = time.perf_counter()
        router = GraphRouter.build(coll, BuildConfig(questions_per_table=qpt, seed=0), embedder=emb)
        build_s = time.perf_counter() - t
        tables = {db: coll.schema(db).table_names for db in coll.databases}
        r = {"build_s": round(build_s, 1), "synthetic_questions": len(router.syn)}
        for name, rows, key in (("spider", dev, "question"), ("spider_syn", syn, "SpiderSynQuestion")):
            rows = [e for e in rows if e["db_id"] in tables]
            golds = [Gold(e["db_id"], gold_tables(e["query"], tables[e["db_id"]])) for e in rows]
            r[name] = summarize(router.route_many([e[key] for e in rows], k=20), golds)
        out[label] = r
        print(f"routing {label}: {r}", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", type=int, default=1000)
    ap.add_argument("--single", type=int, default=100)
    ap.add_argument("--distill-tokens", type=int, default=3000)
    ap.add_argument("--routing-dbs", type=int, default=0, help="also build/score routing on N Spider databases")
    ap.add_argument("--questions-per-table", type=int, default=8)
    ap.add_argument("--only-routing", action="store_true", help="skip the speed/fidelity part")
    ap.add_argument("--root", type=Path, default=Path("/tmp/tagql-embed-bench"))
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    if a.only_routing:
        from tagql.knowledge.static import load_static

        onnx = make_embedder(backend="onnx")
        embs = {"torch": make_embedder(backend="torch"), "onnx": onnx, "static": load_static(onnx)}
        res = routing(embs, a.routing_dbs, a.questions_per_table, a.root)
        print("\n| embedder | build s | Spider DB R@1 | DB R@5 | table R@5 | Spider-Syn DB R@1 | DB R@5 |")
        print("|---|---|---|---|---|---|---|")
        for label in embs:
            r = res[label]
            print(f"| {label} | {r['build_s']:.0f} | {r['spider']['db_r@1']} | {r['spider']['db_r@5']} |"
                  f" {r['spider']['table_r@5']} | {r['spider_syn']['db_r@1']} | {r['spider_syn']['db_r@5']} |")
        run.save(a.out.with_name(a.out.stem + "_routing.json"), {"routing": res})
        return
    texts = [q["question"] for q in json.loads((DATA / "spider" / "dev.json").read_text())][: a.texts]
    rows: dict[str, dict] = {}
    for backend in ("torch", "onnx"):
        t = time.perf_counter()
        emb = make_embedder(backend=backend)
        load_s = time.perf_counter() - t
        r = {"name": emb.name, "load_s": round(load_s, 2)} | speed(emb, texts, a.single)
        from tagql.knowledge.static import distill

        ids = list(range(1996, 1996 + a.distill_tokens))  # after BERT's special/unused/single-character block
        t = time.perf_counter()
        distill(emb, token_ids=ids)
        r["distill_full_s_est"] = round((time.perf_counter() - t) * (VOCAB - 1996) / a.distill_tokens, 1)
        rows[backend] = r
        print(f"{backend}: {({k: v for k, v in r.items() if k != 'vecs'})}", file=sys.stderr, flush=True)
    from tagql.knowledge.static import load_static

    static = load_static(make_embedder(backend="onnx"))
    t = time.perf_counter()
    static.embed(texts[:32])
    rows["static"] = {"name": static.name, "load_s": round(time.perf_counter() - t, 2)} | speed(static, texts, a.single)
    ref = rows["torch"]["vecs"]
    for r in rows.values():
        r |= fidelity(r.pop("vecs"), ref)
    print(f"\n{len(texts)} Spider dev questions; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    print("| backend | model | load s | batch texts/s | one text p50 ms | cos vs torch fp32 mean / min |"
          " same nearest question | distil static table (est.) |")
    print("|---|---|---|---|---|---|---|---|")
    for b, r in rows.items():
        d = f"{r['distill_full_s_est']:.0f} s" if "distill_full_s_est" in r else "-"
        print(f"| {b} | {r['name']} | {r['load_s']:.2f} | {r['texts_per_s']:.0f} | {r['single_p50_ms']:.1f} |"
              f" {r['cos_mean']:.4f} / {r['cos_min']:.4f} | {100 * r['nn_agree']:.1f} % | {d} |")
    run.save(a.out, {"texts": len(texts), "backends": rows})


if __name__ == "__main__":
    main()
