"""Wide-schema routing (issue 37 item 2): Spider databases merged into ONE database, tables renamed
``<db>__<table>``, against the per-database collection of the same databases, on Spider dev questions.

    python -m bench.routing.wide [--dbs dev|all] [--limit N] [--out FILE]
    python -m bench.routing.wide --edges [--exhaustive] [--out FILE]     # link discovery only

``--dbs dev`` merges the 20 databases Spider dev asks about (81 tables); ``all`` merges all 166 (876
tables). The per-database control is the collection of the same databases, one entry each. Both are built
under ``$TAGQL_COLLECTIONS_DIR`` (set it to a scratch folder; the collections are rebuilt each run). Table
recall@k in the wide database counts the gold tables (renamed) among its first k listed tables; in the
per-database collection it counts them among the flattened candidates (a wrong database lists no gold
table), as ``bench/routing/spider.py`` does. Prints a table and writes ``bench/results/routing/wide.json``.

``--edges`` times joinable-link discovery (``graph.table_edges``, blocked) against the pairwise reference
(``graph.table_edges_exhaustive``; CPU seconds) on every Spider database (edges per kind must be equal) and on wide
schemas: all 166 Spider databases merged into one, Spider + BIRD dev merged and copied k times (tables
renamed ``c<k>__<db>__<table>``), and 100 tables sharing 1,269 per-date columns (the enterprise shape of
issue 37). The reference runs on the wide schemas only with ``--exhaustive`` (the 876-table one takes
minutes) and never on the larger ones. Writes ``bench/results/routing/edges.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import common
from tagql.config import load_settings
from tagql.db.schema import Column, ForeignKey, Schema, Table
from tagql.embeddings import make_embedder
from tagql.routing.collection import Collection, read_values
from tagql.routing.metrics import Gold, gold_tables, summarize

DATA = common.DATA
OUT = common.result_path("routing", "wide")
SEP = "__"


def merge_schemas(name: str, schemas: Sequence[Schema], values: dict[str, dict[tuple[str, str], list[Any]]] | None = None,
                  sep: str = SEP) -> tuple[Schema, dict[tuple[str, str], list[Any]]]:
    """One database holding every table of ``schemas``, each renamed ``<db><sep><table>`` (keys and
    foreign keys follow), and the values renamed the same way."""
    tables, vals = [], {}
    for s in schemas:
        for t in s.tables:
            cols = [Column(c.name, c.type, c.primary_key, c.description, c.value_description) for c in t.columns]
            fks = [ForeignKey(list(f.columns), f"{s.name}{sep}{f.ref_table}", list(f.ref_columns)) for f in t.foreign_keys]
            tables.append(Table(f"{s.name}{sep}{t.name}", cols, fks, t.description))
        for (t, c), v in (values or {}).get(s.name, {}).items():
            vals[(f"{s.name}{sep}{t}", c)] = v
    return Schema(name, tables), vals


def spider_schemas(dbs: Sequence[str] | None = None) -> list[tuple[Schema, str | None]]:
    """Spider's schemas (all, or ``dbs``) with the path of their SQLite file (None when absent)."""
    out = []
    for e in json.loads((DATA / "spider" / "tables.json").read_text()):
        if dbs is None or e["db_id"] in dbs:
            f = DATA / "spider" / "database" / e["db_id"] / f"{e['db_id']}.sqlite"
            out.append((Schema.from_spider(e), str(f) if f.exists() else None))
    return out


def _timed(fn: Any, *a: Any) -> tuple[Any, float]:
    """(result, CPU seconds of this process): on a shared, loaded machine wall time mostly measures the
    other jobs."""
    t = time.process_time()
    out = fn(*a)
    return out, round(time.process_time() - t, 3)


