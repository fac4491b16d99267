"""Synthetic-question cost and recall vs number of synthetic questions (DBCopilot Figure 10 shape).

    python -m bench.routing.synth [--llm-questions 8] [--fractions 0.05,0.1,0.25,0.5,1.0]

Needs the ``spider-bench`` collection and its router (``python -m bench.routing.spider`` builds
them, or ``tagql route index spider-bench --spider-tables ../shared/data/spider/tables.json``).
Measures: questions/minute of the template+pattern questioner and of the local LLM questioner
(few-shot exemplars from Spider *train*), the filter's pass rate, and Spider-dev routing recall
when the scorer and memory are trained on a fraction of the synthetic questions (embeddings reused).
Writes ``bench/results/routing/synth.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np

from tagql.config import load_settings
from tagql.routing.collection import Collection
from tagql.routing.metrics import Gold, gold_tables, summarize
from tagql.routing.ours import GraphRouter
from tagql.routing.sampling import sample_schemas
from tagql.routing.synth import LLMQuestioner, PatternQuestioner, keep_question, load_patterns
from tagql.embeddings import make_embedder

from bench import common

DATA = common.DATA
OUT = common.result_path("routing", "synth")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--collection", default="spider-bench")
    ap.add_argument("--llm-questions", type=int, default=8)
    ap.add_argument("--llm-model", default=None, help="model pack (default: the configured one)")
    ap.add_argument("--fractions", default="0.05,0.1,0.25,0.5,1.0")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    settings = load_settings()
    coll = Collection.load(args.collection, settings)
    schemas = {d: coll.schema(d) for d in coll.databases}
    values = {d: coll.values(d) for d in coll.databases}
    res: dict = {"collection": args.collection}

    # 1. cheap questioner throughput + filter pass rate
    samples = sample_schemas(coll.graph, 5000, seed=11)
    t = time.perf_counter()
    qs = PatternQuestioner(schemas, values, load_patterns(), seed=11).generate(samples)
    dt = time.perf_counter() - t
    kept = [q for q in qs if keep_question(q.question, schemas[q.schema.database], q.schema, values[q.schema.database])]
    res["template"] = {"questions": len(qs), "per_minute": round(60 * len(qs) / dt), "kept_share": round(len(kept) / len(qs), 3),
                       "examples": [q.question for q in kept[:5]]}

    # 2. LLM questioner on a small sample
    if args.llm_questions:
        from tagql.llm import make_llm

        if args.llm_model:
            settings.llm.model = args.llm_model
        llm = make_llm(settings)
        lq = LLMQuestioner(llm, schemas, DATA / "spider_syn" / "train_spider.json", seed=1)
        picks = random.Random(5).sample(samples, args.llm_questions)
        t = time.perf_counter()
        out = lq.generate(picks)
        dt = time.perf_counter() - t
        ok = [q for q in out if keep_question(q.question, schemas[q.schema.database], q.schema, values[q.schema.database])]
        res["llm"] = {"model": settings.llm.model, "questions": len(out), "per_minute": round(60 * len(out) / dt, 2),
                      "kept_share": round(len(ok) / len(out), 3),
                      "examples": [{"tables": [q.schema.database, *q.schema.tables], "question": q.question} for q in out]}

    # 3. recall vs number of synthetic questions (embeddings reused; scorer + memory retrained)
    d = coll.path / "router"
    from tagql.routing.synth import SyntheticQuestion

    syn = [SyntheticQuestion.from_dict(json.loads(x)) for x in (d / "synthetic.jsonl").read_text().splitlines()]
    vecs = np.load(d / "syn_vecs.npy")
    base = GraphRouter.load(coll, make_embedder())
    tables = {db: coll.schema(db).table_names for db in coll.databases}
    dev = json.loads((DATA / "spider" / "dev.json").read_text())
    golds = [Gold(e["db_id"], gold_tables(e["query"], tables[e["db_id"]])) for e in dev]
    curve = []
    for frac in [float(x) for x in args.fractions.split(",")]:
        idx = sorted(random.Random(0).sample(range(len(syn)), max(50, int(frac * len(syn)))))
        r = GraphRouter(coll, base.cfg, base.emb)
        t = time.perf_counter()
        r.train([syn[i] for i in idx], vecs=vecs[idx])
        train_s = time.perf_counter() - t
        s = summarize(r.route_many([e["question"] for e in dev], k=20), golds)
        curve.append({"synthetic_questions": len(idx), "train_s": round(train_s, 1)} | s)
        print(curve[-1], flush=True)
    res["recall_vs_questions"] = curve

    print(json.dumps({k: v for k, v in res.items() if k != "recall_vs_questions"}, indent=1))
    print(f"{'synthetic q':>12}{'DB R@1':>8}{'DB R@5':>8}{'T R@5':>8}{'T R@15':>8}")
    for c in curve:
        print(f"{c['synthetic_questions']:>12}{c['db_r@1']:>8}{c['db_r@5']:>8}{c['table_r@5']:>8}{c['table_r@15']:>8}")
    run.save(args.out, res, indent=2)


if __name__ == "__main__":
    main()
