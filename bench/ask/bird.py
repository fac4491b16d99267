"""Execution accuracy, latency and memory of `tagql ask` on BIRD dev (student_club, superhero, toxicology).

Conditions side by side in one run: `none` (no domain knowledge) and `evidence` (the dataset's
per-question evidence given to the prompt as domain statements). Accuracy is BIRD's execution match:
the set of rows of the predicted SQL equals that of the gold SQL from bird/dev.json (June-2024 revision).

    python -m bench.ask.bird --limit 25            # first 25 questions of each database (fixed subset)
    python -m bench.ask.bird                       # all 432 questions
    python -m bench.ask.bird --splits dev,test --out bench/results/ask/bird_heldout.json   # the held-out parts
    python -m bench.ask.bird --limit 20 --models qwen2.5-coder-1.5b,qwen2.5-coder-1.5b-q4_0   # model variants

Prints a table and writes bench/results/ask/bird.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from tagql.config import load_settings
from tagql.db import open_database
from tagql.errors import TagqlError
from tagql.knowledge import ScoredStatement, StaticStatements
from tagql.llm import make_llm
from tagql.llm.local import _close_all
from tagql.pipeline import TagQL

from bench import common

DATA = common.DATA
DBS = ["student_club", "superhero", "toxicology"]


def rows_match(pred: list, gold: list) -> bool:
    return {tuple(r) for r in pred} == {tuple(r) for r in gold}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=0, help="first N questions per database (0 = all)")
    ap.add_argument("--splits", default="", help="only these parts of the fixed split, e.g. dev,test (default: all)")
    ap.add_argument("--dbs", default=",".join(DBS))
    ap.add_argument("--conditions", default="none,evidence")
    ap.add_argument("--models", default="", help="comma-separated model names to compare (default: the configured one)")
    ap.add_argument("--out", default=str(common.result_path("ask", "bird")))
    ap.add_argument("--from-partial", default="", help="summarise a stopped run's .partial.jsonl and exit")
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    if args.from_partial:
        return from_partial(args.from_partial)

    settings = load_settings()
    # "cold first question" measures evaluating the schema, as in every earlier run; with the on-disk
    # prefix states of an earlier run it would measure a file read (bench/ask/cold_start.py compares both)
    settings.llm.persist_prefixes = False
    questions = json.loads((DATA / "bird" / "dev.json").read_text())
    dbs = args.dbs.split(",")
    conditions = args.conditions.split(",")
    chosen = {db: [q for q in questions if q["db_id"] == db] for db in dbs}
    if args.splits:
        from bench.ask.bird_split import load_split

        part_of, wanted = load_split(), set(args.splits.split(","))
        chosen = {db: [q for q in qs if part_of.get(q["question_id"]) in wanted] for db, qs in chosen.items()}
    if args.limit:
        chosen = {db: qs[: args.limit] for db, qs in chosen.items()}
    models = args.models.split(",") if args.models else [settings.llm.model]
    total = sum(len(v) for v in chosen.values()) * len(conditions) * len(models)
    console = Console()
    records = []
    first_question_s: dict[str, float] = {}
    load_s: dict[str, float] = {}
    host_speed: list[dict] = []  # decode_ms_per_token probes taken during the run
    with Progress(console=console) as progress:
        task = progress.add_task("asking", total=total)
        for model in models:
            settings.llm.model = model
            t0 = time.perf_counter()
            llm = make_llm(settings)
            load_s[model] = round(time.perf_counter() - t0, 2)
            with open(args.out + ".partial.jsonl", "a") as partial:
                records += ask_all(llm, model, settings, dbs, conditions, chosen, first_question_s, progress, task,
                                   partial, host_speed)
            _close_all()  # free this model before loading the next
    peak_rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6

    summary, table = summarize(records, models, conditions, dbs)
    console.print(table)
    console.print(
        "model load " + ", ".join(f"{k} {v:.1f} s" for k, v in load_s.items()) + "; cold first question: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in first_question_s.items())
        + f"; peak RSS {peak_rss_gb:.2f} GB (max over the models run)"
    )
    if host_speed:
        console.print("host speed (plain greedy decoding, ms/token) before each database/condition: "
                      + ", ".join(f"{h['before']} {h['decode_ms_per_token']}" for h in host_speed))
    out = {
        "models": models, "limit_per_db": args.limit or None, "splits": args.splits or "all", "subset": "first N questions per db in bird/dev.json order",
        "model_load_s": load_s, "cold_first_question_s": first_question_s, "peak_rss_gb": round(peak_rss_gb, 3),
        "host_speed": host_speed,
        "summary": summary, "records": records,
    }
    run.save(args.out, out)
    console.print(f"wrote {args.out}")


def summarize(records: list[dict], models: list[str], conditions: list[str], dbs: list[str],
              part_of: dict[int, str] | None = None) -> tuple[dict, Table]:
    """EX, errors and warm latency per model x condition x database, over all databases, and per part
    of the fixed train / dev / test split (``split:test`` rows: the figure nothing was tuned on)."""
    from bench.ask.bird_split import load_split

    part_of = load_split() if part_of is None else part_of
    summary = {}
    table = Table(title="tagql ask on BIRD dev (execution accuracy, local model)")
    for col in ("model", "condition", "db", "n", "EX", "errors", "retried", "repaired", "warm p50 s", "warm p95 s"):
        table.add_column(col, justify="right")
    groups = [*dbs, "all", "split:train", "split:dev", "split:test"]

    def member(r: dict, group: str) -> bool:
        if group == "all":
            return True
        if group.startswith("split:"):
            return part_of.get(r["question_id"]) == group.removeprefix("split:")
        return r["db"] == group

    for model in models:
        for cond in conditions:
            for db_id in groups:
                rs = [r for r in records if r["model"] == model and r["condition"] == cond and member(r, db_id)]
                if not rs:
                    continue
                warm = [r["wall_s"] for r in rs if not r.get("cold")]
                s = {
                    "n": len(rs),
                    "ex": sum(r["correct"] for r in rs) / len(rs),
                    "errors": sum("error" in r for r in rs),
                    "retried": sum(r.get("retries", 0) > 0 for r in rs),
                    "repaired": sum(bool(r.get("repairs")) for r in rs),
                    "warm_p50_s": common.pct(warm, 0.5),
                    "warm_p95_s": common.pct(warm, 0.95),
                }
                summary[f"{model}/{cond}/{db_id}"] = s
                table.add_row(model, cond, db_id, str(s["n"]), f"{s['ex']:.3f}", str(s["errors"]),
                              str(s["retried"]), str(s["repaired"]), f"{s['warm_p50_s']:.2f}", f"{s['warm_p95_s']:.2f}")
    return summary, table


def from_partial(path: str) -> None:
    """Summarise the records a stopped run left in its .partial.jsonl (only what was asked)."""
    records = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    models = list(dict.fromkeys(r["model"] for r in records))
    conditions = list(dict.fromkeys(r["condition"] for r in records))
    dbs = list(dict.fromkeys(r["db"] for r in records))
    summary, table = summarize(records, models, conditions, dbs)
    Console().print(table)
    out = path.replace(".partial.jsonl", "")
    Path(out).write_text(json.dumps({"models": models, "partial": True, "subset": "the records of a stopped run",
                                     "summary": summary, "records": records}, indent=1, default=str))
    Console().print(f"wrote {out}")


def decode_ms_per_token(llm) -> float | None:
    """This host's speed right now: ms per token of plain greedy decoding (a long minus a short reply
    to the same prompt, so prompt processing cancels out). The machine's speed drifts -- the same
    calls ran 1.4x faster half an hour apart -- so each run records it next to its latencies."""
    if not hasattr(llm, "lookup_decoding"):
        return None  # not the local backend
    from tagql.llm.base import user

    saved, llm.lookup_decoding = llm.lookup_decoding, False
    try:
        msgs = [user("Count from 1 to 200, separated by commas.")]
        short, long = llm.complete(msgs, max_tokens=8), llm.complete(msgs, max_tokens=72)
    finally:
        llm.lookup_decoding = saved
    n = long.completion_tokens - short.completion_tokens
    return round(1000 * (long.seconds - short.seconds) / n, 1) if n > 0 else None


def ask_all(llm, model, settings, dbs, conditions, chosen, first_question_s, progress, task,
            partial=None, host_speed: list[dict] | None = None) -> list[dict]:
    """Ask every chosen question under every condition with one model; one record per question.
    Host-speed probes taken before each database/condition are appended to ``host_speed``."""
    host_speed = host_speed if host_speed is not None else []
    records = []
    for db_id in dbs:
        path = DATA / "bird" / "dev_databases" / db_id / f"{db_id}.sqlite"
        db = open_database(path, settings=settings.db)
        gold_db = open_database(path)
        for cond in conditions:
            if (ms := decode_ms_per_token(llm)) is not None:
                host_speed.append({"before": f"{db_id}/{cond}", "decode_ms_per_token": ms})
            for q in chosen[db_id]:
                evidence = (q.get("evidence") or "").strip()
                knowledge = None
                if cond == "evidence" and evidence:
                    knowledge = StaticStatements([ScoredStatement(evidence, "", 1.0)])
                session = TagQL(db, llm, settings=settings, knowledge=knowledge)
                rec = {"model": model, "db": db_id, "condition": cond, "question_id": q["question_id"],
                       "question": q["question"]}
                start = time.perf_counter()
                try:
                    answer = session.ask(q["question"])
                    rec.update(sql=answer.sql, answer=answer.answer, timings=answer.timings, tokens=answer.tokens,
                               retries=len(answer.attempts) - 1,
                               repairs=[n for n in answer.notes if n.startswith("SQL repaired")])
                    try:
                        gold = gold_db.execute(q["SQL"], timeout_s=60, row_cap=1_000_000).rows
                        rec["correct"] = rows_match([tuple(r) for r in answer.rows], gold) and not answer.truncated
                    except TagqlError as exc:
                        rec.update(correct=False, gold_error=exc.one_line())
                except TagqlError as exc:
                    rec.update(correct=False, error=exc.one_line(),
                               attempts=[vars(a) for a in getattr(exc, "attempts", [])])
                rec["wall_s"] = round(time.perf_counter() - start, 3)
                if f"{model}/{db_id}" not in first_question_s:
                    first_question_s[f"{model}/{db_id}"] = rec["wall_s"]
                    rec["cold"] = True
                records.append(rec)
                if partial is not None:  # a long run that is stopped early still leaves its records
                    partial.write(json.dumps(rec, default=str) + "\n")
                    partial.flush()
                progress.advance(task)
    return records


if __name__ == "__main__":
    main()
