"""Follow-up questions (issue 33): execution accuracy of the second turn of a conversation with and without
the first turn as context, with the real local model.

Each pair is a first question (with its gold SQL) and an elliptical follow-up ("And for DC Comics?", "Only
those taller than 200 cm.") with the gold SQL of the second turn. The pairs (``bench/service/data/
followups.json``, fixed and committed, split into dev and test) are

* 12 written by hand on the bundled demo database (BIRD's superhero), and
* made from Spider dev gold SQL by deterministic rules (``--build``; seed 33): change a filter's value
  ("And for X?"), change a threshold ("And more than N?"), change the aggregate ("And the maximum?"),
  count the rows ("How many are there?"), add a filter ("Only those whose <column> is X."). A candidate is
  kept only when the new gold SQL returns rows that differ from the first turn's.

Per pair the model writes the first turn's SQL from its question, then the follow-up's SQL twice:
``none`` (the follow-up alone, as a service without conversations would) and ``context`` (the first
question and the SQL the model wrote for it: what ``POST /v1/ask`` with ``conversation_id`` passes);
``--conditions`` can add ``gold_context`` (the first turn's gold SQL instead of the model's). SQL only,
no answer sentences: EX compares the rows as sets (BIRD's execution match).

    python -m bench.service.followups --build        # (re)make the pairs file from Spider dev (deterministic)
    nice -n 10 python -m bench.service.followups     # dev and test, prints a table, writes bench/results/service/followups.json
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

from bench import common

DATA = common.DATA
PAIRS = Path(__file__).parent / "data" / "followups.json"
SEED = 33
SPIDER_DBS = DATA / "spider" / "database"

MARVEL = ("SELECT COUNT(*) FROM superhero AS T1 JOIN publisher AS T2 ON T1.publisher_id = T2.id "
          "WHERE T2.publisher_name = 'Marvel Comics'")
BLUE_EYES = ("SELECT T1.superhero_name FROM superhero AS T1 JOIN colour AS T2 ON T1.eye_colour_id = T2.id "
             "WHERE T2.colour = 'Blue'")
FEMALE_WEIGHT = ("SELECT AVG(T1.weight_kg) FROM superhero AS T1 JOIN gender AS T2 ON T1.gender_id = T2.id "
                 "WHERE T2.gender = 'Female'")
POWER = ("SELECT COUNT(*) FROM hero_power AS T1 JOIN superpower AS T2 ON T1.power_id = T2.id "
         "WHERE T2.power_name = 'Flight'")
ALIGN = ("SELECT COUNT(*) FROM superhero AS T1 JOIN alignment AS T2 ON T1.alignment_id = T2.id "
         "WHERE T2.alignment = 'Bad'")
DARK_HORSE = ("SELECT T1.superhero_name FROM superhero AS T1 JOIN publisher AS T2 ON T1.publisher_id = T2.id "
              "WHERE T2.publisher_name = 'Dark Horse Comics'")
GREEN_HAIR = ("SELECT COUNT(*) FROM superhero AS T1 JOIN colour AS T2 ON T1.hair_colour_id = T2.id "
              "WHERE T2.colour = 'Green'")
MARVEL_HEIGHT = ("SELECT AVG(T1.height_cm) FROM superhero AS T1 JOIN publisher AS T2 ON T1.publisher_id = T2.id "
                 "WHERE T2.publisher_name = 'Marvel Comics'")
MUTANTS = ("SELECT COUNT(*) FROM superhero AS T1 JOIN race AS T2 ON T1.race_id = T2.id WHERE T2.race = 'Mutant'")
HULK = ("SELECT T3.power_name FROM superhero AS T1 JOIN hero_power AS T2 ON T1.id = T2.hero_id "
        "JOIN superpower AS T3 ON T2.power_id = T3.id WHERE T1.superhero_name = 'Hulk'")

# (first question, its gold SQL, follow-up, the follow-up's gold SQL), written by hand on the demo database
HAND: list[tuple[str, str, str, str]] = [
    ("How many superheroes are published by Marvel Comics?", MARVEL, "And for DC Comics?",
     MARVEL.replace("Marvel Comics", "DC Comics")),
    ("List the names of the superheroes with blue eyes.", BLUE_EYES, "Only those taller than 200 cm.",
     BLUE_EYES + " AND T1.height_cm > 200"),
    ("What is the average weight of female superheroes?", FEMALE_WEIGHT, "And of the male ones?",
     FEMALE_WEIGHT.replace("'Female'", "'Male'")),
    ("How many superheroes have the power Flight?", POWER, "What about Super Strength?",
     POWER.replace("'Flight'", "'Super Strength'")),
    ("Which 3 superheroes are the tallest?", "SELECT superhero_name FROM superhero ORDER BY height_cm DESC LIMIT 3",
     "And the 3 heaviest?", "SELECT superhero_name FROM superhero ORDER BY weight_kg DESC LIMIT 3"),
    ("How many superheroes have a bad alignment?", ALIGN, "And how many are good?", ALIGN.replace("'Bad'", "'Good'")),
    ("List the superheroes published by Dark Horse Comics.", DARK_HORSE, "How many are there?",
     DARK_HORSE.replace("SELECT T1.superhero_name", "SELECT COUNT(*)")),
    ("What is the full name of Spider-Man?", "SELECT full_name FROM superhero WHERE superhero_name = 'Spider-Man'",
     "And of Batman?", "SELECT full_name FROM superhero WHERE superhero_name = 'Batman'"),
    ("How many superheroes have green hair?", GREEN_HAIR, "And green skin?",
     GREEN_HAIR.replace("hair_colour_id", "skin_colour_id")),
    ("What is the average height of the superheroes published by Marvel Comics?", MARVEL_HEIGHT,
     "And the maximum?", MARVEL_HEIGHT.replace("AVG(", "MAX(")),
    ("How many superheroes are mutants?", MUTANTS, "Only the female ones?",
     MUTANTS.replace("WHERE", "JOIN gender AS T3 ON T1.gender_id = T3.id WHERE T3.gender = 'Female' AND")),
    ("List the superpowers of Hulk.", HULK, "And of Thor?", HULK.replace("'Hulk'", "'Thor'")),
]

# how many pairs each rule contributes (sampled with SEED from every candidate the rule makes)
RULES = {"value": 12, "threshold": 6, "aggregate": 8, "count": 8, "add_filter": 8}


def run_sql(path: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.text_factory = lambda b: b.decode(errors="replace")
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def rows_match(pred: list, gold: list) -> bool:
    return {tuple(r) for r in pred} == {tuple(r) for r in gold}


def spider_path(db_id: str) -> Path:
    return SPIDER_DBS / db_id / f"{db_id}.sqlite"


def demo_path() -> Path:
    from tagql.demo import demo_database_path

    return demo_database_path()


# -- building the pairs ------------------------------------------------------------------------------------


def _columns(path: Path) -> dict[str, list[str]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')] for t in tables}
    finally:
        con.close()


def _table_of(tree: exp.Expression, column: exp.Column, cols: dict[str, list[str]]) -> str | None:
    """The table a column of the query belongs to (its alias resolved, or the one table that has it)."""
    aliases = {t.alias_or_name.lower(): t.name for t in tree.find_all(exp.Table)}
    lower = {t.lower(): t for t in cols}
    if column.table:
        name = aliases.get(column.table.lower())
        return lower.get(name.lower()) if name else None
    owners = [lower[a.lower()] for a in set(aliases.values()) if a.lower() in lower
              and column.name.lower() in (c.lower() for c in cols[lower[a.lower()]])]
    return owners[0] if len(owners) == 1 else None


def _distinct(path: Path, table: str, column: str, *, repeated: bool = False) -> list[Any]:
    """The column's stored values, most frequent first (``repeated``: only values stored twice or more)."""
    rows = run_sql(path, f'SELECT "{column}", COUNT(*) FROM "{table}" WHERE "{column}" IS NOT NULL '
                         f'GROUP BY "{column}" ORDER BY COUNT(*) DESC, "{column}"')
    return [r[0] for r in rows if r[1] > 1 or not repeated]


