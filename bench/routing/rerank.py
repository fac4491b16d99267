"""Fit the database re-ranker (``tagql.routing.rerank``) on Spider **train** questions (issue 4).

    python -m bench.routing.rerank [--collection spider-ctl] [--write-model]

Every Spider train question and its Spider-Syn version is routed by the collection's ``ours`` router
(166 databases) and its 16 best databases become re-ranker rows (label: the gold database). The 140
train databases are split in two halves (seed 0, as in the other tuning scripts); a question of one half
is routed with the synonym substitutions mined from the *other* half only, so it never sees its own.
Reported: database R@1 of the first stage and of trees fitted on the other half (cross-fit, the honest
figure), per half and question version. ``--write-model`` then fits on both halves and writes
``src/tagql/routing/data/db_reranker.json``. No dev question is read: dev figures come from
``bench/routing/spider.py`` (``--set rerank=false`` for the control).

``--distractors N`` (issue 37): each half's questions are also routed in a collection grown to N databases
with the scale bench's distractors (``bench/routing/scale.py``: renamed recombinations of real schemas),
recombined from the *other* half's databases and BIRD dev's only, so none holds a copy of the question's
own tables. ``--collection-rows DIR`` routes a sample of each half in a collection built elsewhere (the scale
bench's 10,000 databases), where copies of a question's tables exist: a database holding copies of all of
them counts as right (:func:`copy_aware_rows`). Trees fitted on the 166 databases alone learned what separates real, whole databases; among
hundreds of near-duplicate fragments they promoted the fragments (Spider dev at 1,000 databases: DB R@1
84.25 first stage, 77.50 re-ranked).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from bench.routing.spider_train_halves import spider_train_halves

from tagql.config import load_settings
from tagql.routing.collection import Collection
from tagql.routing.rerank import MODEL_PATH, TreeEnsemble, load_reranker
from tagql.routing.synonyms import mine_synonyms, mined_reverse
from tagql.embeddings import make_embedder

from bench import common

OUT = common.result_path("routing", "rerank")
TREES = {"max_iter": 200, "learning_rate": 0.05, "max_leaf_nodes": 15, "l2_regularization": 0.0}


def cross_lexicon(router, entries: list[dict]):
    """The router's lexicon with the substitutions mined from ``entries`` only."""
    return router.lexicon.variant(mined=mined_reverse(router.cfg.mined_min_count, synonyms=mine_synonyms(entries)))


def rows(router, questions: list[str], golds: list[int], label: str) -> list[tuple[np.ndarray, np.ndarray, int]]:
    out = []
    t = time.perf_counter()
    for s in range(0, len(questions), 512):
        out += [(cand, x, g) for (cand, x, _), g in zip(router.rerank_inputs(questions[s:s + 512]), golds[s:s + 512])]
        print(f"{label}: {min(s + 512, len(questions))}/{len(questions)} ({time.perf_counter() - t:.0f} s)",
              file=sys.stderr, flush=True)
    return out


def routed_halves(collection: str) -> tuple[dict[str, list[dict]], dict[str, dict[str, list]]]:
    """(train entries per half, re-ranker rows per half and question version): every train question
    routed by the collection's router with the substitutions mined from the other half."""
    router = Collection.load(collection, load_settings()).router("ours", embedder=make_embedder())
    train, half_a, _ = spider_train_halves(0)
    halves = {"A": [e for e in train if e["db_id"] in half_a], "B": [e for e in train if e["db_id"] not in half_a]}
    data: dict[str, dict[str, list]] = {}
    for name, other in (("A", "B"), ("B", "A")):
        router.lexicon = cross_lexicon(router, halves[other])
        ents = halves[name]
        golds = [router.db_index[e["db_id"]] for e in ents]
        data[name] = {v: rows(router, [e[key] for e in ents], golds, f"half {name} {v}")
                      for v, key in (("plain", "SpiderQuestion"), ("syn", "SpiderSynQuestion"))}
    return halves, data


def distractor_sources(sources: list, own: set[str], dev_dbs: list[str]) -> list:
    """The schemas a half's distractors are recombined from: neither the half's own databases (a copy of a
    question's tables would make it unanswerable) nor Spider dev's (never read while tuning)."""
    return [s for s in sources if s[0].name not in own and s[0].name not in dev_dbs]


