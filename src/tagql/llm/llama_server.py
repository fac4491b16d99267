"""llama.cpp's OpenAI-compatible server (``python -m llama_cpp.server``) on loopback, started and stopped
here: the tests of the ``openai`` backend and the LOTUS benchmark (which talks to a server) use it.

Needs ``pip install 'llama-cpp-python[server]'`` (in the ``test`` extra).

    with LlamaServer(model_path, alias="qwen-small") as server:
        llm = make_llm(LLMSettings(backend="openai", base_url=server.base_url, openai_model=server.alias))
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from tagql.errors import LLMUnavailable


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """``python -m llama_cpp.server`` serving ``model_path`` on 127.0.0.1 under the model name ``alias``.

    ``n_threads`` (default: all cores, as the in-process backend uses) is passed for generation and
    prompt processing. The constructor returns once ``/v1/models`` answers; it raises
    :class:`~tagql.errors.LLMUnavailable` when the server exits or does not answer within ``start_timeout_s``.
    """

    def __init__(
        self, model_path: str | os.PathLike[str], *, alias: str = "tagql", n_ctx: int = 8192,
        n_threads: int | None = None, seed: int = 0, start_timeout_s: float = 120.0,
    ) -> None:
        import httpx

        self.alias = alias
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        threads = str(n_threads or os.cpu_count() or 2)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(Path(model_path)), "--host", "127.0.0.1",
             "--port", str(self.port), "--n_ctx", str(n_ctx), "--n_threads", threads, "--n_threads_batch",
             threads, "--model_alias", alias, "--seed", str(seed)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + start_timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base_url}/models", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None:
                raise LLMUnavailable("llama_cpp.server exited during start-up",
                                     "install it with: pip install 'llama-cpp-python[server]'")
            time.sleep(0.5)
        self.stop()
        raise LLMUnavailable(f"llama_cpp.server did not start in {start_timeout_s:.0f} s", "check the model file")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> LlamaServer:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