def _differs(path: Path, first: str, second: str) -> bool:
    try:
        a, b = run_sql(path, first), run_sql(path, second)
    except sqlite3.Error:
        return False
    return bool(b) and not rows_match(a, b) and b != [(None,)] and b != [(0,)]


def _simple(tree: exp.Expression) -> bool:
    return not any(tree.find_all(exp.Union, exp.Intersect, exp.Except)) and len(list(tree.find_all(exp.Select))) == 1


def rule_value(db_id: str, question: str, sql: str, tree: exp.Expression) -> tuple[str, str] | None:
    """One ``column = 'text'`` filter: the follow-up asks for another stored value of that column."""
    path = spider_path(db_id)
    eqs = [e for e in tree.find_all(exp.EQ) if isinstance(e.this, exp.Column)
           and isinstance(e.expression, exp.Literal) and e.expression.is_string]
    if len(eqs) != 1 or not _simple(tree):
        return None
    eq = eqs[0]
    table = _table_of(tree, eq.this, _columns(path))
    if table is None:
        return None
    values = [v for v in _distinct(path, table, eq.this.name) if isinstance(v, str)]
    if eq.expression.this not in values:
        return None  # the question's value is not stored as written
    for v in values:
        if v == eq.expression.this or "'" in v:
            continue
        new = tree.copy()
        next(e for e in new.find_all(exp.EQ) if e.expression.is_string).expression.replace(exp.Literal.string(v))
        gold = new.sql(dialect="sqlite")
        if _differs(path, sql, gold):
            return f"And for {v}?", gold
    return None


