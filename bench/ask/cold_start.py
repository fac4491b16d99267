"""The first question on a database in a new process (one `tagql ask` from the shell), with and without
the schema prompt's KV state kept on disk (`llm.persist_prefixes`, `<cache_dir>/kv/`).

For each database, three fresh processes ask the same question: without the disk cache; with it
while it is still empty (evaluates the schema and writes its state); with it filled (reads the
state). Each prints its own wall time for `connect` + `ask`; the SQL and answer must be the same.
Clears `<cache_dir>/kv/` first.

    python -m bench.ask.cold_start

Prints a table and writes bench/results/ask/cold_start.json.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tagql.config import load_settings

from bench import common

DATA = common.DATA
QUESTIONS = {
    "student_club": "How many members are there in the club?",
    "superhero": "How many superheroes have blue eyes?",
    "toxicology": "How many molecules are carcinogenic?",
}
CHILD = """
import json, sys, time
t0 = time.perf_counter()
import tagql
session = tagql.connect(sys.argv[1])
answer = session.ask(sys.argv[2])
prefixes = session.llm._prefixes
print(json.dumps({"seconds": round(time.perf_counter() - t0, 2), "sql": answer.sql, "answer": answer.answer,
                  "evaluated_prefixes": prefixes.misses, "read_from_disk": prefixes.disk_hits}))
"""


def ask_in_new_process(db: Path, question: str, persist: bool) -> dict:
    env = dict(os.environ, TAGQL_LLM__PERSIST_PREFIXES="true" if persist else "false")
    out = subprocess.run([sys.executable, "-c", CHILD, str(db), question], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    run = common.Run(__spec__, argv)
    console = Console()
    kv = Path(load_settings().cache_dir).expanduser() / "kv"
    shutil.rmtree(kv, ignore_errors=True)
    results = {}
    for name, question in QUESTIONS.items():
        db = DATA / "bird" / "dev_databases" / name / f"{name}.sqlite"
        off = ask_in_new_process(db, question, persist=False)
        first = ask_in_new_process(db, question, persist=True)
        again = ask_in_new_process(db, question, persist=True)
        results[name] = {"off": off, "first_with_cache": first, "cached": again,
                         "same_output": off["sql"] == again["sql"] and off["answer"] == again["answer"]}
        console.print(f"{name}: {off['seconds']} s / {first['seconds']} s / {again['seconds']} s")
    size = sum(f.stat().st_size for f in kv.rglob("*.kv")) / 1e6
    table = Table(title="first question in a new process (connect + ask), schema state on disk or not")
    for col in ("database", "no disk cache", "cache empty (writes)", "cache filled (reads)", "speed-up", "same output"):
        table.add_column(col, justify="right")
    for name, r in results.items():
        table.add_row(name, f"{r['off']['seconds']:.1f} s", f"{r['first_with_cache']['seconds']:.1f} s",
                      f"{r['cached']['seconds']:.1f} s", f"{r['off']['seconds'] / r['cached']['seconds']:.1f}x",
                      str(r["same_output"]))
    console.print(table)
    console.print(f"disk: {size:.0f} MB in {kv}")
    out = run.save(common.result_path("ask", "cold_start"), {"results": results, "disk_mb": round(size, 1)})
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
