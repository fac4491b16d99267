"""Execution-guided SQL candidates on BIRD: EX and warm latency for N = 1, 3, 5, 8 candidates side by side.

Two passes over the fixed split of the 432 questions of student_club, superhero and toxicology
(bench/ask/data/bird_ask_split.json):

1. **Accuracy.** Per question and condition (`evidence`: BIRD's evidence as a domain statement, `none`),
   the greedy query plus ``--n-max - 1`` sampled candidates (parallel sequences of one llama.cpp
   context, temperature ``--temperature``), each run once and compared with the gold rows. EX for
   N < n-max takes the greedy query and the first N - 1 samples (the samples are i.i.d. draws, so this is
   what N candidates would have drawn), for every choice policy of tagql.text2sql.candidates, plus the
   oracle (any candidate right), the bound no policy can pass.
2. **Latency.** ``--latency-questions`` questions (the first of each database's dev part, in turn) asked
   end to end (`TagQL.ask`: SQL, candidates, answer sentence) with ``answer.sql_candidates = N`` for
   each N, one N after the other on the same warm model; p50 / p95 of the warm questions.

Policies and the temperature are chosen on train and dev only; test is reported beside dev.

    python -m bench.ask.candidates --splits dev,test --conditions evidence,none        # both passes
    python -m bench.ask.candidates --splits dev --max-minutes 14                       # a resumable chunk
    python -m bench.ask.candidates --summarize                                         # table from the records
    python -m bench.ask.candidates --latency-only --latency-ns 1 --records R --out O   # warm p50 of the default

Records go to bench/results/ask/candidates.partial.jsonl (resumable); the table to
bench/results/ask/candidates.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tagql.config import load_settings
from tagql.db import open_database
from tagql.errors import TagqlError
from tagql.knowledge import ScoredStatement, StaticStatements
from tagql.llm import make_llm
from tagql.pipeline import TagQL
from tagql.text2sql.candidates import POLICIES, Candidate, choose

from bench import common
from bench.ask.bird import DBS, rows_match
from bench.ask.bird_split import load_split

DATA = common.DATA
NS = (1, 3, 5, 8)


def questions(splits: list[str], limit: int) -> list[dict]:
    part_of = load_split()
    out = []
    for q in json.loads((DATA / "bird" / "dev.json").read_text()):
        if q["db_id"] in DBS and part_of.get(q["question_id"]) in splits:
            out.append({**q, "split": part_of[q["question_id"]]})
    if limit:
        out = [q for db in DBS for q in [x for x in out if x["db_id"] == db][:limit]]
    return out


def knowledge_for(q: dict, condition: str) -> StaticStatements | None:
    evidence = (q.get("evidence") or "").strip()
    if condition == "evidence" and evidence:
        return StaticStatements([ScoredStatement(evidence, "", 1.0)])
    return None


def db_path(db_id: str) -> Path:
    return DATA / "bird" / "dev_databases" / db_id / f"{db_id}.sqlite"


def accuracy_pass(args, settings, llm, records_path: Path, deadline: float, console: Console) -> bool:
    """Candidates for every (question, condition) not yet recorded; False when the time budget ran out."""
    done = set()
    if records_path.exists():
        for line in records_path.read_text().splitlines():
            r = json.loads(line)
            if r.get("pass") == "accuracy":
                done.add((r["question_id"], r["condition"]))
    settings.answer.sql_candidates = args.n_max
    settings.answer.sql_candidate_temperature = args.temperature
    todo = [(q, c) for q in questions(args.splits.split(","), args.limit) for c in args.conditions.split(",")
            if (q["question_id"], c) not in done]
    console.print(f"accuracy pass: {len(todo)} (question, condition) pairs left, {len(done)} recorded")
    dbs, gold_dbs = {}, {}
    with records_path.open("a") as out:
        for i, (q, cond) in enumerate(todo):
            if time.monotonic() > deadline:
                return False
            db_id = q["db_id"]
            if db_id not in dbs:
                dbs[db_id] = open_database(db_path(db_id), settings=settings.db)
                gold_dbs[db_id] = open_database(db_path(db_id))
            session = TagQL(dbs[db_id], llm, settings=settings, knowledge=knowledge_for(q, cond))
            rec = {"pass": "accuracy", "question_id": q["question_id"], "db": db_id, "split": q["split"],
                   "condition": cond, "n_max": args.n_max, "temperature": args.temperature}
            try:
                gold = gold_dbs[db_id].execute(q["SQL"], timeout_s=60, row_cap=1_000_000).rows
            except TagqlError as exc:
                rec["gold_error"] = exc.one_line()
                gold = None
            start = time.perf_counter()
            try:
                outcome = session.synthesizer.run(q["question"], session.statements_for(q["question"]),
                                                  values=session.values_for(q["question"]))
                cands = outcome.candidates or [Candidate(outcome.sql, outcome.result, greedy=True)]
                rec["candidates"] = [
                    {"sql": c.sql, "error": c.error, "greedy": c.greedy,
                     "correct": bool(c.result is not None and gold is not None and not c.result.truncated
                                     and rows_match([tuple(r) for r in c.result.rows], gold)),
                     "key": None if c.result is None else _key_text(c)} for c in cands]
            except TagqlError as exc:
                rec["error"] = exc.one_line()
                rec["candidates"] = []
            rec["wall_s"] = round(time.perf_counter() - start, 3)
            out.write(json.dumps(rec, default=str) + "\n")
            out.flush()
            if i % 10 == 0:
                console.print(f"  {i + 1}/{len(todo)} {db_id} {cond} {rec['wall_s']} s")
    return True


def _key_text(c: Candidate) -> str:
    """The candidate's result as compared by the policies: a digest of its row set ("" when empty)."""
    from tagql.text2sql.candidates import result_key

    rows = sorted(map(list, result_key(c.result)), key=str)  # type: ignore[arg-type]
    return hashlib.sha1(json.dumps(rows, default=str).encode()).hexdigest() if rows else ""


