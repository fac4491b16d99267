"""A client that goes away mid-answer stops the model within a second: a real server (uvicorn, scripted model
streaming one word per 20 ms, a 300-word answer = 6 s) on loopback; the client reads the SSE stream up to the
first answer token and closes the connection; the queue must be empty again within 1 s."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.loopback import free_port, wait_until_healthy

from .test_uvicorn import REPO


def pending(base: str) -> tuple[float, str]:
    lines = httpx.get(f"{base}/metrics", timeout=5).text.splitlines()
    gauge = next(line for line in lines if line.startswith("tagql_queue_pending "))
    return float(gauge.split()[1]), "\n".join(line for line in lines if line.startswith("tagql_asks_total"))


def test_disconnect_stops_the_answer_within_a_second(tmp_path: Path, demo_db_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(REPO / "src")}
    answer = " ".join(["superheroes"] * 300)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.service.scripted_server", "--db", str(demo_db_path), "--state",
         str(tmp_path / "state.sqlite"), "--port", str(port), "--stream-ms", "20", "--answer", answer,
         "--sql", "SELECT COUNT(*), MAX(id) FROM superhero"],  # two columns: the model writes the sentence
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(base)
        seen = []
        with httpx.stream("POST", f"{base}/v1/ask", headers={"accept": "text/event-stream"}, timeout=30,
                          json={"question": "How many superheroes are there?", "database": "superhero"}) as r:
            for line in r.iter_lines():
                if line.startswith("event: "):
                    seen.append(line[7:])
                if seen and seen[-1] == "answer":
                    break
        closed = time.perf_counter()  # leaving the block closed the connection
        assert seen[:4] == ["queued", "statements", "sql", "rows"] and seen[-1] == "answer"
        while pending(base)[0] and time.perf_counter() - closed < 5:
            time.sleep(0.02)
        stopped_s = time.perf_counter() - closed
        assert stopped_s < 1.0, f"the model ran {stopped_s:.2f} s after the client left"
        assert 'tagql_asks_total{outcome="499"} 1.0' in pending(base)[1]  # cancelled, not answered
    finally:
        proc.terminate()
        proc.communicate(timeout=20)
