"""Values from the data: BIRD EX of text-to-SQL with and without the stored values a question names in the SQL
prompt (``answer.value_hints``, tagql.text2sql.values), side by side, on the fixed split of the 432 BIRD
questions over student_club, superhero and toxicology (bench/ask/data/bird_ask_split.json).

Two parts:

- ``--literals`` (no model, seconds): per database the value index's build time and size; per split the
  recall and precision of the hints against the string constants of the gold SQL that the database stores
  (what the thresholds were tuned on: train only), hints per question and lookup latency (ms/question).
- the model part: per question and condition (``none``, ``evidence``) the SQL stage runs twice, without
  and with the hints (same session, same statements); a question with no hint has the same prompt in both
  arms, so it runs once and counts for both. Resumable and chunked: each invocation asks at most
  ``--chunk`` new (question, condition) pairs and appends them to ``<out>.partial.jsonl``; run it under the
  model lock until it reports nothing left, then ``--summarise``.

    python -m bench.ask.values --literals --splits train,dev,test
    flock /work/wt/llm.lock python -m bench.ask.values --splits dev --chunk 60     # repeat until done
    python -m bench.ask.values --splits dev --summarise
    flock /work/wt/llm.lock python -m bench.ask.values --splits train --arms with --out bench/results/ask/values_train.json

EX is BIRD's execution match (row sets equal, as bench/ask/bird.py); latency is the SQL stage's seconds
(LLM + execution, answer generation is not run) per question. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import sqlglot
from rich.console import Console
from rich.table import Table
from sqlglot import exp

from tagql.config import load_settings
from tagql.db import open_database
from tagql.db.values import ValueIndex, value_index
from tagql.errors import TagqlError
from tagql.knowledge import ScoredStatement, StaticStatements
from tagql.pipeline import TagQL
from tagql.text2sql.values import match_values

from bench import common
from bench.ask.bird import rows_match
from bench.ask.bird_split import load_split

DATA = common.DATA
DBS = ["student_club", "superhero", "toxicology"]
ARMS = ("without", "with")


def db_path(name: str) -> Path:
    return DATA / "bird" / "dev_databases" / name / f"{name}.sqlite"


def chosen_questions(splits: list[str]) -> list[dict]:
    part_of = load_split()
    qs = json.loads((DATA / "bird" / "dev.json").read_text())
    return [dict(q, split=part_of[q["question_id"]]) for q in qs
            if q["db_id"] in DBS and part_of.get(q["question_id"]) in splits]


def gold_literals(sql: str, index: ValueIndex) -> set[str]:
    """String constants of the gold SQL that the database stores (what a hint can supply)."""
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except sqlglot.errors.ParseError:
        return set()
    return {lit.this for lit in tree.find_all(exp.Literal) if lit.is_string and index.exact(lit.this)}


def literals(args, console: Console, run: common.Run) -> None:
    indexes, build = {}, {}
    for name in DBS:
        db = open_database(db_path(name))
        db.schema  # noqa: B018 (introspection is not part of the build time)
        t0 = time.perf_counter()
        indexes[name] = ValueIndex.build(db)
        st = indexes[name].stats()
        size = len(json.dumps(indexes[name].to_json(), ensure_ascii=False).encode())
        build[name] = {**st, "build_s": round(time.perf_counter() - t0, 3), "json_bytes": size}
    table = Table(title="value index per database (built from scratch)")
    for col in ("db", "text columns", "skipped", "capped", "values", "distinct", "trigrams", "build s", "JSON KB"):
        table.add_column(col, justify="right")
    for name, b in build.items():
        table.add_row(name, str(b["columns"]), str(b["skipped"]), str(b["capped"]), str(b["values"]),
                      str(b["distinct"]), str(b["trigrams"]), f"{b['build_s']:.2f}", f"{b['json_bytes'] / 1024:.0f}")
    console.print(table)
    summary = {}
    table = Table(title="hints vs the gold SQL's stored constants (train: what the thresholds were tuned on)")
    for col in ("split", "n", "with hints", "gold constants", "recall", "hints", "precision", "lookup p50 ms",
                "p95 ms", "max ms"):
        table.add_column(col, justify="right")
    for split in args.splits.split(","):
        gold_n = found = hints = good = with_hints = 0
        lat = []
        qs = chosen_questions([split])
        for q in qs:
            ix = indexes[q["db_id"]]
            gold = gold_literals(q["SQL"], ix)
            t0 = time.perf_counter()
            ms = match_values(q["question"], ix)
            lat.append(1000 * (time.perf_counter() - t0))
            vals = {m.value for m in ms}
            gold_n += len(gold)
            found += len(gold & vals)
            hints += len(ms)
            good += sum(m.value in gold for m in ms)
            with_hints += bool(ms)
        s = {"n": len(qs), "with_hints": with_hints, "gold_constants": gold_n,
             "recall": round(found / max(gold_n, 1), 3), "hints": hints, "precision": round(good / max(hints, 1), 3),
             "lookup_ms_p50": round(common.pct(lat, 0.5), 2), "lookup_ms_p95": round(common.pct(lat, 0.95), 2),
             "lookup_ms_max": round(max(lat), 2)}
        summary[split] = s
        table.add_row(split, str(s["n"]), str(with_hints), str(gold_n), f"{s['recall']:.3f}", str(hints),
                      f"{s['precision']:.3f}", f"{s['lookup_ms_p50']:.2f}", f"{s['lookup_ms_p95']:.2f}",
                      f"{s['lookup_ms_max']:.1f}")
    console.print(table)
    out = args.out.replace(".json", "_literals.json")
    run.save(out, {"index": build, "literals": summary})
    console.print(f"wrote {out}")


def ask_chunk(args, console: Console) -> int:
    """Ask up to ``args.chunk`` new (question, condition) pairs; returns how many are left after."""
    from tagql.llm import make_llm

    partial = Path(args.out + ".partial.jsonl")
    done = common.read_partial(partial, lambda r: (r["question_id"], r["condition"], r["arm"]))
    conditions = args.conditions.split(",")
    splits = args.splits.split(",")
    last = args.arms.split(",")[-1]
    todo = [(q, c) for q in chosen_questions(splits) for c in conditions
            if (q["question_id"], c, last) not in done]
    # a split at a time (dev before test), each in a fixed shuffled order: a stopped run is a seeded subset
    todo.sort(key=lambda qc: (splits.index(qc[0]["split"]), random.Random(f"36/{qc[0]['question_id']}").random()))
    if not todo:
        return 0
    settings = load_settings()
    llm = make_llm(settings)
    hinted = settings.model_copy(update={"answer": settings.answer.model_copy(update={"value_hints": True})})
    dbs: dict[str, tuple] = {}
    with partial.open("a") as out:
        for q, cond in todo[: args.chunk]:
            name = q["db_id"]
            if name not in dbs:
                db = open_database(db_path(name), settings=settings.db)
                t0 = time.perf_counter()
                value_index(db, settings.cache_dir)
                dbs[name] = (db, open_database(db_path(name)), round(time.perf_counter() - t0, 3))
            db, gold_db, _ = dbs[name]
            evidence = (q.get("evidence") or "").strip()
            knowledge = StaticStatements([ScoredStatement(evidence, "", 1.0)]) if cond == "evidence" and evidence else None
            session = TagQL(db, llm, settings=hinted, knowledge=knowledge)
            statements = session.statements_for(q["question"])
            t0 = time.perf_counter()
            values = session.values_for(q["question"])
            lookup_ms = round(1000 * (time.perf_counter() - t0), 2)
            gold = gold_db.execute(q["SQL"], timeout_s=60, row_cap=1_000_000).rows
            base = {"question_id": q["question_id"], "db": name, "split": q["split"], "condition": cond,
                    "question": q["question"], "hints": [m.render() for m in values], "lookup_ms": lookup_ms}
            rec_without = None
            for arm in args.arms.split(","):
                if arm == "with" and not values and rec_without is not None:
                    rec = dict(rec_without, arm="with", same_prompt=True)
                else:
                    rec = dict(base, arm=arm)
                    try:
                        o = session.synthesizer.run(q["question"], statements, values=values if arm == "with" else ())
                        rec.update(sql=o.sql, seconds=round(o.llm_seconds + o.exec_seconds, 3),
                                   correct=rows_match([tuple(r) for r in o.result.rows], gold)
                                   and not o.result.truncated,
                                   repairs=[n for n in o.result.notes if n.startswith("SQL repaired")])
                    except TagqlError as exc:
                        rec.update(correct=False, error=exc.one_line(),
                                   seconds=None)
                    if arm == "without":
                        rec_without = rec
                out.write(json.dumps(rec, default=str) + "\n")
                out.flush()
    return max(0, len(todo) - args.chunk)


def summarise(args, console: Console, run: common.Run) -> None:
    partial = Path(args.out + ".partial.jsonl")
    records = list(common.read_partial(partial, lambda r: (r["question_id"], r["condition"], r["arm"])).values())
    summary = {}
    table = Table(title="BIRD EX without / with value hints (SQL stage, local model)")
    for col in ("split", "condition", "n", "with hints", "EX without", "EX with", "gained", "lost",
                "errors w/o", "errors with", "p50 s w/o", "p50 s with", "lookup ms p50"):
        table.add_column(col, justify="right")
    for split in args.splits.split(","):
        for cond in args.conditions.split(","):
            by = {arm: {r["question_id"]: r for r in records
                        if r["split"] == split and r["condition"] == cond and r["arm"] == arm} for arm in ARMS}
            paired = sorted(set(by["without"]) & set(by["with"]))
            alone = not paired  # a `--arms with` run: the default configuration alone, no comparison
            ids = paired or sorted(by["with"])
            if not ids:
                continue
            h = [by["with"][i] for i in ids]
            s = {"n": len(ids), "with_hints": sum(bool(r["hints"]) for r in h),
                 "ex_with": round(sum(r["correct"] for r in h) / len(ids), 3),
                 "errors_with": sum("error" in r for r in h),
                 "p50_s_with": common.pct([r["seconds"] for r in h if r.get("seconds") is not None], 0.5),
                 "lookup_ms_p50": common.pct([r["lookup_ms"] for r in h], 0.5)}
            w = [] if alone else [by["without"][i] for i in ids]
            if not alone:
                s.update({"ex_without": round(sum(r["correct"] for r in w) / len(ids), 3),
                          "gained": sum(b["correct"] and not a["correct"] for a, b in zip(w, h)),
                          "lost": sum(a["correct"] and not b["correct"] for a, b in zip(w, h)),
                          "errors_without": sum("error" in r for r in w),
                          "p50_s_without": common.pct([r["seconds"] for r in w if r.get("seconds") is not None], 0.5)})
            if split != "test":  # never list test questions
                s["changed_ids"] = [i for i, a, b in zip(ids, w, h) if a["correct"] != b["correct"]]
            summary[f"{split}/{cond}"] = s
            def cell(key: str, fmt: str = "{}") -> str:
                return fmt.format(s[key]) if key in s else "-"

            table.add_row(split, cond, str(s["n"]), str(s["with_hints"]), cell("ex_without", "{:.3f}"),
                          f"{s['ex_with']:.3f}", cell("gained"), cell("lost"), cell("errors_without"),
                          str(s["errors_with"]), cell("p50_s_without", "{:.2f}"), f"{s['p50_s_with']:.2f}",
                          f"{s['lookup_ms_p50']:.2f}")
    console.print(table)
    run.save(args.out, {"splits": args.splits, "conditions": args.conditions, "summary": summary,
                        "records": records})
    console.print(f"wrote {args.out}")


def chunked_run_parser(doc: str | None, out: str) -> argparse.ArgumentParser:
    """The options of a resumable, chunked run over the fixed BIRD split (this bench, bench/ask/repeats.py)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--splits", default="dev", help="parts of the fixed split, e.g. dev or test or dev,test")
    ap.add_argument("--conditions", default="none,evidence")
    ap.add_argument("--chunk", type=int, default=60, help="(question, condition) pairs per invocation")
    ap.add_argument("--summarise", action="store_true", help="summarise the records asked so far and exit")
    ap.add_argument("--out", default=str(common.result_path("ask", out)))
    return ap


def run_chunked(args: argparse.Namespace, run: common.Run, ask: Callable[[argparse.Namespace, Console], int],
                summarise_records: Callable[[argparse.Namespace, Console, common.Run], None]) -> None:
    """What a chunked run does when invoked (this bench, bench/ask/repeats.py): summarise the records so far,
    or ask the next chunk and say how many pairs are left."""
    console = Console(width=150)
    if args.summarise:
        return summarise_records(args, console, run)
    left = ask(args, console)
    console.print(f"{left} (question, condition) pairs left" if left else "all asked: run again with --summarise")


def main(argv: list[str] | None = None) -> None:
    ap = chunked_run_parser(__doc__, "values")
    ap.add_argument("--literals", action="store_true", help="index size/build time and hint recall/precision (no model)")
    ap.add_argument("--arms", default="without,with",
                    help="'with' alone asks only the default configuration (hints on): EX, not the comparison")
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    if args.literals:
        return literals(args, Console(width=150), run)
    run_chunked(args, run, ask_chunk, summarise)


if __name__ == "__main__":
    main()
