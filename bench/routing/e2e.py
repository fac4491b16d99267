"""End-to-end routing benchmark (issue 4, item 4): execution accuracy of `tagql ask --collection` on Spider dev.

Conditions side by side on the SAME questions, one local model:

* ``routed``  -- ``ask --collection spider-bench`` with the ``ours`` router: its best candidate's database,
  and its routed tables as the prompt schema (``tagql.connect(collection=...)``, exactly what the CLI runs);
* ``gold_db`` -- no routing: the gold database with its full schema (``TagQL``), the upper bound;
* ``bm25``    -- ``ask --collection spider-bench --route-method bm25``: bm25's top-1 database and its
  retrieved tables (the paper's zero-shot baseline router).

A question the router is unsure about (confidence below ``tagql.routing.hitl.LOW_CONFIDENCE``) is answered
anyway, as with ``--force``; it is counted (``unsure``) and ``ex_refusing`` scores it wrong, as the plain
CLI would refuse it.

Fixed subset: ``sorted(random.Random(0).sample(pool, 200))``, ``pool`` = the indices, in ``spider/dev.json``
order, of the 972 dev questions whose database file is here (``wta_1``'s 62 have no data: no gold result);
asked in dev order (questions on one database follow each other); ``--limit N`` asks the first N of them.
Per question every condition runs before the next question, so a stopped run is still paired.

Execution accuracy (``ex``, Spider's rule): the predicted SQL's result rows equal the gold SQL's
(``query``) as multisets, in order when the gold query has a top-level ORDER BY; columns in order; a result
cut at the row cap is wrong. ``ex_set`` is BIRD's set rule of bench/ask/bird.py, for comparison with it.

Records stream to ``<out>.partial.jsonl``; a new run resumes from it (a record is reused when its question,
condition, model and routing method match). ``--summarise-only`` summarises that file.

    nice -n 10 python -m bench.routing.e2e                  # 200 questions x 3 conditions
    nice -n 10 python -m bench.routing.e2e --limit 3        # smoke run
    python -m bench.routing.e2e --summarise-only

Prints a table and writes bench/results/routing/e2e.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from sqlglot import parse_one

from tagql.config import Settings, load_settings
from tagql.errors import TagqlError
from tagql.llm.base import LLM
import tagql
from tagql.models import Answer
from tagql.pipeline import TagQL, open_knowledge
from tagql.routing.collection import Collection
from tagql.routing.hitl import LOW_CONFIDENCE
from tagql.routing.metrics import gold_tables
from tagql.text2sql.answer import json_value

from bench import common
from bench.ask.bird import rows_match
from bench.routing.spider import DATA, ensure_router, spider_collection

CONDITIONS = ["routed", "gold_db", "bm25"]
SIZE, SEED = 200, 0
OUT = common.result_path("routing", "e2e")
SUBSET_RULE = ("sorted(random.Random(seed).sample(pool, size)), pool = the indices in spider/dev.json order of the "
               "questions whose database file exists; asked in dev order")


def subset(dev: Sequence[dict], size: int = SIZE, seed: int = SEED,
           usable: Callable[[str], bool] = lambda db_id: True) -> list[int]:
    """Indices into dev.json of the fixed question subset (among questions on ``usable`` databases), in dev order."""
    pool = [i for i, q in enumerate(dev) if usable(q["db_id"])]
    return sorted(random.Random(seed).sample(pool, min(size, len(pool))))


def has_data(db_id: str) -> bool:
    """Whether Spider's database file is here (``wta_1``, ``baseball_1`` and ``soccer_1`` are schema-only)."""
    return (DATA / "spider" / "database" / db_id / f"{db_id}.sqlite").exists()


def ordered(sql: str) -> bool:
    """Whether the gold query's result order is specified (a top-level ORDER BY)."""
    try:
        return parse_one(sql, read="sqlite").args.get("order") is not None
    except Exception:  # noqa: BLE001 -- Spider's evaluation rule for what sqlglot cannot parse
        return "order by" in sql.lower()


def results_match(pred: Sequence[Sequence[Any]], gold: Sequence[Sequence[Any]], in_order: bool) -> bool:
    """Rows equal as multisets (as lists when ``in_order``), after the pipeline's value normalisation."""
    p = [tuple(json_value(v) for v in r) for r in pred]
    g = [tuple(json_value(v) for v in r) for r in gold]
    return p == g if in_order else Counter(p) == Counter(g)