_THRESHOLD_WORDS = {exp.GT: "more than", exp.LT: "less than", exp.GTE: "at least", exp.LTE: "at most"}


def rule_threshold(db_id: str, question: str, sql: str, tree: exp.Expression) -> tuple[str, str] | None:
    """One ``column > number`` (or <, >=, <=): the follow-up asks for another threshold."""
    path = spider_path(db_id)
    cmps = [c for c in tree.find_all(*_THRESHOLD_WORDS) if isinstance(c.this, exp.Column)
            and isinstance(c.expression, exp.Literal) and not c.expression.is_string]
    if len(cmps) != 1 or not _simple(tree):
        return None
    cmp = cmps[0]
    n = float(cmp.expression.this)
    for candidate in (n + 10, n - 10, n * 2, n / 2, n + 1, n - 1):
        value = int(candidate) if float(candidate).is_integer() or abs(candidate) >= 10 else round(candidate, 1)
        if value == n or value < 0:
            continue
        new = tree.copy()
        next(c for c in new.find_all(*_THRESHOLD_WORDS) if not c.expression.is_string).expression.replace(
            exp.Literal.number(value))
        gold = new.sql(dialect="sqlite")
        if _differs(path, sql, gold):
            return f"And {_THRESHOLD_WORDS[type(cmp)]} {value}?", gold
    return None


_AGG_NEXT = {exp.Avg: (exp.Max, "And the maximum?"), exp.Max: (exp.Min, "And the minimum?"),
             exp.Min: (exp.Max, "And the maximum?"), exp.Sum: (exp.Avg, "And the average?")}


def rule_aggregate(db_id: str, question: str, sql: str, tree: exp.Expression) -> tuple[str, str] | None:
    """One AVG/MAX/MIN/SUM selected: the follow-up asks for another aggregate of the same column."""
    if not _simple(tree) or not isinstance(tree, exp.Select) or len(tree.expressions) != 1:
        return None
    agg = tree.expressions[0]
    if type(agg) not in _AGG_NEXT or tree.args.get("group"):
        return None
    kind, words = _AGG_NEXT[type(agg)]
    new = tree.copy()
    new.expressions[0].replace(kind(this=agg.this.copy()))
    gold = new.sql(dialect="sqlite")
    return (words, gold) if _differs(spider_path(db_id), sql, gold) else None


def rule_count(db_id: str, question: str, sql: str, tree: exp.Expression) -> tuple[str, str] | None:
    """A listing (no aggregate, grouping or limit) of distinct rows: the follow-up asks how many."""
    if not _simple(tree) or not isinstance(tree, exp.Select) or tree.args.get("group") or tree.args.get("limit"):
        return None
    if any(tree.find_all(exp.AggFunc)):
        return None
    path = spider_path(db_id)
    try:
        rows = run_sql(path, sql)
    except sqlite3.Error:
        return None
    if len(rows) < 2 or len(set(rows)) != len(rows):
        return None
    inner = tree.copy()
    inner.set("order", None)
    return "How many are there?", f"SELECT COUNT(*) FROM ({inner.sql(dialect='sqlite')})"


def rule_add_filter(db_id: str, question: str, sql: str, tree: exp.Expression) -> tuple[str, str] | None:
    """A one-table listing without WHERE: the follow-up keeps the rows of one value of a text column with
    2-8 stored values (its most frequent one, stored more than once), named by the column's words."""
    from tagql.text import split_identifier

    if not _simple(tree) or not isinstance(tree, exp.Select) or tree.args.get("where") or tree.args.get("group"):
        return None
    tables = list(tree.find_all(exp.Table))
    if len(tables) != 1 or any(tree.find_all(exp.AggFunc)):
        return None
    path = spider_path(db_id)
    cols = _columns(path)
    table = next((t for t in cols if t.lower() == tables[0].name.lower()), None)
    if table is None:
        return None
    shown = {c.name.lower() for c in tree.find_all(exp.Column)}
    for column in cols[table]:
        if column.lower() in shown or column.lower().endswith("id"):
            continue
        values = _distinct(path, table, column)
        if _distinct(path, table, column, repeated=True)[:1] != values[:1]:
            continue  # no value is stored twice: a name or a date, not a category
        if not 2 <= len(values) <= 8 or not all(isinstance(v, str) for v in values) or "'" in values[0]:
            continue
        new = tree.copy().where(exp.EQ(this=exp.column(column), expression=exp.Literal.string(values[0])))
        gold = new.sql(dialect="sqlite")
        if _differs(path, sql, gold):
            return f"Only those whose {split_identifier(column)} is {values[0]}.", gold
    return None


