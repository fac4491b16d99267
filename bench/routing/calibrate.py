"""Fit the table-list calibration of the ``ours`` router on Spider *train* questions (never dev).

    python -m bench.routing.calibrate [--questions 1500] [--out bench/results/routing/calibrate.json]

The router's candidates list tables so as to maximise the expected table recall (``GraphRouter.allocate``)
under two calibrated probabilities: the question's database, softmax(db logit / db_temp), and a table of
that database being needed, sigmoid(table_scale * logit + table_bias). The three parameters are fitted
here by maximum likelihood (not by recall) on Spider train questions, whose databases are disjoint from
dev; the results are the defaults of ``BuildConfig``. Also reports train recall with the fitted values
and with the current defaults. Needs the collection ``spider-bench`` with a trained router
(``bench/routing/spider.py``).
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import replace

import numpy as np
from scipy.optimize import minimize

from tagql.config import load_settings
from tagql.routing.collection import Collection
from tagql.routing.metrics import Gold, gold_tables, summarize
from tagql.embeddings import make_embedder

from bench import common

DATA = common.DATA
OUT = common.result_path("routing", "calibrate")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--collection", default="spider-bench")
    ap.add_argument("--questions", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)

    coll = Collection.load(args.collection, load_settings())
    router = coll.router("ours", embedder=make_embedder())
    tables = {db: coll.schema(db).table_names for db in coll.databases}
    train = json.loads((DATA / "spider_syn" / "train_spider.json").read_text())
    random.Random(args.seed).shuffle(train)
    train = [e for e in train if e["db_id"] in tables][: args.questions]
    qs = [e["SpiderQuestion"] for e in train]
    golds = [Gold(e["db_id"], gold_tables(e["query"], tables[e["db_id"]])) for e in train]

    lg, dlg, near = [], [], []
    for s in range(0, len(qs), 128):
        f, nr = router._features(qs[s:s + 128])
        lg.append(f @ router.weights)
        dlg.append(router.db_features(f, lg[-1]) @ router.db_weights)
        near.append(nr)
    lg, dlg, near = np.concatenate(lg), np.concatenate(dlg), np.concatenate(near)

    gi = np.array([router.db_index[g.database] for g in golds])

    def nll_db(t: np.ndarray) -> float:
        x = dlg.astype(np.float64) / t[0]
        x -= x.max(axis=1, keepdims=True)
        return float(-(x[np.arange(len(x)), gi] - np.log(np.exp(x).sum(axis=1))).mean())

    xs, ys = [], []
    for row, g in zip(lg, golds):
        for t in tables[g.database]:
            xs.append(row[router.key_pos[(g.database, t)]])
            ys.append(float(t.lower() in g.tables))
    x, y = np.array(xs, dtype=np.float64), np.array(ys)

    def nll_table(p: np.ndarray) -> float:
        s = np.clip(1 / (1 + np.exp(-(p[0] * x + p[1]))), 1e-9, 1 - 1e-9)
        return float(-(y * np.log(s) + (1 - y) * np.log(1 - s)).mean())

    td = minimize(nll_db, [1.0], method="Nelder-Mead").x
    ab = minimize(nll_table, [1.0, 0.0], method="Nelder-Mead").x
    fitted = {"db_temp": round(float(td[0]), 3), "table_scale": round(float(ab[0]), 3),
              "table_bias": round(float(ab[1]), 3)}

    def recall(cfg: object) -> dict:
        router.cfg = cfg
        return summarize([router._candidates(r, 20, d, n) for r, d, n in zip(lg, dlg, near)], golds)

    default = router.cfg
    out = {"questions": len(qs), "seed": args.seed, "fitted": fitted,
           "nll_db": {"t=1": round(nll_db(np.array([1.0])), 4), "fitted": round(nll_db(td), 4)},
           "nll_table": {"identity": round(nll_table(np.array([1.0, 0.0])), 4), "fitted": round(nll_table(ab), 4)},
           "train_recall_defaults": recall(default),
           "train_recall_fitted": recall(replace(default, **fitted)),
           "defaults": {k: getattr(default, k) for k in fitted}}
    router.cfg = default
    print(json.dumps(out, indent=1))
    run.save(args.out, out, indent=2)


if __name__ == "__main__":
    main()
