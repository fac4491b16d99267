"""The TAG question pool (issue 36 item 1): knowledge questions whose answer the data itself proves, made by
HIDING A COLUMN, split once into train / dev / test by database.

    python -m bench.tag.pool                 # regenerate bench/tag/data/pool.json from bench/tag/pool.toml
    python -m bench.tag.pool --check         # regenerate in memory and fail if the committed file differs

Each entry of ``pool.toml`` names columns that hold public knowledge about another column's values (a country's
continent, a circuit's country, a car maker's home country, a superhero's publisher). The gold answer of a
question is plain SQL over the real database WITH those columns; the system answers on a copy of the database
WITHOUT them (:func:`hidden_copy` drops them, so neither its schema nor its SQL can reach them), so it has to
bring the knowledge itself (LM operators judging the visible key column, or the model's own SQL guesses).

Four TAG-Bench types per group of entities (a group = the rows whose hidden column has one value, or an explicit
SQL condition over it): Match (count, list of names, superlative by a visible measure), Comparison (which of two
groups has more entities; never a group against one that contains it), Ranking (top 3 by a visible measure; only when the top 4 values are distinct, so ties
cannot make two orders right) and Aggregation (summary: the names when 2-6, else the count). Every record keeps
its gold ``SQL``: the answer is that SQL's first column, re-checked by the tests. Nothing here uses tagql or an LM.

Split: the databases tagql's TAG components were already fitted or checked on (``train_only`` in pool.toml:
superhero holds dev-set questions, world_1 the judge, cascade and LOTUS benchmarks, world_1 and car_1 plan
exemplars) are train; the others, sorted by name and shuffled with the pool's seed, give the first two to test,
the next two to dev and the rest to train (no database in two parts); the first shuffle whose dev and test parts
each hold >= 15% of the questions and >= 5 of every type is kept (:func:`split_of`; decided on counts, never on
any method's results). The output is fixed and committed; regenerating it must give the same bytes (``--check``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sqlite3
import sys
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

from bench import common

SPEC = Path(__file__).with_name("pool.toml")
OUT = common.BENCH / "tag" / "data" / "pool.json"
TYPES = ("Match", "Comparison", "Ranking", "Aggregation")
TOP_K = 3


def db_file(source: str, db: str, data: Path | None = None) -> Path:
    """The real database file of a pool record (``source`` spider or bird) under the shared data folder."""
    data = data or common.DATA
    if source == "spider":
        return data / "spider" / "database" / db / f"{db}.sqlite"
    if source == "bird":
        return data / "bird" / "dev_databases" / db / f"{db}.sqlite"
    raise ValueError(f"unknown source {source!r}")


def run_sql(path: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def gold(path: Path, sql: str) -> list:
    """A record's answer: the first column of its gold SQL's rows."""
    return [r[0] for r in run_sql(path, sql)]


def lit(v: object) -> str:
    if isinstance(v, (int, float)):
        return repr(v)
    return "'" + str(v).replace("'", "''") + "'"


# -- hiding columns -------------------------------------------------------------------------------------------

def _drop_column(con: sqlite3.Connection, table: str, column: str) -> None:
    """Remove ``table.column``: indexes on it first, then ALTER TABLE ... DROP COLUMN; a column named in a
    foreign key (SQLite refuses to drop it) is removed by rebuilding the table without it and its key."""
    import sqlglot
    from sqlglot import exp

    cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
    match = [c for c in cols if c.lower() == column.lower()]
    if not match:
        raise ValueError(f"no column {table}.{column}")
    column = match[0]
    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
                               "AND sql IS NOT NULL", (table,)).fetchall():
        if column.lower() in [r[2].lower() for r in con.execute(f'PRAGMA index_info("{name}")') if r[2]]:
            con.execute(f'DROP INDEX "{name}"')
    try:
        con.execute(f'ALTER TABLE "{table}" DROP COLUMN "{column}"')
        return
    except sqlite3.OperationalError:
        pass
    (ddl,) = con.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
    tree = sqlglot.parse_one(ddl, read="sqlite")
    schema = tree.this
    for node in list(schema.expressions):
        if isinstance(node, exp.ColumnDef) and node.name.lower() == column.lower():
            node.pop()
        elif isinstance(node, exp.ForeignKey) and any(e.name.lower() == column.lower() for e in node.expressions):
            node.pop()
    schema.set("this", exp.to_table(f"{table}__pool_new"))
    keep = ", ".join(f'"{c}"' for c in cols if c != column)
    con.execute(tree.sql(dialect="sqlite"))
    con.execute(f'INSERT INTO "{table}__pool_new" ({keep}) SELECT {keep} FROM "{table}"')
    con.execute(f'DROP TABLE "{table}"')
    con.execute(f'ALTER TABLE "{table}__pool_new" RENAME TO "{table}"')


def hidden_copy(src: Path, hidden: list[str], workdir: Path) -> Path:
    """A copy of ``src`` without the ``table.column`` names in ``hidden`` (same file name, so the system sees
    the same database name), made once per hidden set under ``workdir``."""
    tag = hashlib.sha256("\n".join([str(src), *sorted(hidden)]).encode()).hexdigest()[:12]
    dst = Path(workdir) / tag / src.name
    if dst.exists():
        return dst
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_suffix(".part")
    shutil.copyfile(src, tmp)
    con = sqlite3.connect(tmp, isolation_level=None)
    try:
        con.execute("PRAGMA foreign_keys = OFF")
        con.execute("PRAGMA legacy_alter_table = ON")
        con.execute("BEGIN")
        for item in hidden:
            table, column = item.split(".", 1)
            _drop_column(con, table, column)
        con.execute("COMMIT")
        con.execute("VACUUM")
    finally:
        con.close()
    tmp.replace(dst)
    return dst


# -- questions ------------------------------------------------------------------------------------------------

def _groups(entry: dict, path: Path) -> list[dict]:
    """Every group of an entry: ``label``, ``phrase`` and a SQL ``where`` over the hidden column(s)."""
    out = []
    if entry["groups"] == "auto":
        names = entry.get("names", {})
        skip = set(entry.get("skip_values", []))
        only = set(entry.get("only_values", []))
        vals = run_sql(path, f"SELECT DISTINCT {entry['column']} FROM {entry['from']} WHERE {entry['scope']} "
                             f"AND {entry['column']} IS NOT NULL ORDER BY 1")
        for (v,) in vals:
            shown = names.get(str(v), str(v).strip())
            if not shown or v in skip or (only and v not in only):  # disputed, obscure or unnamed: left out
                continue
            out.append({"label": shown, "phrase": entry["phrase"].format(value=shown),
                        "where": f"{entry['column']} = {lit(v)}", "auto": True})
    out += [dict(g) for g in entry.get("group", [])]
    return out


def _candidates(entry: dict, path: Path, cfg: dict) -> dict[str, list[dict]]:
    frm, key, ents = entry["from"], entry["key"], entry["entities"]
    by: dict[str, list[dict]] = {t: [] for t in TYPES}
    sized = []
    for g in _groups(entry, path):
        where = f"({entry['scope']}) AND ({g['where']})"
        n, nd = run_sql(path, f"SELECT count(*), count(DISTINCT {key}) FROM {frm} WHERE {where}")[0]
        if n == 0 or (g.get("auto") and n < entry.get("min_group", cfg["min_auto_group"])):
            continue
        members = {r[0] for r in run_sql(path, f"SELECT DISTINCT {key} FROM {frm} WHERE {where}")}
        sized.append((g, n, members))
        p = g["phrase"]
        list_sql = f"SELECT DISTINCT {key} FROM {frm} WHERE {where} ORDER BY 1"
        count_sql = f"SELECT count(*) FROM {frm} WHERE {where}"
        if n == nd:  # a count is unambiguous only when every entity has its own name
            by["Match"].append({"q": f"How many {ents} {p} are there in the database?", "sql": count_sql})
        if nd <= cfg["max_list"]:
            by["Match"].append({"q": f"List the {entry['key_label']} of all {ents} {p}.", "sql": list_sql})
        if 2 <= nd <= 6:
            by["Aggregation"].append({"q": f"Summarize the {ents} {p}.", "sql": list_sql})
        elif nd > 6 and n == nd:
            by["Aggregation"].append({"q": f"Provide information about the {ents} {p}, including how many there "
                                           f"are.", "sql": count_sql})
        for m in entry.get("numeric", []):
            expr, label = m["expr"], m["label"]
            top = run_sql(path, f"SELECT {key}, {expr} FROM {frm} WHERE {where} AND ({expr}) IS NOT NULL "
                                f"ORDER BY {expr} DESC LIMIT {TOP_K + 1}")
            vals = [r[1] for r in top]
            names = [r[0] for r in top]
            strict = all(a > b for a, b in zip(vals, vals[1:]))
            order_sql = f"SELECT {key} FROM {frm} WHERE {where} AND ({expr}) IS NOT NULL ORDER BY {expr} DESC"
            if len(top) >= 2 and top[0][1] > top[1][1]:
                by["Match"].append({"q": f"Which {entry['entity']} {p} has the highest {label}?",
                                    "sql": order_sql + " LIMIT 1"})
            if len(top) == TOP_K + 1 and strict and len(set(names[:TOP_K])) == TOP_K:
                by["Ranking"].append({"q": f"List the {TOP_K} {ents} {p} with the highest {label}, highest first.",
                                      "sql": order_sql + f" LIMIT {TOP_K}"})
    for i, (g1, n1, m1) in enumerate(sized):
        for g2, n2, m2 in sized[i + 1:]:
            if n1 == n2 or g1["label"].lower() == g2["label"].lower() or m1 <= m2 or m2 <= m1:
                continue  # a tie, or one group inside the other (Sweden vs Scandinavia) says nothing
            w1 = f"({entry['scope']}) AND ({g1['where']})"
            w2 = f"({entry['scope']}) AND ({g2['where']})"
            sql = (f"SELECT CASE WHEN (SELECT count(*) FROM {frm} WHERE {w1}) > (SELECT count(*) FROM {frm} "
                   f"WHERE {w2}) THEN {lit(g1['label'])} ELSE {lit(g2['label'])} END")
            by["Comparison"].append({"q": f"Are there more {ents} {g1['phrase']} or {ents} {g2['phrase']}? Answer "
                                          f"'{g1['label']}' or '{g2['label']}'.", "sql": sql})
    return by


def split_of(records: list[dict], seed: int, train_only: tuple[str, ...] = (), min_share: float = 0.15,
             min_type: int = 5) -> dict[str, str]:
    """Databases -> train/dev/test: ``train_only`` databases go to train; the others, sorted by name and
    shuffled with the seed, give the first two to test, the next two to dev, the rest to train. The first
    shuffle (attempt 0, 1, ...) whose test and dev parts each hold at least ``min_share`` of the questions and
    ``min_type`` of every type is kept (decided on counts only)."""
    dbs = sorted({r["DB used"] for r in records})
    by = Counter((r["DB used"], r["Query type"]) for r in records)
    for attempt in range(1000):
        order = [d for d in dbs if d not in train_only]
        random.Random(f"{seed}:split:{attempt}").shuffle(order)
        split = {db: ("test" if i < 2 else "dev" if i < 4 else "train") for i, db in enumerate(order)}
        split |= {db: "train" for db in dbs if db in train_only}
        ok = True
        for part in ("dev", "test"):
            mine = [d for d in dbs if split[d] == part]
            total = sum(by[(d, t)] for d in mine for t in TYPES)
            ok &= total >= min_share * len(records) and all(sum(by[(d, t)] for d in mine) >= min_type
                                                            for t in TYPES)
        if ok:
            return split
    raise ValueError("no split of the databases meets the size rule")


def build(spec: Path = SPEC, data: Path | None = None) -> list[dict[str, Any]]:
    cfg = tomllib.loads(spec.read_text())
    seed = cfg["seed"]
    records: list[dict[str, Any]] = []
    for entry in cfg["entry"]:
        path = db_file(entry["source"], entry["db"], data)
        by = _candidates(entry, path, cfg)
        for qtype in TYPES:
            cands = by[qtype]
            if len(cands) > cfg["max_per_type"]:  # a fixed sample, same on every run
                keep = sorted(random.Random(f"{seed}:{entry['id']}:{qtype}").sample(range(len(cands)),
                                                                                   cfg["max_per_type"]))
                cands = [cands[i] for i in keep]
            for c in cands:
                answer = gold(path, c["sql"])
                if not answer or any(a is None or a == "" for a in answer):
                    continue
                records.append({"DB used": entry["db"], "Query": c["q"], "Query type": qtype,
                                "Knowledge/Reasoning Type": "Knowledge", "Answer": answer,
                                "Reference": entry["id"], "Hidden columns": list(entry["hide"]),
                                "Source": entry["source"], "SQL": c["sql"]})
    seen: set[tuple[str, str]] = set()
    unique = []
    for r in records:  # the same wording twice (two entries of one database) is kept once
        if (r["DB used"], r["Query"]) not in seen:
            seen.add((r["DB used"], r["Query"]))
            unique.append(r)
    split = split_of(unique, seed, tuple(cfg.get("train_only", ())))
    for r in unique:
        r["Split"] = split[r["DB used"]]
    order = {"train": 0, "dev": 1, "test": 2}
    unique.sort(key=lambda r: (order[r["Split"]], r["DB used"]))  # stable: generation order within a database
    return [{"Query ID": i, **r} for i, r in enumerate(unique)]


def dumps(records: list[dict]) -> str:
    return "[\n" + ",\n".join(json.dumps(r, ensure_ascii=False, default=str) for r in records) + "\n]\n"


def counts(records: list[dict]) -> str:
    lines = [f"{'split':<6} {'database':<12} " + " ".join(f"{t[:6]:>6}" for t in TYPES) + "  total"]
    by = Counter((r["Split"], r["DB used"], r["Query type"]) for r in records)
    for sp in ("train", "dev", "test"):
        dbs = sorted({r["DB used"] for r in records if r["Split"] == sp})
        for db in dbs:
            row = [by[(sp, db, t)] for t in TYPES]
            lines.append(f"{sp:<6} {db:<12} " + " ".join(f"{x:>6}" for x in row) + f"  {sum(row):>5}")
        row = [sum(by[(sp, d, t)] for d in dbs) for t in TYPES]
        lines.append(f"{sp:<6} {'(all)':<12} " + " ".join(f"{x:>6}" for x in row) + f"  {sum(row):>5}")
    lines.append(f"total  {len(records)} questions over {len({r['DB used'] for r in records})} databases")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="fail if the committed pool differs from a regeneration")
    args = ap.parse_args(argv)
    records = build()
    text = dumps(records)
    print(counts(records))
    if args.check:
        same = args.out.exists() and args.out.read_text() == text
        print("pool is up to date" if same else f"{args.out} differs from a regeneration")
        return 0 if same else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
