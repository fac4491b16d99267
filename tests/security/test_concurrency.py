"""Concurrency (issue 35 item 4): 8 writer processes into one knowledge store while they retrieve from it, the
same through the service (two ``tagql serve`` replicas sharing the store and the state store, 8 clients
proposing statements, 2 listing them), and 8 writer processes into the operator cache and into the state
store. Each: 0 lost, 0 duplicated, 0 errors (no "database is locked" reaches anyone), integrity ok.

8 x 50 items in CI; ``TAGQL_STRESS=1`` runs 8 x 200 (docs/security.md)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tagql.llm.llama_server import free_port
from tests.loopback import stop_processes

WORKER = Path(__file__).with_name("store_worker.py")
SRC = Path(__file__).resolve().parents[2] / "src"
PROCS = 8
PER_PROC = 200 if os.environ.get("TAGQL_STRESS") else 50


def _run_writers(kind: str, target: str, extra: list[str] | None = None) -> list[str]:
    procs = [subprocess.Popen([sys.executable, str(WORKER), kind, target, f"p{i}", str(PER_PROC), *(extra or [])],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(PROCS)]
    lines: list[str] = []
    for p in procs:
        out, err = p.communicate(timeout=900)
        # stderr may hold the log (a state store's migrations): no traceback, no lock error
        assert p.returncode == 0 and "Traceback" not in err and "locked" not in err, (p.returncode, err[-2000:], out[-300:])
        lines += out.splitlines()
    assert not [ln for ln in lines if ln.startswith(("error", "problem", "mem"))], lines
    return [ln.split(" ", 1)[1] for ln in lines if ln.startswith("ack ")]


def _check(path: Path, query: str, acked: list[str]) -> None:
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        stored = [r[0] for r in conn.execute(query)]
    finally:
        conn.close()
    twice = [k for k, n in Counter(stored).items() if n > 1]
    assert not twice, twice[:5]
    assert len(acked) == PROCS * PER_PROC and set(acked) == set(stored)


def test_knowledge_store_8_writers_reading_as_they_write(tmp_path: Path) -> None:
    path = tmp_path / "k.kb"
    acked = _run_writers("kb", str(path), ["--read", "5"])
    _check(path, "SELECT text FROM statements", acked)
    from tagql.knowledge.store import KnowledgeBase

    kb = KnowledgeBase.open(path)
    assert kb.revision == PROCS * PER_PROC  # one revision per add: no write overwrote another's bump


def test_operator_cache_8_writers(tmp_path: Path) -> None:
    path = tmp_path / "tag_cache.sqlite"
    acked = _run_writers("cache", str(path))
    _check(path, "SELECT key FROM ops", acked)


def test_state_store_8_writers(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    acked = _run_writers("state", f"sqlite:///{path}")
    _check(path, "SELECT question FROM answers", acked)


def _serve(port: int, env: dict[str, str], db: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tagql.cli", "serve", "--db", f"superhero={db}", "--port", str(port),
                             "--llm", "openai"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait_up(url: str, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise AssertionError("the server did not start")


def test_statements_through_two_service_replicas(tmp_path: Path, demo_db_path: Path) -> None:
    from tagql.service.state import StateStore

    state_url = f"sqlite:///{tmp_path / 'state.sqlite'}"
    store = StateStore(state_url)
    expert = store.create_token("expert", "expert")
    reader = store.create_token("reader", "reader")
    store.close()
    env = {**os.environ, "PYTHONPATH": str(SRC), "TAGQL_KNOWLEDGE_DIR": str(tmp_path / "knowledge"),
           "TAGQL_SERVICE__STATE_URL": state_url, "TAGQL_CACHE_DIR": str(tmp_path / "cache"),
           "TAGQL_LLM__BASE_URL": f"http://127.0.0.1:{free_port()}/v1"}
    ports = [free_port(), free_port()]
    servers = [_serve(p, env, demo_db_path) for p in ports]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    try:
        for url, proc in zip(urls, servers):
            _wait_up(url, proc)
        acked: list[str] = []
        failures: list[Any] = []
        lock = threading.Lock()
        stop = threading.Event()
        reads = [0]

        def write(i: int) -> None:
            with httpx.Client(headers={"Authorization": f"Bearer {expert}"}, timeout=300) as c:
                for j in range(PER_PROC):
                    text = f"phrase c{i} n{j}"
                    start = time.monotonic()
                    try:
                        r = c.post(f"{urls[(i + j) % 2]}/v1/databases/superhero/statements",
                                   json={"text": text, "sql": "superhero.height_cm > 200"})
                    except httpx.HTTPError as exc:
                        with lock:
                            failures.append((text, f"{exc!r} after {time.monotonic() - start:.1f} s"))
                        continue
                    with lock:
                        if r.status_code == 200 and r.json()["statement"]["text"] == text:
                            acked.append(text)
                        else:
                            failures.append((r.status_code, r.text[:300]))

        def read(i: int) -> None:
            with httpx.Client(headers={"Authorization": f"Bearer {reader}"}, timeout=120) as c:
                while not stop.is_set():
                    r = c.get(f"{urls[i % 2]}/v1/databases/superhero/statements")
                    with lock:
                        reads[0] += 1
                        if r.status_code != 200:
                            failures.append((r.status_code, r.text[:300]))

        writers = [threading.Thread(target=write, args=(i,)) for i in range(PROCS)]
        readers = [threading.Thread(target=read, args=(i,)) for i in range(2)]
        for t in writers + readers:
            t.start()
        for t in writers:
            t.join()
        stop.set()
        for t in readers:
            t.join()
        assert not failures, failures[:5]
        assert reads[0] > 0
        listed = httpx.get(f"{urls[0]}/v1/databases/superhero/statements",
                           headers={"Authorization": f"Bearer {reader}"}).json()["statements"]
    finally:
        stop_processes(servers)
    texts = [s["text"] for s in listed]
    assert len(acked) == PROCS * PER_PROC and sorted(texts) == sorted(acked)  # 0 lost, 0 duplicated
    _check(tmp_path / "knowledge" / "superhero.kb", "SELECT text FROM statements", acked)
    conn = sqlite3.connect(tmp_path / "state.sqlite")
    assert conn.execute("SELECT COUNT(*) FROM reviews WHERE action = 'propose'").fetchone()[0] == PROCS * PER_PROC
