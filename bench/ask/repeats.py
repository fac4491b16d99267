"""A failed query written again word for word: BIRD EX of the SQL stage with and without the fresh try that
``answer.fresh_retry_on_repeat`` grants (tagql.llm.repeats), side by side, on the fixed split of the 432 BIRD
questions over student_club, superhero and toxicology (bench/ask/data/bird_ask_split.json).

Per question and condition (``none``, ``evidence``) the SQL stage runs with the setting on. At temperature 0 the
two arms are the same conversation until a failed query repeats, so a question with no repeat counts the same
for both; only a question with a repeat runs again with the setting off. Also counted: how many questions
repeat at all, and the extra LLM call each costs. Value hints on (the default). Resumable and chunked like
bench/ask/values.py: each invocation asks at most ``--chunk`` new (question, condition) pairs and appends them to
``<out>.partial.jsonl``; run it under the model lock until it reports nothing left, then ``--summarise``.

    flock /work/wt/llm.lock python -m bench.ask.repeats --splits dev,test --chunk 120   # repeat until done
    python -m bench.ask.repeats --splits dev,test --summarise

``--errored-in bench/results/ask/values.json`` asks only the pairs whose SQL failed in that earlier run (the
stratum where a repeat can happen; 44 of the 434 dev+test pairs) and estimates the change over each split
assuming the rest unchanged -- a paired sample, cheaper than the whole split on a slow host.

EX is BIRD's execution match (row sets equal, as bench/ask/bird.py). Prints a table and writes JSON; test
question ids are never listed.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tagql.config import load_settings
from tagql.db import open_database
from tagql.errors import TagqlError
from tagql.knowledge import ScoredStatement, StaticStatements
from tagql.pipeline import TagQL

from bench import common
from bench.ask.bird import rows_match
from bench.ask.values import chosen_questions, chunked_run_parser, db_path, run_chunked

ARMS = ("off", "on")


def _attempts(outcome_or_exc) -> list[dict]:
    return [{"sql": a.sql, "error": a.error, "repeated": a.repeated}
            for a in getattr(outcome_or_exc, "attempts", None) or []]


def _run(session: TagQL, q: dict, statements, values, gold, fresh: bool) -> dict:
    session.synthesizer.fresh_retry_on_repeat = fresh
    calls = session.llm.usage.calls
    t0 = time.perf_counter()
    try:
        o = session.synthesizer.run(q["question"], statements, values=values)
        rec = {"sql": o.sql, "correct": rows_match([tuple(r) for r in o.result.rows], gold) and not o.result.truncated,
               "attempts": _attempts(o)}
    except TagqlError as exc:
        rec = {"correct": False, "error": exc.one_line(), "attempts": _attempts(exc)}
    rec.update(seconds=round(time.perf_counter() - t0, 3), llm_calls=session.llm.usage.calls - calls,
               repeated=any(a["repeated"] for a in rec["attempts"]))
    return rec


def errored_pairs(path: str) -> set[tuple[int, str]]:
    """The (question, condition) pairs whose SQL stage ended in an error in an earlier result file's records
    (bench/ask/values.py: its ``with`` arm, the default settings): where a repeat can change the outcome."""
    records = json.loads(Path(path).read_text())["records"]
    return {(r["question_id"], r["condition"]) for r in records if "error" in r and r.get("arm", "with") == "with"}


def ask_chunk(args, console: Console) -> int:
    """Ask up to ``args.chunk`` new (question, condition) pairs; returns how many are left after."""
    from tagql.llm import make_llm

    partial = Path(args.out + ".partial.jsonl")
    done = common.read_partial(partial, lambda r: (r["question_id"], r["condition"]))
    conditions = args.conditions.split(",")
    splits = args.splits.split(",")
    todo = [(q, c) for q in chosen_questions(splits) for c in conditions if (q["question_id"], c) not in done]
    if args.errored_in:
        frame = errored_pairs(args.errored_in)
        todo = [(q, c) for q, c in todo if (q["question_id"], c) in frame]
    # a split at a time (dev before test), each in a fixed shuffled order: a stopped run is a seeded subset
    todo.sort(key=lambda qc: (splits.index(qc[0]["split"]), random.Random(f"36/{qc[0]['question_id']}").random()))
    if not todo:
        return 0
    settings = load_settings()
    llm = make_llm(settings)
    dbs: dict[str, tuple] = {}
    with partial.open("a") as out:
        for i, (q, cond) in enumerate(todo[: args.chunk], 1):
            name = q["db_id"]
            if name not in dbs:
                dbs[name] = (open_database(db_path(name), settings=settings.db), open_database(db_path(name)))
            db, gold_db = dbs[name]
            evidence = (q.get("evidence") or "").strip()
            knowledge = StaticStatements([ScoredStatement(evidence, "", 1.0)]) if cond == "evidence" and evidence else None
            session = TagQL(db, llm, settings=settings, knowledge=knowledge)
            statements = session.statements_for(q["question"])
            values = session.values_for(q["question"])
            gold = gold_db.execute(q["SQL"], timeout_s=60, row_cap=1_000_000).rows
            rec = {"question_id": q["question_id"], "db": name, "split": q["split"], "condition": cond}
            on = _run(session, q, statements, values, gold, fresh=True)
            off = _run(session, q, statements, values, gold, fresh=False) if on["repeated"] else {"same": True}
            rec.update(on=on, off=off)
            out.write(json.dumps(rec, default=str) + "\n")
            out.flush()
            console.print(f"[{i}/{min(args.chunk, len(todo))}] {q['split']} {cond} {name}: "
                          f"{'repeat' if on['repeated'] else 'no repeat'}, on {'right' if on['correct'] else 'wrong'}"
                          + ("" if "same" in off else f", off {'right' if off['correct'] else 'wrong'}")
                          + f" ({on['seconds']:.1f} s)")
    return max(0, len(todo) - args.chunk)


def summarise(args, console: Console, run: common.Run) -> None:
    partial = Path(args.out + ".partial.jsonl")
    records = list(common.read_partial(partial, lambda r: (r["question_id"], r["condition"])).values())
    summary = {}
    table = Table(title="BIRD EX without / with the fresh try after a repeated failed query (SQL stage, local model)")
    for col in ("split", "condition", "n", "repeats", "EX off", "EX on", "gained", "lost", "errors off",
                "errors on", "extra calls", "p50 s on"):
        table.add_column(col, justify="right")
    for split in args.splits.split(","):
        for cond in args.conditions.split(","):
            rs = [r for r in records if r["split"] == split and r["condition"] == cond]
            if not rs:
                continue
            on = [r["on"] for r in rs]
            off = [r["on"] if "same" in r["off"] else r["off"] for r in rs]
            s = {"n": len(rs), "repeats": sum(o["repeated"] for o in on),
                 "ex_off": round(sum(o["correct"] for o in off) / len(rs), 3),
                 "ex_on": round(sum(o["correct"] for o in on) / len(rs), 3),
                 "gained": sum(b["correct"] and not a["correct"] for a, b in zip(off, on)),
                 "lost": sum(a["correct"] and not b["correct"] for a, b in zip(off, on)),
                 "errors_off": sum("error" in o for o in off), "errors_on": sum("error" in o for o in on),
                 "extra_calls": sum(b["llm_calls"] - a["llm_calls"] for a, b in zip(off, on)),
                 "p50_s_on": common.pct([o["seconds"] for o in on], 0.5)}
            if args.errored_in:  # the other questions of the split are assumed unchanged (no repeat, same arms)
                n_all = len([q for q in chosen_questions([split])])
                s["frame"] = args.errored_in
                s["split_n"] = n_all
                s["estimated_ex_change_over_split"] = round((s["gained"] - s["lost"]) / n_all, 4)
            if split != "test":  # never list test questions
                s["changed_ids"] = [r["question_id"] for r, a, b in zip(rs, off, on) if a["correct"] != b["correct"]]
            summary[f"{split}/{cond}"] = s
            table.add_row(split, cond, str(s["n"]), str(s["repeats"]), f"{s['ex_off']:.3f}", f"{s['ex_on']:.3f}",
                          str(s["gained"]), str(s["lost"]), str(s["errors_off"]), str(s["errors_on"]),
                          str(s["extra_calls"]), f"{s['p50_s_on']:.2f}")
    console.print(table)
    if args.errored_in:
        console.print(f"paired sample: only the pairs whose SQL failed in {args.errored_in}; the estimated change "
                      "over the whole split assumes the others unchanged")
    run.save(args.out, {"splits": args.splits, "conditions": args.conditions, "summary": summary,
                        "records": [r for r in records if r["split"] != "test"]})
    console.print(f"wrote {args.out}")


def main(argv: list[str] | None = None) -> None:
    ap = chunked_run_parser(__doc__, "repeats")
    ap.add_argument("--errored-in", default="",
                    help="ask only the pairs whose SQL failed in this earlier result file (a paired sample of the "
                         "stratum where the arms can differ), e.g. bench/results/ask/values.json")
    args = ap.parse_args(argv)
    run_chunked(args, common.Run(__spec__, argv), ask_chunk, summarise)


if __name__ == "__main__":
    main()
