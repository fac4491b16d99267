"""A writer process for the fault and concurrency tests: adds items to one of tagql's three stores and prints
one line per item the store acknowledged (``ack <key>``), so a test can kill it at any moment (``kill -9``),
starve it of disk (``--fsize``: RLIMIT_FSIZE) or run it as an unprivileged user (``--nobody``) and then check
that every acknowledged item is still there.

    python store_worker.py kb PATH PREFIX N [--fsize BYTES] [--nobody] [--read Q]
    python store_worker.py cache PATH PREFIX N [...]
    python store_worker.py state SQLITE_URL PREFIX N [...]

A failure prints ``error <one line>`` and exits 3 (a traceback would exit 1: the tests count those).
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import numpy as np  # noqa: E402


class HashEmbedder:
    """Deterministic 16-dim vectors from CRC32s: the store's concurrency does not depend on the model."""

    name = "hash16"
    dim = 16

    def embed(self, texts, batch_size: int = 128) -> np.ndarray:
        out = np.array([[zlib.crc32(f"{i}:{t}".encode()) % 997 + 1 for i in range(self.dim)] for t in texts],
                       dtype=np.float32).reshape(len(texts), self.dim)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("store", choices=["kb", "cache", "state"])
    ap.add_argument("path")
    ap.add_argument("prefix")
    ap.add_argument("n", type=int)
    ap.add_argument("--fsize", type=int, default=0, help="RLIMIT_FSIZE in bytes (a disk that fills up)")
    ap.add_argument("--nobody", action="store_true", help="drop to uid/gid 65534 first (root ignores modes)")
    ap.add_argument("--read", type=int, default=0, help="kb: retrieve after every READ adds (reader and writer)")
    a = ap.parse_args()
    import tagql.knowledge.retrieval  # noqa: F401 - import as root: the interpreter may live in /root
    import tagql.knowledge.store  # noqa: F401
    import tagql.service.state  # noqa: F401
    import tagql.tag.cache  # noqa: F401

    import sqlalchemy  # noqa: E402
    sqlalchemy.create_engine("sqlite://").dispose()  # loads the dialect (by entry point) before dropping root

    if a.nobody:
        os.setgid(65534)
        os.setuid(65534)
    if a.fsize:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (a.fsize, a.fsize))
    from tagql.errors import TagqlError

    try:
        if a.store == "kb":
            from tagql.knowledge.store import KnowledgeBase

            kb = KnowledgeBase.open(a.path, create=True, embedder=HashEmbedder())
            retriever = kb.retriever("dense", statuses=("proposed", "approved")) if a.read else None
            print("open", flush=True)
            for i in range(a.n):
                key = f"{a.prefix}-{i}"
                kb.add(key, "", status="approved")
                print(f"ack {key}", flush=True)
                if retriever is not None and i % a.read == 0:
                    retriever.retrieve(key, 3)
        elif a.store == "cache":
            from tagql.tag.cache import OpCache

            cache = OpCache(a.path)
            print("open", flush=True)
            if cache.problem:
                print("problem", cache.problem, flush=True)
            for i in range(a.n):
                key = f"{a.prefix}-{i}"
                cache.put(key, key.upper())
                assert cache.get(key) == key.upper()
                print(f"{'mem' if cache.problem else 'ack'} {key}", flush=True)
            if cache.problem:
                print("problem", cache.problem, flush=True)
        else:
            from tagql.service.state import StateStore

            store = StateStore(a.path)
            print("open", flush=True)
            for i in range(a.n):
                key = f"{a.prefix}-{i}"
                store.save_answer({"question": key, "database": "d", "answer": "x" * 200}, target="d",
                                  token_name=None)
                print(f"ack {key}", flush=True)
    except TagqlError as exc:
        print("error", exc, flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