RULE_FUNCS = {"value": rule_value, "threshold": rule_threshold, "aggregate": rule_aggregate, "count": rule_count,
              "add_filter": rule_add_filter}


def build() -> dict[str, Any]:
    """Every pair, deterministically: the hand-written ones and a seeded sample of each rule's candidates
    (one per Spider gold SQL, at most two per database and rule), split half dev, half test per rule."""
    spider = json.loads((DATA / "spider" / "dev.json").read_text())
    seen: set[str] = set()
    candidates: dict[str, list[dict[str, Any]]] = {r: [] for r in RULES}
    for i, item in enumerate(spider):
        if not spider_path(item["db_id"]).exists():
            continue  # wta_1 is not in the shared copy
        sql = " ".join(item["query"].replace(";", " ").split())
        if sql.lower() in seen:
            continue  # Spider asks most queries twice, in two wordings
        seen.add(sql.lower())
        try:
            tree = sqlglot.parse_one(sql, read="sqlite")
        except sqlglot.errors.ParseError:
            continue
        for name, rule in RULE_FUNCS.items():
            made = rule(item["db_id"], item["question"], sql, tree)
            if made:
                candidates[name].append({"id": f"spider-{i}-{name}", "source": "spider", "rule": name,
                                         "db_id": item["db_id"], "question": item["question"], "sql": sql,
                                         "follow_up": made[0], "follow_up_sql": made[1]})
    rng = random.Random(SEED)
    pairs: list[dict[str, Any]] = []
    for name, want in RULES.items():
        pool = candidates[name][:]
        rng.shuffle(pool)
        per_db: Counter = Counter()
        chosen = []
        for c in pool:
            if per_db[c["db_id"]] < 2:
                chosen.append(c)
                per_db[c["db_id"]] += 1
            if len(chosen) == want:
                break
        pairs += [{**c, "split": "dev" if j % 2 == 0 else "test"} for j, c in enumerate(chosen)]
    order = list(range(len(HAND)))
    rng.shuffle(order)
    for j, k in enumerate(order):
        q1, s1, q2, s2 = HAND[k]
        assert _differs(demo_path(), s1, s2), q2
        pairs.append({"id": f"superhero-{k}", "source": "hand", "rule": "hand", "db_id": "superhero",
                      "question": q1, "sql": s1, "follow_up": q2, "follow_up_sql": s2,
                      "split": "dev" if j % 2 == 0 else "test"})
    # round-robin over the rules within each split, so the first N pairs of a split (--limit) cover every rule
    rank = Counter()
    keyed = []
    for p in pairs:
        keyed.append((p["split"], rank[(p["split"], p["rule"])], list(RULES).index(p["rule"]) if p["rule"] in RULES
                      else len(RULES), p))
        rank[(p["split"], p["rule"])] += 1
    pairs = [k[-1] for k in sorted(keyed, key=lambda k: k[:3])]
    return {"seed": SEED, "rules": RULES, "candidates": {k: len(v) for k, v in candidates.items()}, "pairs": pairs}


# -- running ---------------------------------------------------------------------------------------------


def db_path(pair: dict[str, Any]) -> Path:
    return demo_path() if pair["db_id"] == "superhero" and pair["source"] == "hand" else spider_path(pair["db_id"])


