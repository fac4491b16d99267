"""Scale benchmark (issue 37 item 1): a collection grown from Spider's 166 + BIRD dev's 11 schemas to
1,000 (10,000, ...) databases with realistic distractors, routed with Spider dev's questions and gold.

    python -m bench.routing.scale [--sizes 177,1000] [--questions 400] [--questions-per-table 4]
                                  [--collection-sizes 10000]   # the collection alone, no router

Distractors are recombined, renamed real schemas: each draws a few connected tables (declared keys kept)
from two or three source databases and renames table and column words with the synonym substitutions
mined from Spider-Syn's train split (``routing/synonyms.py``: "singer" -> "vocalist", "city" -> "town"),
half of the words on average; their values come along. Sources are the Spider databases Spider dev never
asks about (the 146 train ones) and BIRD dev's 11, so a distractor can resemble a gold database (same
domains, the same kind of tables) without being a renamed copy of it -- a copy of the gold tables with the
gold values would make the question unanswerable by construction.

Every size runs in its own process (peak RSS per size): add the databases (``Collection.add``), build the
``ours`` router (``--questions-per-table`` synthetic questions per table at every size, so sizes compare;
the default build uses 24), route a fixed sample of Spider dev questions (``--questions``, seed 0; latency
one question at a time over the first ``--latency`` of them), then add one more database incrementally
(``Collection.add`` + ``GraphRouter.update``). Collections live under ``--work`` (default
``$TAGQL_COLLECTIONS_DIR/scale-bench``; deleted and rebuilt per size). Prints a table and writes
``bench/results/routing/scale.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import random
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import common
from tagql.config import load_settings
from tagql.db.schema import Column, ForeignKey, Schema, Table
from tagql.routing.metrics import Gold, gold_tables, summarize
from tagql.routing.synonyms import load_synonyms
from tagql.text import split_identifier

DATA = common.DATA
OUT = common.result_path("routing", "scale")
Source = tuple[Schema, dict[tuple[str, str], list[Any]]]


def load_sources(work: Path) -> tuple[list[Source], list[str]]:
    """Spider's 166 and BIRD dev's 11 schemas with their values (cached in ``work``), and the names of
    the databases Spider dev asks about. Both have a ``formula_1``: the collection keeps BIRD's, so the
    177 sources make 176 databases (:func:`counts`)."""
    from tagql.routing.collection import read_values

    cache = work / "sources.pkl"
    if cache.exists():
        return pickle.loads(cache.read_bytes())
    out: list[Source] = []
    for tables, ddir in ((DATA / "spider" / "tables.json", DATA / "spider" / "database"),
                         (DATA / "bird" / "dev_tables.json", DATA / "bird" / "dev_databases")):
        for e in json.loads(tables.read_text()):
            s = Schema.from_spider(e)
            f = ddir / e["db_id"] / f"{e['db_id']}.sqlite"
            out.append((s, read_values(str(f), s) if f.exists() else {}))
    dev = sorted({e["db_id"] for e in json.loads((DATA / "spider" / "dev.json").read_text())})
    work.mkdir(parents=True, exist_ok=True)
    cache.write_bytes(pickle.dumps((out, dev)))
    return out, dev


def _synonyms() -> dict[str, list[str]]:
    """Schema word -> one-word substitutes seen at least twice in Spider-Syn's train questions."""
    out: dict[str, list[str]] = {}
    for orig, syn, n in load_synonyms():
        if n >= 2 and " " not in orig and " " not in syn and syn.isalpha() and syn != orig:
            out.setdefault(orig, []).append(syn)
    return out


def _rename(name: str, rng: random.Random, syn: dict[str, list[str]], share: float) -> str:
    words = split_identifier(name).split() or [name]
    return "_".join(rng.choice(syn[w]) if w in syn and rng.random() < share else w for w in words)


