"""TAG dev-set accuracy: the five methods side by side, exact match per query type, plus latency and LM calls.

    python -m bench.tag.accuracy                                 # all 40 questions x 5 methods (slow!)
    python -m bench.tag.accuracy --per-type 1 --methods tag,text2sql   # a small subset
    python -m bench.tag.accuracy --ids 0,10,20 --json /tmp/tag_accuracy_ids.json
    python -m bench.tag.accuracy --ids 10,11 --resume     # add questions to a stopped run's results
    python -m bench.tag.accuracy --data bench/tag/data/tag_heldout.csv --json bench/results/tag/heldout.json
                                                          # the 15 held-out questions (bench/tag/heldout.py)
    python -m bench.tag.accuracy --knowledge /tmp/kb       # with each database's domain statements
    python -m bench.tag.accuracy --pool dev --per-type 2 --methods tag,text2sql
                                      # (--per-type on the pool takes a seeded sample, --seed 36 by default)
                                      # the hidden-column pool (bench/tag/pool.py): each question is asked on a
                                      # copy of its database without the record's "Hidden columns"

Scoring (TAG-Bench style): match and comparison answers must equal the reference as a set of values,
ranking answers as an ordered list; numbers compare numerically and strings case-insensitively, a row of
several columns counts as its values joined by spaces. Aggregation answers are correct when every key
fact of the reference appears in the answer text (the paper leaves aggregation unscored; we report it
separately and exclude it from "overall", as the paper does).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

from bench import common

DEV = common.BENCH / "tag" / "data" / "tag_dev.csv"
POOL = common.BENCH / "tag" / "data" / "pool.json"
BIRD = common.DATA / "bird" / "dev_databases"


def norm(v: object) -> str:
    if isinstance(v, (list, tuple)):
        return " ".join(norm(x) for x in v)
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (int, float)):
        return f"{float(v):g}"
    s = str(v).strip().strip("'\"").lower()
    try:
        return f"{float(s):g}"
    except ValueError:
        return s


def correct(qtype: str, reference: list, values: list, text: str) -> bool:
    if qtype == "Aggregation":
        blob = (text + " " + " ".join(norm(v) for v in values)).lower()
        return all(norm(k) in blob for k in reference)
    pred = [norm(v) for v in values]
    ref = [norm(v) for v in reference]
    if qtype == "Ranking":
        return pred == ref
    return sorted(set(pred)) == sorted(set(ref))


def load(ids: set[int] | None, per_type: int | None, data: Path = DEV, split: str | None = None,
         seed: int | None = None) -> list[dict]:
    """Questions from a TAG-Bench CSV, or from the pool's JSON (``split``: train, dev, test or all). With
    ``seed`` the rows are shuffled before the ``per_type`` cut (the pool is stored database by database, so
    its first questions of a type all come from one database)."""
    if data.suffix == ".json":
        rows = [r for r in json.loads(data.read_text()) if split in (None, "all") or r["Split"] == split]
    else:
        rows = list(csv.DictReader(data.open()))
    if seed is not None:
        import random

        random.Random(seed).shuffle(rows)
    if ids is not None:
        rows = [r for r in rows if int(r["Query ID"]) in ids]
    if per_type:
        seen: dict[str, int] = defaultdict(int)
        keep = []
        for r in rows:
            if seen[r["Query type"]] < per_type:
                keep.append(r)
                seen[r["Query type"]] += 1
        rows = keep
    return rows


def reference(row: dict) -> list:
    """The gold answer: a JSON list in the CSV sets, already a list in the pool."""
    return row["Answer"] if isinstance(row["Answer"], list) else json.loads(row["Answer"])


def database_for(row: dict, workdir: Path) -> Path:
    """The database a question is asked on: the dev/held-out sets' BIRD file, or for a pool record a copy of
    its database without the record's hidden columns (so neither the schema nor the SQL can reach them)."""
    db = row["DB used"]
    if "Hidden columns" not in row:
        return BIRD / db / f"{db}.sqlite"
    from bench.tag.pool import db_file, hidden_copy

    return hidden_copy(db_file(row["Source"], db), row["Hidden columns"], workdir)


