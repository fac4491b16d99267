"""serve_in_thread: the app answers on loopback while the block runs, the port is closed after it, and an app
that cannot start raises instead of hanging."""

from __future__ import annotations

from contextlib import asynccontextmanager

import httpx
import pytest
from fastapi import FastAPI

from tagql.service.background import serve_in_thread


def test_serves_on_loopback_then_stops() -> None:
    app = FastAPI()

    @app.get("/ping")
    def ping() -> dict:
        return {"pong": True}

    with serve_in_thread(app) as url:
        assert url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{url}/ping", timeout=5).json() == {"pong": True}
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/ping", timeout=2)


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_an_app_that_fails_to_start_raises() -> None:
    @asynccontextmanager
    async def broken(_app: FastAPI):
        raise RuntimeError("no state store")
        yield

    with pytest.raises(RuntimeError, match="did not start"):
        with serve_in_thread(FastAPI(lifespan=broken), log_level="critical", start_timeout_s=10):
            pass
