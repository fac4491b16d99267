"""Questions across databases (issue 37 item 4): ``--method cross`` vs single-database routing.

    python -m bench.ask.cross --verify                      # every gold SQL runs and gives its stored answer
    python -m bench.ask.cross --split dev [--limit N --offset M] [--methods cross,sql]

The set (``bench/ask/data/cross_questions.json``): 36 questions, each needing two Spider databases (world_1
and one of formula_1, singer, chinook_1, car_1, swimming, flight_4, sports_competition, party_host,
film_rank, climbing, perpetrator, hr_1), with a gold answer computed by hand-written SQL over both
databases ATTACHed read-only to one SQLite connection (name mappings such as "Spanish" -> "Spain" written
out in the SQL). Split once: ``random.Random(37)`` shuffle, 18 dev / 18 test; prompts were tuned on dev only.

The collection ``cross-bench``: those 13 databases plus 11 distractors from Spider (with country,
people or sports tables), built once with its ``ours`` router. ``sql`` is single-database routing: the
router's top database, SQL on it (``Session.ask(method="sql", force=True)``): one database cannot hold
the answer, so its exact match is 0 by construction unless a database happens to hold both halves.

Exact match: the gold values (one column) equal the values of some column of the answer's rows, as sets
(numbers within 1e-6 relative, text case- and blank-insensitive); a one-value gold also matches a one-row
answer that holds it. Real-model runs are resumable (``<out>.partial.jsonl``): run in chunks under the
lock, e.g. ``flock /work/wt/llm.lock nice -n 10 python -m bench.ask.cross --split dev --limit 6``.
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench import common

DATA = common.DATA
SET = Path(__file__).resolve().parent / "data" / "cross_questions.json"
OUT = common.result_path("ask", "cross")
SPIDER_DBS = DATA / "spider" / "database"
NEEDED = ["formula_1", "world_1", "singer", "chinook_1", "car_1", "swimming", "flight_4", "sports_competition",
          "party_host", "film_rank", "climbing", "perpetrator", "hr_1"]
DISTRACTORS = ["concert_singer", "orchestra", "soccer_2", "poker_player", "wine_1", "museum_visit", "pets_1",
               "gymnast", "wrestler", "match_season", "roller_coaster"]
COLLECTION = "cross-bench"


def questions(split: str | None = None) -> list[dict[str, Any]]:
    items = json.loads(SET.read_text())["questions"]
    return [q for q in items if split in (None, "all", q["split"])]


def gold_rows(item: dict[str, Any], root: Path = SPIDER_DBS) -> list[Any]:
    """Run the item's gold SQL with its databases ATTACHed read-only; the first column's values."""
    con = sqlite3.connect(":memory:")
    try:
        for db in item["databases"]:
            con.execute(f"ATTACH ? AS {db}", (f"file:{root / db / (db + '.sqlite')}?mode=ro",))
        return [r[0] for r in con.execute(item["gold_sql"]).fetchall()]
    finally:
        con.close()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-9)
    try:  # a number written as text ("56") still equals 56
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-9)
    except (TypeError, ValueError):
        return " ".join(str(a).split()).casefold() == " ".join(str(b).split()).casefold()


def _same_set(gold: list[Any], got: list[Any]) -> bool:
    if len({str(g).casefold() for g in gold}) != len({str(v).casefold() for v in got}):
        return False
    return all(any(_same(g, v) for v in got) for g in gold) and all(any(_same(g, v) for g in gold) for v in got)


def exact_match(gold: list[Any], columns: list[str], rows: list[list[Any]]) -> bool:
    """Does some column of ``rows`` hold exactly the gold values (as sets; see the module docstring)?"""
    if not rows:
        return False
    for i in range(len(columns) or len(rows[0])):
        if _same_set(gold, [r[i] for r in rows if i < len(r)]):
            return True
    if len(gold) == 1 and len(rows) == 1:
        return any(_same(gold[0], v) for v in rows[0])
    return False


def verify() -> int:
    bad = 0
    for item in questions():
        try:
            got = gold_rows(item)
        except sqlite3.Error as exc:
            print(f"{item['id']}: gold SQL fails: {exc}")
            bad += 1
            continue
        if not got or not _same_set(item["answer"], got):
            print(f"{item['id']}: gold SQL gives {got[:5]}, stored {item['answer'][:5]}")
            bad += 1
    n = len(questions())
    print(f"{n - bad}/{n} gold SQL queries run and give their stored non-empty answer")
    return bad


def build_collection(name: str = COLLECTION):
    from bench.routing.spider import ensure_router
    from tagql.config import load_settings
    from tagql.routing.collection import Collection

    coll = Collection.create(name, load_settings())
    if not coll.entries:
        coll.add_spider(DATA / "spider" / "tables.json", only=NEEDED + DISTRACTORS)
        coll.save()
    built = ensure_router(coll)
    return coll, built


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--verify", action="store_true", help="only check the gold SQL of every question")
    ap.add_argument("--split", default="dev", choices=("dev", "test", "all"))
    ap.add_argument("--methods", default="cross,sql", help="comma-separated: cross, sql (single-database routing)")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--collection", default=COLLECTION)
    ap.add_argument("--llm", default=None, help="local | openai (default: configured)")
    ap.add_argument("--max-minutes", type=float, default=0, help="start no new question after this (resume later)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.verify:
        sys.exit(1 if verify() else 0)
    run = common.Run(__spec__, argv)
    import tagql

    out = Path(args.out) if args.out else OUT.with_name(f"cross_{args.split}.json")
    partial = out.with_name(out.stem + ".partial.jsonl")
    done = common.read_partial(partial, lambda r: (r["id"], r["method"]))
    coll, built = build_collection(args.collection)
    items = questions(args.split)
    chunk = items[args.offset: args.offset + args.limit] if args.limit else items[args.offset:]
    methods = [m for m in args.methods.split(",") if m]
    session = tagql.connect(collection=coll, llm=args.llm)
    started = time.perf_counter()
    for item in chunk:
        if args.max_minutes and time.perf_counter() - started > args.max_minutes * 60:
            print("--max-minutes reached: run again to resume", file=sys.stderr)
            break
        for method in methods:
            if (item["id"], method) in done:
                continue
            t = time.perf_counter()
            rec: dict[str, Any] = {"id": item["id"], "method": method, "split": item["split"]}
            usage = session.llm(method).usage
            before = usage.snapshot()
            try:
                a = session.ask(item["question"], method=method, **({"force": True} if method == "sql" else {}))
                rec.update(database=a.database, sql=a.sql, columns=a.columns, rows=a.rows[:50],
                           plan=(a.plan.model_dump().get("cross") if a.plan is not None else None),
                           em=exact_match(item["answer"], a.columns, a.rows))
            except tagql.TagqlError as exc:
                rec.update(error=exc.one_line(), em=False, plan=getattr(exc, "details", None))
            except Exception as exc:  # noqa: BLE001 -- a bug: recorded as such, the run goes on
                rec.update(error=f"internal error {type(exc).__name__}: {str(exc)[:200]}", em=False)
            rec["calls"] = usage.since(before)["calls"]
            rec["seconds"] = round(time.perf_counter() - t, 2)
            done[(item["id"], method)] = rec
            with partial.open("a") as f:
                f.write(json.dumps(rec, default=str) + "\n")
            print(f"{item['id']} {method:5s} em={int(rec['em'])} {rec['seconds']:6.1f}s "
                  f"{rec.get('database', '')} {rec.get('error', '')[:90]}", file=sys.stderr, flush=True)
    report(run, out, items, methods, done, args, built)


def report(run: common.Run, out: Path, items: list[dict[str, Any]], methods: list[str], done: dict, args: Any,
           built: float | None) -> None:
    rows, summary = [], {}
    for method in methods:
        recs = [done[(q["id"], method)] for q in items if (q["id"], method) in done]
        if not recs:
            continue
        calls = [r["calls"] for r in recs if r.get("calls") is not None]
        secs = [r["seconds"] for r in recs]
        s = {"n": len(recs), "of": len(items), "exact_match": round(sum(r["em"] for r in recs) / len(recs), 3),
             "errors": sum(1 for r in recs if "error" in r),
             "latency_p50_s": round(statistics.median(secs), 1), "latency_mean_s": round(statistics.mean(secs), 1),
             "llm_calls_mean": round(statistics.mean(calls), 1) if calls else None}
        summary[method] = s
        rows.append([method, f"{s['n']}/{s['of']}", f"{s['exact_match']:.3f}", s["errors"], s["latency_p50_s"],
                     s["latency_mean_s"], s["llm_calls_mean"]])
    head = ["method", "questions", "exact match", "errors", "p50 s", "mean s", "LLM calls"]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    for r in [head, *rows]:
        print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
    run.save(out, {"split": args.split, "collection": args.collection, "databases": NEEDED + DISTRACTORS,
                   "router_build_s": built, "summary": summary,
                   "records": [done[k] for q in items for k in [(q["id"], m) for m in methods] if k in done]})


if __name__ == "__main__":
    main()