def knowledge_store(directory: Path, db: str) -> Path:
    """``directory/<db>.kb``, imported once from the paper's DBA-screened statements (no LM involved)."""
    from tagql.db.connection import open_database
    from tagql.embeddings import make_embedder
    from tagql.knowledge.importer import import_database

    store = directory / f"{db}.kb"
    if not store.exists():
        directory.mkdir(parents=True, exist_ok=True)
        print(f"importing the domain statements of {db} into {store}", flush=True)
        import_database(BIRD.parents[1], db, store, database=open_database(BIRD / db / f"{db}.sqlite"),
                        embedder=make_embedder())
    return store


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="tag,text2sql,rag,retrieval_rank,text2sql_lm")
    ap.add_argument("--ids", default=None, help="comma-separated Query IDs")
    ap.add_argument("--per-type", type=int, default=None)
    ap.add_argument("--seed", type=int, default=None,
                    help="shuffle the questions with this seed before the --per-type cut (default: file order; "
                         "with --pool: 36, so a sample mixes the split's databases)")
    ap.add_argument("--llm", default="local")
    ap.add_argument("--data", type=Path, default=DEV, help="question CSV (default: the dev set)")
    ap.add_argument("--pool", choices=("train", "dev", "test", "all"), default=None,
                    help="ask the hidden-column pool's questions of this split (bench/tag/data/pool.json; "
                         "--ids are its Query IDs), each on a copy of its database without its hidden columns, "
                         "with no stored domain statements")
    ap.add_argument("--json", default=str(common.result_path("tag", "accuracy")))
    ap.add_argument("--knowledge", type=Path, default=None,
                    help="domain-knowledge stores DIR/<db>.kb for every method that writes SQL; a missing store "
                         "is imported from the domain-knowledge paper's statements for that database "
                         "(default: no knowledge)")
    ap.add_argument("--resume", action="store_true",
                    help="keep the results in the --json file's .partial.json and ask only what is missing")
    ap.add_argument("--op-cache", default="",
                    help="operator cache directory (default: a fresh temporary one, so LM calls and latency are "
                         "not flattered by an earlier run's cached judgements)")
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)

    import tagql
    from tagql.config import for_tag
    from tagql.llm import make_llm

    if args.pool:
        if args.knowledge:
            ap.error("--pool asks without domain statements (they could state what a hidden column holds)")
        args.data = POOL
        if args.seed is None:
            args.seed = 36
    rows = load({int(x) for x in args.ids.split(",")} if args.ids else None, args.per_type, args.data, args.pool,
                args.seed)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    import tempfile

    from tagql.config import load_settings

    workdir = Path(tempfile.mkdtemp(prefix="tag_accuracy_"))
    overrides: dict = {"cache_dir": args.op_cache or workdir}
    if args.pool:  # a stored statement could state what a hidden column holds
        overrides["knowledge_dir"] = workdir / "no_knowledge"
    settings = load_settings(**overrides)
    llm = make_llm(for_tag(settings), backend=args.llm)  # every method here runs on the TAG model (tag.model)
    sessions: dict[tuple, tagql.Session] = {}
    results: list[dict] = []
    partial = Path(args.json).with_suffix(".partial.json")
    if args.resume and partial.exists():  # a stopped run's answers (same code, same settings)
        results = json.loads(partial.read_text())
        done = {int(x["Query ID"]) for x in rows}
        rows += [r for r in load(None, None, args.data, args.pool) if int(r["Query ID"]) in {x["id"] for x in results} - done]
    asked = {(x["id"], x["method"]) for x in results}
    for r in rows:
        db = r["DB used"]
        key = (db, tuple(r.get("Hidden columns", ())))
        if key not in sessions:
            store = knowledge_store(args.knowledge, db) if args.knowledge else None
            sessions[key] = tagql.connect(database_for(r, workdir / "databases"), llm=llm, settings=settings,
                                          knowledge=store)
        ref = reference(r)
        for m in methods:
            if (int(r["Query ID"]), m) in asked:
                continue
            t0 = time.perf_counter()
            try:
                a = sessions[key].ask(r["Query"], method=m)
                values, text, calls, err = a.values, a.answer, int(a.tokens["calls"]), None
                plan = a.plan.model_dump() if a.plan else None
                table = {"columns": a.columns, "rows": a.rows[:20]}  # what the values were read from
            except Exception as exc:  # noqa: BLE001 - a failed method scores 0, with the reason
                values, text, calls, err, plan = [], "", None, f"{type(exc).__name__}: {exc}"[:300], None
                table = None
                if getattr(exc, "attempts", None):  # what was tried: the rejected SQL or plans, with why
                    plan = {"attempts": [a if isinstance(a, dict) else {"sql": getattr(a, "sql", str(a)),
                                                                        "error": getattr(a, "error", None)}
                                         for a in exc.attempts]}
                if getattr(exc, "plan_attempts", None):  # the planner's tries before the SQL fallback
                    plan = {**(plan or {}), "plan_attempts": exc.plan_attempts}
                if getattr(exc, "plan_error", None):  # why the plan failed, when the fallback failed too
                    plan = {**(plan or {}), "plan_error": exc.plan_error}
            ok = correct(r["Query type"], ref, values, text)
            res = {"id": int(r["Query ID"]), "type": r["Query type"], "kind": r["Knowledge/Reasoning Type"],
                   "method": m, "correct": ok, "seconds": round(time.perf_counter() - t0, 2), "lm_calls": calls,
                   "values": values[:20], "answer": text[:300], "reference": ref, "error": err, "plan": plan,
                   "result": table}
            results.append(res)
            print(f"[{r['Query ID']:>2}] {m:<15} {'OK ' if ok else 'bad'} {res['seconds']:7.1f}s "
                  f"calls={calls} {str(values)[:60]} {err or ''}", flush=True)
            # partial results survive an interrupted run (the machine is slow)
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).with_suffix(".partial.json").write_text(json.dumps(results, indent=1, default=str))

    summary: dict[str, dict] = {}
    for m in methods:
        mine = [x for x in results if x["method"] == m]
        by = defaultdict(list)
        for x in mine:
            by[x["type"]].append(x)
            by[x["kind"]].append(x)
        scored = [x for x in mine if x["type"] != "Aggregation"]
        summary[m] = {
            "overall_em": round(sum(x["correct"] for x in scored) / len(scored), 3) if scored else None,
            **{k: round(sum(x["correct"] for x in v) / len(v), 3) for k, v in by.items()},
            "avg_seconds": round(sum(x["seconds"] for x in mine) / len(mine), 2) if mine else None,
            "avg_lm_calls": round(sum(x["lm_calls"] or 0 for x in mine) / len(mine), 2) if mine else None,
            "n": len(mine),
        }
    print("\nmethod           overall  " + "  ".join(f"{t[:6]:>6}" for t in
                                                   ("Match", "Comparison", "Ranking", "Aggregation")) + "   avg s")
    for m, s in summary.items():
        cells = "  ".join(f"{s.get(t, float('nan')) if s.get(t) is not None else float('nan'):6.2f}"
                          for t in ("Match", "Comparison", "Ranking", "Aggregation"))
        print(f"{m:<16} {s['overall_em'] if s['overall_em'] is not None else float('nan'):7.2f}  {cells}  "
              f"{s['avg_seconds']:6.1f}")
    out = {"model": getattr(llm, "name", "?"), "questions": len(rows), "data": str(args.data), "pool_split": args.pool,
           "seed": args.seed, "per_type": args.per_type,
           "summary": summary, "results": results}
    run.save(args.json, out)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
