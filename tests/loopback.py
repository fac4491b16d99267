"""Servers the tests start on loopback: an app run by uvicorn in a thread, or a ``tagql serve`` process
waited for until its ``/v1/health`` answers. One copy of each, for every test that talks to a server."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx

from tagql.llm.llama_server import free_port
from tagql.service.background import serve_in_thread

__all__ = ["free_port", "run_app", "stop_processes", "wait_until_healthy"]


def run_app(app: Any, *, log_level: str = "warning", **config: Any) -> Iterator[str]:
    """Serve ``app`` on a free loopback port in a thread; yields its base URL, stops it afterwards.
    ``config``: more ``uvicorn.Config`` arguments."""
    try:
        with serve_in_thread(app, log_level=log_level, **config) as url:
            yield url
    except RuntimeError as exc:
        raise AssertionError(str(exc)) from exc


def wait_until_healthy(base: str, tries: int = 300) -> None:
    """Poll ``base``/v1/health (0.1 s apart) until it answers 200; fail the test if it never does."""
    for _ in range(tries):
        try:
            if httpx.get(f"{base}/v1/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("the server did not come up")


def stop_processes(procs: list[subprocess.Popen], timeout: float = 30) -> None:
    """Terminate every server process, then wait for each (killing one that outlives ``timeout``), so a
    failed test never leaves a replica holding its port or the state store."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
