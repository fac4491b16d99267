"""A lost link pinned to one far name: LM_CHOOSE per row vs one yes/no filter per row.

A question about one far name over a key the database lost ("heroes published by Dark Horse Comics" with
``superhero.publisher_id`` gone) can be answered two ways: choose each row's far name among the stored
ones and keep the rows whose choice is the name (`LM_CHOOSE` join + `WHERE far.name = '...'`, what
tagql.tag.plan.orphaned_joins writes), or judge "the publisher of {hero} is Dark Horse Comics" yes/no per
row (`LM_FILTER`, what tagql.tag.plan.pinned_choices turns the pinned choice into). Both cost one LM call
per distinct row; a choice, once cached, serves every name, a filter only its own. This measures which
keeps the right rows, on the train-split databases of the TAG question pool (never dev or test), on the
gold links the lost keys held:

* superhero - hero -> publisher, the 4 publishers with the most heroes;
* car_1     - car maker -> home country, the 3 countries with the most makers;
* world_1   - city -> country, the 4 countries with the most cities.

Per target name: up to ``--positives`` rows of that name and negatives up to ``--items``, seeded. The
filter runs as in production (P(yes) per row, cut at the widest gap: tagql.tag.verdicts); the choice is
the grammar-forced one among all stored names. Reports precision, recall and F1 of the kept rows, calls
and seconds per call, and how far the embedding proxy of the filter cascade ranks the rows (ROC AUC).

    python -m bench.tag.lost_link [--items 48] [--positives 12] [--out ...]

Prints a table and writes JSON. Fresh operator cache; tag.model, temperature 0.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import sys
import time
from collections import Counter

import numpy as np

from bench import common
from bench.tag import choose_batch
from tagql.config import for_tag, load_settings
from tagql.llm import make_llm
from tagql.tag import cascade
from tagql.tag.cache import OpCache
from tagql.tag.operators import SemEngine

# choose_batch's sets (name, database path, fact, field, gold (item, far name) SQL, options SQL), each with how
# many of its most frequent far names are targets
SETS = [(*entry, targets) for entry, targets in zip(choose_batch.SETS, (4, 3, 4), strict=True)]


def scores(kept: list[bool], truth: list[bool]) -> dict[str, float]:
    tp = sum(k and t for k, t in zip(kept, truth))
    p = tp / max(1, sum(kept))
    r = tp / max(1, sum(truth))
    return {"precision": round(p, 3), "recall": round(r, 3), "f1": round(2 * p * r / (p + r), 3) if p + r else 0.0}


def auc(values: np.ndarray, truth: list[bool]) -> float:
    y = np.array(truth)
    pos, neg = values[y], values[~y]
    if not len(pos) or not len(neg):
        return float("nan")
    return float((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=48, help="rows per target name")
    ap.add_argument("--positives", type=int, default=12, help="rows of the target name among them, at most")
    ap.add_argument("--seed", type=int, default=36)
    ap.add_argument("--sets", default=",".join(s[0] for s in SETS))
    ap.add_argument("--out", default=str(common.result_path("tag", "lost_link")))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    llm = make_llm(for_tag(load_settings()))
    from tagql.embeddings import make_embedder

    embedder = make_embedder(load_settings())
    wanted = set(args.sets.split(","))
    records = []
    for name, path, fact, field, gold_sql, options_sql, n_targets in SETS:
        if name not in wanted:
            continue
        con = sqlite3.connect(f"file:{common.DATA / path}?mode=ro", uri=True)
        gold = dict(con.execute(gold_sql).fetchall())
        options = [r[0] for r in con.execute(options_sql).fetchall()]
        con.close()
        rng = random.Random(args.seed)
        targets = [t for t, _n in Counter(gold.values()).most_common(n_targets)]
        chooser = SemEngine(llm, cache=OpCache(None), max_calls=100_000)  # one cache: a choice serves every name
        for target in targets:
            pos = sorted(i for i, a in gold.items() if a == target)
            neg = sorted(i for i, a in gold.items() if a != target)
            items = rng.sample(pos, min(args.positives, len(pos)))
            items += rng.sample(neg, min(args.items - len(items), len(neg)))
            truth = [gold[i] == target for i in items]
            filled = [chooser.fill(fact, {field: i}) for i in items]
            c0, t0 = chooser.stats.lm_calls, time.perf_counter()
            chosen = chooser.choose_many(fact, filled, options)
            choose_s, choose_calls = time.perf_counter() - t0, chooser.stats.lm_calls - c0
            claim = f"{fact} is {target}"
            judge = SemEngine(llm, cache=OpCache(None), max_calls=100_000, cascade="off")
            claims = [judge.fill(claim, {field: i}) for i in items]
            t0 = time.perf_counter()
            verdicts = judge.judge_many(claim, claims)
            filter_s = time.perf_counter() - t0
            proxy = cascade.proxy_scores(embedder, claim, claims)
            rec = {"set": name, "target": target, "items": len(items), "positives": sum(truth),
                   "options": len(options),
                   "choose": {**scores([c == target for c in chosen], truth), "lm_calls": choose_calls,
                              "seconds": round(choose_s, 1)},
                   "filter": {**scores(verdicts, truth), "lm_calls": judge.stats.lm_calls,
                              "seconds": round(filter_s, 1)},
                   "proxy_auc": round(auc(proxy, truth), 3),
                   "rows": [{"item": i, "gold": gold[i], "chosen": c, "filter": v}
                            for i, c, v in zip(items, chosen, verdicts)]}
            records.append(rec)
            print(f"  {name:9s} {target[:22]:22s} choose F1 {rec['choose']['f1']:.3f} ({choose_calls} calls, "
                  f"{choose_s:.0f} s)  filter F1 {rec['filter']['f1']:.3f} ({judge.stats.lm_calls} calls, "
                  f"{filter_s:.0f} s)  proxy AUC {rec['proxy_auc']:.2f}", file=sys.stderr)
    print(f"\n{'set':9s} {'target':22s} {'pos/n':>6s} {'choose P/R/F1':>17s} {'filter P/R/F1':>17s} "
          f"{'s/call c':>8s} {'s/call f':>8s} {'proxy AUC':>9s}")
    for r in records:
        c, f = r["choose"], r["filter"]
        print(f"{r['set']:9s} {r['target'][:22]:22s} {r['positives']:>2d}/{r['items']:<3d} "
              f"{c['precision']:.2f}/{c['recall']:.2f}/{c['f1']:.2f}  {f['precision']:.2f}/{f['recall']:.2f}/"
              f"{f['f1']:.2f}  {c['seconds'] / max(1, c['lm_calls']):>8.2f} {f['seconds'] / max(1, f['lm_calls']):>8.2f}"
              f" {r['proxy_auc']:>9.2f}")
    summary = {}
    for method in ("choose", "filter"):
        summary[method] = {"mean_f1": round(float(np.mean([r[method]["f1"] for r in records])), 3),
                           "lm_calls": sum(r[method]["lm_calls"] for r in records),
                           "seconds": round(sum(r[method]["seconds"] for r in records), 1)}
    summary["mean_proxy_auc"] = round(float(np.nanmean([r["proxy_auc"] for r in records])), 3)
    print(f"mean F1: choose {summary['choose']['mean_f1']:.3f}, filter {summary['filter']['mean_f1']:.3f}; "
          f"time filter/choose {summary['filter']['seconds'] / max(1e-9, summary['choose']['seconds']):.2f}x")
    run.save(args.out, {"model": getattr(llm, "name", "llm"), "seed": args.seed, "summary": summary,
                        "records": records})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
