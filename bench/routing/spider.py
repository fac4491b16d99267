"""Spider routing benchmark (issue 4): 166 databases, 1034 dev questions (+ Spider-Syn).

    python -m bench.routing.spider [--methods ours,bm25,dense,bm25-max,dense-max] [--syn] [--limit N]

Builds (or reuses) the collection ``spider-bench`` under ``collections_dir`` and, for ``ours``, its
router index. Prints a table and writes ``bench/results/routing/spider.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time

from tagql.config import Settings, load_settings
from tagql.embeddings import BACKENDS, make_embedder
from tagql.routing.collection import Collection
from tagql.routing.metrics import Gold, gold_tables, summarize

from bench import common

DATA = common.DATA
OUT = common.result_path("routing", "spider")


def spider_collection(name: str = "spider-bench", settings: Settings | None = None) -> Collection:
    """The collection of Spider's 166 databases (``tables.json``; data from ``database/``), built once."""
    coll = Collection.create(name, settings or load_settings())
    if not coll.entries:
        coll.add_spider(DATA / "spider" / "tables.json")
        coll.save()
    return coll


def ensure_router(coll: Collection, *, rebuild: bool = False, questions_per_table: int | None = None,
                  finetune: bool | None = None, tuned_steps: int | None = None, embedder=None) -> float | None:
    """Train the ``ours`` router of ``coll`` unless its index exists; the build time in s (None = reused).
    ``finetune``: fine-tune the encoder in the build; ``tuned_steps``: steps of the contrastive table
    encoder (None: the BuildConfig defaults)."""
    if not rebuild and (coll.path / "router" / "meta.json").exists():
        return None
    from tagql.routing.ours import BuildConfig, GraphRouter

    kw: dict = {"questions_per_table": questions_per_table} if questions_per_table else {}
    if finetune is not None:
        kw["finetune"] = finetune
    if tuned_steps is not None:
        kw["tuned_steps"] = tuned_steps
    cfg = BuildConfig(**kw)
    t = time.perf_counter()
    last: list = ["", 0.0]

    def progress(stage: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if stage != last[0] or done == total or now - last[1] > 20:
            print(f"{stage}: {done}/{total} ({now - t:.0f} s)", file=sys.stderr, flush=True)
            last[0], last[1] = stage, now

    GraphRouter.build(coll, cfg, progress, embedder=embedder or make_embedder(load_settings()))
    return round(time.perf_counter() - t, 1)


def split_methods(text: str) -> list[str]:
    """``ours,ours[rerank=false;knn=20],bm25`` -> its methods (commas inside brackets do not split)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [m for m in out + [cur] if m]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--methods", default="ours,ours[rerank=false],bm25,dense,bm25-max,dense-max",
                    help="comma-separated; ours[KEY=VALUE;...] routes with those router settings")
    ap.add_argument("--collection", default="spider-bench")
    ap.add_argument("--syn", action="store_true", help="also run Spider-Syn dev")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--rebuild", action="store_true", help="re-train the 'ours' router from scratch (build cost)")
    ap.add_argument("--questions-per-table", type=int, default=None, help="synthetic questions per table")
    ft = ap.add_mutually_exclusive_group()
    ft.add_argument("--finetune", dest="finetune", action="store_true", default=None,
                    help="with --rebuild: fine-tune the encoder on Spider-Syn train pairs in the build")
    ft.add_argument("--no-finetune", dest="finetune", action="store_false")
    ap.add_argument("--tuned-steps", type=int, default=None,
                    help="with --rebuild: steps of the contrastive table encoder (0 = none)")
    ap.add_argument("--latency-questions", type=int, default=100, help="questions routed one at a time for p50/p95")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a query-time setting of the 'ours' router (e.g. wordnet_senses=0), no rebuild")
    ap.add_argument("--backend", choices=BACKENDS, default=None, help="embedding backend (default: the configured one)")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)

    settings = load_settings()
    embedder = make_embedder(settings, backend=args.backend)
    t0 = time.perf_counter()
    coll = spider_collection(args.collection, settings)
    build_s = time.perf_counter() - t0
    router_build = None
    if "ours" in args.methods:
        router_build = ensure_router(coll, rebuild=args.rebuild, questions_per_table=args.questions_per_table,
                                     finetune=args.finetune, tuned_steps=args.tuned_steps, embedder=embedder)
    tables = {db: coll.schema(db).table_names for db in coll.databases}

    dev = json.loads((DATA / "spider" / "dev.json").read_text())
    syn = json.loads((DATA / "spider_syn" / "dev.json").read_text())
    if args.limit:
        dev, syn = dev[: args.limit], syn[: args.limit]
    sets = {"spider": ([e["question"] for e in dev], [Gold(e["db_id"], gold_tables(e["query"], tables[e["db_id"]])) for e in dev])}
    if args.syn:
        sets["spider_syn"] = ([e["SpiderSynQuestion"] for e in syn],
                              [Gold(e["db_id"], gold_tables(e["query"], tables[e["db_id"]])) for e in syn])

    results: dict = {"collection": args.collection, "embedder": embedder.name, "databases": len(coll.databases), "collection_build_s": round(build_s, 1),
               "router_build_s": router_build,
                     "methods": {}}
    for m in split_methods(args.methods):
        name, _, own = m.partition("[")  # ours[rerank=false]: the router with its own settings, same run
        base, _, agg = name.partition("-")
        kwargs: dict = {"db_agg": agg} if agg else {}
        settings_of = args.set + [x for x in own.rstrip("]").split(";") if x]
        if base == "ours" and settings_of:
            kwargs["overrides"] = {k: json.loads(v) for k, v in (x.split("=", 1) for x in settings_of)}
        t = time.perf_counter()
        if base != "bm25":
            kwargs["embedder"] = embedder
        router = coll.router(base, **kwargs)
        load_s = time.perf_counter() - t
        res: dict = {"load_s": round(load_s, 2)}
        if getattr(router, "cfg", None) is not None:  # the knobs in effect (decoding ones may postdate the index)
            res["config"] = dict(router.cfg.__dict__)
        for name, (qs, golds) in sets.items():
            t = time.perf_counter()
            cands = router.route_many(qs, k=20)  # batched (embeddings); latency below is one at a time
            batch_s = time.perf_counter() - t
            lex = getattr(router, "lexicon", None)
            if lex is not None:
                lex.cache.clear()  # one at a time from a cold word cache: the batch above warmed it
            lat = []
            for q in qs[: args.latency_questions]:
                t = time.perf_counter()
                router.route(q, k=20)
                lat.append(1000 * (time.perf_counter() - t))
            lat.sort()
            res[name] = summarize(cands, golds) | {"p50_ms": round(statistics.median(lat), 1),
                                                    "p95_ms": round(lat[min(len(lat) - 1, int(0.95 * len(lat)))], 1),
                                                    "batch_ms_per_q": round(1000 * batch_s / len(qs), 1)}
        results["methods"][m] = res
        print(f"done {m}", file=sys.stderr)
    results["max_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    results["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    results["cpus"] = os.cpu_count()
    if getattr(coll, "path", None) and (coll.path / "router" / "meta.json").exists():
        meta = json.loads((coll.path / "router" / "meta.json").read_text())
        results["router_meta"] = {k: v for k, v in meta.items() if k not in ("fingerprints", "weights_vec", "db_weights_vec")}
        results["router_rebuilt"] = router_build is not None
        if router_build is None:  # index reused: its build time as recorded when it was built
            results["router_build_s"] = meta.get("build_s")

    print(f"{'method':<22}{'set':<12}{'DB R@1':>8}{'DB R@5':>8}{'T R@5':>8}{'T R@15':>8}{'mAP':>8}{'p50 ms':>8}"
          f"{'p95 ms':>8}")
    for m, res in results["methods"].items():
        for name in sets:
            r = res[name]
            print(f"{m:<22}{name:<12}{r['db_r@1']:>8}{r['db_r@5']:>8}{r['table_r@5']:>8}{r['table_r@15']:>8}"
                  f"{r['mAP']:>8}{r['p50_ms']:>8}{r['p95_ms']:>8}")
    print("DBCopilot             spider         85.01   96.42   91.63   97.51")
    print("DBCopilot             spider_syn     62.67   85.11   70.35   86.26")
    meta = results.get("router_meta", {})
    print(f"router build {results['router_build_s']} s (synthesis {meta.get('synthesis_s')} s, embedding "
          f"{meta.get('synthetic_questions')} questions {meta.get('embed_s')} s); max RSS {results['max_rss_mb']} MB; "
          f"load average {results['load_avg']} (latency on a shared machine is inflated by other jobs)")
    run.save(args.out, results, indent=2)


if __name__ == "__main__":
    main()
