"""How far perfect plans could take the TAG dev set with this model's world knowledge (issue 5).

The dev set's reference pipelines (`bench/tag/devset.py`) are the plans a perfect planner would write:
exact SQL plus a few knowledge labels (which states border Canada, which elements are halogens, ...).
`bench/tag/judge.py` records, for 8 of those labels, the set of values the local model's filter judge
says yes to. Here each of those label sets is replaced by the judge's set and every reference pipeline
is run again: a question whose answer changes would be answered wrongly even by a perfect plan. The
labels the judge was not measured on (numeric facts, month order, ...) keep their hand values, so the
figure is an upper bound, optimistic for the rest.

    python -m bench.tag.oracle_bound [--judge bench/results/archive/tag_judge_s8.json]

No LM call: it reads the judge's recorded answers. Prints a table and writes
bench/results/tag/oracle_bound.json.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from bench import common


def global_names(code) -> set[str]:
    """Names a function's code reads, including its comprehensions' and lambdas' code."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= global_names(const)
    return names


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--judge", default=str(common.RESULTS / "archive" / "tag_judge_s8.json"),
                    help="a bench.tag.judge result with the variant below (the default is the session-8 run)")
    ap.add_argument("--variant", default="statement")
    ap.add_argument("--out", default=str(common.result_path("tag", "oracle_bound")))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)

    # the judge's sets replace the hand labels in this process's copy of the dev set (run it as its own process)
    from bench.tag import devset, judge

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
    judge_file = Path(args.judge).resolve()
    if judge_file.is_relative_to(common.REPO):
        judge_file = judge_file.relative_to(common.REPO)
    run.save(args.out, {"judge": str(judge_file), "variant": args.variant, "labels": swapped, "summary": summary,
                        "questions": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