class _RecordingRouter:
    """Wraps a router to remember its last candidates (a failed ask still tells where it was routed)."""

    def __init__(self, router: Any) -> None:
        self.router = router
        self.last: list = []

    def route(self, question: str, k: int = 5) -> list:
        self.last = self.router.route(question, k)
        return self.last


class Conditions:
    """One way of asking per condition, sharing the model, the collection and opened databases."""

    def __init__(self, coll: Collection, llm: LLM, settings: Settings, names: Sequence[str],
                 routed_method: str = "ours") -> None:
        self.coll, self.llm, self.settings = coll, llm, settings
        self.routers: dict[str, tagql.Session] = {}
        self.load_s: dict[str, float] = {}
        for name in names:
            if name == "gold_db":
                continue
            method = {"routed": routed_method, "bm25": "bm25"}.get(name)
            if method is None:
                raise SystemExit(f"unknown condition '{name}' (use {', '.join(CONDITIONS)})")
            t = time.perf_counter()
            routed = tagql.connect(collection=coll, llm=llm, settings=settings, route_method=method)
            routed._router = _RecordingRouter(routed._loaded_router())
            self.routers[name] = routed
            self.load_s[name] = round(time.perf_counter() - t, 2)
        self._gold: dict[str, TagQL] = {}

    def ask(self, name: str, question: str, db_id: str) -> tuple[Answer | None, list[dict], TagqlError | None]:
        """The answer (or the error) and the routing candidates (best first; empty for ``gold_db``)."""
        try:
            if name == "gold_db":
                if db_id not in self._gold:
                    db = self.coll.open(db_id, settings=self.settings.db)
                    self._gold[db_id] = TagQL(db, self.llm, settings=self.settings,
                                              knowledge=open_knowledge(db.name, self.settings))
                answer, err = self._gold[db_id].ask(question), None
            else:
                session = self.routers[name]
                session._router.last = []
                answer, err = session.ask(question, force=True), None  # answer even when unsure
        except TagqlError as exc:
            answer, err = None, exc
        cands = [c.to_dict() for c in self.routers[name]._router.last] if name != "gold_db" else []
        return answer, cands, err


def read_partial(path: Path) -> dict[tuple[int, str], dict]:
    """(dev index, condition) -> the last record written for it."""
    return common.read_partial(path, lambda r: (r["i"], r["condition"]))


def run(coll: Collection, llm: LLM, settings: Settings, dev: Sequence[dict], indices: Sequence[int],
        conditions: Sequence[str], partial_path: Path, *, model: str, routed_method: str = "ours",
        advance: Callable[[], None] = lambda: None) -> tuple[list[dict], int, dict[str, float]]:
    """Ask every question under every condition; returns (records, how many were reused, router load s)."""
    done = read_partial(partial_path)
    asker = Conditions(coll, llm, settings, conditions, routed_method)
    gold_dbs: dict[str, Any] = {}
    records, reused = [], 0
    partial_path.parent.mkdir(parents=True, exist_ok=True)
    with open(partial_path, "a") as partial:
        for i in indices:
            q = dev[i]
            gold: tuple[list, bool] | str | None = None
            for cond in conditions:
                method = {"routed": routed_method, "bm25": "bm25"}.get(cond)
                old = done.get((i, cond))
                if old and old["question"] == q["question"] and old["model"] == model and old["method"] == method:
                    records.append(old)
                    reused += 1
                    advance()
                    continue
                if gold is None:  # the gold result, once per question
                    try:
                        if q["db_id"] not in gold_dbs:
                            gold_dbs[q["db_id"]] = coll.open(q["db_id"])
                        res = gold_dbs[q["db_id"]].execute(q["query"], timeout_s=60, row_cap=1_000_000)
                        gold = (res.rows, ordered(q["query"]))
                    except TagqlError as exc:
                        gold = exc.one_line()
                rec = ask_one(asker, cond, method, i, q, gold, model)
                records.append(rec)
                partial.write(json.dumps(rec, default=str) + "\n")
                partial.flush()
                advance()
    return records, reused, asker.load_s


