"""``GET /metrics``: Prometheus text format (``prometheus-client``), one registry per app. Requests by
route template, method and status; their latency; questions by outcome; the model queue's depth."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)


class Metrics:
    def __init__(self, queue: Any) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("tagql_http_requests", "HTTP requests", ["route", "method", "status"],
                                registry=self.registry)
        self.latency = Histogram("tagql_http_request_seconds", "HTTP request time (to the end of the response)",
                                 ["route"], registry=self.registry,
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
        self.asks = Counter("tagql_asks", "Questions by outcome (answered, or the error's HTTP status)",
                            ["outcome"], registry=self.registry)
        pending = Gauge("tagql_queue_pending", "Questions waiting for or running on the model",
                        registry=self.registry)
        pending.set_function(lambda: queue.pending)
        size = Gauge("tagql_queue_size", "Places in the model queue", registry=self.registry)
        size.set(queue.size)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class MetricsMiddleware:
    """Counts every HTTP request under its route template (``/v1/answers/{answer_id}``, not the id)."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = 500

        async def sending(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.requests.labels(route, scope.get("method", ""), str(status)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - t0)
