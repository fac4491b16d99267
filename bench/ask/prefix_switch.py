"""A/B latency of the local backend's system-prefix handling, this checkout vs another commit, in one process.

The host's decoding speed drifts by up to 1.4x within an hour, so two separate `bench/ask/bird.py` runs cannot
resolve a 0.1 s difference. Here both versions of ``tagql.llm.local`` are loaded side by side (two copies of
the model), and every question is asked with both, alternating which goes first. The rest of the pipeline is
this checkout's.

    git worktree add /tmp/base ec39afc        # the commit to compare with
    python -m bench.ask.prefix_switch --baseline /tmp/base --per-db 12

Prints per-database p50 and the paired median difference; writes bench/results/ask/prefix_switch.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics as st
import time
from pathlib import Path

from bench import common

DATA = common.DATA
DBS = ["student_club", "superhero", "toxicology"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, help="checkout of the commit to compare with")
    ap.add_argument("--per-db", type=int, default=12, help="warm questions per database (first N of bird/dev.json)")
    ap.add_argument("--out", default=str(common.result_path("ask", "prefix_switch")))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)

    from tagql.config import load_settings
    from tagql.db import open_database
    from tagql.llm.local import LocalLLM
    from tagql.llm.model_pack import resolve_model_path
    from tagql.pipeline import TagQL

    spec = importlib.util.spec_from_file_location("baseline_local", Path(args.baseline) / "src/tagql/llm/local.py")
    assert spec is not None and spec.loader is not None
    baseline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(baseline)
    settings = load_settings()
    path = resolve_model_path(settings.llm.model, settings.cache_dir)
    llms = {"baseline": baseline.LocalLLM(path), "this": LocalLLM(path)}
    questions = json.loads((DATA / "bird" / "dev.json").read_text())
    records, turn = [], 0
    for db_id in DBS:
        db = open_database(DATA / "bird" / "dev_databases" / db_id / f"{db_id}.sqlite", settings=settings.db)
        for j, q in enumerate([q for q in questions if q["db_id"] == db_id][: args.per_db + 1]):
            order = list(llms) if turn % 2 == 0 else list(reversed(llms))
            turn += 1
            rec = {"db": db_id, "question_id": q["question_id"], "cold": j == 0}
            for name in order:
                t0 = time.perf_counter()
                try:
                    sql = TagQL(db, llms[name], settings=settings).ask(q["question"]).sql
                except Exception as exc:  # noqa: BLE001 - a failed question still has a latency
                    sql = f"error: {exc}"
                rec[name] = {"s": round(time.perf_counter() - t0, 3), "sql": sql}
            records.append(rec)
            print(f"{db_id:<13} baseline {rec['baseline']['s']:5.2f} s  this {rec['this']['s']:5.2f} s", flush=True)

    summary = {}
    print(f"\n{'db':<13} {'n':>3} {'p50 baseline':>13} {'p50 this':>9} {'paired median diff':>19} {'same SQL':>9}")
    for db_id in [*DBS, "all"]:
        rs = [r for r in records if not r["cold"] and db_id in ("all", r["db"])]
        diff = [r["this"]["s"] - r["baseline"]["s"] for r in rs]
        s = {"n": len(rs), "p50_baseline_s": st.median(r["baseline"]["s"] for r in rs),
             "p50_this_s": st.median(r["this"]["s"] for r in rs), "paired_median_diff_s": round(st.median(diff), 3),
             "paired_mean_diff_s": round(st.mean(diff), 3),
             "same_sql": sum(r["this"]["sql"] == r["baseline"]["sql"] for r in rs)}
        summary[db_id] = s
        print(f"{db_id:<13} {s['n']:>3} {s['p50_baseline_s']:>13.3f} {s['p50_this_s']:>9.3f} "
              f"{s['paired_median_diff_s']:>+19.3f} {s['same_sql']:>9}")
    run.save(args.out, {"baseline": args.baseline, "per_db": args.per_db, "summary": summary, "records": records})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
