"""OpCache: WAL + synchronous=NORMAL, one write transaction per operator call, concurrent writers lose nothing."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from tagql.llm.scripted import ScriptedLLM
from tagql.tag.cache import OpCache
from tagql.tag.operators import SemEngine, SemTable


def commits(cache: OpCache) -> list[str]:
    log: list[str] = []
    assert cache._conn is not None
    cache._conn.set_trace_callback(lambda stmt: log.append(stmt) if stmt == "COMMIT" else None)
    return log


def stored(path) -> dict[str, str]:
    con = sqlite3.connect(path)
    try:
        return dict(con.execute("SELECT key, value FROM ops").fetchall())
    finally:
        con.close()


def test_file_is_wal_with_normal_sync(tmp_path):
    cache = OpCache(tmp_path / "c.sqlite")
    assert cache._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert cache._conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    cache.put("k", "v")  # outside a batch: written at once
    assert stored(tmp_path / "c.sqlite") == {"k": "v"}


def test_batch_writes_once_at_the_end(tmp_path):
    cache = OpCache(tmp_path / "c.sqlite")
    log = commits(cache)
    with cache.batch():
        for i in range(50):
            cache.put(f"k{i}", str(i))
        with cache.batch():  # nested: the outer block writes
            cache.put("inner", "x")
        assert cache.get("k7") == "7"  # readable at once in this process
        assert stored(tmp_path / "c.sqlite") == {}
    assert len(log) == 1 and len(stored(tmp_path / "c.sqlite")) == 51


def test_batch_keeps_answers_when_the_block_raises(tmp_path):
    cache = OpCache(tmp_path / "c.sqlite")
    with pytest.raises(RuntimeError), cache.batch():
        cache.put("paid", "for")
        raise RuntimeError("LM call cap")
    assert stored(tmp_path / "c.sqlite") == {"paid": "for"}


def test_long_batch_still_writes_periodically(tmp_path, monkeypatch):
    cache = OpCache(tmp_path / "c.sqlite")
    monkeypatch.setattr(cache, "flush_every_s", 0.0)
    with cache.batch():
        cache.put("a", "1")
        assert stored(tmp_path / "c.sqlite") == {"a": "1"}


def test_one_transaction_per_operator_call(tmp_path):
    cache = OpCache(tmp_path / "c.sqlite")
    log = commits(cache)
    llm = ScriptedLLM(lambda m: "yes")
    rows = [(f"city{i}",) for i in range(12)]
    SemTable(["City"], rows, SemEngine(llm, cache=cache)).sem_filter("{City} is big")
    assert llm.usage.calls == 12 and len(log) == 1 and len(stored(tmp_path / "c.sqlite")) == 12


def test_concurrent_writers_lose_nothing(tmp_path):
    """Four writers (own connections to one file, as separate processes would have) and four threads
    sharing one cache, all writing in batches at the same time: every entry ends up in the file."""
    path = tmp_path / "c.sqlite"
    shared = OpCache(path)
    errors: list[BaseException] = []

    def write(cache: OpCache, tag: str) -> None:
        try:
            for b in range(10):
                with cache.batch():
                    for i in range(25):
                        cache.put(f"{tag}-{b}-{i}", tag)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(OpCache(path), f"own{t}")) for t in range(4)]
    threads += [threading.Thread(target=write, args=(shared, f"shared{t}")) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    got = stored(path)
    assert len(got) == 8 * 10 * 25
    assert got["own3-9-24"] == "own3" and got["shared0-0-0"] == "shared0"


def test_home_in_the_path_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    OpCache("~/cache/tag_cache.sqlite").put("k", "v")
    assert stored(tmp_path / "cache" / "tag_cache.sqlite") == {"k": "v"}