def latency_pass(args, settings, llm, records_path: Path, deadline: float, console: Console) -> bool:
    done = set()
    if records_path.exists():
        for line in records_path.read_text().splitlines():
            r = json.loads(line)
            if r.get("pass") == "latency":
                done.add((r["n"], r["question_id"]))
    dev = questions(["dev"], 0)
    by_db = [[q for q in dev if q["db_id"] == db] for db in DBS]
    chosen = [qs[i] for i in range(max(map(len, by_db))) for qs in by_db if i < len(qs)][: args.latency_questions]
    chosen.sort(key=lambda q: DBS.index(q["db_id"]))  # one database after the other: its first question is cold
    with records_path.open("a") as out:
        for n in args.latency_ns:
            if all((n, q["question_id"]) in done for q in chosen):
                continue
            settings.answer.sql_candidates = n
            settings.answer.sql_candidate_temperature = args.temperature
            llm.forget_cached_prompts() if hasattr(llm, "forget_cached_prompts") else None
            seen_db: set[str] = set()
            for q in chosen:
                if time.monotonic() > deadline:
                    return False
                db = open_database(db_path(q["db_id"]), settings=settings.db)
                session = TagQL(db, llm, settings=settings, knowledge=knowledge_for(q, "evidence"))
                start = time.perf_counter()
                try:
                    session.ask(q["question"])
                    err = None
                except TagqlError as exc:
                    err = exc.one_line()
                rec = {"pass": "latency", "n": n, "question_id": q["question_id"], "db": q["db_id"],
                       "wall_s": round(time.perf_counter() - start, 3), "cold": q["db_id"] not in seen_db,
                       "error": err}
                seen_db.add(q["db_id"])
                if (n, q["question_id"]) not in done:
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
            console.print(f"  latency N={n}: {len(chosen)} questions")
    return True


def ex_at(rec: dict, n: int, policy: str) -> bool:
    """Whether ``policy`` over the greedy query and the first n - 1 samples picks a right candidate."""
    cands = rec["candidates"][:n]
    if not cands:
        return False
    pool = [Candidate(c["sql"], _Rows(c["key"]) if c["key"] is not None else None, c["error"], c["greedy"])
            for c in cands]
    picked = choose(pool, policy)  # type: ignore[arg-type]
    return picked is not None and cands[picked[0]]["correct"]


class _Rows:
    """A recorded result key standing in for a Result (choose() reads rows only): one row holding the digest,
    none for an empty result. (Records of the first chunk hold the rows' JSON, cut at 20,000 characters.)"""

    def __init__(self, key: str) -> None:
        empty = key in ("", "[]")
        self.rows = [] if empty else [(key if len(key) == 40 else hashlib.sha1(key.encode()).hexdigest(),)]


