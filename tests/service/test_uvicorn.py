"""One real server: `tagql serve` (uvicorn) in its own process on a free loopback port, talked to over HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.loopback import free_port, wait_until_healthy

REPO = Path(__file__).resolve().parents[2]


def test_real_server_over_loopback(tmp_path: Path, demo_db_path: Path) -> None:
    config = tmp_path / "tagql.toml"
    config.write_text(f'[service]\nstate_url = "sqlite:///{tmp_path / "state.sqlite"}"\n')
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(REPO / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tagql.cli", "serve", "--config", str(config), "--port", str(port),
         "--db", f"heroes={demo_db_path}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(base)
        assert [d["name"] for d in httpx.get(f"{base}/v1/databases").json()["databases"]] == ["heroes"]
        r = httpx.post(f"{base}/v1/sql", json={"database": "heroes", "sql": "SELECT COUNT(*) FROM superhero"})
        assert r.status_code == 200 and r.json()["rows"] == [[750]]
        r = httpx.post(f"{base}/v1/sql", json={"database": "heroes", "sql": "DROP TABLE superhero"})
        assert r.status_code == 422 and r.json()["error"] == "only SELECT queries may run, got DROP"
        assert "/v1/ask" in httpx.get(f"{base}/openapi.json").json()["paths"]
        assert httpx.get(f"{base}/docs").status_code == 200
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=20)
    assert "applied migration 1" in out and "Uvicorn running on http://127.0.0.1" in out
