"""How fast Ctrl-C ends a tagql command, by what it is doing when the signal arrives (issue 31).

    python -m bench.ask.interrupt [--trials 5] [--with-model] [--out bench/results/ask/interrupt.json]

Cases: a runaway query inside SQLite's C code (``tagql sql``), and with ``--with-model`` the language model
loading / evaluating the schema prompt (``tagql ask``, llama.cpp's C code). Each trial starts the command,
waits until it is busy, sends SIGINT and times the exit. Prints a table (seconds from SIGINT to exit, exit
status, whether stderr was the one line "interrupted") and writes JSON.
"""

from __future__ import annotations

import argparse
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import common

RUNAWAY = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT COUNT(*) FROM c"


def trial(args: list[str], busy_after_s: float) -> dict:
    proc = subprocess.Popen([sys.executable, "-m", "tagql.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(busy_after_s)
    if proc.poll() is not None:
        return {"exit": proc.returncode, "seconds": None, "one_line": False, "note": "finished before SIGINT"}
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return {"exit": proc.returncode, "seconds": round(time.perf_counter() - t0, 3),
            "one_line": err.strip().splitlines() == ["interrupted"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--with-model", action="store_true", help="also interrupt the language model (slow)")
    ap.add_argument("--out", default=str(common.result_path("ask", "interrupt")))
    a = ap.parse_args(argv)
    run = common.Run(__spec__, argv)

    db = Path(tempfile.mkdtemp(prefix="tagql_interrupt_")) / "t.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t (v INTEGER)")
    cases = {"runaway SQLite query": (["sql", RUNAWAY, "--db", str(db)], 3.0)}
    if a.with_model:
        from tagql.demo import demo_database_path

        ask = ["ask", "How many superheroes are there?", "--db", str(demo_database_path())]
        cases["model loading"] = (ask, 1.5)
        cases["model evaluating"] = (ask, 6.0)
    rows = []
    for name, (args, busy) in cases.items():
        runs = [trial(args, busy) for _ in range(a.trials)]
        secs = [r["seconds"] for r in runs if r["seconds"] is not None]
        rows.append({"case": name, "trials": runs,
                     "median_s": statistics.median(secs) if secs else None, "max_s": max(secs) if secs else None,
                     "exit_130": sum(r["exit"] == 130 for r in runs), "one_line": sum(r["one_line"] for r in runs)})
    print(f"{'case':<24} {'median s':>9} {'max s':>7} {'exit 130':>9} {'one line':>9}")
    for r in rows:
        med = "-" if r["median_s"] is None else f"{r['median_s']:.3f}"
        mx = "-" if r["max_s"] is None else f"{r['max_s']:.3f}"
        print(f"{r['case']:<24} {med:>9} {mx:>7} {r['exit_130']:>5}/{a.trials:<3} {r['one_line']:>5}/{a.trials:<3}")
    out = run.save(a.out, {"trials": a.trials, "results": rows})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
