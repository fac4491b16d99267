"""LM operators over 10k / 100k / 1M rows: cost grows with the distinct inputs, not the rows (issue 37 item 3).

    python -m bench.tag.operator_scale                          # scripted LLM, DuckDB and SQLite, 10k/100k/1M rows
    python -m bench.tag.operator_scale --llm local --engines duckdb   # the real local model (take the lock)

A table ``orders(id, country, amount)`` of N rows over 50 distinct country names (row i has country
``COUNTRIES[(i * 7919) % 50]``, amount ``i % 100``; deterministic), written to a DuckDB and a SQLite file
under a temp folder. Each size runs in its own process (so its peak RSS is its own), with an in-memory
operator cache (every size pays for its distinct inputs), two statements:

* filter: ``SELECT COUNT(*), SUM(amount) FROM orders WHERE LM_FILTER('{country} is a country in Europe', country)``
* map:    ``SELECT LM_MAP('the continent of {country}', country) AS continent, COUNT(*) ... GROUP BY continent``

and reports LM calls, wall time and peak RSS (``VmHWM`` of the worker; ``base_rss_mb`` is the worker
after opening the database and the model, before the statements). Target: LM calls the same at every size,
peak RSS flat from 100k to 1M rows.

``--llm scripted``: a scripted double (P(yes) from a fixed set of European names, the continent from a
table), instant, so the curve shows the engine's own cost. ``--llm local``: ``tag.model`` in process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common

COUNTRIES = {  # name -> continent (50 names; the scripted LLM's knowledge)
    "France": "Europe", "Germany": "Europe", "Italy": "Europe", "Spain": "Europe", "Portugal": "Europe",
    "Poland": "Europe", "Sweden": "Europe", "Norway": "Europe", "Greece": "Europe", "Austria": "Europe",
    "Belgium": "Europe", "Netherlands": "Europe", "Ireland": "Europe", "Hungary": "Europe", "Finland": "Europe",
    "Japan": "Asia", "China": "Asia", "India": "Asia", "Vietnam": "Asia", "Thailand": "Asia",
    "Indonesia": "Asia", "Pakistan": "Asia", "Mongolia": "Asia", "Nepal": "Asia", "Malaysia": "Asia",
    "Brazil": "South America", "Argentina": "South America", "Chile": "South America", "Peru": "South America",
    "Colombia": "South America", "Venezuela": "South America", "Uruguay": "South America",
    "Kenya": "Africa", "Nigeria": "Africa", "Egypt": "Africa", "Ghana": "Africa", "Morocco": "Africa",
    "Ethiopia": "Africa", "Senegal": "Africa", "Tanzania": "Africa",
    "Canada": "North America", "Mexico": "North America", "Cuba": "North America", "Guatemala": "North America",
    "Jamaica": "North America", "Panama": "North America",
    "Australia": "Oceania", "Fiji": "Oceania", "Samoa": "Oceania", "Tonga": "Oceania",
}
NAMES = list(COUNTRIES)
FILTER_SQL = ("SELECT COUNT(*), SUM(amount) FROM orders "
              "WHERE LM_FILTER('{country} is a country in Europe', country)")
MAP_SQL = ("SELECT LM_MAP('the continent of {country}', country) AS continent, COUNT(*) AS n FROM orders "
           "GROUP BY continent ORDER BY n DESC, continent")


def country_of(i: int) -> str:
    return NAMES[(i * 7919) % len(NAMES)]


def build_sqlite(path: Path, n: int) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, country TEXT NOT NULL, amount INTEGER NOT NULL)")
    con.executemany("INSERT INTO orders VALUES (?, ?, ?)", ((i, country_of(i), i % 100) for i in range(n)))
    con.commit()
    con.close()


def build_duckdb(path: Path, n: int) -> None:
    import duckdb

    con = duckdb.connect(str(path))
    names = ", ".join("'" + c + "'" for c in NAMES)
    con.execute(f"CREATE TABLE orders AS SELECT i::BIGINT AS id, list_extract([{names}], "
                f"((i * 7919) % {len(NAMES)})::BIGINT + 1) AS country, (i % 100)::BIGINT AS amount "
                f"FROM range({n}) t(i) ORDER BY i")
    con.close()


def scripted_llm() -> Any:
    from tagql.llm.scripted import ScriptedLLM

    def claim_country(messages: Any) -> str:
        text = messages[-1].content
        return next((c for c in NAMES if c in text), "")

    def choice_probs(messages: Any, choices: list[str]) -> list[float]:
        yes = COUNTRIES.get(claim_country(messages)) == "Europe"
        p = 0.9 if yes else 0.05
        return [p / 2, p / 2, (1 - p) / 2, (1 - p) / 2]

    return ScriptedLLM(lambda messages: COUNTRIES.get(claim_country(messages), "unknown"),
                       choice_probs=choice_probs)


def rss_mb() -> float:
    """This process's peak RSS: ``VmHWM`` (reset by exec; ``ru_maxrss`` keeps the forking parent's peak)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(db_path: str, llm_kind: str) -> dict[str, Any]:
    """One size in this process: open, run the filter and the map, report calls, seconds, peak RSS."""
    from tagql.config import for_tag, load_settings
    from tagql.db import open_database
    from tagql.llm import make_llm
    from tagql.tag.cache import OpCache
    from tagql.tag.operators import SemEngine
    from tagql.tag.udf import execute_with_lm, register_lm_functions

    t0 = time.perf_counter()
    llm = scripted_llm() if llm_kind == "scripted" else make_llm(for_tag(load_settings()))
    load_s = time.perf_counter() - t0
    db = open_database(db_path)
    out: dict[str, Any] = {"load_s": round(load_s, 2), "base_rss_mb": round(rss_mb(), 1)}
    for name, sql in (("filter", FILTER_SQL), ("map", MAP_SQL)):
        engine = SemEngine(llm, cache=OpCache(None), cascade="off", max_calls=1000)
        register_lm_functions(db, engine)
        t = time.perf_counter()
        result = execute_with_lm(db, sql, engine)
        out[name] = {"lm_calls": engine.stats.lm_calls, "seconds": round(time.perf_counter() - t, 2),
                     "rows": [list(r) for r in result.rows[:8]]}
    out["peak_rss_mb"] = round(rss_mb(), 1)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--engines", default="duckdb,sqlite")
    ap.add_argument("--llm", choices=("scripted", "local"), default="scripted")
    ap.add_argument("--json", default=None)
    ap.add_argument("--worker", nargs=2, metavar=("DB", "LLM"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return 0
    run = common.Run(__spec__, argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="tagql-scale-") as tmp:
        for engine in engines:
            for n in sizes:
                path = Path(tmp) / f"orders_{n}.{'duckdb' if engine == 'duckdb' else 'sqlite'}"
                t = time.perf_counter()
                (build_duckdb if engine == "duckdb" else build_sqlite)(path, n)
                build_s = time.perf_counter() - t
                proc = subprocess.run([sys.executable, "-m", "bench.tag.operator_scale", "--worker", str(path),
                                       args.llm], capture_output=True, text=True, cwd=common.REPO,
                                      env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
                if proc.returncode:
                    print(proc.stderr[-2000:], file=sys.stderr)
                    return 1
                got = json.loads(proc.stdout.strip().splitlines()[-1])
                row = {"engine": engine, "rows": n, "build_s": round(build_s, 1), **got}
                rows.append(row)
                print(f"{engine:7} {n:>9,} rows  filter {got['filter']['lm_calls']:3} calls "
                      f"{got['filter']['seconds']:7.2f} s   map {got['map']['lm_calls']:3} calls "
                      f"{got['map']['seconds']:7.2f} s   peak RSS {got['peak_rss_mb']:7.1f} MB "
                      f"(base {got['base_rss_mb']:.1f})", flush=True)
                path.unlink()
    print("\n| engine | rows | filter LM calls | filter s | map LM calls | map s | peak RSS MB | base RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['engine']} | {r['rows']:,} | {r['filter']['lm_calls']} | {r['filter']['seconds']} | "
              f"{r['map']['lm_calls']} | {r['map']['seconds']} | {r['peak_rss_mb']} | {r['base_rss_mb']} |")
    out = Path(args.json) if args.json else common.result_path("tag", f"operator_scale_{args.llm}")
    run.save(out, {"llm": args.llm, "distinct_inputs": len(NAMES), "results": rows})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
