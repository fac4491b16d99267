"""Who says a one-column result: warm latency and what the answer reads, the rows vs the model, paired.

    python -m bench.ask.answer_latency [--splits dev,test] [--per-db 8] [--modes rows,model]

Per split of the fixed BIRD split of student_club, superhero and toxicology (bench/ask/data/
bird_ask_split.json), the first ``--per-db`` questions of each database are asked end to end (``TagQL.ask``:
values, SQL, repairs, answer; BIRD's evidence as a domain statement; N = 1) once per
``answer.one_column_answer`` mode, back to back on the same warm model. Both runs of a question start from
the same state: the model's recent outputs (prompt-lookup drafts) are restored and the last prompt is dropped
from the KV cache (``LocalLLM.forget_last_prompt``), so the second run neither re-uses the first one's SQL
prompt nor drafts from its SQL. The SQL is greedy, so both modes run the same query and differ in the answer
step only (checked: ``same_sql``). The first question of each database is cold (its schema prefix is
evaluated) and left out of the warm figures.

Reported per split and mode: warm p50 / p95 / mean of the whole ask, the paired median difference, how many
results had one column, and for the model's sentences how many the answer check replaced with the rows.
Records go to ``--records`` (resumable); the table to ``--out``.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tagql.config import load_settings
from tagql.db import open_database
from tagql.errors import TagqlError
from tagql.llm import make_llm
from tagql.pipeline import TagQL

from bench import common
from bench.ask.bird import DBS
from bench.ask.candidates import db_path, knowledge_for, questions

OUT = common.result_path("ask", "answer_latency")
MODES = ("rows", "model")


def chosen(split: str, per_db: int) -> list[dict]:
    """The first ``per_db`` questions of each database in ``split``, one database after the other."""
    qs = questions([split], 0)
    return [q for db in DBS for q in [x for x in qs if x["db_id"] == db][:per_db]]


def ask_once(llm, settings, q: dict, mode: str) -> dict:
    settings.answer.one_column_answer = mode
    db = open_database(db_path(q["db_id"]), settings=settings.db)
    session = TagQL(db, llm, settings=settings, knowledge=knowledge_for(q, "evidence"))
    if hasattr(llm, "forget_last_prompt"):
        llm.forget_last_prompt()
    start = time.perf_counter()
    try:
        a = session.ask(q["question"])
    except TagqlError as exc:
        return {"wall_s": round(time.perf_counter() - start, 3), "error": exc.one_line()}
    return {"wall_s": round(time.perf_counter() - start, 3), "error": None, "sql": a.sql, "answer": a.answer,
            "columns": len(a.columns), "rows": len(a.rows), "calls": a.tokens.get("calls", 0),
            "answer_s": a.timings.get("answer_s"), "abstained": a.abstained,
            "replaced": any("answer sentence replaced" in n for n in a.notes)}


def run(args, records_path: Path, console: Console) -> None:
    done = set()
    if records_path.exists():
        done = {(r["split"], r["question_id"]) for r in map(json.loads, records_path.read_text().splitlines())}
    settings = load_settings()
    settings.llm.persist_prefixes = False
    llm = make_llm(settings)
    with records_path.open("a") as out:
        for split in args.splits:
            seen_db: set[str] = set()
            for q in chosen(split, args.per_db):
                cold = q["db_id"] not in seen_db
                seen_db.add(q["db_id"])
                if (split, q["question_id"]) in done:
                    continue
                recent = copy.deepcopy(getattr(llm, "recent", None))
                by_mode = {}
                for mode in args.modes:
                    if recent is not None:
                        llm.recent = copy.deepcopy(recent)
                    by_mode[mode] = ask_once(llm, settings, q, mode)
                rec = {"split": split, "question_id": q["question_id"], "db": q["db_id"], "cold": cold,
                       "modes": by_mode, "same_sql": len({m.get("sql") for m in by_mode.values()}) == 1}
                out.write(json.dumps(rec) + "\n")
                out.flush()
                walls = ", ".join(f"{m} {r['wall_s']:.2f} s" for m, r in by_mode.items())
                console.print(f"{split} {q['db_id']} {q['question_id']}{' (cold)' if cold else ''}: {walls}")


def summarize(records: list[dict], modes: list[str], console: Console) -> dict:
    table = Table(title="Warm latency of tagql ask by who says a one-column result (evidence, N = 1)")
    for col in ("split", "mode", "warm q", "p50 s", "p95 s", "mean s", "one column", "LM calls",
                "sentences replaced", "same SQL"):
        table.add_column(col, justify="right")
    summary: dict = {}
    for split in ("train", "dev", "test"):
        warm = [r for r in records if r["split"] == split and not r["cold"]
                and all(not r["modes"][m]["error"] for m in modes if m in r["modes"])]
        if not warm:
            continue
        for m in modes:
            walls = [r["modes"][m]["wall_s"] for r in warm]
            s = {"warm_questions": len(warm), "p50_s": round(statistics.median(walls), 3),
                 "p95_s": round(common.pct(walls, 0.95), 3), "mean_s": round(statistics.mean(walls), 3),
                 "one_column": sum(r["modes"][m]["columns"] == 1 for r in warm),
                 "lm_calls": sum(r["modes"][m]["calls"] for r in warm),
                 "replaced": sum(r["modes"][m]["replaced"] for r in warm),
                 "same_sql": sum(r["same_sql"] for r in warm)}
            summary[f"{split}/{m}"] = s
            table.add_row(split, m, str(len(warm)), f"{s['p50_s']:.2f}", f"{s['p95_s']:.2f}", f"{s['mean_s']:.2f}",
                          str(s["one_column"]), str(s["lm_calls"]), str(s["replaced"]), str(s["same_sql"]))
        if len(modes) == 2:
            a, b = modes
            diff = [r["modes"][b]["wall_s"] - r["modes"][a]["wall_s"] for r in warm]
            summary[f"{split}/paired_median_{b}_minus_{a}_s"] = round(statistics.median(diff), 3)
            summary[f"{split}/p50_ratio_{a}_to_{b}"] = round(summary[f"{split}/{a}"]["p50_s"]
                                                             / summary[f"{split}/{b}"]["p50_s"], 3)
    console.print(table)
    for k, v in summary.items():
        if not isinstance(v, dict):
            console.print(f"{k}: {v}")
    return summary


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--splits", default="dev,test")
    ap.add_argument("--per-db", type=int, default=8)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--records", default=str(OUT).replace(".json", ".partial.jsonl"))
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--summarize", action="store_true", help="only the table of the recorded runs")
    args = ap.parse_args(argv)
    args.splits = args.splits.split(",")
    args.modes = args.modes.split(",")
    console = Console()
    records_path = Path(args.records)
    records_path.parent.mkdir(parents=True, exist_ok=True)
    started = common.Run(__spec__, argv)
    if not args.summarize:
        run(args, records_path, console)
    records = [json.loads(line) for line in records_path.read_text().splitlines()] if records_path.exists() else []
    summary = summarize(records, args.modes, console)
    started.save(args.out, {"per_db": args.per_db, "modes": args.modes, "records_file": str(records_path),
                            "summary": summary})
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