def ask_pair(pair: dict[str, Any], llm: Any, settings: Any, conditions: list[str], databases: dict) -> dict:
    """The first turn, then the follow-up under each condition; one record."""
    from tagql.db import open_database
    from tagql.errors import TagqlError
    from tagql.pipeline import TagQL
    from tagql.text2sql.context import Turn

    path = db_path(pair)
    if path not in databases:
        databases[path] = open_database(path, settings=settings.db)
    pipeline = TagQL(databases[path], llm, settings=settings)
    gold1, gold2 = run_sql(path, pair["sql"]), run_sql(path, pair["follow_up_sql"])
    rec: dict[str, Any] = {k: pair[k] for k in ("id", "split", "rule", "db_id", "question", "follow_up")}

    def write(question: str, history: list[Turn]) -> dict[str, Any]:
        t0 = time.perf_counter()
        try:
            outcome = pipeline.synthesizer.run(question, history=history)
            return {"sql": outcome.sql, "rows": [list(r) for r in outcome.result.rows[:50]],
                    "wall_s": round(time.perf_counter() - t0, 2), "_rows": outcome.result.rows}
        except TagqlError as exc:
            return {"error": exc.one_line(), "wall_s": round(time.perf_counter() - t0, 2)}

    first = write(pair["question"], [])
    first["correct"] = "_rows" in first and rows_match(first.pop("_rows"), gold1)
    rec["first"] = first
    for cond in conditions:
        if cond == "none":
            history: list[Turn] = []
        elif cond == "context":
            history = [Turn(pair["question"], first.get("sql", ""))]
        else:  # gold_context
            history = [Turn(pair["question"], pair["sql"])]
        out = write(pair["follow_up"], history)
        out["correct"] = "_rows" in out and rows_match(out.pop("_rows"), gold2)
        out.pop("rows", None)
        rec[cond] = out
    first.pop("rows", None)
    return rec


def summarize(records: list[dict], conditions: list[str]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for split in ("dev", "test", "all"):
        rs = [r for r in records if split == "all" or r["split"] == split]
        if not rs:
            continue
        s: dict[str, Any] = {"n": len(rs), "first_turn_ex": round(sum(r["first"]["correct"] for r in rs) / len(rs), 3)}
        for cond in conditions:
            s[cond] = round(sum(r[cond]["correct"] for r in rs) / len(rs), 3)
        by_rule = {}
        for rule in sorted({r["rule"] for r in rs}):
            rr = [r for r in rs if r["rule"] == rule]
            by_rule[rule] = {"n": len(rr), **{c: sum(r[c]["correct"] for r in rr) for c in conditions}}
        s["by_rule"] = by_rule
        summary[split] = s
    return summary


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", action="store_true", help="remake the pairs file from Spider dev and exit")
    ap.add_argument("--splits", default="dev,test")
    ap.add_argument("--conditions", default="none,context", help="none, context, gold_context")
    ap.add_argument("--limit", type=int, default=0,
                    help="first N pairs per split (0 = all; the file lists each split round-robin over the rules)")
    ap.add_argument("--out", default=str(common.result_path("service", "followups")))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    if args.build:
        built = build()
        common.write_json(PAIRS, built)
        counts = Counter((p["rule"], p["split"]) for p in built["pairs"])
        print(f"wrote {PAIRS}: {len(built['pairs'])} pairs; candidates per rule {built['candidates']}; "
              + ", ".join(f"{r}/{s} {n}" for (r, s), n in sorted(counts.items())))
        return

    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from tagql.config import load_settings
    from tagql.llm import make_llm

    conditions = args.conditions.split(",")
    pairs = json.loads(PAIRS.read_text())["pairs"]
    chosen = []
    for split in args.splits.split(","):
        part = [p for p in pairs if p["split"] == split]
        chosen += part[: args.limit] if args.limit else part
    chosen.sort(key=lambda p: p["db_id"])  # one schema prompt evaluated per database, not per pair
    settings = load_settings()
    llm = make_llm(settings)
    console = Console()
    records: list[dict] = []
    databases: dict = {}
    partial_path = Path(args.out + ".partial.jsonl")
    partial_path.parent.mkdir(parents=True, exist_ok=True)
    with Progress(console=console) as progress, partial_path.open("a") as partial:
        task = progress.add_task("follow-ups", total=len(chosen))
        for pair in chosen:
            rec = ask_pair(pair, llm, settings, conditions, databases)
            records.append(rec)
            partial.write(json.dumps(rec, default=str) + "\n")
            partial.flush()
            done = summarize(records, conditions)["all"]
            progress.update(task, advance=1, description="follow-ups " + " ".join(
                f"{c} {done[c]:.2f}" for c in conditions))
    summary = summarize(records, conditions)
    table = Table(title=f"follow-up EX, second turn ({settings.llm.model})")
    for col in ("split", "n", "first turn", *conditions, "context - none"):
        table.add_column(col, justify="right")
    for split, s in summary.items():
        gain = s["context"] - s["none"] if "context" in s and "none" in s else float("nan")
        table.add_row(split, str(s["n"]), f"{s['first_turn_ex']:.3f}", *(f"{s[c]:.3f}" for c in conditions),
                      f"{gain:+.3f}")
    console.print(table)
    run.save(args.out, {"model": settings.llm.model, "pairs_file": str(PAIRS.relative_to(common.REPO)),
                        "conditions": conditions, "limit_per_split": args.limit or None,
                        "summary": summary, "records": records})
    partial_path.unlink(missing_ok=True)
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
