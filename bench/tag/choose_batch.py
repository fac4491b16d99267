"""LM_CHOOSE packed into numbered records vs one record per call: what packing costs in accuracy.

A join over a key the database lost asks the LM, per row of the near side, which stored name of the far
side the row belongs to (`LM_CHOOSE`, tagql.tag.plan.orphaned_joins). One call per row passes the per-question
call cap on a large near side (750 heroes, cap 200), so `MapEngine.choose_many` packs the rows into numbered
records, one grammar-forced option per line, when they would not fit. This measures, on the train-split
databases of the TAG question pool (never dev or test), the share of rows placed right with 1, 4, 8 and 16
records per call, the calls and the time, on the gold links the lost keys held:

* superhero   - hero -> publisher (`superhero.publisher_id`, the pool's train entry), 24 stored publishers;
* car_1       - car maker -> home country (`car_makers.Country`), 15 stored countries;
* world_1     - city -> country (`city.CountryCode`), 239 stored country names.

    python -m bench.tag.choose_batch [--per-call 1,4,8,16] [--items 48] [--out ...]

Prints a table and writes JSON. Fresh operator cache: every choice is asked; tag.model, temperature 0.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import sys
import time

from bench import common
from tagql.config import for_tag, load_settings
from tagql.llm import make_llm
from tagql.tag.cache import OpCache
from tagql.tag.operators import SemEngine

# (name, database path under the shared data, instruction, field, gold (item, answer) SQL, options SQL)
SETS = [
    ("superhero", "bird/dev_databases/superhero/superhero.sqlite", "the publisher of {superhero_name}",
     "superhero_name",
     "SELECT s.superhero_name, p.publisher_name FROM superhero AS s JOIN publisher AS p ON s.publisher_id = p.id "
     "WHERE TRIM(p.publisher_name) <> '' GROUP BY s.superhero_name HAVING COUNT(*) = 1",
     "SELECT DISTINCT publisher_name FROM publisher WHERE TRIM(publisher_name) <> '' ORDER BY 1"),
    ("car_1", "spider/database/car_1/car_1.sqlite", "the home country of the car maker {FullName}", "FullName",
     "SELECT m.FullName, c.CountryName FROM car_makers AS m JOIN countries AS c ON m.Country = c.CountryId",
     "SELECT DISTINCT CountryName FROM countries ORDER BY 1"),
    ("world_1", "spider/database/world_1/world_1.sqlite", "the country of the city {Name}", "Name",
     "SELECT ci.Name, co.Name FROM city AS ci JOIN country AS co ON ci.CountryCode = co.Code GROUP BY ci.Name "
     "HAVING COUNT(*) = 1",
     "SELECT DISTINCT Name FROM country ORDER BY 1"),
]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-call", default="1,4,8,16", help="records per call to compare")
    ap.add_argument("--items", type=int, default=48, help="rows per database (seeded sample)")
    ap.add_argument("--seed", type=int, default=36)
    ap.add_argument("--out", default=str(common.result_path("tag", "choose_batch")))
    args = ap.parse_args(argv)
    sizes = [int(n) for n in args.per_call.split(",")]
    run = common.Run(__spec__, argv)
    llm = make_llm(for_tag(load_settings()))
    records = []
    for name, path, instruction, field, gold_sql, options_sql in SETS:
        con = sqlite3.connect(f"file:{common.DATA / path}?mode=ro", uri=True)
        gold = sorted(con.execute(gold_sql).fetchall())
        options = [r[0] for r in con.execute(options_sql).fetchall()]
        con.close()
        picked = random.Random(args.seed).sample(gold, min(args.items, len(gold)))
        for size in sizes:
            engine = SemEngine(llm, cache=OpCache(None), max_calls=10_000)
            items = [engine.fill(instruction, {field: item}) for item, _answer in picked]
            t0 = time.perf_counter()
            chosen = engine.choose_many(instruction, items, options, per_call=size)
            seconds = time.perf_counter() - t0
            right = sum(c == answer for c, (_item, answer) in zip(chosen, picked, strict=True))
            records.append({"set": name, "per_call": size, "items": len(picked), "options": len(options),
                            "right": right, "accuracy": round(right / len(picked), 3),
                            "lm_calls": engine.stats.lm_calls, "seconds": round(seconds, 1),
                            "chosen": {item: c for (item, _a), c in zip(picked, chosen, strict=True)}})
            print(f"  {name:10s} {size:>2d} per call: {right}/{len(picked)} right, {engine.stats.lm_calls} calls, "
                  f"{seconds:.1f} s", file=sys.stderr)
    print(f"\n{'set':10s} {'options':>7s} " + " ".join(f"{f'{n}/call acc':>11s} {'calls':>5s} {'time x':>6s}"
                                                    for n in sizes))
    summary: dict[str, dict[str, float]] = {}
    for name, *_rest in SETS:
        rows = {r["per_call"]: r for r in records if r["set"] == name}
        base = rows[sizes[0]]["seconds"] or 1.0
        print(f"{name:10s} {rows[sizes[0]]['options']:>7d} " + " ".join(
            f"{rows[n]['accuracy']:>11.3f} {rows[n]['lm_calls']:>5d} {rows[n]['seconds'] / base:>6.2f}" for n in sizes))
    for n in sizes:
        rows = [r for r in records if r["per_call"] == n]
        summary[str(n)] = {"accuracy": round(sum(r["right"] for r in rows) / sum(r["items"] for r in rows), 3),
                           "lm_calls": sum(r["lm_calls"] for r in rows),
                           "seconds": round(sum(r["seconds"] for r in rows), 1)}
    print("all       " + " " * 8 + " ".join(f"{summary[str(n)]['accuracy']:>11.3f} {summary[str(n)]['lm_calls']:>5d} "
                                         f"{summary[str(n)]['seconds'] / summary[str(sizes[0])]['seconds']:>6.2f}"
                                         for n in sizes))
    run.save(args.out, {"model": getattr(llm, "name", "llm"), "seed": args.seed, "summary": summary,
                        "records": records})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
