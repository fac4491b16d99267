"""Re-score the SQL a `bench/ask.py` run recorded under the current deterministic repairs, per split.

A full `bench/ask.py` run asks the model 864 times (~50 min on an idle 2-core host, hours on a loaded
one). Deterministic repairs of the SQL it wrote can be measured without the model: each recorded query
goes through `prepare_sql` again with the question (and, in the `evidence` condition, the evidence as
its domain statement), once without the question-grounding repairs (text2sql/grounding.py) and once with
them, and both results are compared with the gold rows (BIRD execution match, as in bench/ask.py).
Records without SQL (every try failed) stay wrong unless `--failed` replays their last try's SQL (the
recorded run keeps it in `attempts`); retries the model would make after a repair are not replayed, so
this measures the repairs, not a new run. To isolate one repair, replay the same records with `--failed`
at the commit before it (a git worktree) and after it, and compare the per-question rows.

Splits: bench/ask/data/bird_ask_split.json (bench/ask/bird_split.py). Tune on train/dev; test is reported beside.

    python -m bench.ask.replay --records bench/results/ask/bird.json
    python -m bench.ask.replay --records /tmp/run.json --out /tmp/replay.json

Prints a table and writes JSON (per split x condition: n, EX as recorded, EX replayed without and
with the grounding repairs, and the question ids that changed on train/dev).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tagql.config import load_settings
from tagql.db import open_database
from tagql.db.values import value_index
from tagql.errors import TagqlError
from tagql.text2sql.query import prepare_sql

from bench import common
from bench.ask.bird_split import load_split

DATA = common.DATA


def rows_match(pred: list, gold: list) -> bool:
    return {tuple(r) for r in pred} == {tuple(r) for r in gold}


def recorded_sql(record: dict, failed: bool = False) -> str:
    """The query a record ran; with ``failed``, for a record whose every try failed, its last try's SQL."""
    if record.get("sql"):
        return record["sql"]
    tries = record.get("attempts") or []
    return tries[-1].get("sql") or "" if failed and tries else ""


def replay(record: dict, gold: dict, db, *, grounding: bool, failed: bool = False) -> bool:
    raw = recorded_sql(record, failed)
    if not raw:
        return False
    statements = (gold.get("evidence") or "").strip() if record["condition"] == "evidence" else ""
    try:
        sql = prepare_sql(raw, db, repairs=[], question=record["question"], statements=statements,
                          grounding=grounding)
        return rows_match(db.execute(sql).rows, db.execute(gold["SQL"], timeout_s=60, row_cap=1_000_000).rows)
    except TagqlError:
        return False


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", required=True, help="a bench/ask.py output (JSON with 'records')")
    ap.add_argument("--failed", action="store_true",
                    help="also replay the last try of records whose every try failed (repairs that turn an error "
                         "into an answer; compare two commits' runs to isolate one repair)")
    ap.add_argument("--no-value-index", action="store_true",
                    help="replay without the databases' value indexes (the pipeline loads them when "
                         "answer.value_hints is on, the default, and the repairs then read them)")
    ap.add_argument("--out", default=str(common.result_path("ask", "replay")))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    split = load_split()
    gold = {q["question_id"]: q for q in json.loads((DATA / "bird" / "dev.json").read_text())}
    records = json.loads(Path(args.records).read_text())["records"]
    dbs: dict[str, object] = {}
    rows = []
    for r in records:
        name = r["db"]
        if name not in dbs:
            dbs[name] = open_database(DATA / "bird" / "dev_databases" / name / f"{name}.sqlite")
            if not args.no_value_index:
                value_index(dbs[name], load_settings().cache_dir)  # as Pipeline.values_for does
        g = gold[r["question_id"]]
        rows.append({"question_id": r["question_id"], "condition": r["condition"], "split": split[r["question_id"]],
                     "recorded": bool(r.get("correct")),
                     "before": replay(r, g, dbs[name], grounding=False, failed=args.failed),
                     "after": replay(r, g, dbs[name], grounding=True, failed=args.failed)})
    summary = {}
    table = Table(title=f"BIRD EX, recorded SQL replayed ({Path(args.records).name})")
    for col in ("split", "condition", "n", "recorded", "replayed: before", "replayed: after", "gained", "lost"):
        table.add_column(col, justify="right")
    for part in ("train", "dev", "test", "all"):
        for cond in ("none", "evidence"):
            rs = [x for x in rows if x["condition"] == cond and (part == "all" or x["split"] == part)]
            if not rs:
                continue
            n = len(rs)
            s = {"n": n, **{k: round(sum(x[k] for x in rs) / n, 3) for k in ("recorded", "before", "after")},
                 "gained": sum(x["after"] and not x["before"] for x in rs),
                 "lost": sum(x["before"] and not x["after"] for x in rs)}
            if part in ("train", "dev"):  # never list test questions
                s["changed_ids"] = sorted(x["question_id"] for x in rs if x["after"] != x["before"])
            summary[f"{part}/{cond}"] = s
            table.add_row(part, cond, str(n), f"{s['recorded']:.3f}", f"{s['before']:.3f}", f"{s['after']:.3f}",
                          str(s["gained"]), str(s["lost"]))
    console = Console()
    console.print(table)
    run.save(args.out, {"records": args.records, "failed": args.failed, "value_index": not args.no_value_index,
                        "summary": summary,
                        "rows": [x for x in rows if x["split"] != "test"]})  # test: the summary only
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
