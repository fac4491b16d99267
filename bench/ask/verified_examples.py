"""Verified examples in the SQL prompt (issue 33): execution accuracy on held-out BIRD questions with and
without the train questions' gold question -> SQL pairs as verified examples, real local model.

The fixed split ``bench/ask/data/bird_ask_split.json`` (student_club, superhero, toxicology; 50 / 25 / 25
train / dev / test per database) gives the examples: every train question of a database with its gold SQL
is a verified example of that database (what the service stores from feedback). Each dev and test question
is asked twice, ``none`` (the plain prompt) and ``examples`` (the ``--k`` most similar examples of its
database, BM25 over their questions: ``tagql.text2sql.context.ExampleIndex``, as ``Session.use_examples``
does). No evidence / domain statements in either, SQL only (no answer sentences); EX compares the rows as
sets (BIRD's execution match).

A full run is 2 x 217 questions; on a shared 2-core host that is hours, so ``--per-db N`` asks a fixed
subset: the first N questions of each database and split after a shuffle with seed 33 (default 5: 15 dev +
15 test questions per condition).

    nice -n 10 python -m bench.ask.verified_examples --per-db 5     # prints a table, writes bench/results/ask/verified_examples.json
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

from bench import common
from bench.ask.bird import rows_match

DATA = common.DATA
SPLIT = common.BENCH / "ask" / "data" / "bird_ask_split.json"
SEED = 33


def subset(split: dict[str, Any], questions: dict[int, dict], name: str, per_db: int) -> list[dict]:
    """The first ``per_db`` questions of each database in ``split[name]`` after a seeded shuffle (all: 0)."""
    chosen = []
    for db in split["dbs"]:
        ids = [i for i in split[name] if questions[i]["db_id"] == db]
        random.Random(f"{SEED}/{name}/{db}").shuffle(ids)
        chosen += [questions[i] for i in (ids[:per_db] if per_db else ids)]
    return chosen


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-db", type=int, default=5, help="questions per database and split (0 = all)")
    ap.add_argument("--splits", default="dev,test")
    ap.add_argument("--k", type=int, default=3, help="verified examples per question")
    ap.add_argument("--out", default=str(common.result_path("ask", "verified_examples")))
    ap.add_argument("--from-partial", action="store_true",
                    help="report the questions a stopped run asked under both conditions (from <out>.partial.jsonl) "
                         "and exit; a run started again resumes from that file")
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)

    from rich.console import Console
    from rich.progress import Progress

    from tagql.config import load_settings
    from tagql.db import open_database
    from tagql.errors import TagqlError
    from tagql.llm import make_llm
    from tagql.pipeline import TagQL
    from tagql.text2sql.context import ExampleIndex

    split = json.loads(SPLIT.read_text())
    questions = {q["question_id"]: q for q in json.loads((DATA / "bird" / "dev.json").read_text())}
    examples = {db: ExampleIndex([(questions[i]["question"], questions[i]["SQL"]) for i in split["train"]
                                  if questions[i]["db_id"] == db]) for db in split["dbs"]}
    asked = {name: subset(split, questions, name, args.per_db) for name in args.splits.split(",")}
    conditions = ["none", "examples"]
    settings = load_settings()
    console = Console()
    records: list[dict] = []
    partial_path = Path(args.out + ".partial.jsonl")
    if args.from_partial:
        records = list(common.read_partial(partial_path, lambda r: (r["split"], r["condition"], r["question_id"]))
                       .values())
        return report(run, args, settings.llm.model, split["dbs"], asked, examples, records, conditions, console)
    llm = make_llm(settings)
    partial_path.parent.mkdir(parents=True, exist_ok=True)
    total = sum(len(v) for v in asked.values()) * len(conditions)
    done = {(r["split"], r["condition"], r["question_id"]): r
            for r in common.read_partial(partial_path, lambda r: (r["split"], r["condition"], r["question_id"])).values()}
    with Progress(console=console) as progress, partial_path.open("a") as partial:
        task = progress.add_task("asking", total=total)
        for db_id in split["dbs"]:  # one database at a time: its schema prompt is evaluated once
            path = DATA / "bird" / "dev_databases" / db_id / f"{db_id}.sqlite"
            db, gold_db = open_database(path, settings=settings.db), open_database(path)
            pipelines = {cond: TagQL(db, llm, settings=settings, example_k=args.k,
                                     examples=examples[db_id] if cond == "examples" else None) for cond in conditions}
            for name, qs in asked.items():
                # both conditions of a question one after the other (the examples sit after the cached
                # system prefix), so a run stopped early still pairs them
                for q, cond in ((q, c) for q in qs if q["db_id"] == db_id for c in conditions):
                    if (name, cond, q["question_id"]) in done:
                        records.append(done[(name, cond, q["question_id"])])
                        progress.update(task, advance=1)
                        continue
                    pipeline = pipelines[cond]
                    shown = pipeline.examples.similar(q["question"], pipeline.example_k) if pipeline.examples else []
                    rec: dict[str, Any] = {"split": name, "db": db_id, "condition": cond,
                                           "question_id": q["question_id"], "question": q["question"],
                                           "examples": [e.question for e in shown]}
                    t0 = time.perf_counter()
                    try:
                        outcome = pipeline.synthesizer.run(q["question"], examples=shown)
                        gold = gold_db.execute(q["SQL"]).rows
                        rec.update(sql=outcome.sql, correct=rows_match(outcome.result.rows, gold),
                                   retries=len(outcome.attempts) - 1)
                    except TagqlError as exc:
                        rec.update(error=exc.one_line(), correct=False)
                    rec["wall_s"] = round(time.perf_counter() - t0, 2)
                    records.append(rec)
                    partial.write(json.dumps(rec, default=str) + "\n")
                    partial.flush()
                    progress.update(task, advance=1, description=f"{db_id} {name} {cond}")
    report(run, args, settings.llm.model, split["dbs"], asked, examples, records, conditions, console)
    partial_path.unlink(missing_ok=True)


def report(run: Any, args: Any, model: str, dbs: list[str], asked: dict, examples: dict, records: list[dict],
           conditions: list[str], console: Any) -> None:
    """The table and the result file, over the questions asked under both conditions."""
    from rich.table import Table

    summary: dict[str, Any] = {}
    table = Table(title=f"BIRD EX with verified examples (train pairs, k={args.k}; {model})")
    for col in ("split", "db", "n", "none", "examples", "gained", "lost"):
        table.add_column(col, justify="right")
    for name in asked:
        for db_id in [*dbs, "all"]:
            rs = {c: {r["question_id"]: r["correct"] for r in records if r["split"] == name and r["condition"] == c
                      and db_id in ("all", r["db"])} for c in conditions}
            paired = set(rs["none"]) & set(rs["examples"])
            rs = {c: {i: v for i, v in rs[c].items() if i in paired} for c in conditions}
            n = len(paired)
            if not n:
                continue
            s = {"n": n, **{c: round(sum(rs[c].values()) / n, 3) for c in conditions},
                 "gained": sum(rs["examples"][i] and not rs["none"][i] for i in rs["none"]),
                 "lost": sum(rs["none"][i] and not rs["examples"][i] for i in rs["none"])}
            summary[f"{name}/{db_id}"] = s
            table.add_row(name, db_id, str(n), f"{s['none']:.3f}", f"{s['examples']:.3f}", str(s["gained"]),
                          str(s["lost"]))
    console.print(table)
    run.save(args.out, {"model": model, "k": args.k, "per_db": args.per_db or None, "partial": args.from_partial,
                        "subset": f"first {args.per_db} per database and split after random.Random('{SEED}/split/db')",
                        "examples_per_db": {db: len(ix) for db, ix in examples.items()},
                        "summary": summary, "records": records})
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
