"""Does the Spider-fitted database re-ranker transfer to questions and databases it never saw? (issue 4)

    python -m bench.routing.transfer [--collection spider-bird]

One collection of Spider's 166 databases plus BIRD dev's 11 (``bird/dev_tables.json``; data for the 3
whose files are here). The ``ours`` router is built once (default settings) and routes BIRD dev's 1534
questions -- neither they nor the BIRD databases were used to fit anything -- and Spider / Spider-Syn dev,
with and without the re-ranker (``rerank=false``), in one run. Prints a table, writes
``bench/results/routing/transfer.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from tagql.config import load_settings
from tagql.routing.collection import Collection
from tagql.routing.metrics import Gold, gold_tables, summarize
from tagql.routing.ours import BuildConfig, GraphRouter
from tagql.embeddings import make_embedder

from bench import common

DATA = common.DATA
OUT = common.result_path("routing", "transfer")
COLUMNS = ("db_r@1", "db_r@5", "table_r@5", "table_r@15")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collection", default="spider-bird")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)

    coll = Collection.create(args.collection, load_settings())
    if not coll.entries:
        coll.add_spider(DATA / "spider" / "tables.json")
        coll.add_spider(DATA / "bird" / "dev_tables.json", database_dir=DATA / "bird" / "dev_databases")
        coll.save()
    build_s = None
    if not (coll.path / "router" / "meta.json").exists():
        t = time.perf_counter()
        GraphRouter.build(coll, BuildConfig(), lambda stage, done, total: print(
            f"{stage}: {done}/{total}", file=sys.stderr, flush=True) if done == total else None,
            embedder=make_embedder())
        build_s = round(time.perf_counter() - t, 1)
    tables = {db: coll.schema(db).table_names for db in coll.databases}

    def load(name: str, question: str, sql: str) -> tuple[list[str], list[Gold]]:
        rows = json.loads((DATA / name).read_text())
        return [e[question] for e in rows], [Gold(e["db_id"], gold_tables(e[sql], tables[e["db_id"]])) for e in rows]

    sets = {"bird_dev": load("bird/dev.json", "question", "SQL"),
            "spider_dev": load("spider/dev.json", "question", "query"),
            "spider_syn_dev": load("spider_syn/dev.json", "SpiderSynQuestion", "query")}
    results: dict = {"collection": f"{args.collection}: Spider's 166 + BIRD dev's 11 databases",
                     "databases": len(coll.databases), "router_build_s": build_s, "results": {}}
    print(f"{'set':<16}{'re-ranker':<11}" + "".join(f"{c:>11}" for c in COLUMNS))
    for rerank in (False, True):
        router = GraphRouter.load(coll, make_embedder(), overrides={"rerank": rerank})
        for name, (qs, golds) in sets.items():
            m = summarize(router.route_many(qs, k=20), golds)
            results["results"][f"{name} rerank={rerank}"] = m
            print(f"{name:<16}{'on' if rerank else 'off':<11}" + "".join(f"{m[c]:>11}" for c in COLUMNS), flush=True)
    run.save(args.out, results, indent=2)


if __name__ == "__main__":
    main()
