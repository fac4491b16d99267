"""Answer streaming and disconnect-to-stop latency of `tagql serve` (issue 33: "the `sql` event arrives before
the first `answer` token; a disconnect stops generation within 1 s").

Each trial sends ``POST /v1/ask`` with ``Accept: text/event-stream`` over loopback, reads the events, and
closes the connection at a chosen point:

- ``answer``: right after the first ``answer`` token (the model is writing the sentence);
- ``sql``: ``--sql-wait`` seconds after the ``statements`` event (the model is writing the SQL; a disconnect
  that lands while llama.cpp still evaluates the prompt waits for that batch to end).

The stop is observed from outside: ``/metrics`` is polled every 10 ms until ``tagql_queue_pending`` is 0 (the
worker left the question). Reported per trial: time to the ``sql`` event and to the first answer token (from
the request), whether ``sql`` came first, and the disconnect-to-stop latency.

Two servers: a scripted model streaming one word per ``--stream-ms`` (the service's own latency), and with
``--model`` the real local model (`tagql serve`; one warm-up question loads it first). Bounded by
``--trials``; loopback only.

    nice -n 10 python -m bench.service.cancel --trials 5 --model
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import common
from bench.service.load import free_port, wait_up

QUESTION = "How many superheroes are there?"


def queue_pending(base: str) -> float:
    for line in httpx.get(f"{base}/metrics", timeout=10).text.splitlines():
        if line.startswith("tagql_queue_pending "):
            return float(line.split()[1])
    raise SystemExit("no tagql_queue_pending in /metrics")


def trial(base: str, at: str, question: str, sql_wait: float, timeout_s: float) -> dict[str, Any]:
    """One streamed question, the connection closed at ``at`` (answer | sql); the latencies."""
    t0 = time.perf_counter()
    seen: dict[str, float] = {}
    order: list[str] = []
    with httpx.stream("POST", f"{base}/v1/ask", headers={"accept": "text/event-stream"}, timeout=timeout_s,
                      json={"question": question, "database": "superhero"}) as r:
        for line in r.iter_lines():
            if not line.startswith("event: "):
                continue
            name = line[7:]
            order.append(name)
            seen.setdefault(name, time.perf_counter() - t0)
            if at == "answer" and name == "answer":
                break
            if at == "sql" and name == "statements":
                time.sleep(sql_wait)  # the model writes the SQL meanwhile (events queue up unread)
                break
            if name in ("done", "error"):
                break
    closed = time.perf_counter()
    while queue_pending(base) and time.perf_counter() - closed < timeout_s:
        time.sleep(0.01)
    stop_s = time.perf_counter() - closed
    return {"at": at, "events": order, "sql_s": _r(seen.get("sql")), "first_token_s": _r(seen.get("answer")),
            "sql_before_answer": None if "answer" not in seen else "sql" in seen and seen["sql"] <= seen["answer"],
            "ended_before_close": order[-1:] in (["done"], ["error"]), "stop_s": round(stop_s, 3)}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def run_server(cmd: list[str], log: Path, base: str, timeout_s: float) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(common.REPO / "src")}
    proc = subprocess.Popen(cmd, env=env, cwd=common.REPO, stdout=log.open("a"), stderr=subprocess.STDOUT)
    wait_up(f"{base}/v1/health", proc, timeout_s)
    return proc


def series(name: str, base: str, args: argparse.Namespace, points: list[str], timeout_s: float) -> list[dict]:
    out = []
    for i in range(args.trials):
        for at in points:
            t = trial(base, at, QUESTION, args.sql_wait, timeout_s)
            print(f"  {name:8} #{i + 1} close at {at:6}  sql {t['sql_s']}s  first token {t['first_token_s']}s  "
                  f"sql first: {t['sql_before_answer']}  stopped {t['stop_s'] * 1000:7.1f} ms after the close"
                  + ("  (had ended already)" if t["ended_before_close"] else ""), flush=True)
            out.append({"server": name, **t})
    return out


def summary(trials: list[dict]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in sorted({(t["server"], t["at"]) for t in trials}):
        stops = [t["stop_s"] for t in trials if (t["server"], t["at"]) == key and not t["ended_before_close"]]
        out[f"{key[0]}/{key[1]}"] = {
            "trials": len(stops), "stop_ms_median": round(statistics.median(stops) * 1000, 1) if stops else None,
            "stop_ms_max": round(max(stops) * 1000, 1) if stops else None,
            "sql_before_first_token": all(t["sql_before_answer"] for t in trials
                                          if (t["server"], t["at"]) == key and t["sql_before_answer"] is not None)}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=5, help="per server and closing point")
    ap.add_argument("--stream-ms", type=float, default=20.0, help="scripted model: ms per word")
    ap.add_argument("--sql-wait", type=float, default=1.0, help="close this long after 'statements'")
    ap.add_argument("--model", action="store_true", help="also the real local model")
    ap.add_argument("--model-timeout", type=float, default=1800.0)
    ap.add_argument("--out", type=Path, default=common.result_path("service", "cancel"))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    from tagql.demo import demo_database_path

    db = demo_database_path().resolve()
    trials: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="tagql-cancel-") as tmp_name:
        tmp = Path(tmp_name)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        long_sql = "SELECT COUNT(*) FROM superhero WHERE " + " AND ".join(["id > 0"] * 60)
        scripted = run_server(
            [sys.executable, "-m", "bench.service.scripted_server", "--db", str(db), "--state", str(tmp / "s.sqlite"),
             "--port", str(port), "--stream-ms", str(args.stream_ms), "--sql", long_sql,
             "--answer", " ".join(["superheroes"] * 300)], tmp / "scripted.log", base, 60)
        try:
            print(f"scripted model, {args.stream_ms:g} ms per word (a 300-word answer, a 241-word SQL)", flush=True)
            trials += series("scripted", base, args, ["answer", "sql"], 60)
        finally:
            scripted.terminate()
            scripted.wait(20)
        if args.model:
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            config = tmp / "tagql.toml"
            config.write_text(f'[service]\nstate_url = "sqlite:///{tmp / "m.sqlite"}"\nask_timeout_s = '
                              f'{args.model_timeout}\n')
            real = run_server([sys.executable, "-m", "tagql.cli", "serve", "--config", str(config), "--port",
                               str(port), "--db", f"superhero={db}"], tmp / "model.log", base, 120)
            try:
                t0 = time.perf_counter()
                warm = httpx.post(f"{base}/v1/ask", json={"question": QUESTION, "database": "superhero"},
                                  timeout=args.model_timeout).json()
                print(f"real model: warm-up answer in {time.perf_counter() - t0:.1f} s: {warm.get('answer')!r} "
                      f"({warm.get('model')})", flush=True)
                trials += series("model", base, args, ["answer", "sql"], args.model_timeout)
            finally:
                real.terminate()
                real.wait(30)
    results = {"trials": trials, "summary": summary(trials), "stream_ms": args.stream_ms, "sql_wait_s": args.sql_wait}
    for key, s in results["summary"].items():
        print(f"{key:16} stop after close: median {s['stop_ms_median']} ms, max {s['stop_ms_max']} ms over "
              f"{s['trials']} trials; sql before the first answer token: {s['sql_before_first_token']}")
    run.save(args.out, results)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
