"""Execution accuracy of SQL generated with retrieved domain statements (local LLM).

Conditions side by side on the SAME questions: ``none``, ``all``, ``bm25``, ``sbr``, ``hybrid``
(retrieved top-K from the database's store of DBA-screened IN-set statements) and ``qs`` (the
question's own NL evidence, the reference). Databases: the three BIRD dev databases available here.
Gold SQL: ``GT_SQL`` of ``Templatized_Domain_Statement/<db>_set1.json`` (IN) and ``SQL`` of
``data/<db>_OUT.json`` (OUT), i.e. the 2023 files the questions come from. A prediction is correct
when its result rows equal the gold rows as sets (BIRD's rule). A fixed subset: the first
``--per-db`` questions of each split after a seeded shuffle.

    nice -n 10 python bench/knowledge_exec_accuracy.py --per-db 8 --splits IN
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from tagql.config import load_settings
from tagql.db import open_database
from tagql.errors import TagqlError
from tagql.knowledge import ScoredStatement
from tagql.knowledge.importer import import_database, load_set1
from tagql.llm import make_llm
from tagql.tag.query import QuerySynthesizer

DBS = ["student_club", "superhero", "toxicology"]
CONDITIONS = ["none", "all", "bm25", "sbr", "hybrid", "qs"]


def questions(data: Path, db: str, split: str, n: int, seed: int) -> list[dict]:
    if split == "IN":
        items = [{"question": it.question, "gold": it.sql, "evidence": it.nl} for it in load_set1(data, db)]
    else:
        raw = json.loads((data / "domain_knowledge" / "data" / f"{db}_OUT.json").read_text())
        items = [{"question": r["question"], "gold": r["SQL"],
                  "evidence": [e.strip() for e in r.get("evidence", "").split(";") if e.strip()]} for r in raw]
    rng = random.Random(seed)
    rng.shuffle(items)
    return items[:n]


def same_result(db, pred_rows, gold_sql: str) -> bool:  # noqa: ANN001
    gold = db.execute(gold_sql, row_cap=100_000)
    return set(map(tuple, pred_rows)) == set(map(tuple, gold.rows))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data")
    ap.add_argument("--dbs", nargs="+", default=DBS)
    ap.add_argument("--splits", nargs="+", default=["IN", "OUT"])
    ap.add_argument("--conditions", nargs="+", default=CONDITIONS)
    ap.add_argument("--per-db", type=int, default=10)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stores", type=Path, default=Path("/tmp/tagql_knowledge_stores"))
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "knowledge_exec_accuracy.json")
    ap.add_argument("--summarise-only", action="store_true", help="summarise the records already in --out")
    a = ap.parse_args()
    if a.summarise_only:
        records = json.loads(a.out.read_text())["records"]
        done = {(r["db"], r["split"], r["i"]) for r in records}
        full = [k for k in done if {r["condition"] for r in records if (r["db"], r["split"], r["i"]) == k} >= set(a.conditions)]
        records = [r for r in records if (r["db"], r["split"], r["i"]) in full]
        summarise(records, a, load_settings(), time.time())
        return
    settings = load_settings()
    llm = make_llm(settings)
    records, t0 = [], time.time()
    for dbname in a.dbs:
        db = open_database(a.data / "bird" / "dev_databases" / dbname / f"{dbname}.sqlite", settings=settings.db)
        kb, _ = import_database(a.data, dbname, a.stores / f"{dbname}.kb")
        rets = {c: kb.retriever(c) for c in a.conditions if c not in ("qs",)}
        synth = QuerySynthesizer(db, llm, max_tokens=settings.answer.max_sql_tokens, retries=settings.answer.sql_retries)
        for split in a.splits:
            for qi, item in enumerate(questions(a.data, dbname, split, a.per_db, a.seed)):
                for cond in a.conditions:
                    if cond == "qs":
                        stmts = [ScoredStatement(e, "", 1.0) for e in item["evidence"]]
                    else:
                        stmts = rets[cond].retrieve(item["question"], None if cond == "all" else a.k)
                    t = time.time()
                    try:
                        out = synth.run(item["question"], stmts)
                        ok, sql, err = same_result(db, out.result.rows, item["gold"]), out.sql, ""
                    except TagqlError as exc:
                        ok, sql, err = False, "", exc.one_line()
                    rec = {"db": dbname, "split": split, "i": qi, "condition": cond, "question": item["question"],
                           "correct": ok, "sql": sql, "error": err, "statements": len(stmts),
                           "seconds": round(time.time() - t, 1)}
                    records.append(rec)
                    print(f"{dbname:13s} {split:3s} {qi:3d} {cond:7s} {'OK ' if ok else 'bad'} {rec['seconds']:5.1f}s",
                          flush=True)
                a.out.parent.mkdir(parents=True, exist_ok=True)
                a.out.write_text(json.dumps({"records": records}, indent=1))
    summarise(records, a, settings, t0)


def summarise(records: list[dict], a: argparse.Namespace, settings, t0: float) -> None:  # noqa: ANN001
    summary: dict[str, dict[str, float]] = {}
    for split in a.splits:
        for cond in a.conditions:
            rs = [r for r in records if r["split"] == split and r["condition"] == cond]
            if rs:
                summary.setdefault(split, {})[cond] = round(100 * sum(r["correct"] for r in rs) / len(rs), 1)
    n = {s: len([r for r in records if r["split"] == s and r["condition"] == a.conditions[0]]) for s in a.splits}
    print(f"\nexecution accuracy (%), local model {settings.llm.model}, k={a.k}, questions per split: {n}")
    print(f"{'split':6s} " + " ".join(f"{c:>7s}" for c in a.conditions))
    for split, row in summary.items():
        print(f"{split:6s} " + " ".join(f"{row.get(c, float('nan')):7.1f}" for c in a.conditions))
    per_db = {f"{db}/{s}": {c: [r["correct"] for r in records if (r["db"], r["split"], r["condition"]) == (db, s, c)].count(True)
                            for c in a.conditions} for db in a.dbs for s in a.splits}
    print("correct per database:", json.dumps(per_db))
    a.out.write_text(json.dumps({"summary": summary, "questions": n, "correct_per_db": per_db, "per_db": a.per_db,
                                 "seed": a.seed, "k": a.k, "dbs": a.dbs, "model": settings.llm.model,
                                 "seconds": round(time.time() - t0), "records": records}, indent=1))


if __name__ == "__main__":
    main()
