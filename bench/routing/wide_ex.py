"""Wide-schema answering (issue 37 item 2): Spider dev's databases merged into ONE SQLite database (data
included; tables renamed ``<db>__<table>``, keys and foreign keys kept), asked the same Spider dev questions
as their own small databases, end to end with the local model.

* ``own``: ``tagql.connect(db=<its own database>)``, the whole (small) schema in the prompt;
* ``wide``: ``tagql.connect(collection=<a one-database collection of the merged database>)``: the router
  picks the tables, the SQL prompt shows them plus the tables on the foreign-key paths between them and,
  in a table over ``answer.max_prompt_columns`` columns, the columns that matter (routing/linking.py).

EX compares the answer's rows with the gold SQL's on the question's own database (the merged tables hold
the same rows). Reported per condition: EX, SQL-prompt tokens p50/p95 (the first model call of each
question), routing ms, warm ask p50. Questions: ``--per-db`` per database of Spider dev, a fixed seeded
sample (nothing here is tuned; the prompts and the linking rules were not fitted to these questions).

    python -m bench.routing.wide_ex --per-db 2 --work /tmp/wide_ex     # 40 questions, 20 databases
    python -m bench.routing.wide_ex --questions train --conditions wide@0,wide@3,wide@5 --work /tmp/wide_ex
        # tuning answer.max_routed_tables on 38 Spider train questions (19 train databases), never on dev
    python -m bench.routing.wide_ex --per-db 1000 --differing 30 --conditions wide@3,wide@3o --work /tmp/wide_ex
        # a paired comparison of the two rankings where it can matter: 30 seeded questions, of all dev
        # questions, whose capped prompts differ (the others get the same prompt, so the same answer); the
        # EX change over all questions is the share that differ x the EX change on the sample

Prints a table and writes bench/results/routing/wide_ex.json.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

from bench import common
from bench.ask.bird import rows_match
from tagql.config import load_settings
from tagql.db import open_database
from tagql.db.schema import Schema
from tagql.errors import TagqlError

DATA = common.DATA
SEP = "__"


def merge_databases(dbs: list[str], out: Path) -> dict[str, Any]:
    """One SQLite file with every table of ``dbs`` as ``<db>__<table>`` (columns and foreign keys as in
    Spider's tables.json, primary keys as the file itself declares them, every row copied).

    The primary key comes from the file, not from tables.json: tables.json names only one column of a
    composite key (``course_arrange``'s is (Course_ID, Teacher_ID, Grade)), and a key declared on that one
    column made the copy drop rows (85 of 840 tables lost rows in the first run, so the merged database
    no longer answered like the small ones). Every copy is checked row for row against its source."""
    entries = {e["db_id"]: e for e in json.loads((DATA / "spider" / "tables.json").read_text())}
    if out.exists():
        out.unlink()
    con = sqlite3.connect(out)
    tables = columns = 0
    uncopied: list[str] = []
    for db in dbs:
        schema = Schema.from_spider(entries[db])
        con.execute("ATTACH DATABASE ? AS src", (f"file:{DATA / 'spider' / 'database' / db / f'{db}.sqlite'}?mode=ro",))
        for t in schema.tables:
            q = lambda name: '"' + name.replace('"', '""') + '"'  # noqa: E731
            cols = [f"{q(c.name)} {c.type or ''}".rstrip() for c in t.columns]
            declared = con.execute("SELECT name, pk FROM pragma_table_info(?, 'src') WHERE pk > 0 ORDER BY pk",
                                   (t.name,)).fetchall()
            pk = [n for n, _ in declared]
            if pk:
                cols.append(f"PRIMARY KEY ({', '.join(map(q, pk))})")
            for fk in t.foreign_keys:
                cols.append(f"FOREIGN KEY ({', '.join(map(q, fk.columns))}) REFERENCES "
                            f"{q(db + SEP + fk.ref_table)}({', '.join(map(q, fk.ref_columns))})")
            name = q(db + SEP + t.name)
            con.execute(f"CREATE TABLE {name} ({', '.join(cols)})")
            names = ", ".join(q(c.name) for c in t.columns)
            try:
                con.execute(f"INSERT INTO {name} ({names}) SELECT {names} FROM src.{q(t.name)}")
                source_rows = con.execute(f"SELECT count(*) FROM src.{q(t.name)}").fetchone()[0]
                copied = con.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
                if copied != source_rows:
                    raise sqlite3.Error(f"{copied} of {source_rows} rows copied")
            except sqlite3.Error as exc:  # a tables.json column the file spells otherwise: keep the table empty
                con.execute(f"DELETE FROM {name}")
                uncopied.append(f"{db}.{t.name}")
                print(f"  {db}.{t.name}: rows not copied ({exc})")
            tables += 1
            columns += len(t.columns)
        con.commit()
        con.execute("DETACH DATABASE src")
    con.close()
    return {"databases": len(dbs), "tables": tables, "columns": columns, "bytes": out.stat().st_size,
            "tables_without_rows": uncopied}


class FirstPromptTokens:
    """The model, recording the prompt tokens of the first call of each question (the SQL prompt)."""

    def __init__(self, llm: Any) -> None:
        self.llm, self.first, self._fresh = llm, [], True

    def next_question(self) -> None:
        self._fresh = True

    def complete(self, messages: Any, **kw: Any) -> Any:
        c = self.llm.complete(messages, **kw)
        if self._fresh:
            self.first.append(c.prompt_tokens)
            self._fresh = False
        return c

    def __getattr__(self, name: str) -> Any:
        return getattr(self.llm, name)


def ships(db: str) -> bool:
    """Whether Spider ships the database's file (wta_1's does not)."""
    return (DATA / "spider" / "database" / db / f"{db}.sqlite").exists()


def pick_questions(kind: str, per_db: int, seed: int) -> tuple[list[dict[str, Any]], list[str]]:
    """``per_db`` seeded questions from each of the databases asked about: Spider dev's databases whose
    file ships (``kind="dev"``, reported), or 19 seeded Spider *train* databases with their train questions
    (``kind="train"``, Spider-Syn's train_spider.json in Spider's own wording: for tuning settings; never a
    dev database or question). Returns the questions ({db_id, question, query}) and the databases."""
    dev = json.loads((DATA / "spider" / "dev.json").read_text())
    dbs = sorted(d for d in {e["db_id"] for e in dev} if ships(d))
    pool = dev
    if kind == "train":
        dev_dbs = set(dbs)
        pool = [{"db_id": e["db_id"], "question": e["SpiderQuestion"], "query": e["query"]}
                for e in json.loads((DATA / "spider_syn" / "train_spider.json").read_text())
                if e["db_id"] not in dev_dbs]
        dbs = sorted(random.Random(seed).sample(sorted(d for d in {e["db_id"] for e in pool} if ships(d)), 19))
    rng = random.Random(seed)
    chosen: list[dict[str, Any]] = []
    for db in dbs:
        qs = [e for e in pool if e["db_id"] == db]
        chosen += rng.sample(qs, min(per_db, len(qs)))
    return chosen, dbs


def answered_elsewhere(question: dict[str, Any], dbs: list[str]) -> list[str]:
    """The other merged databases on which the question's gold SQL compiles as written (every table and
    column it names exists there): in the merged database the question cannot tell them apart from its
    own ("For each type, how many ships are there?" is ship_mission's and ship_1's alike). SQLite's
    ``EXPLAIN`` prepares the statement without running it."""
    out = []
    for db in dbs:
        if db == question["db_id"]:
            continue
        con = sqlite3.connect(f"file:{DATA / 'spider' / 'database' / db / f'{db}.sqlite'}?mode=ro", uri=True)
        try:
            con.execute("EXPLAIN " + question["query"])
            out.append(db)
        except sqlite3.Error:
            pass
        finally:
            con.close()
    return out


def summarize(records: list[dict[str, Any]], conditions: list[str]) -> dict[str, dict[str, Any]]:
    """Per condition: EX, EX on the questions no other merged database answers by the same SQL
    (:func:`answered_elsewhere`), prompt tokens, routing ms, warm latency. Prints the table."""
    summary = {}
    print(f"{'condition':<10}{'n':>4}{'EX':>8}{'n one db':>10}{'EX there':>10}{'prompt p50':>12}{'prompt p95':>12}"
          f"{'route ms p50':>14}{'warm p50 s':>12}")
    for cond in conditions:
        rs = [r for r in records if r["condition"] == cond]
        one = [r for r in rs if not r.get("elsewhere")]
        toks = [r["prompt_tokens"] for r in rs if r["prompt_tokens"]]
        warm = [r["wall_s"] for r in rs if not r["cold"]]
        s = {"n": len(rs), "ex": round(sum(r["correct"] for r in rs) / len(rs), 4),
             "n_one_db": len(one), "ex_one_db": round(sum(r["correct"] for r in one) / len(one), 4) if one else None,
             "prompt_tokens_p50": statistics.median(toks) if toks else None, "prompt_tokens_p95": common.pct(toks, 0.95),
             "route_ms_p50": statistics.median([r.get("route_ms", 0) for r in rs]),
             "warm_p50_s": round(statistics.median(warm), 2) if warm else None}
        summary[cond] = s
        print(f"{cond:<10}{s['n']:>4}{s['ex']:>8.3f}{s['n_one_db']:>10}{s['ex_one_db'] or 0:>10.3f}"
              f"{s['prompt_tokens_p50']!s:>12}{s['prompt_tokens_p95']!s:>12}{s['route_ms_p50']!s:>14}{s['warm_p50_s']!s:>12}")
    return summary


def condition_settings(settings: Any, cond: str) -> Any:
    """The settings of ``wide@N`` (N routed tables ranked in context) or ``wide@No`` (the router's first N)."""
    capped = settings.model_copy(deep=True)
    cap = cond.partition("@")[2]
    capped.answer.max_routed_tables = int(cap.rstrip("o") or 0)
    capped.answer.wide_table_ranking = "router" if cap.endswith("o") else "context"
    return capped


def prompts_differ(name: str, settings: Any, chosen: list[dict[str, Any]], pair: list[str], n: int,
                   seed: int, gold: bool = False) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``n`` seeded questions of ``chosen`` whose SQL-prompt tables differ between the two conditions (routed
    once, no model), and how many of all differ. ``gold``: only those where one prompt holds every table the
    gold SQL reads and the other does not (where the table choice can decide the answer)."""
    from bench.routing.wide_coverage import gold_tables

    import tagql
    from tagql.routing.linking import routed_prompt_schema

    session = tagql.connect(collection=name, settings=settings)
    answers = [condition_settings(settings, c).answer for c in pair]
    differ = []
    for e in chosen:
        cand = session.route(e["question"], 1)[0]
        schema = session.database(cand.database).schema
        shown = [{t.name for t in routed_prompt_schema(schema, cand.tables, e["question"], a, cand.table_scores).tables}
                 for a in answers]
        if gold:
            need = gold_tables(e["db_id"], e["query"]) or set()
            held = [need <= {t.lower() for t in names} for names in shown]
            if need and held[0] != held[1]:
                differ.append(e)
        elif shown[0] != shown[1]:
            differ.append(e)
    picked = random.Random(seed).sample(differ, min(n, len(differ)))
    return picked, {"pair": pair, "differ": len(differ), "of": len(chosen), "share": round(len(differ) / len(chosen), 4),
                     "gold_coverage_differs": gold}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-db", type=int, default=2)
    ap.add_argument("--seed", type=int, default=37)
    ap.add_argument("--work", default="/tmp/tagql_wide_ex", help="scratch folder for the merged database and collection")
    ap.add_argument("--conditions", default="own,wide",
                    help="own, wide, and wide@N: the wide database with answer.max_routed_tables = N "
                         "(wide@No: N in the router's order, answer.wide_table_ranking = router)")
    ap.add_argument("--questions", choices=("dev", "train"), default="dev",
                    help="Spider dev questions (reported), or Spider train questions (Spider-Syn's "
                         "train_spider.json, original wording) of train databases, for tuning settings")
    ap.add_argument("--dbs", choices=("all", "dev"), default="all",
                    help="merge every Spider database that ships (163, ~870 tables) or only Spider dev's 19")
    ap.add_argument("--prepare", action="store_true", help="merge and index only (no model), for a later run")
    ap.add_argument("--differing", type=int, default=0,
                    help="only N seeded questions whose prompt tables differ between the first two wide@ conditions")
    ap.add_argument("--gold-differs", action="store_true",
                    help="with --differing: only questions where one prompt holds the gold tables and the other not")
    ap.add_argument("--summarize", default=None,
                    help="re-print the table of a saved run (adding which questions another database answers)")
    ap.add_argument("--out", default=str(common.result_path("routing", "wide_ex")))
    args = ap.parse_args(argv)
    all_dbs = sorted(e["db_id"] for e in json.loads((DATA / "spider" / "tables.json").read_text()) if ships(e["db_id"]))
    if args.summarize:
        saved = json.loads(Path(args.summarize).read_text())
        gold = {(e["db_id"], e["question"]): e for e in pick_questions(saved["question_set"], 100_000, saved["seed"])[0]}
        for r in saved["records"]:
            if "elsewhere" not in r:
                r["elsewhere"] = answered_elsewhere(gold[(r["db"], r["question"])], all_dbs)
        saved["summary"] = summarize(saved["records"], list(saved["summary"]))
        Path(args.summarize).write_text(json.dumps(saved, indent=1))
        return
    run = common.Run(__spec__, argv)
    import os

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    os.environ["TAGQL_COLLECTIONS_DIR"] = str(work / "collections")
    settings = load_settings()
    settings.llm.persist_prefixes = False
    chosen, dbs = pick_questions(args.questions, args.per_db, args.seed)
    merged_dbs = dbs if args.dbs == "dev" else all_dbs
    target = work / f"spider_{args.dbs}_wide.sqlite"
    import tagql
    from tagql.api import index_collection
    from tagql.llm import make_llm

    name = f"spider_{args.dbs}_wide"
    meta_file = work / f"{name}.json"
    if args.prepare or not meta_file.exists():
        t = time.perf_counter()
        merged = merge_databases(merged_dbs, target)
        merged["merge_s"] = round(time.perf_counter() - t, 1)
        print(f"merged: {merged}")
        t = time.perf_counter()
        last = [""]

        def tick(stage: str, done: int, total: int) -> None:
            if stage != last[0] or done == total:
                print(f"  index: {stage} {done}/{total} ({time.perf_counter() - t:.0f} s)", flush=True)
                last[0] = stage

        info = index_collection(name, databases=[str(target)], progress=tick, settings=settings)
        merged["index_s"] = round(time.perf_counter() - t, 1)
        merged["index"] = {k: v for k, v in info.items() if k != "ok"}
        meta_file.write_text(json.dumps(merged))
        if args.prepare:
            return
    merged = json.loads(meta_file.read_text())
    differing = None
    if args.differing:
        pair = [c for c in args.conditions.split(",") if c.startswith("wide@")][:2]
        if len(pair) < 2:
            raise SystemExit("--differing compares two wide@ conditions: name them in --conditions")
        chosen, differing = prompts_differ(name, settings, chosen, pair, args.differing, args.seed, args.gold_differs)
        print(f"prompts differ between {pair[0]} and {pair[1]}: {differing['differ']} of {differing['of']} "
              f"questions; running {len(chosen)}", flush=True)
    llm = FirstPromptTokens(make_llm(settings))
    elsewhere = {(e["db_id"], e["question"]): answered_elsewhere(e, merged_dbs) for e in chosen}
    records = []
    for cond in args.conditions.split(","):
        wide = None
        if cond.startswith("wide"):
            wide = tagql.connect(collection=name, llm=llm, settings=condition_settings(settings, cond))
        for i, e in enumerate(chosen):
            gold_db = open_database(DATA / "spider" / "database" / e["db_id"] / f"{e['db_id']}.sqlite")
            session = wide or tagql.connect(db=str(DATA / "spider" / "database" / e["db_id"] / f"{e['db_id']}.sqlite"),
                                            llm=llm, settings=settings)
            llm.next_question()
            rec: dict[str, Any] = {"condition": cond, "db": e["db_id"], "question": e["question"],
                                   "elsewhere": elsewhere[(e["db_id"], e["question"])]}
            start = time.perf_counter()
            try:
                answer = session.ask(e["question"], force=True) if wide else session.ask(e["question"])
                gold = gold_db.execute(e["query"], timeout_s=60, row_cap=1_000_000).rows
                rec.update(sql=answer.sql, correct=rows_match([tuple(r) for r in answer.rows], gold) and not answer.truncated,
                           route_ms=round(1000 * answer.timings.get("route_s", 0.0), 1),
                           routed=answer.routing[0].tables if answer.routing else None)
            except TagqlError as exc:
                rec.update(correct=False, error=exc.one_line())
            rec["wall_s"] = round(time.perf_counter() - start, 3)
            rec["prompt_tokens"] = llm.first[-1] if llm.first and not llm._fresh else None
            rec["cold"] = i == 0
            records.append(rec)
            print(f"  {cond} {i + 1}/{len(chosen)} {e['db_id']}: {'ok' if rec['correct'] else 'x'} {rec['wall_s']} s "
                  f"{rec['prompt_tokens']} tokens", flush=True)
    summary = summarize(records, args.conditions.split(","))
    if differing:
        a, b = (summary[c]["ex"] for c in differing["pair"])
        differing["ex_change_over_all"] = round(differing["share"] * (a - b), 4)
        print(f"EX change over all {differing['of']} questions, {differing['pair'][0]} - {differing['pair'][1]}: "
              f"{differing['share']:.3f} x ({a:.3f} - {b:.3f}) = {differing['ex_change_over_all']:+.4f}")
    run.save(args.out, {"merged": merged, "merged_databases": args.dbs, "question_set": args.questions,
                        "questions": len(chosen), "seed": args.seed, "summary": summary, "records": records,
                        "differing": differing})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
