"""The database re-ranker's training objective, side by side on the same cross-fit (issue 4).

    pip install lightgbm      # benchmark only; the shipped trees need neither it nor sklearn
    python -m bench.routing.rerank_objectives [--collection spider-ctl]

The rows are those of ``bench/routing/rerank.py`` (every Spider train question and its Spider-Syn version,
16 candidate databases each, each half routed with substitutions mined from the other half). Each
objective is fitted on one half and scored by database R@1 on the other:

* ``hgb-binary`` -- the shipped one: sklearn's HistGradientBoostingClassifier, one row = one candidate;
* ``lgb-binary`` -- the same pointwise objective in LightGBM (checks the library is not the difference);
* ``lambdarank`` / ``rank_xendcg`` -- listwise LightGBM objectives over each question's 16 candidates,
  which optimise the order within a question instead of each candidate's probability.

Same tree budget for all (200 trees, 15 leaves, learning rate 0.05). Writes
``bench/results/routing/rerank_objectives.json``.
"""

from __future__ import annotations

import argparse
import json

from bench.routing.rerank import TREES, fit_sklearn, recall1, routed_halves, training_arrays

from bench import common

OUT = common.result_path("routing", "rerank_objectives")
OBJECTIVES = ("hgb-binary", "lgb-binary", "lambdarank", "rank_xendcg")


def scorer(objective: str, rows: list):
    """A function (candidate features) -> scores, fitted on ``rows``."""
    x, y = training_arrays(rows)
    if objective == "hgb-binary":
        return fit_sklearn(x, y).decision_function
    try:
        import lightgbm as lgb
    except ImportError:
        raise SystemExit("the LightGBM objectives need lightgbm: pip install lightgbm") from None
    params = {"n_estimators": TREES["max_iter"], "learning_rate": TREES["learning_rate"],
              "num_leaves": TREES["max_leaf_nodes"], "random_state": 0, "n_jobs": 2, "verbose": -1}
    if objective == "lgb-binary":
        model = lgb.LGBMClassifier(objective="binary", **params).fit(x, y)
        return lambda z: model.predict(z, raw_score=True)
    ranker = lgb.LGBMRanker(objective=objective, **params).fit(x, y, group=[len(r[0]) for r in rows])
    return ranker.predict


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collection", default="spider-ctl")
    ap.add_argument("--objectives", default=",".join(OBJECTIVES))
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)

    _, data = routed_halves(args.collection)
    results: dict = {"collection": args.collection, "trees": TREES, "objectives": {}}
    print(f"{'objective':<14}{'A->B plain':>11}{'A->B syn':>10}{'B->A plain':>11}{'B->A syn':>10}{'mean plain':>11}{'mean syn':>10}")
    for objective in args.objectives.split(","):
        row = {}
        for train_half, test_half in (("A", "B"), ("B", "A")):
            score = scorer(objective, data[train_half]["plain"] + data[train_half]["syn"])
            for v in ("plain", "syn"):
                row[f"{train_half}->{test_half} {v}"] = recall1(data[test_half][v], score)
        row["mean plain"] = round((row["A->B plain"] + row["B->A plain"]) / 2, 2)
        row["mean syn"] = round((row["A->B syn"] + row["B->A syn"]) / 2, 2)
        results["objectives"][objective] = row
        print(f"{objective:<14}" + "".join(f"{v:>{w}}" for v, w in zip(row.values(), (11, 10, 11, 10, 11, 10))), flush=True)
    run.save(args.out, results, indent=2)


if __name__ == "__main__":
    main()