def summarize(records: list[dict], console: Console) -> dict:
    acc = [r for r in records if r["pass"] == "accuracy" and "gold_error" not in r]
    lat = [r for r in records if r["pass"] == "latency"]
    summary: dict = {"ex": {}, "latency": {}}
    table = Table(title="SQL candidates on BIRD (EX; greedy + N-1 samples, chosen by agreement of results)")
    for col in ("split", "condition", "n", "policy", *(f"N={n}" for n in NS), "oracle@8"):
        table.add_column(col, justify="right")
    for split in ("train", "dev", "test"):
        for cond in ("evidence", "none"):
            rs = [r for r in acc if r["split"] == split and r["condition"] == cond]
            if not rs:
                continue
            for policy in POLICIES:
                row = {n: sum(ex_at(r, n, policy) for r in rs) / len(rs) for n in NS}
                summary["ex"][f"{split}/{cond}/{policy}"] = {"n": len(rs), **{f"N={n}": round(v, 4) for n, v in row.items()}}
                oracle = sum(any(c["correct"] for c in r["candidates"]) for r in rs) / len(rs)
                summary["ex"][f"{split}/{cond}/oracle"] = round(oracle, 4)
                table.add_row(split, cond, str(len(rs)), policy, *(f"{row[n]:.3f}" for n in NS), f"{oracle:.3f}")
    console.print(table)
    if lat:
        t2 = Table(title="Warm latency of tagql ask (SQL + candidates + answer), evidence condition")
        for col in ("N", "questions", "warm p50 s", "warm p95 s", "mean s", "errors"):
            t2.add_column(col, justify="right")
        for n in NS:
            rs = [r for r in lat if r["n"] == n]
            warm = [r["wall_s"] for r in rs if not r["cold"]]
            if not warm:
                continue
            s = {"questions": len(rs), "warm_p50_s": round(statistics.median(warm), 3),
                 "warm_p95_s": round(common.pct(warm, 0.95), 3), "mean_s": round(statistics.mean(warm), 3),
                 "errors": sum(bool(r["error"]) for r in rs)}
            summary["latency"][f"N={n}"] = s
            t2.add_row(str(n), str(s["questions"]), f"{s['warm_p50_s']:.2f}", f"{s['warm_p95_s']:.2f}",
                       f"{s['mean_s']:.2f}", str(s["errors"]))
        base = summary["latency"].get("N=1", {}).get("warm_p50_s")
        if base:
            for n in NS:
                if f"N={n}" in summary["latency"]:
                    summary["latency"][f"N={n}"]["p50_ratio_to_N1"] = round(summary["latency"][f"N={n}"]["warm_p50_s"] / base, 2)
        console.print(t2)
    return summary


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--splits", default="dev,test")
    ap.add_argument("--conditions", default="evidence,none")
    ap.add_argument("--limit", type=int, default=0, help="first N questions per database of the chosen splits")
    ap.add_argument("--n-max", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--latency-questions", type=int, default=12, help="0: skip the latency pass")
    ap.add_argument("--max-minutes", type=float, default=0, help="stop (resumably) after this long; 0: no limit")
    ap.add_argument("--records", default=str(common.result_path("ask", "candidates")).replace(".json", ".partial.jsonl"))
    ap.add_argument("--out", default=str(common.result_path("ask", "candidates")))
    ap.add_argument("--latency-ns", default=",".join(map(str, NS)),
                    help="the N of the latency pass, e.g. 1 for the default configuration alone")
    ap.add_argument("--latency-only", action="store_true", help="skip the accuracy pass")
    ap.add_argument("--summarize", action="store_true", help="only print the table of the recorded runs")
    args = ap.parse_args(argv)
    args.latency_ns = [int(n) for n in args.latency_ns.split(",")]
    run = common.Run(__spec__, argv)
    console = Console()
    records_path = Path(args.records)
    records_path.parent.mkdir(parents=True, exist_ok=True)
    finished = True
    if not args.summarize:
        settings = load_settings()
        settings.llm.persist_prefixes = False
        llm = make_llm(settings)
        deadline = time.monotonic() + (args.max_minutes * 60 if args.max_minutes else 1e9)
        finished = args.latency_only or accuracy_pass(args, settings, llm, records_path, deadline, console)
        if finished and args.latency_questions:
            finished = latency_pass(args, settings, llm, records_path, deadline, console)
    records = [json.loads(line) for line in records_path.read_text().splitlines()] if records_path.exists() else []
    summary = summarize(records, console)
    run.save(args.out, {"finished": finished, "temperature": args.temperature, "n_max": args.n_max,
                        "records_file": str(records_path), "summary": summary})
    console.print(f"wrote {args.out}" + ("" if finished else " (time budget reached: run again to go on)"))


if __name__ == "__main__":
    main()