def distractor_rows(halves: dict[str, list[dict]], size: int, work: Path, questions_per_table: int,
                    seed: int = 1) -> dict[str, dict[str, list]]:
    """Re-ranker rows per half and question version (``plain@N``, ``syn@N``) from a collection of ``size``
    databases: Spider's 166 and BIRD dev's 11 plus distractors recombined from the other half's databases
    (and BIRD dev's), one collection and router per half, built once under ``work``."""
    from tagql.routing.ours import BuildConfig, GraphRouter

    from bench.routing import scale

    sources, dev_dbs = scale.load_sources(work)
    settings = load_settings()
    embedder = make_embedder(settings)
    data: dict[str, dict[str, list]] = {}
    for name, other in (("A", "B"), ("B", "A")):
        pool = distractor_sources(sources, {e["db_id"] for e in halves[name]}, dev_dbs)
        path = work / f"rerank-{name}-{size}"
        if (path / "router" / "meta.json").exists():
            coll = Collection.load(path.name, settings, path=path)
        else:
            coll = Collection(path.name, path, settings=settings)
            scale.fill_collection(coll, list(sources) + scale.distractors(pool, max(0, size - len(sources)), seed))
            t = time.perf_counter()

            def progress(stage: str, done: int, total: int, t=t) -> None:
                if done == total:
                    print(f"half {name} @{size}: {stage} {done}/{total} ({time.perf_counter() - t:.0f} s)",
                          file=sys.stderr, flush=True)

            GraphRouter.build(coll, BuildConfig(questions_per_table=questions_per_table, seed=seed), progress,
                              embedder=embedder)
        router = coll.router("ours", embedder=embedder)
        router.lexicon = cross_lexicon(router, halves[other])
        ents = halves[name]
        golds = [router.db_index[e["db_id"]] for e in ents]
        data[name] = {f"{v}@{size}": rows(router, [e[key] for e in ents], golds, f"half {name} {v} @{size}")
                      for v, key in (("plain", "SpiderQuestion"), ("syn", "SpiderSynQuestion"))}
    return data


def copy_aware_rows(halves: dict[str, list[dict]], path: Path, per_half: int, seed: int = 0
                    ) -> dict[str, dict[str, list]]:
    """Re-ranker rows per half and question version (``plain@<name>``, ``syn@<name>``) from a collection built
    elsewhere (the scale bench's 10,000 databases: ``--collection-rows``), ``per_half`` questions of each half
    (seeded sample), routed with the substitutions mined from the other half. Its distractors were recombined
    from every train database, so a database that holds copies of all the tables a question's gold query
    reads answers it as well: each row's gold is that set (the gold database first), never a negative."""
    import random

    from tagql.routing.metrics import gold_tables
    from tagql.routing.ours import groups_by_database, same_rows

    settings = load_settings()
    embedder = make_embedder(settings)
    coll = Collection.load(path.name, settings, path=path)
    router = coll.router("ours", embedder=embedder)
    group = same_rows(coll, router.keys)
    groups_of = groups_by_database(group, router.key_db, len(router.dbs))
    data: dict[str, dict[str, list]] = {}
    for name, other in (("A", "B"), ("B", "A")):
        router.lexicon = cross_lexicon(router, halves[other])
        ents = random.Random(seed).sample(halves[name], min(per_half, len(halves[name])))
        golds = []
        for e in ents:
            schema = coll.schema(e["db_id"])
            used = gold_tables(e["query"], schema.table_names)
            need = {int(group[router.key_pos[(e["db_id"], t)]]) for t in schema.table_names if t.lower() in used}
            own = router.db_index[e["db_id"]]
            golds.append(np.array([own] + [d for d in range(len(router.dbs))
                                           if d != own and need and need <= groups_of[d]]))
        data[name] = {f"{v}@{path.name}": rows(router, [e[key] for e in ents], golds, f"half {name} {v} @{path.name}")
                      for v, key in (("plain", "SpiderQuestion"), ("syn", "SpiderSynQuestion"))}
    return data


def is_gold(cand: np.ndarray, gold) -> np.ndarray:
    """Which candidates answer the question: the gold database, or any of a gold set (copy-aware rows)."""
    return np.isin(cand, gold)


