"""`tagql serve` with a scripted model, for benchmarks of the service itself (bench/service/load.py,
bench/service/cancel.py) and the disconnect tests: every SQL prompt gets ``--sql``, every answer prompt
``--answer``, after ``--delay-ms`` (a stand-in for the model's time). With ``--stream-ms`` the model streams
its replies word by word, that many milliseconds per word (a stand-in for decoding steps). Loopback only."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import uvicorn

from tagql.config import load_settings
from tagql.llm.scripted import ScriptedLLM
from tagql.service.app import create_app
from tagql.service.state import StateStore


def build(db: str, state: Path, sql: str, answer: str, delay_ms: float = 0.0, queue_size: int = 8,
          stream_ms: float | None = None):
    def reply(messages):
        if delay_ms:
            time.sleep(delay_ms / 1000)
        return sql if "CREATE TABLE" in messages[0].content else answer

    settings = load_settings()
    settings.service.databases = {"superhero": db}
    settings.service.queue_size = queue_size
    llm = ScriptedLLM(reply, stream_s=None if stream_ms is None else stream_ms / 1000)
    return create_app(settings, llm=llm, store=StateStore(f"sqlite:///{state}"), host="127.0.0.1")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--db", required=True)
    ap.add_argument("--state", required=True, type=Path)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--sql", default="SELECT COUNT(*) FROM superhero")
    ap.add_argument("--answer", default="There are 750 superheroes.")
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--queue-size", type=int, default=8)
    ap.add_argument("--stream-ms", type=float, default=None, help="stream replies, this long per word")
    args = ap.parse_args(argv)
    app = build(args.db, args.state, args.sql, args.answer, args.delay_ms, args.queue_size, args.stream_ms)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
