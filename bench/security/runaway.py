"""Runaway work (issue 35 item 2): each case in a fresh process under a statement timeout; how long until
it stops, with what message, and the process's peak RSS (the row cap and value limits must bound memory).

    python -m bench.security.runaway [--limit 2] [--dialects sqlite,duckdb,postgres] [--out FILE]

PostgreSQL needs TAGQL_TEST_POSTGRES_URL (a SELECT-only role, see docs/security.md).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import common

CASES: dict[str, dict[str, str]] = {
    "sqlite": {
        "recursive CTE": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
        "recursive CTE, UNION (dedup set grows)":
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION SELECT x + 1 FROM c) SELECT count(*) FROM c",
        "cross join 750^4": "SELECT count(*) FROM superhero a, superhero b, superhero c, superhero d",
        "10M-row result": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 10000000) "
                          "SELECT x, printf('%.200c', 'x') FROM c",
        "randomblob(1e9)": "SELECT length(randomblob(1000000000))",
        "sort of 421M rows": "SELECT a.id FROM superhero a, superhero b, superhero c ORDER BY random() LIMIT 1",
    },
    "duckdb": {
        "recursive CTE": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
        "cross join 750^4": "SELECT count(*) FROM superhero a, superhero b, superhero c, superhero d",
        "10M-row result": "SELECT range, repeat('x', 200) FROM range(10000000)",
        "repeat 1e9": "SELECT length(repeat('x', 1000000000))",
        "sort of 421M rows": "SELECT a.id FROM superhero a, superhero b, superhero c ORDER BY random() LIMIT 1",
        "string_agg of 10M": "SELECT length(string_agg(repeat('x', 100), ',')) FROM range(10000000)",
    },
    "postgres": {
        "recursive CTE": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
        "cross join 750^4": "SELECT count(*) FROM superhero a, superhero b, superhero c, superhero d",
        "10M-row result": "SELECT g, repeat('x', 200) FROM generate_series(1, 10000000) g",
        "421M-row result": "SELECT a.id, b.id, c.id FROM superhero a, superhero b, superhero c",
        "pg_sleep(60)": "SELECT pg_sleep(60)",
        "3,000-CTE chain": "WITH c0 AS (SELECT 1 AS x), " + ", ".join(
            f"c{i} AS (SELECT x FROM c{i - 1})" for i in range(1, 3000)) + " SELECT x FROM c2999",
        "repeat 1e9": "SELECT length(repeat('x', 1000000000))",
    },
}


def one(dialect: str, target: str, sql: str, limit: float, row_cap: int) -> dict[str, object]:
    from tagql.config import DatabaseSettings
    from tagql.db import open_database
    from tagql.errors import TagqlError

    db = open_database(target, settings=DatabaseSettings(statement_timeout_s=limit, row_cap=row_cap))
    start = time.perf_counter()
    try:
        r = db.execute(sql)
        outcome = f"{len(r.rows)} rows" + (" (cut at the row cap)" if r.truncated else "")
    except TagqlError as exc:
        outcome = f"{exc.__class__.__name__}: {exc.one_line()}"
    seconds = time.perf_counter() - start
    usable = db.execute("SELECT 1").rows == [(1,)]
    return {"seconds": round(seconds, 2), "outcome": outcome[:150], "usable_after": usable,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def targets(work: Path) -> dict[str, str]:
    from tagql.demo import demo_database_path

    out = {"sqlite": str(demo_database_path())}
    try:
        from tagql.db.duck import copy_sqlite_to_duckdb

        path = work / "superhero.duckdb"
        copy_sqlite_to_duckdb(demo_database_path(), path)
        out["duckdb"] = str(path)
    except ImportError:
        pass
    if os.environ.get("TAGQL_TEST_POSTGRES_URL"):
        out["postgres"] = os.environ["TAGQL_TEST_POSTGRES_URL"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=float, default=2.0, help="statement timeout, seconds")
    ap.add_argument("--row-cap", type=int, default=1000)
    ap.add_argument("--dialects", default="sqlite,duckdb,postgres")
    ap.add_argument("--out", default=str(common.result_path("security", "runaway")))
    ap.add_argument("--one", nargs=3, metavar=("DIALECT", "TARGET", "CASE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    if args.one:
        dialect, target, case = args.one
        print(json.dumps(one(dialect, target, CASES[dialect][case], args.limit, args.row_cap)))
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        found = targets(Path(tmp))
        for dialect in args.dialects.split(","):
            if dialect not in found:
                continue
            for case in CASES[dialect]:
                proc = subprocess.run([sys.executable, "-m", "bench.security.runaway", "--limit", str(args.limit), "--row-cap",
                                       str(args.row_cap), "--one", dialect, found[dialect], case],
                                      capture_output=True, text=True, timeout=max(60, args.limit * 20),
                                      cwd=common.REPO)
                try:
                    got = json.loads(proc.stdout.strip().splitlines()[-1])
                except (IndexError, json.JSONDecodeError):
                    got = {"seconds": None, "outcome": "crashed: " + proc.stderr.strip()[-200:], "usable_after": False,
                           "peak_rss_mb": None}
                got.update(dialect=dialect, case=case,
                           within=got["seconds"] is not None and got["seconds"] <= 1.5 * args.limit)
                rows.append(got)
                print(f"{dialect:9} {case:40} {got['seconds']!s:>6} s  {got['peak_rss_mb']!s:>5} MB  "
                      f"{'ok ' if got['within'] else 'SLOW'} {got['outcome'][:90]}", flush=True)
    run.save(args.out, {"limit_s": args.limit, "row_cap": args.row_cap, "cases": rows})
    print(f"wrote {args.out}")
    return 0 if all(r["within"] and r["usable_after"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