def ask_one(asker: Conditions, cond: str, method: str | None, i: int, q: dict, gold: tuple[list, bool] | str,
            model: str) -> dict:
    """One question under one condition -> its record."""
    rec: dict[str, Any] = {"i": i, "condition": cond, "method": method, "model": model, "db": q["db_id"],
                           "question": q["question"], "gold_sql": q["query"]}
    start = time.perf_counter()
    answer, cands, err = asker.ask(cond, q["question"], q["db_id"])
    rec["wall_s"] = round(time.perf_counter() - start, 3)
    want = gold_tables(q["query"], asker.coll.schema(q["db_id"]).table_names)
    if cond == "gold_db":
        rec.update(routed_db=q["db_id"], prompt_tables=None)
    elif cands:
        top = cands[0]
        rec.update(routed_db=top["database"], prompt_tables=top["tables"], confidence=top.get("confidence"),
                   candidates=[c["database"] for c in cands])
    else:
        rec.update(routed_db=None, prompt_tables=[])
    rec["db_ok"] = rec["routed_db"] == q["db_id"]
    rec["tables_ok"] = rec["db_ok"] and (rec["prompt_tables"] is None
                                         or want <= {t.lower() for t in rec["prompt_tables"]})
    conf = rec.get("confidence")
    rec["unsure"] = conf is not None and conf < LOW_CONFIDENCE
    if answer is None:
        assert err is not None
        rec.update(correct=False, correct_set=False, error=err.one_line(),
                   attempts=[vars(a) for a in getattr(err, "attempts", [])])
        return rec
    rec.update(sql=answer.sql, timings=answer.timings, tokens=answer.tokens, retries=len(answer.attempts) - 1,
               repairs=[n for n in answer.notes if n.startswith("SQL repaired")], rows=len(answer.rows))
    if isinstance(gold, str):
        rec.update(correct=False, correct_set=False, gold_error=gold)
    else:
        gold_rows, in_order = gold
        ok = not answer.truncated
        rec["correct"] = ok and results_match(answer.rows, gold_rows, in_order)
        rec["correct_set"] = ok and rows_match([tuple(json_value(v) for v in r) for r in answer.rows],
                                               [tuple(json_value(v) for v in r) for r in gold_rows])
    return rec


