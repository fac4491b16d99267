"""Persistent cache for LM operator outputs, keyed by model + operator + instruction + input.

A small SQLite file (``<cache_dir>/tag_cache.sqlite``). Re-running a question, or another question that
filters the same column with the same instruction, costs no LM calls. ``OpCache(None)`` is in-memory.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path

# bump when operator prompts change so stale outputs are not reused
PROMPT_VERSION = "tag-ops-1"


def cache_key(model: str, kind: str, instruction: str, payload: str) -> str:
    blob = json.dumps([PROMPT_VERSION, model, kind, instruction, payload], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


class OpCache:
    """Key -> text. Thread-safe; a file path persists across processes, ``None`` keeps it in memory."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self._mem: dict[str, str] = {}
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
            self._conn.execute("CREATE TABLE IF NOT EXISTS ops (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self._conn.commit()

    def get(self, key: str) -> str | None:
        with self._lock:
            if key in self._mem:
                return self._mem[key]
            if self._conn is None:
                return None
            row = self._conn.execute("SELECT value FROM ops WHERE key = ?", (key,)).fetchone()
            if row is not None:
                self._mem[key] = row[0]
                return row[0]
            return None

    def put(self, key: str, value: str) -> None:
        with self._lock:
            self._mem[key] = value
            if self._conn is not None:
                self._conn.execute("INSERT OR REPLACE INTO ops (key, value) VALUES (?, ?)", (key, value))
                self._conn.commit()

    def __len__(self) -> int:
        with self._lock:
            if self._conn is None:
                return len(self._mem)
            return int(self._conn.execute("SELECT COUNT(*) FROM ops").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
