"""A tiny OpenAI-compatible chat-completions server on loopback that misbehaves on request: the fault tests
point the real :class:`tagql.llm.openai_compat.OpenAICompatLLM` at it.

Each request takes the next mode from ``server.modes`` (the last one repeats):

* ``ok`` -- a well-formed completion whose content is ``server.reply`` (a callable of the request body, or text),
  streamed as server-sent events in three pieces when the request asks ``"stream": true``
* ``plain`` -- ``ok`` as one JSON completion even when a stream was asked for (a server that ignores it)
* ``streamcut`` -- a stream whose first piece arrives, then the connection is closed
* ``slow`` -- ``ok`` after ``server.delay_s`` seconds
* ``garbage`` -- HTTP 200 with an HTML page
* ``nochoices`` -- HTTP 200 with JSON lacking ``choices``
* ``429`` / ``500`` / ``502`` / ``503`` -- that status (429 and 503 with ``Retry-After: 0``)
* ``cut`` -- headers announce a 4,000-byte body, 40 bytes are sent, then the connection is closed
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeLLMServer:
    def __init__(self, modes: list[str] | None = None, reply: str | Callable[[dict], str] = "SELECT 1") -> None:
        self.modes = list(modes or ["ok"])
        self.reply = reply
        self.delay_s = 2.0
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                with outer._lock:
                    outer.requests.append(body)
                    mode = outer.modes.pop(0) if len(outer.modes) > 1 else outer.modes[0]
                outer._answer(self, mode, body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _answer(self, h: BaseHTTPRequestHandler, mode: str, body: dict) -> None:
        if mode == "slow":
            time.sleep(self.delay_s)
            mode = "ok"
        text = self.reply(body) if callable(self.reply) else self.reply
        if mode in ("ok", "streamcut") and body.get("stream"):
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("Transfer-Encoding", "chunked")  # what servers stream with: a cut is then visible
            h.end_headers()

            def chunk(data: bytes) -> None:
                h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                h.wfile.flush()

            third = max(1, len(text) // 3)
            for piece in (text[:third], text[third:2 * third], text[2 * third:]):
                chunk(f"data: {json.dumps({'choices': [{'index': 0, 'delta': {'content': piece}}]})}\n\n".encode())
                if mode == "streamcut":
                    h.close_connection = True
                    h.connection.shutdown(2)
                    return None
            usage = {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 3}}
            chunk(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
            h.wfile.write(b"0\r\n\r\n")
            return None
        if mode in ("ok", "plain"):
            payload = {"id": "x", "object": "chat.completion", "model": body.get("model", "m"),
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": text}}],
                       "usage": {"prompt_tokens": 10, "completion_tokens": 3}}
            return self._send(h, 200, json.dumps(payload).encode(), "application/json")
        if mode == "garbage":
            return self._send(h, 200, b"<html><body>\n<h1>502 Bad Gateway</h1>\n</body></html>", "text/html")
        if mode == "nochoices":
            return self._send(h, 200, b'{"object": "error", "detail": "model is loading"}', "application/json")
        if mode == "cut":
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", "4000")
            h.end_headers()
            h.wfile.write(b'{"id": "x", "choices": [{"index": 0, "mess')
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(2)
            return None
        status = int(mode)
        extra = {"Retry-After": "0"} if status in (429, 503) else {}
        return self._send(h, status, json.dumps({"error": {"message": f"fake {status}\nsecond line"}}).encode(),
                          "application/json", extra)

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, data: bytes, ctype: str,
              headers: dict[str, str] | None = None) -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)