def _kinds(edges: Sequence[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in edges:
        out[e.kind] = out.get(e.kind, 0) + 1
    return dict(sorted(out.items()))


def edges_main(args: Any, run: Any) -> None:
    from tagql.routing.collection import _text_values
    from tagql.routing.graph import table_edges, table_edges_exhaustive

    pairs = spider_schemas()
    bird = [(Schema.from_spider(e), str(DATA / "bird" / "dev_databases" / e["db_id"] / f"{e['db_id']}.sqlite"))
            for e in json.loads((DATA / "bird" / "dev_tables.json").read_text())]
    vals = {s.name: _text_values(read_values(f, s)) if f and Path(f).exists() else {} for s, f in pairs + bird}
    before, after, t_before, t_after, differ = {}, {}, 0.0, 0.0, []
    per_db = []
    for s, _f in pairs:
        a, ta = _timed(table_edges_exhaustive, s, vals[s.name])
        b, tb = _timed(table_edges, s, vals[s.name])
        for kind, n in _kinds(a).items():
            before[kind] = before.get(kind, 0) + n
        for kind, n in _kinds(b).items():
            after[kind] = after.get(kind, 0) + n
        t_before, t_after = t_before + ta, t_after + tb
        per_db.append((ta, tb, s.name))
        if a != b:
            differ.append(s.name)
    per_db.sort(reverse=True)
    res: dict[str, Any] = {"spider": {"databases": len(pairs), "differ": differ, "edges_before": before, "edges_after": after,
                                      "seconds_before": round(t_before, 2), "seconds_after": round(t_after, 2),
                                      "slowest": [{"db": n, "before_s": a, "after_s": b} for a, b, n in per_db[:3]]},
                           "wide": []}
    schemas = [s for s, _ in pairs]
    wides = [("spider 166 merged", *merge_schemas("spider_all", schemas, vals))]
    allsch = schemas + [s for s, _ in bird]
    for k in (4, 10):
        copies = [Schema(f"c{i}__{s.name}", s.tables) for i in range(k) for s in allsch]
        cvals = {f"c{i}__{s.name}": vals[s.name] for i in range(k) for s in allsch}
        wides.append((f"spider+bird merged x{k}", *merge_schemas(f"x{k}", copies, cvals)))
    dates = [f"d_{2000 + y}_{m:02d}_{d:02d}" for y in range(4) for m in range(1, 13) for d in range(1, 27)][:1269]
    wides.append(("100 tables x 1,269 date columns", Schema("dates", [
        Table(f"metric_{i}", [Column("id", "INT", True), Column(f"metric_{(i + 1) % 100}_id", "INT")]
              + [Column(d, "REAL") for d in dates]) for i in range(100)]), {}))
    for name, schema, wv in wides:
        w0 = time.perf_counter()
        b, tb = _timed(table_edges, schema, wv)
        row = {"wall_s_after": round(time.perf_counter() - w0, 1), "schema": name, "tables": len(schema.tables), "columns": sum(len(t.columns) for t in schema.tables),
               "columns_with_values": len(wv), "edges": _kinds(b), "seconds_after": tb}
        if args.exhaustive and row["columns"] <= 5000:
            a, ta = _timed(table_edges_exhaustive, schema, wv)
            row |= {"seconds_before": ta, "equal": a == b}
        res["wide"].append(row)
        print(f"{name}: {row}", file=sys.stderr, flush=True)
    sp = res["spider"]
    print(f"Spider {sp['databases']} databases: edges before {sp['edges_before']} ({sp['seconds_before']} s), "
          f"after {sp['edges_after']} ({sp['seconds_after']} s); databases that differ: {len(sp['differ'])}")
    print(f"{'schema':<34}{'tables':>8}{'columns':>9}{'before s':>10}{'after s':>9}  edges   (CPU seconds)")
    for r in res["wide"]:
        print(f"{r['schema']:<34}{r['tables']:>8}{r['columns']:>9}{r.get('seconds_before', '-')!s:>10}"
              f"{r['seconds_after']:>9}  {r['edges']}")
    run.save(args.out or common.result_path("routing", "edges"), res, indent=2)


def _build(coll: Collection, embedder: Any) -> float:
    from tagql.routing.ours import BuildConfig, GraphRouter

    t = time.perf_counter()
    last = [""]

    def progress(stage: str, done: int, total: int) -> None:
        if stage != last[0] or done == total:
            print(f"  {coll.name}: {stage} {done}/{total} ({time.perf_counter() - t:.0f} s)", file=sys.stderr, flush=True)
            last[0] = stage

    GraphRouter.build(coll, BuildConfig(), progress, embedder=embedder)
    return round(time.perf_counter() - t, 1)


def _route(router: Any, qs: list[str], golds: list[Gold], latency: int = 50) -> dict[str, Any]:
    cands = router.route_many(qs, k=20)
    lat = []
    for q in qs[:latency]:
        t = time.perf_counter()
        router.route(q, k=20)
        lat.append(1000 * (time.perf_counter() - t))
    lat.sort()
    return summarize(cands, golds) | {"p50_ms": round(statistics.median(lat), 1),
                                      "p95_ms": round(lat[min(len(lat) - 1, int(0.95 * len(lat)))], 1)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dbs", choices=("dev", "all"), default="dev")
    ap.add_argument("--limit", type=int, default=0, help="first N dev questions (0 = all 1034)")
    ap.add_argument("--edges", action="store_true", help="time link discovery only (no routing)")
    ap.add_argument("--exhaustive", action="store_true", help="with --edges: also the pairwise reference on wide schemas")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    if args.edges:
        edges_main(args, run)
        return
    args.out = args.out or str(OUT)
    settings = load_settings()
    embedder = make_embedder(settings)
    dev = json.loads((DATA / "spider" / "dev.json").read_text())
    if args.limit:
        dev = dev[: args.limit]
    dbs = sorted({e["db_id"] for e in dev}) if args.dbs == "dev" else None
    pairs = spider_schemas(dbs)
    schemas = [s for s, _ in pairs]
    t = time.perf_counter()
    values = {s.name: read_values(f, s) if f else {} for s, f in pairs}
    read_s = round(time.perf_counter() - t, 1)
    tables = {s.name: s.table_names for s in schemas}
    golds = [Gold(e["db_id"], gold_tables(e["query"], tables[e["db_id"]])) for e in dev]
    qs = [e["question"] for e in dev]
    results: dict[str, Any] = {"dbs": args.dbs, "databases": len(schemas), "questions": len(qs),
                               "tables": sum(len(s.tables) for s in schemas), "read_values_s": read_s, "runs": {}}

    # the per-database collection (control)
    per = Collection(f"wide-per-{args.dbs}", settings.collections_dir / f"wide-per-{args.dbs}", settings=settings)
    per.delete()
    t = time.perf_counter()
    for s, f in pairs:
        per.add(s, kind="spider", target=f, values=values[s.name])
    per.save()
    add_s = round(time.perf_counter() - t, 1)
    build_s = _build(per, embedder)
    results["runs"]["per_database"] = {"collection_s": add_s, "build_s": build_s} | _route(per.router("ours", embedder=embedder), qs, golds)
    print("done per-database", file=sys.stderr, flush=True)

    # one wide database
    wide_name = f"spider_{args.dbs}_wide"
    merged, mvals = merge_schemas(wide_name, schemas, values)
    wide = Collection(f"wide-one-{args.dbs}", settings.collections_dir / f"wide-one-{args.dbs}", settings=settings)
    wide.delete()
    t = time.perf_counter()
    wide.add(merged, kind="ddl", target=None, values=mvals)
    wide.save()
    add_s = round(time.perf_counter() - t, 1)
    build_s = _build(wide, embedder)
    wgolds = [Gold(wide_name, frozenset(f"{g.database}{SEP}{x}".lower() for x in g.tables)) for g in golds]
    edges: dict[str, int] = {}
    for e in wide.entries[wide_name].edges:
        edges[e.kind] = edges.get(e.kind, 0) + 1
    results["runs"]["one_wide_database"] = {"collection_s": add_s, "build_s": build_s, "edges": edges} | _route(
        wide.router("ours", embedder=embedder), qs, wgolds)

    results["max_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    results["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    print(f"{'collection':<22}{'tables':>8}{'build s':>9}{'DB R@1':>8}{'T R@5':>8}{'T R@15':>8}{'mAP':>8}{'p50 ms':>8}{'p95 ms':>8}")
    for name, r in results["runs"].items():
        print(f"{name:<22}{results['tables']:>8}{r['build_s']:>9}{r['db_r@1']:>8}{r['table_r@5']:>8}{r['table_r@15']:>8}"
              f"{r['mAP']:>8}{r['p50_ms']:>8}{r['p95_ms']:>8}")
    print(f"{len(qs)} Spider dev questions over {len(schemas)} databases; max RSS {results['max_rss_mb']} MB; "
          f"load average {results['load_avg']}")
    run.save(args.out, results, indent=2)


if __name__ == "__main__":
    main()
