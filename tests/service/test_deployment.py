"""The deployment recipe of docs/deployment.md on loopback: two `tagql serve` replicas (separate processes) over one
state store (SQLite file, and PostgreSQL), the model behind a pool of two scripted OpenAI-compatible servers. A
TAG question answered by one replica leaves its operator verdicts in the state store, so the other replica
answers it without a single filter call; answers and domain statements written through one are read through
the other."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.loopback import free_port, stop_processes, wait_until_healthy
from tests.openai_double import OpenAIDouble, yes_no_reply

REPO = Path(__file__).resolve().parents[2]
PEOPLE = {"George Lucas", "J. K. Rowling", "J. R. R. Tolkien"}
PLAN = {"sql": "SELECT p.publisher_name, COUNT(*) AS heroes FROM superhero s JOIN publisher p "
               "ON s.publisher_id = p.id GROUP BY p.publisher_name ORDER BY heroes DESC",
        "operators": [{"op": "filter", "instruction": "{publisher_name} is a person, not a company"},
                      {"op": "columns", "columns": ["publisher_name"]}]}
QUESTION = "Which publishers are people rather than companies?"


def _claim_is_person(claim: str) -> bool:
    m = re.search(r"<statement>(.*?)</statement>", claim, re.S)
    return bool(m) and m.group(1).split(" is ")[0] in PEOPLE


def _model():
    judge = yes_no_reply(_claim_is_person)
    seen = {"judge": 0}

    def reply(body):
        system, last = body["messages"][0]["content"], body["messages"][-1]["content"]
        if "Does answering" in last:
            return "yes"
        if "Question:" in last and "plan" in system:
            return json.dumps(PLAN)
        if "<statement>" in last:
            seen["judge"] += 1
            return judge(body)
        return "George Lucas, J. K. Rowling and J. R. R. Tolkien."
    return reply, seen


def _replica(config: Path, db: Path, port: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(REPO / "src"), "TAGQL_CONFIG": str(config)}
    return subprocess.Popen([sys.executable, "-m", "tagql.cli", "serve", "--port", str(port), "--db", f"superhero={db}"],
                            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


@pytest.fixture(params=["sqlite", "postgresql"])
def state_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.sqlite'}"
        return
    yield request.getfixturevalue("pg_schema_url")


def test_two_replicas_share_verdicts_answers_and_statements(tmp_path, demo_db_path, state_url):
    reply, seen = _model()
    with OpenAIDouble(reply) as a, OpenAIDouble(reply) as b:
        config = tmp_path / "tagql.toml"
        config.write_text(
            f'knowledge_dir = "{tmp_path / "knowledge"}"\ncache_dir = "{tmp_path / "cache"}"\n'
            f'[llm]\nbackend = "openai"\nendpoints = ["{a.base_url}", "{b.base_url}"]\nopenai_model = "m"\n'
            f'concurrency = 1\nmax_calls = 500\nrequest_timeout_s = 30\n'
            f'[service]\nstate_url = "{state_url}"\nknowledge = "state"\ntag_cache = "state"\nworkers = 2\n')
        ports = [free_port(), free_port()]
        procs = [_replica(config, demo_db_path, p, tmp_path / f"replica{i}.log") for i, p in enumerate(ports)]
        try:
            one, two = (f"http://127.0.0.1:{p}" for p in ports)
            for base in (one, two):
                wait_until_healthy(base, tries=600)
            ask = {"database": "superhero", "question": QUESTION, "method": "tag"}
            first = httpx.post(f"{one}/v1/ask", json=ask, timeout=300).json()  # 120 s ran out on a loaded host
            assert first["ok"], first
            assert set(first["values"]) == PEOPLE
            judged = seen["judge"]
            assert judged >= 20  # one per distinct publisher, through the pool
            assert a.requests and b.requests  # both endpoints served
            second = httpx.post(f"{two}/v1/ask", json=ask, timeout=300).json()
            assert second["ok"] and set(second["values"]) == PEOPLE
            assert seen["judge"] == judged  # the other replica judged nothing: every verdict from the state store
            assert second["tokens"]["calls"] < first["tokens"]["calls"] - 20
            # answers and statements written through one replica are read through the other
            stored = httpx.get(f"{two}/v1/answers/{first['id']}", timeout=30).json()
            assert stored["question"] == QUESTION
            added = httpx.post(f"{one}/v1/databases/superhero/statements", timeout=60,
                               json={"text": "giants are heroes taller than 300 cm",
                                     "sql": "superhero.height_cm > 300"}).json()
            assert added["ok"], added
            listed = httpx.get(f"{two}/v1/databases/superhero/statements", timeout=30).json()
            assert "giants are heroes taller than 300 cm" in json.dumps(listed)
        finally:
            stop_processes(procs, timeout=20)