def distractors(sources: Sequence[Source], n: int, seed: int = 0, *, start: int = 0, share: float = 0.5) -> list[Source]:
    """``n`` databases recombined from ``sources``: 2-3 sources each, 1-4 connected tables from each,
    table and column words replaced by mined synonyms (each with probability ``share``), values kept."""
    syn = _synonyms()
    out = []
    for i in range(start, start + n):
        rng = random.Random(f"{seed}-{i}")
        tables: list[Table] = []
        vals: dict[tuple[str, str], list[Any]] = {}
        used: set[str] = set()
        for s, sv in rng.sample(list(sources), rng.choice((2, 2, 3))):
            if not s.tables:
                continue
            nbr: dict[str, set[str]] = {t.name: set() for t in s.tables}
            for t in s.tables:
                for fk in t.foreign_keys:
                    if fk.ref_table in nbr:
                        nbr[t.name].add(fk.ref_table)
                        nbr[fk.ref_table].add(t.name)
            pick = [rng.choice(s.tables).name]
            want = rng.randint(1, 4)
            while len(pick) < want:
                frontier = sorted({m for t in pick for m in nbr[t]} - set(pick))
                if not frontier:
                    break
                pick.append(rng.choice(frontier))
            new = {}
            for tn in pick:
                name = _rename(tn, rng, syn, share)
                while name.lower() in used:
                    name += "_2"
                used.add(name.lower())
                new[tn] = name
            colmap: dict[str, dict[str, str]] = {}
            for tn in pick:
                seen: set[str] = set()
                colmap[tn] = {}
                for c in s.table(tn).columns:  # column names stay unique within the table
                    nc = _rename(c.name, rng, syn, share)
                    while nc.lower() in seen:
                        nc += "_2"
                    seen.add(nc.lower())
                    colmap[tn][c.name] = nc
            for tn in pick:
                t, cols = s.table(tn), colmap[tn]
                fks = [ForeignKey([cols.get(c, c) for c in fk.columns], new[fk.ref_table],
                                  [colmap[fk.ref_table].get(c, c) for c in fk.ref_columns])
                       for fk in t.foreign_keys if fk.ref_table in new]
                tables.append(Table(new[tn], [Column(cols[c.name], c.type, c.primary_key) for c in t.columns], fks))
                for c in t.columns:
                    if (tn, c.name) in sv:
                        vals[(new[tn], cols[c.name])] = sv[(tn, c.name)]
        out.append((Schema(re.sub(r"\W", "_", f"{tables[0].name[:24]}_{i:05d}"), tables), vals))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="177,1000", help="collection sizes (databases), comma-separated")
    ap.add_argument("--questions", type=int, default=400, help="Spider dev questions routed (seeded sample; 0 = all)")
    ap.add_argument("--latency", type=int, default=100, help="questions routed one at a time for p50/p95")
    ap.add_argument("--questions-per-table", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default=None)
    ap.add_argument("--reuse", action="store_true",
                    help="route with the router an earlier run built under --work (e.g. after a re-ranker refit); "
                         "build figures are that run's, peak RSS is this run's (load and routing only)")
    ap.add_argument("--collection-sizes", default="",
                    help="sizes whose collection only is built and loaded (no router: its embedding is the cost)")
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # child: run one size
    ap.add_argument("--collection-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    work = Path(args.work) if args.work else load_settings().collections_dir / "scale-bench"
    work.mkdir(parents=True, exist_ok=True)
    if args.one is not None:
        res = collection_size(args.one, args, work) if args.collection_only else run_size(args.one, args, work)
        Path(args.child_out).write_text(json.dumps(res))
        return
    run = common.Run(__spec__, argv)
    load_sources(work)  # once, before the children read the cache
    results: dict[str, Any] = {"questions_per_table": args.questions_per_table, "seed": args.seed, "sizes": {},
                               "collection_only": {}}
    jobs = [(int(x), False) for x in args.sizes.split(",") if x] + [(int(x), True) for x in args.collection_sizes.split(",") if x]
    for size, only in jobs:
        out = work / f"size-{size}{'-collection' if only else ''}.json"
        cmd = [sys.executable, "-m", "bench.routing.scale", "--one", str(size), "--child-out", str(out),
               *(["--collection-only"] if only else []),
               "--questions", str(args.questions), "--latency", str(args.latency),
               "--questions-per-table", str(args.questions_per_table), "--seed", str(args.seed), "--work", str(work),
               *(["--reuse"] if args.reuse else [])]
        print(f"size {size} ...", file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True)
        results["collection_only" if only else "sizes"][str(size)] = json.loads(out.read_text())
        _print(results)
        run.save(args.out, results, indent=2)
    results["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    run.save(args.out, results, indent=2)


def _print(results: dict[str, Any]) -> None:
    for size, r in results.get("collection_only", {}).items():
        print(f"collection only, {size} databases: {r['tables']} tables, {r['columns']} columns; add {r['add_s']} s, "
              f"save {r['save_s']} s, load {r['load_s']} s, graph {r['graph_s']} s, add one database {r['add_one_s']} s, "
              f"{r['disk_mb']} MB on disk, peak RSS {r['max_rss_mb']} MB")
    print(f"{'databases':>10}{'tables':>8}{'syn q':>8}{'build s':>9}{'add 1 s':>9}{'disk MB':>9}{'RSS MB':>8}"
          f"{'p50 ms':>8}{'p95 ms':>8}{'DB R@1':>8}{'DB R@5':>8}{'T R@5':>8}")
    for size, r in results["sizes"].items():
        print(f"{size:>10}{r['tables']:>8}{r['synthetic_questions']:>8}{r['build_s']:>9}{r['add_one_s']:>9}"
              f"{r['disk_mb']:>9}{r['max_rss_mb']:>8}{r['p50_ms']:>8}{r['p95_ms']:>8}{r['db_r@1']:>8}"
              f"{r['db_r@5']:>8}{r['table_r@5']:>8}")


def grown(size: int, seed: int, work: Path) -> tuple[list[Source], Source, list[Source]]:
    """(the ``size`` databases: every source, then distractors recombined from the sources Spider dev never
    asks about; one more distractor, the database added last; the sources)."""
    sources, dev_dbs = load_sources(work)
    pool = [s for s in sources if s[0].name not in dev_dbs]
    extra = distractors(pool, max(0, size - len(sources)) + 1, seed)
    return list(sources) + extra[:-1], extra[-1], sources


def counts(dbs: Sequence[Source]) -> dict[str, int]:
    """Databases, tables and columns of the collection ``dbs`` fill: a name met twice is one database
    (Spider and BIRD dev both have ``formula_1``; the collection keeps the last added, BIRD's)."""
    distinct = {s.name: s for s, _ in dbs}
    return {"databases": len(distinct), "tables": sum(len(s.tables) for s in distinct.values()),
            "columns": sum(len(t.columns) for s in distinct.values() for t in s.tables), "sources_given": len(dbs)}


def fill_collection(coll: Any, dbs: Sequence[Source]) -> tuple[float, float]:
    """Empty ``coll``, add every schema of ``dbs`` with its stored values, save it (one write);
    (seconds adding, seconds saving)."""
    coll.delete()
    t = time.perf_counter()
    for s, v in dbs:
        coll.add(s, kind="ddl", target=None, values=v)
    t1 = time.perf_counter()
    coll.save()
    return round(t1 - t, 1), round(time.perf_counter() - t1, 1)


def collection_size(size: int, args: Any, work: Path) -> dict[str, Any]:
    """The collection alone at ``size`` databases: add (values, graph edges), save, load, schema graph."""
    from tagql.routing.collection import Collection

    t = time.perf_counter()
    dbs, more, _ = grown(size, args.seed, work)
    gen_s = time.perf_counter() - t
    settings = load_settings()
    coll = Collection(f"scale-{size}-collection", work / f"scale-{size}-collection", settings=settings)
    add_s, save_s = fill_collection(coll, dbs)
    t = time.perf_counter()
    loaded = Collection.load(coll.name, settings, path=coll.path)
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    g = loaded.graph
    graph_s = time.perf_counter() - t
    t = time.perf_counter()
    loaded.add(more[0], kind="ddl", target=None, values=more[1])
    loaded.save()
    add_one_s = time.perf_counter() - t
    disk = sum(f.stat().st_size for f in coll.path.rglob("*") if f.is_file())
    res = {**counts(dbs),
           "graph_edges": sum(len(e.edges) for e in loaded.entries.values()), "graph_nodes": g.g.number_of_nodes(),
           "distractors_s": round(gen_s, 1), "add_s": add_s, "save_s": save_s,
           "load_s": round(load_s, 1), "graph_s": round(graph_s, 1), "add_one_s": round(add_one_s, 1),
           "disk_mb": round(disk / 2**20, 1),
           "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
           "load_avg": [round(x, 2) for x in os.getloadavg()]}
    coll.delete()
    return res


def run_size(size: int, args: Any, work: Path) -> dict[str, Any]:
    from tagql.embeddings import make_embedder
    from tagql.routing.collection import Collection
    from tagql.routing.ours import BuildConfig, GraphRouter

    dbs, more, sources = grown(size, args.seed, work)
    settings = load_settings()
    embedder = make_embedder(settings)
    path = work / f"scale-{size}"
    if args.reuse and (path / "router" / "meta.json").exists():
        coll = Collection.load(path.name, settings, path=path)
        if more[0].name in coll.entries:  # the database the earlier run added last
            coll.remove(more[0].name)
            coll.save()
        router = GraphRouter.load(coll, embedder)
        build: dict[str, Any] = {"reused_build": True, "build_s": router.meta.get("build_s")}
    else:
        coll = Collection(path.name, path, settings=settings)
        t0 = time.perf_counter()
        fill_collection(coll, dbs)
        build = {"collection_s": round(time.perf_counter() - t0, 1)}
        last: dict[str, float] = {}

        def progress(stage: str, done: int, total: int) -> None:
            now = time.perf_counter()
            if done == total or now - last.get(stage, 0) > 60:
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024  # which stage sets the peak
                print(f"  {size}: {stage} {done}/{total} ({now - t0:.0f} s, peak RSS {peak} MB)", file=sys.stderr,
                      flush=True)
                last[stage] = now

        t = time.perf_counter()
        router = GraphRouter.build(coll, BuildConfig(questions_per_table=args.questions_per_table, seed=args.seed),
                                   progress, embedder=embedder)
        build |= {"router_s": round(time.perf_counter() - t, 1), "build_s": round(time.perf_counter() - t0, 1)}
    res = {**counts(dbs), "distractors": len(dbs) - len(sources),
           "graph_edges": sum(len(e.edges) for e in coll.entries.values()),
           "synthetic_questions": len(router.syn), **build,
           "router_meta": {k: router.meta.get(k) for k in ("synthesis_s", "embed_s", "build_s")},
           **route_figures(router, sources, args)}
    # the router is let go before the incremental step loads it again: two in memory at once made the peak
    res["max_rss_build_route_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    del router
    gc.collect()
    res |= add_one(coll, embedder, more)
    res |= {"disk_mb": round(sum(f.stat().st_size for f in coll.path.rglob("*") if f.is_file()) / 2**20, 1),
            "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "load_avg": [round(x, 2) for x in os.getloadavg()]}
    return res


def route_figures(router: Any, sources: list[Source], args: Any) -> dict[str, Any]:
    """Route the seeded Spider dev sample with ``router``: in one batch (recall), then one at a time
    (latency)."""
    dev = json.loads((DATA / "spider" / "dev.json").read_text())
    if args.questions and args.questions < len(dev):
        dev = random.Random(args.seed).sample(dev, args.questions)
    tables = {s.name: s.table_names for s, _ in sources}
    golds = [Gold(e["db_id"], gold_tables(e["query"], tables[e["db_id"]])) for e in dev]
    qs = [e["question"] for e in dev]
    t = time.perf_counter()
    cands = router.route_many(qs, k=5)
    batch_ms = 1000 * (time.perf_counter() - t) / len(qs)
    router.lexicon.cache.clear() if router.lexicon is not None else None
    lat = []
    for q in qs[: args.latency]:
        t = time.perf_counter()
        router.route(q, k=5)
        lat.append(1000 * (time.perf_counter() - t))
    lat.sort()
    return {"questions": len(qs), "batch_ms_per_q": round(batch_ms, 1), "p50_ms": round(statistics.median(lat), 1),
            "p95_ms": round(lat[min(len(lat) - 1, int(0.95 * len(lat)))], 1), **summarize(cands, golds)}


def add_one(coll: Any, embedder: Any, more: Source) -> dict[str, Any]:
    """Add one database to the built collection and bring its saved router up to date (load + update)."""
    from tagql.routing.ours import GraphRouter

    t = time.perf_counter()
    coll.add(more[0], kind="ddl", target=None, values=more[1])
    coll.save()
    add_coll_s = time.perf_counter() - t
    router = GraphRouter.load(coll, embedder)
    load_s = time.perf_counter() - t - add_coll_s
    info = router.update()
    return {"add_one_s": round(time.perf_counter() - t, 1),
            "add_one": {"collection_s": round(add_coll_s, 2), "router_load_s": round(load_s, 1),
                        "update_s": info["seconds"], "new_questions": info["new_questions"]}}


if __name__ == "__main__":
    main()
