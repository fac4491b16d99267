"""The service app in a background thread on a loopback port, for programs that talk HTTP to an app in
their own process: benchmarks, tests, a notebook. Users run the service with ``tagql serve``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tagql.llm.llama_server import free_port

__all__ = ["serve_in_thread"]


@contextmanager
def serve_in_thread(app: Any, *, log_level: str = "warning", start_timeout_s: float = 30,
                    **config: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free 127.0.0.1 port; yields the base URL and stops the server on
    exit. ``config``: more ``uvicorn.Config`` arguments. Raises ``RuntimeError`` when it does not come up."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level=log_level, **config))

    def run() -> None:
        try:
            server.run()
        except SystemExit:  # uvicorn exits when the app fails to start: the caller gets the RuntimeError below
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            raise RuntimeError(f"the service did not start on 127.0.0.1:{port} within {start_timeout_s:g} s")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
