"""Load on `tagql serve` over loopback, side by side with datasette on the same SQLite file (issue 33).

1. ``/v1/sql``: 32 concurrent clients run the same read-only query against `tagql serve` and against
   datasette's JSON API (``/superhero.json?sql=...&_shape=array``), alternating rounds in one run;
   throughput, p50/p95 and errors (a non-200 or a wrong value counts as an error).
2. ``/v1/ask`` with a scripted model: p50 over HTTP (one client) against ``Session.ask`` in process,
   same question, same scripted replies: the service's own overhead.
3. Overload: 4x more concurrent asks than the model queue holds, the scripted model taking ``--delay-ms``
   per call: every request must get 200 or 429 (none hangs or fails); the server's RSS before and after.

Bounded by ``--requests`` per round and ``--seconds`` per round; loopback only. Datasette runs as an external
program (``--datasette``, default ``datasette`` on PATH: ``pip install datasette`` anywhere).

    nice -n 10 python -m bench.service.load --rounds 2 --requests 3000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import common

SQL = "SELECT COUNT(*) AS n FROM superhero WHERE height_cm > 180"
QUESTION = "How many superheroes are there?"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(url: str, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    end = time.time() + timeout_s
    while time.time() < end:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with status {proc.returncode} (see its log)")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not come up in {timeout_s} s")


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def hammer(make_request: Any, check: Any, clients: int, requests: int, seconds: float) -> dict[str, Any]:
    """``clients`` workers send requests until ``requests`` were sent or ``seconds`` passed."""
    latencies: list[float] = []
    errors: dict[str, int] = {}
    sent = 0
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        async def worker() -> None:
            nonlocal sent
            while sent < requests and time.perf_counter() < deadline:
                sent += 1
                t0 = time.perf_counter()
                try:
                    r = await make_request(client)
                    ok = r.status_code == 200 and check(r.json())
                    key = None if ok else f"status {r.status_code}" if r.status_code != 200 else "wrong value"
                except httpx.HTTPError as exc:
                    key = type(exc).__name__
                latencies.append(time.perf_counter() - t0)
                if key:
                    errors[key] = errors.get(key, 0) + 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        wall = time.perf_counter() - t0
    return {"requests": len(latencies), "seconds": round(wall, 2), "rps": round(len(latencies) / wall, 1),
            "p50_ms": round(common.pct(latencies, 0.5) * 1000, 1), "p95_ms": round(common.pct(latencies, 0.95) * 1000, 1),
            "errors": sum(errors.values()), "error_kinds": errors}


def sql_load(args: argparse.Namespace, db: Path, tmp: Path, expected: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(common.REPO / "src")}
    config = tmp / "tagql.toml"
    config.write_text(f'[service]\nstate_url = "sqlite:///{tmp / "state.sqlite"}"\nqueue_size = 64\n')
    tq_port, ds_port = free_port(), free_port()
    # both log every request (uvicorn's access log), to files: a pipe nobody reads would stall them
    tagql_proc = subprocess.Popen(
        [sys.executable, "-m", "tagql.cli", "serve", "--config", str(config), "--port", str(tq_port),
         "--db", f"superhero={db}"], env=env, stdout=(tmp / "tagql.log").open("w"), stderr=subprocess.STDOUT)
    ds_proc = subprocess.Popen(
        [args.datasette, "serve", "-i", str(db), "--port", str(ds_port), "--host", "127.0.0.1"],
        stdout=(tmp / "datasette.log").open("w"), stderr=subprocess.STDOUT)
    try:
        wait_up(f"http://127.0.0.1:{tq_port}/v1/health", tagql_proc)
        wait_up(f"http://127.0.0.1:{ds_port}/-/versions.json", ds_proc)
        tq_url = f"http://127.0.0.1:{tq_port}/v1/sql"
        ds_url = f"http://127.0.0.1:{ds_port}/superhero.json"

        def tq_req(c: httpx.AsyncClient) -> Any:
            return c.post(tq_url, json={"database": "superhero", "sql": args.sql})

        def ds_req(c: httpx.AsyncClient) -> Any:
            return c.get(ds_url, params={"sql": args.sql, "_shape": "array"})

        targets = {
            "tagql": (tq_req, lambda body: body["rows"][0][0] == expected),
            "datasette": (ds_req, lambda body: next(iter(body[0].values())) == expected),
        }
        rounds: list[dict[str, Any]] = []
        for name, (req, check) in targets.items():  # warm-up: connections, caches, code paths
            asyncio.run(hammer(req, check, args.clients, 200, 30))
        for n in range(args.rounds):
            order = list(targets) if n % 2 == 0 else list(reversed(targets))
            for name in order:
                req, check = targets[name]
                result = asyncio.run(hammer(req, check, args.clients, args.requests, args.seconds))
                rounds.append({"round": n + 1, "server": name, **result})
                print(f"  round {n + 1} {name:10s} {result['rps']:8.1f} req/s  p50 {result['p50_ms']:6.1f} ms  "
                      f"p95 {result['p95_ms']:6.1f} ms  errors {result['errors']}", flush=True)
        return {"rounds": rounds, "tagql_rss_kb": rss_kb(tagql_proc.pid)}
    finally:
        for proc in (tagql_proc, ds_proc):
            proc.terminate()
            proc.wait(timeout=20)


def ask_overhead(args: argparse.Namespace, db: Path, tmp: Path) -> dict[str, Any]:
    """/v1/ask over HTTP (one client, sequential) against Session.ask in process, same scripted replies."""
    import tagql
    from tagql.llm.scripted import ScriptedLLM

    reply_sql = "SELECT COUNT(*) FROM superhero"

    def reply(messages: Any) -> str:
        return reply_sql if "CREATE TABLE" in messages[0].content else "There are 750 superheroes."

    session = tagql.connect(str(db), llm=ScriptedLLM(reply))
    session.ask(QUESTION)
    direct = []
    for _ in range(args.asks):
        t0 = time.perf_counter()
        session.ask(QUESTION)
        direct.append(time.perf_counter() - t0)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(common.REPO / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "bench.service.scripted_server", "--db", str(db), "--state",
                             str(tmp / "ask_state.sqlite"), "--port", str(port), "--sql", reply_sql],
                            env=env, cwd=common.REPO, stdout=(tmp / "scripted.log").open("a"),
                            stderr=subprocess.STDOUT)
    try:
        wait_up(f"http://127.0.0.1:{port}/v1/health", proc)
        served = []
        with httpx.Client(timeout=30) as client:
            body = {"question": QUESTION, "database": "superhero"}
            client.post(f"http://127.0.0.1:{port}/v1/ask", json=body).raise_for_status()
            for _ in range(args.asks):
                t0 = time.perf_counter()
                r = client.post(f"http://127.0.0.1:{port}/v1/ask", json=body)
                served.append(time.perf_counter() - t0)
                assert r.status_code == 200 and r.json()["values"] == [750], r.text
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    d50, s50 = statistics.median(direct) * 1000, statistics.median(served) * 1000
    out = {"asks": args.asks, "api_p50_ms": round(d50, 2), "http_p50_ms": round(s50, 2),
           "overhead_p50_ms": round(s50 - d50, 2), "api_p95_ms": round(common.pct(direct, 0.95) * 1000, 2),
           "http_p95_ms": round(common.pct(served, 0.95) * 1000, 2)}
    print(f"  /v1/ask p50 {s50:.1f} ms over HTTP vs {d50:.1f} ms Session.ask: overhead {s50 - d50:.1f} ms", flush=True)
    return out


def overload(args: argparse.Namespace, db: Path, tmp: Path) -> dict[str, Any]:
    """4x more concurrent asks than the queue holds; every one must end in 200 or 429."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(common.REPO / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "bench.service.scripted_server", "--db", str(db), "--state",
                             str(tmp / "overload_state.sqlite"), "--port", str(port), "--delay-ms",
                             str(args.delay_ms), "--queue-size", str(args.queue_size)],
                            env=env, cwd=common.REPO, stdout=(tmp / "scripted.log").open("a"),
                            stderr=subprocess.STDOUT)
    try:
        wait_up(f"http://127.0.0.1:{port}/v1/health", proc)
        url = f"http://127.0.0.1:{port}/v1/ask"
        body = {"question": QUESTION, "database": "superhero"}
        rss_before = rss_kb(proc.pid)

        async def burst() -> list[tuple[int, float, str | None]]:
            limits = httpx.Limits(max_connections=4 * args.queue_size)
            async with httpx.AsyncClient(limits=limits, timeout=60) as client:
                async def one() -> tuple[int, float, str | None]:
                    t0 = time.perf_counter()
                    try:
                        r = await client.post(url, json=body)
                        return r.status_code, time.perf_counter() - t0, r.headers.get("retry-after")
                    except httpx.HTTPError as exc:
                        return -1, time.perf_counter() - t0, type(exc).__name__
                return await asyncio.gather(*(one() for _ in range(4 * args.queue_size)))

        waves = []
        for _ in range(args.waves):
            got = asyncio.run(burst())
            waves.append({"ok": sum(s == 200 for s, _, _ in got), "rejected_429": sum(s == 429 for s, _, _ in got),
                          "other": sum(s not in (200, 429) for s, _, _ in got),
                          "retry_after": sorted({ra for s, _, ra in got if s == 429}),
                          "max_s": round(max(t for _, t, _ in got), 2)})
        rss_after = rss_kb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    out = {"queue_size": args.queue_size, "concurrent": 4 * args.queue_size, "delay_ms": args.delay_ms,
           "waves": waves, "rss_kb_before": rss_before, "rss_kb_after": rss_after}
    print(f"  overload: {waves[0]} ... {waves[-1]}; RSS {rss_before} -> {rss_after} kB", flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", type=Path, default=None, help="SQLite file (default: the bundled demo database)")
    ap.add_argument("--sql", default=SQL)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=3000, help="per round and server")
    ap.add_argument("--seconds", type=float, default=30.0, help="per round and server")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--asks", type=int, default=200, help="sequential asks for the overhead figure")
    ap.add_argument("--queue-size", type=int, default=4)
    ap.add_argument("--delay-ms", type=float, default=50.0, help="scripted model time per call (overload)")
    ap.add_argument("--waves", type=int, default=5)
    ap.add_argument("--datasette", default=shutil.which("datasette") or "datasette")
    ap.add_argument("--out", type=Path, default=common.result_path("service", "load"))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    from tagql.demo import demo_database_path

    db = (args.db or demo_database_path()).resolve()
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        expected = conn.execute(args.sql).fetchone()[0]
    with tempfile.TemporaryDirectory(prefix="tagql-load-") as tmp:
        print(f"/v1/sql vs datasette: {args.clients} clients, {args.requests} requests or {args.seconds:g} s "
              f"per round, {args.sql!r}", flush=True)
        sql = sql_load(args, db, Path(tmp), expected)
        by = {name: [r["rps"] for r in sql["rounds"] if r["server"] == name] for name in ("tagql", "datasette")}
        ratio = statistics.median(by["tagql"]) / statistics.median(by["datasette"])
        print(f"  tagql / datasette throughput (median of rounds): {ratio:.2f}x", flush=True)
        ask = ask_overhead(args, db, Path(tmp))
        over = overload(args, db, Path(tmp))
    results = {"sql": {**sql, "sql": args.sql, "clients": args.clients, "throughput_ratio": round(ratio, 3)},
               "ask_overhead": ask, "overload": over}
    run.save(args.out, results)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
