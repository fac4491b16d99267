"""Persistent cache for LM operator outputs, keyed by prompt texts + model + operator + instruction + input.

A small SQLite file (``<cache_dir>/tag_cache.sqlite``). Re-running a question, or another question that
filters the same column with the same instruction, costs no LM calls. ``OpCache(None)`` is in-memory.

Writes are cheap: the file is in WAL mode with ``synchronous=NORMAL`` (a commit appends to the log and
does not wait for the disk; a power cut can lose the last commits, never corrupt the file - for a cache
that is only a few repeated LM calls), and inside :meth:`OpCache.batch` (one per operator call) the
entries are buffered and written in one transaction when the batch ends (or every
``flush_every_s`` during a long one). Several processes may share
the file: SQLite serialises their write transactions (each waits up to 30 s for the lock), and
``INSERT OR REPLACE`` of a key by two writers keeps one of two equal answers, so nothing is lost.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger("tagql.tag")


def cache_key(model: str, kind: str, instruction: str, payload: str, *, prompts: str) -> str:
    """The key of one LM output. ``prompts`` is a digest of the prompt texts that produced it (the operator
    engine passes the hash of its prompt file), so a changed prompt never reuses an old wording's outputs."""
    blob = json.dumps([prompts, model, kind, instruction, payload], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


class OpCache:
    """Key -> text. Thread-safe; a file path persists across processes, ``None`` keeps it in memory."""

    flush_every_s = 2.0  # a long batch still writes at least this often (a killed process loses little)

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path).expanduser() if path else None
        self._mem: dict[str, str] = {}
        self._pending: dict[str, str] = {}  # written inside a batch, not yet in the file
        self._depth = 0  # open batch() blocks (any thread)
        self._last_flush = time.monotonic()
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self.problem = ""  # why the file is not used (read-only folder, disk full): the cache runs in memory
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
                self._conn.execute("PRAGMA journal_mode=WAL")  # persistent: recorded in the file
                self._conn.execute("PRAGMA synchronous=NORMAL")  # per connection
                self._conn.execute("CREATE TABLE IF NOT EXISTS ops (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                self._conn.commit()
            except (OSError, sqlite3.Error) as exc:
                self._give_up(exc)

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
        """Store ``key``; written at once, or when the enclosing :meth:`batch` ends."""
        with self._lock:
            self._mem[key] = value
            if self._conn is None:
                return
            self._pending[key] = value
            if self._depth == 0 or time.monotonic() - self._last_flush > self.flush_every_s:
                self._flush_locked()

    @contextmanager
    def batch(self) -> Iterator[OpCache]:
        """Buffer the ``put``\\ s of this block and write them in one transaction at its end (also when the
        block raises: answers already paid for are kept). Blocks nest; the outermost one writes."""
        with self._lock:
            self._depth += 1
        try:
            yield self
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    self._flush_locked()

    def flush(self) -> None:
        """Write buffered entries now."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        self._last_flush = time.monotonic()
        if self._conn is None or not self._pending:
            return
        items = list(self._pending.items())
        self._pending.clear()
        try:
            with self._conn:  # one transaction; commits, or rolls back and raises
                self._conn.executemany("INSERT OR REPLACE INTO ops (key, value) VALUES (?, ?)", items)
        except sqlite3.OperationalError as exc:  # disk full, read-only, locked past 30 s: a cache may forget
            self._give_up(exc)

    def _give_up(self, exc: BaseException) -> None:
        """Stop using the file (what it holds stays as it was) and keep caching in memory: a cache that
        cannot write costs repeated LM calls, never a failed question. Said once, in the log."""
        self.problem = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]
        log.warning("operator cache %s is not written any more (%s); caching in memory", self.path, self.problem)
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
        self._conn = None

    def __len__(self) -> int:
        with self._lock:
            if self._conn is None:
                return len(self._mem)
            self._flush_locked()
            return int(self._conn.execute("SELECT COUNT(*) FROM ops").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._flush_locked()
                self._conn.close()
                self._conn = None
