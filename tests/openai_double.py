"""A scripted OpenAI-compatible server on loopback, for tests of the pooled backend and of deployments:
``/v1/chat/completions`` answers from a function of the request body after ``delay_s``, ``/v1/models`` lists
one model. It counts requests, the requests in flight and their peak, and can be told to fail the next
requests with a status (429, 503) or to stop listening.

    with OpenAIDouble(reply=lambda body: "yes") as server:
        llm = PooledOpenAILLM([server.base_url], "m")
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def yes_no_reply(yes: Callable[[str], bool]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Chat-completion bodies answering a filter's claim (the last user message) with yes or no, with
    ``top_logprobs`` (P 0.9 for the answer) when the request asks for log-probabilities."""
    def reply(body: dict[str, Any]) -> dict[str, Any]:
        claim = body["messages"][-1]["content"]
        answer = "Yes" if yes(claim) else "No"
        other = "No" if answer == "Yes" else "Yes"
        choice: dict[str, Any] = {"message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}
        if body.get("logprobs"):
            choice["logprobs"] = {"content": [{"token": answer, "logprob": math.log(0.9), "top_logprobs": [
                {"token": answer, "logprob": math.log(0.9)}, {"token": other, "logprob": math.log(0.1)}]}]}
        return {"choices": [choice], "usage": {"prompt_tokens": 10, "completion_tokens": 1}}
    return reply


class OpenAIDouble:
    def __init__(self, reply: Callable[[dict[str, Any]], dict[str, Any] | str], *, delay_s: float = 0.0,
                 model: str = "m") -> None:
        self.reply = reply
        self.delay_s = delay_s
        self.model = model
        self.requests = 0
        self.in_flight = 0
        self.peak_in_flight = 0
        self.fail_next: list[int] = []  # statuses to answer the next requests with (e.g. [429, 503])
        self.retry_after: str | None = None
        self._lock = threading.Lock()
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._send(200, {"data": [{"id": double.model, "object": "model"}]})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                with double._lock:
                    double.requests += 1
                    failure = double.fail_next.pop(0) if double.fail_next else None
                    double.in_flight += 1
                    double.peak_in_flight = max(double.peak_in_flight, double.in_flight)
                # a request stops being in flight when its reply is ready, before it is written: the client
                # may read the reply and send its next request before this thread runs another line
                status, reply, headers = 200, None, None
                try:
                    if failure is not None:
                        status, reply = failure, {"error": {"message": f"scripted {failure}"}}
                        headers = {"retry-after": double.retry_after} if double.retry_after else {}
                    else:
                        if double.delay_s:
                            time.sleep(double.delay_s)
                        reply = double.reply(body)
                        if isinstance(reply, str):
                            reply = {"choices": [{"message": {"role": "assistant", "content": reply},
                                                  "finish_reason": "stop"}],
                                     "usage": {"prompt_tokens": 10, "completion_tokens": 1}}
                finally:
                    with double._lock:
                        double.in_flight -= 1
                self._send(status, reply, headers)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop listening (requests then find nothing at the port)."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> OpenAIDouble:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        except OSError:
            pass
