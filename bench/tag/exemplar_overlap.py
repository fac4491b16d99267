"""How close each TAG question set sits to the plan-exemplar bank (issue 36 item 2: what was fitted to what).

The planner shows the model the bank's most similar solved plans (``tag/exemplars.py``, TF-IDF over words
and word pairs). The bank was written while the 40-question dev set was being tuned; if its questions
are shaped after the dev questions, the dev figure measures recall of those shapes, not planning. This
script measures it with the planner's own similarity (the exemplar it would show first, never one on the
asked database): per question set, the cosine of each question to its nearest exemplar, and the share of
questions whose nearest exemplar is at least 0.5 (a paraphrase of the same shape). No model involved.

    python -m bench.tag.exemplar_overlap

Prints a table and writes bench/results/tag/exemplar_overlap.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from bench import common

DATA = Path(__file__).resolve().parent / "data"
CLOSE = 0.5


def nearest(index: Any, question: str, db: str) -> tuple[float, str]:
    """The planner's first exemplar for ``question`` (as ``ExemplarIndex.nearest`` ranks): cosine, question."""
    from tagql.tag.exemplars import _terms

    q = index._vector(Counter(_terms(question)))
    scored = [(sum(w * vec.get(t, 0.0) for t, w in q.items()), -i) for i, vec in enumerate(index.vectors)
              if index.exemplars[i].db != db]
    score, neg = max(scored)
    return score, index.exemplars[-neg].question


def question_sets() -> dict[str, list[tuple[str, str]]]:
    sets: dict[str, list[tuple[str, str]]] = {}
    for name, file in (("tag dev (40)", "tag_dev.csv"), ("tag held-out (15)", "tag_heldout.csv")):
        with (DATA / file).open() as f:
            sets[name] = [(r["Query"], r["DB used"]) for r in csv.DictReader(f)]
    pool = json.loads((DATA / "pool.json").read_text())
    for split in ("train", "dev", "test"):
        sets[f"pool {split}"] = [(q["Query"], q["DB used"]) for q in pool if q["Split"] == split]
    return sets


def measure(index: Any, sets: dict[str, list[tuple[str, str]]]) -> dict[str, dict[str, Any]]:
    out = {}
    for name, qs in sets.items():
        near = [nearest(index, q, db) for q, db in qs]
        scores = [s for s, _ in near]
        closest = max(zip(scores, qs, (e for _, e in near)), key=lambda x: x[0])
        out[name] = {"n": len(qs), "median": round(statistics.median(scores), 3),
                     "mean": round(statistics.mean(scores), 3),
                     "share_close": round(sum(s >= CLOSE for s in scores) / len(scores), 3),
                     "closest": {"cosine": round(closest[0], 3), "question": closest[1][0], "exemplar": closest[2]}}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(common.result_path("tag", "exemplar_overlap")))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    from tagql.tag.exemplars import exemplar_index

    index = exemplar_index()
    summary = measure(index, question_sets())
    print(f"{len(index.exemplars)} exemplars; nearest-exemplar cosine per question set")
    print(f"{'set':<20}{'n':>5}{'median':>9}{'mean':>8}{f'share >= {CLOSE}':>15}")
    for name, s in summary.items():
        print(f"{name:<20}{s['n']:>5}{s['median']:>9.3f}{s['mean']:>8.3f}{s['share_close']:>15.2f}")
    run.save(args.out, {"exemplars": len(index.exemplars), "close": CLOSE, "summary": summary})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
