"""How far perfect plans could take the TAG dev set with this model's world knowledge (issue 5).

The dev set's reference pipelines (`bench/tag_devset.py`) are the plans a perfect planner would write:
exact SQL plus a few knowledge labels (which states border Canada, which elements are halogens, ...).
`bench/tag_judge.py` records, for 8 of those labels, the set of values the local model's filter judge
says yes to. Here each of those label sets is replaced by the judge's set and every reference pipeline
is run again: a question whose answer changes would be answered wrongly even by a perfect plan. The
labels the judge was not measured on (numeric facts, month order, ...) keep their hand values, so the
figure is an upper bound, optimistic for the rest.

    python bench/tag_oracle_bound.py [--judge bench/results/tag_judge_s8.json]

No LM call: it reads the judge's recorded answers. Prints a table and writes
bench/results/tag_oracle_bound.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def global_names(code) -> set[str]:
    """Names a function's code reads, including its comprehensions' and lambdas' code."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= global_names(const)
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--judge", default=str(REPO / "bench" / "results" / "tag_judge_s8.json"))
    ap.add_argument("--variant", default="statement")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "tag_oracle_bound.json"))
    args = ap.parse_args()

    judge = load("tag_judge")
    devset = judge.devset
    said = {r["criterion"]: set(r["yes"]) for r in json.loads(Path(args.judge).read_text())["records"]
            if r["variant"] == args.variant}
    gold = [(qtype, kind, fn.__name__, fn()) for _db, _q, qtype, kind, fn in devset.QUESTIONS]

    swapped: dict[str, dict] = {}
    for _db, _sql, _col, instruction, truth in judge.CRITERIA:
        if instruction not in said:
            continue
        name = next(n for n, v in vars(devset).items() if v is truth)
        swapped[name] = {"criterion": instruction, "exact": said[instruction] == set(truth)}
        setattr(devset, name, said[instruction])

    rows = []
    for (_db, question, qtype, kind, fn), (_, _, _, answer) in zip(devset.QUESTIONS, gold):
        uses = sorted(global_names(fn.__code__) & set(swapped))
        got = fn() if uses else answer
        rows.append({"question": question, "type": qtype, "kind": kind, "labels": uses, "right": got == answer})

    table = Counter()
    for r in rows:
        table[(r["type"], "n")] += 1
        table[(r["type"], "dep")] += bool(r["labels"])
        table[(r["type"], "right")] += r["right"]
    types = ["Match", "Comparison", "Ranking", "Aggregation"]
    print(f"{'type':<12}{'questions':>10}{'use a judged label':>20}{'still right':>13}{'upper bound':>13}")
    summary = {}
    for t in types:
        n, dep, right = table[(t, "n")], table[(t, "dep")], table[(t, "right")]
        summary[t] = {"questions": n, "use_judged_label": dep, "right": right, "upper_bound": round(right / n, 3)}
        print(f"{t:<12}{n:>10}{dep:>20}{right:>13}{right / n:>13.2f}")
    em = [r for r in rows if r["type"] != "Aggregation"]  # tag_accuracy's overall exact match: M, C, R
    summary["overall_em"] = round(sum(r["right"] for r in em) / len(em), 3)
    replaced = ", ".join(f"{n} ({'exact' if s['exact'] else 'differs'})" for n, s in swapped.items())
    print(f"overall exact match (Match, Comparison, Ranking): upper bound {summary['overall_em']:.2f}; "
          f"labels replaced: {replaced}")
    Path(args.out).write_text(json.dumps({"judge": args.judge, "variant": args.variant, "labels": swapped,
                                          "summary": summary, "questions": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