def summarise(records: Sequence[dict], conditions: Sequence[str]) -> tuple[dict, Table]:
    """Per condition over the questions that have a record for every condition (a paired comparison)."""
    by_q: dict[int, dict[str, dict]] = {}
    for r in records:
        by_q.setdefault(r["i"], {})[r["condition"]] = r
    paired = [i for i, rs in by_q.items() if all(c in rs for c in conditions)]
    table = Table(title=f"tagql ask --collection on Spider dev ({len(paired)} questions, same for every condition)",
                  caption="DB: routed to the gold database; tables: prompt tables include the gold SQL's; "
                          "EX: Spider rule; set: BIRD's set rule; unsure: below the router's confidence floor")
    for col in ("condition", "n", "DB %", "tables %", "EX %", "set %", "unsure", "errors", "p50 s", "p95 s",
                "prompt tok"):
        table.add_column(col, justify="left" if col == "condition" else "right")
    summary: dict[str, dict] = {}
    for cond in conditions:
        rs = [by_q[i][cond] for i in paired]
        if not rs:
            continue
        n = len(rs)
        wall = sorted(r["wall_s"] for r in rs)
        toks = [r["tokens"]["prompt_tokens"] for r in rs if r.get("tokens")]
        s = {
            "n": n,
            "db_routed_pct": round(100 * sum(r["db_ok"] for r in rs) / n, 1),
            "tables_cover_gold_pct": round(100 * sum(r["tables_ok"] for r in rs) / n, 1),
            "ex_pct": round(100 * sum(r["correct"] for r in rs) / n, 1),
            "ex_set_pct": round(100 * sum(r["correct_set"] for r in rs) / n, 1),
            "ex_refusing_pct": round(100 * sum(r["correct"] and not r["unsure"] for r in rs) / n, 1),
            "ex_when_db_routed_pct": round(100 * sum(r["correct"] for r in rs if r["db_ok"])
                                           / max(1, sum(r["db_ok"] for r in rs)), 1),
            "unsure": sum(r["unsure"] for r in rs),
            "errors": sum("error" in r for r in rs),
            "gold_errors": sum("gold_error" in r for r in rs),
            "p50_s": round(statistics.median(wall), 2),
            "p95_s": round(wall[min(n - 1, round(0.95 * (n - 1)))], 2),
            "mean_prompt_tokens": round(statistics.mean(toks)) if toks else None,
        }
        summary[cond] = s
        table.add_row(cond, str(n), f"{s['db_routed_pct']:.1f}", f"{s['tables_cover_gold_pct']:.1f}",
                      f"{s['ex_pct']:.1f}", f"{s['ex_set_pct']:.1f}", str(s["unsure"]), str(s["errors"]),
                      f"{s['p50_s']:.2f}", f"{s['p95_s']:.2f}", str(s["mean_prompt_tokens"]))
    return summary, table


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=0, help="first N questions of the fixed subset (0 = all)")
    ap.add_argument("--size", type=int, default=SIZE, help="questions in the fixed subset")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--conditions", default=",".join(CONDITIONS))
    ap.add_argument("--routed-method", default="ours", help="router of the 'routed' condition")
    ap.add_argument("--collection", default="spider-bench")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--summarise-only", action="store_true", help="summarise <out>.partial.jsonl and exit")
    args = ap.parse_args(argv)
    stamp = common.Run(__spec__, argv)  # (run() asks the questions)
    conditions = args.conditions.split(",")
    partial_path = args.out.with_name(args.out.name + ".partial.jsonl")
    console = Console(width=None if sys.stdout.isatty() else 130)  # a log file gets the whole table
    dev = json.loads((DATA / "spider" / "dev.json").read_text())
    indices = subset(dev, args.size, args.seed, has_data)
    if args.limit:
        indices = indices[: args.limit]
    meta: dict[str, Any] = {
        "subset": {"source": "spider/dev.json", "rule": SUBSET_RULE, "seed": args.seed, "size": args.size,
                   "pool": sum(has_data(q["db_id"]) for q in dev), "limit": args.limit or None, "indices": indices},
        "conditions": conditions, "routed_method": args.routed_method, "collection": args.collection,
        "ex_rule": "multiset of result rows (list when the gold SQL has a top-level ORDER BY); row-capped = wrong",
    }
    if args.summarise_only:
        wanted = set(indices)
        records = [r for r in read_partial(partial_path).values() if r["i"] in wanted and r["condition"] in conditions]
        return write(console, stamp, args.out, meta | {"partial": True}, records, conditions)

    settings = load_settings()
    coll = spider_collection(args.collection, settings)
    if "routed" in conditions and args.routed_method == "ours":
        meta["router_build_s"] = ensure_router(coll)
    from tagql.llm import make_llm

    t = time.perf_counter()
    llm = make_llm(settings)
    meta["model"] = model = getattr(llm, "name", None) or settings.llm.model
    meta["model_load_s"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    with Progress(console=console) as progress:
        task = progress.add_task("asking", total=len(indices) * len(conditions))
        records, reused, meta["router_load_s"] = run(
            coll, llm, settings, dev, indices, conditions, partial_path, model=model,
            routed_method=args.routed_method, advance=lambda: progress.advance(task))
    meta.update(run_s=round(time.perf_counter() - t, 1), reused_records=reused,
                peak_rss_gb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 3),
                load_avg=[round(x, 2) for x in os.getloadavg()], cpus=os.cpu_count())
    write(console, stamp, args.out, meta, records, conditions)
    console.print(f"({reused} records reused from {partial_path}; model load {meta['model_load_s']} s, "
                  f"router load {meta['router_load_s']}, peak RSS {meta['peak_rss_gb']} GB, "
                  f"load average {meta['load_avg']})")


def write(console: Console, stamp: common.Run, out: Path, meta: dict, records: list[dict], conditions: Sequence[str]) -> None:
    summary, table = summarise(records, conditions)
    console.print(table)
    for cond, s in summary.items():
        line = f"{cond}: EX {s['ex_when_db_routed_pct']}% where the database was right"
        if cond == "routed":
            line += f", {s['ex_refusing_pct']}% if unsure questions are refused (plain `ask --collection`)"
        if s["gold_errors"]:
            line += f"; {s['gold_errors']} gold SQL errors"
        console.print(line)
    stamp.save(out, meta | {"summary": summary, "records": records})
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