def training_arrays(data: list[tuple[np.ndarray, np.ndarray, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(candidate features, 1 where the candidate answers the question) of all questions' rows."""
    return (np.concatenate([r[1] for r in data]),
            np.concatenate([is_gold(r[0], r[2]).astype(int) for r in data]))


def fit_sklearn(x: np.ndarray, y: np.ndarray):
    """The shipped objective: pointwise gradient-boosted trees (sklearn), :data:`TREES`."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    return HistGradientBoostingClassifier(random_state=0, early_stopping=False, **TREES).fit(x, y)


def fit(data: list[tuple[np.ndarray, np.ndarray, int]], meta: dict | None = None) -> dict:
    """The JSON spec of trees fitted on ``data``, checked to score as sklearn does."""
    x, y = training_arrays(data)
    model = fit_sklearn(x, y)
    spec = TreeEnsemble.from_sklearn(model, meta)
    if not np.allclose(TreeEnsemble(spec).decision(x[:2000]), model.decision_function(x[:2000]), atol=1e-6):
        raise SystemExit("the exported trees do not reproduce sklearn's scores")
    return spec


def recall1(data, score=None) -> float:
    """Database R@1 when each question's candidates are ordered by ``score(features)`` (None: as routed)."""
    hit = 0
    for cand, x, gold in data:
        best = cand[int(np.argmax(score(x)))] if score is not None else cand[0]
        hit += int(is_gold(np.array([best]), gold)[0])
    return round(100 * hit / max(len(data), 1), 2)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collection", default="spider-ctl")
    ap.add_argument("--write-model", action="store_true", help=f"fit on all train questions, write {MODEL_PATH.name}")
    ap.add_argument("--distractors", type=int, default=0,
                    help="also route each half in a collection of this many databases with distractors (0 = no)")
    ap.add_argument("--distractor-questions-per-table", type=int, default=4,
                    help="synthetic questions per table of the distractor collections' routers (the scale bench's)")
    ap.add_argument("--work", default=None, help="where the distractor collections are built (kept for re-runs)")
    ap.add_argument("--collection-rows", default=None,
                    help="also route a sample of each half in this prebuilt collection (a folder, e.g. the scale "
                         "bench's scale-10000), copy-aware")
    ap.add_argument("--collection-questions", type=int, default=1500, help="questions per half for --collection-rows")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)

    halves, data = routed_halves(args.collection)
    if args.distractors:
        work = Path(args.work) if args.work else load_settings().collections_dir / "rerank-bench"
        for name, extra in distractor_rows(halves, args.distractors, work, args.distractor_questions_per_table).items():
            data[name].update(extra)
    if args.collection_rows:
        for name, extra in copy_aware_rows(halves, Path(args.collection_rows), args.collection_questions).items():
            data[name].update(extra)
    versions = list(data["A"])
    results: dict = {"collection": args.collection, "trees": TREES, "questions": {n: len(halves[n]) for n in halves},
                     "distractors": args.distractors, "collection_rows": args.collection_rows,
                     "collection_questions": args.collection_questions if args.collection_rows else None,
                     "cross_fit": {}}
    shipped = load_reranker()
    print(f"{'fit on -> test':<16}{'version':<12}{'first stage R@1':>16}{'re-ranked R@1':>15}{'shipped R@1':>13}")
    for train_half, test_half in (("A", "B"), ("B", "A")):
        model = TreeEnsemble(fit([r for v in versions for r in data[train_half][v]]))
        for v in versions:
            row = {"first_stage": recall1(data[test_half][v]), "reranked": recall1(data[test_half][v], model.decision),
                   "shipped": recall1(data[test_half][v], shipped.decision) if shipped is not None else None}
            results["cross_fit"][f"{train_half}->{test_half} {v}"] = row
            print(f"{train_half + ' -> ' + test_half:<16}{v:<12}{row['first_stage']:>16}{row['reranked']:>15}"
                  f"{row['shipped'] if row['shipped'] is not None else '-':>13}", flush=True)
    if args.write_model:
        every = [r for h in data.values() for v in h.values() for r in v]
        spec = fit(every, {
            "fitted_on": "Spider train questions and their Spider-Syn versions (train_spider.json), "
                         "each half routed with substitutions mined from the other half"
                         + (f", in the 166 databases and in {args.distractors} with distractors recombined from the"
                            " other half's databases" if args.distractors else "")
                         + (f", and {args.collection_questions} per half in {Path(args.collection_rows).name}"
                            " (copy-aware)" if args.collection_rows else ""),
            "questions": len(every), "trees_config": TREES, "router_collection": args.collection,
            "distractor_collections": args.distractors or None})
        MODEL_PATH.write_text(json.dumps(spec, separators=(",", ":")))
        results["model"] = {"path": str(MODEL_PATH.name), "trees": len(spec["trees"]), "rows": len(every)}
        print(f"wrote {MODEL_PATH} ({len(spec['trees'])} trees, {len(every)} questions)", file=sys.stderr)
    run.save(args.out, results, indent=2)


if __name__ == "__main__":
    main()
