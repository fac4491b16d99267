"""Execution accuracy of SQL generated with retrieved domain statements (local LLM).

Conditions side by side on the SAME questions: ``none``, ``all``, ``bm25``, ``sbr``, the default
retrieval method (``hybrid-static``; retrieved top-K from the database's store of DBA-screened
IN-set statements) and ``qs`` (the question's own NL evidence, the reference). Databases: the three
BIRD dev databases available here. Gold SQL: ``GT_SQL`` of ``Templatized_Domain_Statement/<db>_set1.json``
(IN) and ``SQL`` of ``data/<db>_OUT.json`` (OUT), i.e. the 2023 files the questions come from. A
prediction is correct when its result rows equal the gold rows as sets (BIRD's rule).

A condition may also be ``method@K`` (a fixed K other than ``--k``), ``method/gap`` (K chosen by
the score gap, :func:`tagql.knowledge.retrieval.gap_k`, at most 4) or ``method/auto`` (the
retriever's own choice, as in ``tagql ask``: at most ``DEFAULT_K`` statements above the method's
score floor, possibly none). ``gold`` (IN set only) gives the question's own DBA-screened
structured statements: oracle retrieval, in the same format as retrieved ones.
``--statement-style`` picks how statements frame the question in the SQL prompt (``external``, the
default, or the paper's ``paper`` list); a record is reused only under the style it was made with.
Retrieved statements take the question's numbers first, as in ``tagql ask``
(``answer.instantiate_statements``). ``TAGQL_ANSWER__SQL_RETRIES=N`` sets the repair rounds after a
failed query; ``answer.fallback_without_statements`` (on by default, as in ``tagql ask``) writes one
more query from the bare question when every try with statements failed. A record made with a smaller
budget is reused when its query ran with the statements (more tries would replay it). A reused
record's SQL goes through today's checks again (``recheck``): a new repair re-scores it without an
LLM call, a new check that rejects it runs the question again.

Fixed subset: per database and split, the first ``--per-db`` questions after a shuffle with
``--seed`` (default 0). Questions run in an interleaved order (question 0 of every database and
split, then question 1, ...), so a stopped run still covers every database and split evenly.

Every record is appended to ``<out>.partial.jsonl`` as soon as it exists; a new run with the same
arguments resumes from it: a record is reused when its question and condition match and, for
retrieval conditions, the statements retrieved now are the same ones (so a change to a retrieval
method re-runs exactly the questions whose statements changed). ``--summarise-only`` summarises
what the partial file holds (only questions that have every condition asked for), so one record
stream can be summarised for several condition sets (``--partial`` names it, ``--out`` the summary).

    nice -n 10 python -m bench.knowledge.exec_accuracy --per-db 8
    python -m bench.knowledge.exec_accuracy --per-db 8 --summarise-only
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from tagql.config import load_settings
from tagql.errors import TagqlError
from tagql.knowledge import ScoredStatement
from tagql.knowledge.importer import import_database, load_set1, structured_or_raw
from tagql.knowledge.instantiate import for_question
from tagql.knowledge.retrieval import DEFAULT_METHOD
from tagql.text2sql.query import prepare_sql
from tagql.embeddings import make_embedder

from bench import common

DBS = ["student_club", "superhero", "toxicology"]
CONDITIONS = ["none", "all", "bm25", "sbr", DEFAULT_METHOD, "qs"]
# Reference conditions that retrieve nothing: the question's own NL evidence (``qs``) and, on the IN
# set, its own DBA-screened structured statements (``gold``: oracle retrieval, to tell a retrieval
# loss from a loss to the statement format).
REFERENCES = ("qs", "gold")


def questions(data: Path, db: str, split: str, n: int, seed: int) -> list[dict]:
    if split == "IN":
        items = [{"question": it.question, "gold": it.sql, "evidence": it.nl, "structured": it.gold}
                 for it in load_set1(data, db)]
    else:
        raw = json.loads((data / "domain_knowledge" / "data" / f"{db}_OUT.json").read_text())
        items = [{"question": r["question"], "gold": r["SQL"],
                  "evidence": [e.strip() for e in r.get("evidence", "").split(";") if e.strip()], "structured": []}
                 for r in raw]
    rng = random.Random(seed)
    rng.shuffle(items)
    return items[:n]


def same_result(db, pred_rows, gold_sql: str) -> bool:
    gold = db.execute(gold_sql, row_cap=100_000)
    return set(map(tuple, pred_rows)) == set(map(tuple, gold.rows))


def statement_keys(stmts: list[ScoredStatement]) -> list[str]:
    return [f"{s.text} => {s.sql}" for s in stmts]


def read_partial(path: Path) -> dict[tuple, dict]:
    """(db, split, i, condition) -> the last record written for it."""
    return common.read_partial(path, lambda r: (r["db"], r["split"], r["i"], r["condition"]))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=common.DATA)
    ap.add_argument("--dbs", nargs="+", default=DBS)
    ap.add_argument("--splits", nargs="+", default=["IN", "OUT"])
    ap.add_argument("--conditions", nargs="+", default=CONDITIONS)
    ap.add_argument("--per-db", type=int, default=10, help="questions per database and split")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stores", type=Path, default=Path("/tmp/tagql_knowledge_stores"))
    ap.add_argument("--out", type=Path, default=common.result_path("knowledge", "exec_accuracy"))
    ap.add_argument("--partial", type=Path, default=None,
                    help="record stream to append to / resume from (default <out>.partial.jsonl)")
    ap.add_argument("--statement-style", choices=["external", "paper"], default=None,
                    help="how statements frame the question in the SQL prompt (default: the setting)")
    ap.add_argument("--summarise-only", action="store_true", help="summarise the records in the --partial file")
    a = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    partial_path = a.partial or a.out.with_name(a.out.name + ".partial.jsonl")
    settings = load_settings()
    if a.statement_style:
        settings.answer.statement_style = a.statement_style
    style = settings.answer.statement_style
    retries = settings.answer.sql_retries
    fallback = settings.answer.fallback_without_statements
    if a.summarise_only:
        summarise(list(read_partial(partial_path).values()), a, settings, run)
        return
    from tagql.db import open_database
    from tagql.llm import make_llm
    from tagql.text2sql.query import QuerySynthesizer

    llm = make_llm(settings)
    done = read_partial(partial_path)
    setup: dict[str, tuple] = {}
    for dbname in a.dbs:
        db = open_database(a.data / "bird" / "dev_databases" / dbname / f"{dbname}.sqlite", settings=settings.db)
        kb, _ = import_database(a.data, dbname, a.stores / f"{dbname}.kb", database=db,
                                embedder=make_embedder())  # checked against the data
        rets = {c: retriever(kb, c) for c in a.conditions if c not in REFERENCES}
        synth = QuerySynthesizer(db, llm, max_tokens=settings.answer.max_sql_tokens, retries=settings.answer.sql_retries,
                                  statement_style=settings.answer.statement_style, fallback_without_statements=fallback)
        qs = {split: questions(a.data, dbname, split, a.per_db, a.seed) for split in a.splits}
        setup[dbname] = (db, rets, synth, qs)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    reused = 0
    with open(partial_path, "a") as partial:
        for qi in range(a.per_db):  # interleaved: a stopped run covers every database and split evenly
            for dbname in a.dbs:
                db, rets, synth, qs = setup[dbname]
                for split in a.splits:
                    if qi >= len(qs[split]):
                        continue
                    item = qs[split][qi]
                    for cond in a.conditions:
                        if cond == "qs":
                            stmts = [ScoredStatement(e, "", 1.0) for e in item["evidence"]]
                        elif cond == "gold":
                            stmts = [ScoredStatement(p.text, p.sql, 1.0) for p in map(structured_or_raw, item["structured"])]
                        else:
                            stmts = rets[cond].retrieve(item["question"], None if cond == "all" else k_of(cond, a.k))
                        if cond != "qs" and settings.answer.instantiate_statements:  # as tagql ask does
                            stmts = for_question(item["question"], stmts)
                        keys = statement_keys(stmts)
                        old = done.get((dbname, split, qi, cond))
                        if old and old["question"] == item["question"] and old.get("statement_keys") == keys \
                                and (not stmts or old.get("statement_style", "paper") == style) \
                                and same_budget(old, retries, fallback and bool(stmts)):
                            rec = recheck(old, db, item)
                            if rec is not None:
                                reused += 1
                                if rec is not old:
                                    done[(dbname, split, qi, cond)] = rec
                                    partial.write(json.dumps(rec) + "\n")
                                continue
                        t = time.time()
                        fell_back = False
                        try:
                            out = synth.run(item["question"], stmts)
                            ok, sql, err = same_result(db, out.result.rows, item["gold"]), out.sql, ""
                            fell_back = not out.used_statements and bool(stmts)
                        except TagqlError as exc:
                            ok, sql, err = False, "", exc.one_line()
                        rec = {"db": dbname, "split": split, "i": qi, "condition": cond,
                               "question": item["question"], "correct": ok, "sql": sql, "error": err,
                               "statements": len(stmts), "statement_keys": keys, "statement_style": style,
                               "scores": [s.score for s in stmts], "model": settings.llm.model, "sql_retries": retries,
                               "fallback": fallback and bool(stmts), "fell_back": fell_back,
                               "seconds": round(time.time() - t, 1)}
                        done[(dbname, split, qi, cond)] = rec
                        partial.write(json.dumps(rec) + "\n")
                        partial.flush()
                        print(f"{dbname:13s} {split:3s} {qi:3d} {cond:13s} {'OK ' if ok else 'bad'} "
                              f"{rec['seconds']:5.1f}s", flush=True)
    print(f"({reused} records reused from {partial_path})")
    summarise(list(done.values()), a, settings, run)


def recheck(old: dict, db, item: dict) -> dict | None:
    """A reused record under today's checks of LLM-written SQL (``prepare_sql``, no LLM call): the
    record itself when its query passes unchanged, a re-scored copy when a new repair rewrites it,
    None (run again) when a new check rejects it (the model then gets its repair round)."""
    if not old.get("sql"):
        return old
    try:
        sql = prepare_sql(old["sql"], db, repairs=[], question=item["question"])
    except TagqlError:
        return None
    if sql == old["sql"]:
        return old
    try:
        ok = same_result(db, db.execute(sql).rows, item["gold"])
    except TagqlError:
        return None
    return old | {"sql": sql, "correct": ok, "rechecked_from": old["sql"]}


def same_budget(old: dict, retries: int, fallback: bool) -> bool:
    """Whether a record stands for ``retries`` repair rounds and the ``fallback`` without statements:
    made with them, or (at temperature 0 the tries replay identically) its query ran within fewer
    rounds, with the statements, so neither more rounds nor the fallback would have been used."""
    had = old.get("sql_retries", 1)
    if (had, old.get("fallback", False)) == (retries, fallback):
        return True
    return not old.get("error") and not old.get("fell_back") and had <= retries


def retriever(kb, condition: str):
    """``method``, ``method@K`` (a fixed K), ``method/gap`` (K chosen by the score gap, at most 4) or
    ``method/auto`` (what ``tagql ask`` does: at most DEFAULT_K, none below the method's floor)."""
    method = condition.split("@")[0].removesuffix("/gap").removesuffix("/auto")
    if condition.endswith("/gap"):
        return kb.retriever(method, k=4, auto_k=True)
    return kb.retriever(method)


def k_of(condition: str, default: int) -> int | None:
    if condition.endswith(("/gap", "/auto")):
        return None  # the retriever picks K
    return int(condition.split("@")[1]) if "@" in condition else default


def summarise(records: list[dict], a: argparse.Namespace, settings, run: common.Run) -> None:
    """Summary over the questions that have a record for every condition (same questions per method)."""
    records = [r for r in records if r["db"] in a.dbs and r["split"] in a.splits and r["i"] < a.per_db
               and r["condition"] in a.conditions]
    by_q: dict[tuple, set] = {}
    for r in records:
        by_q.setdefault((r["db"], r["split"], r["i"]), set()).add(r["condition"])
    full = {q for q, cs in by_q.items() if cs >= set(a.conditions)}
    records = sorted((r for r in records if (r["db"], r["split"], r["i"]) in full),
                     key=lambda r: (r["db"], r["split"], r["i"], a.conditions.index(r["condition"])))
    summary: dict[str, dict[str, float]] = {}
    for split in a.splits + ["all"]:
        for cond in a.conditions:
            rs = [r for r in records if split in ("all", r["split"]) and r["condition"] == cond]
            if rs:
                summary.setdefault(split, {})[cond] = round(100 * sum(r["correct"] for r in rs) / len(rs), 1)
    n = {s: len([q for q in full if q[1] == s]) for s in a.splits}
    per_db = {f"{db}/{s}": {"questions": len([q for q in full if q[:2] == (db, s)])}
              | {c: sum(r["correct"] for r in records if (r["db"], r["split"], r["condition"]) == (db, s, c))
                 for c in a.conditions} for db in a.dbs for s in a.splits}
    models = sorted({r.get("model", "?") for r in records})
    print(f"\nexecution accuracy (%), model {', '.join(models) or settings.llm.model}, k={a.k}, "
          f"questions per split: {n}")
    print(f"{'split':6s} " + " ".join(f"{c:>13s}" for c in a.conditions))
    for split, row in summary.items():
        print(f"{split:6s} " + " ".join(f"{row.get(c, float('nan')):13.1f}" for c in a.conditions))
    print("correct per database/split:")
    for k, v in per_db.items():
        print(f"  {k:18s} " + json.dumps(v))
    run.save(a.out, {"summary": summary, "questions": n, "correct_per_db": per_db, "per_db": a.per_db,
                                 "seed": a.seed, "k": a.k, "dbs": a.dbs, "splits": a.splits,
                                 "conditions": a.conditions, "model": models,
                                 "subset": f"per database and split, the first {a.per_db} questions after "
                                           f"random.Random({a.seed}).shuffle; only questions with every condition",
                                 "records": records})


if __name__ == "__main__":
    main()
