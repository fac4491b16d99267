"""Operator verdict caches in the service's state store (tag_ops, migration 6): two caches over one store share
every verdict (SQLite and PostgreSQL), writes of one key by two caches keep one, a store without the table is
a one-line error, a store that fails falls back to memory, and make_engine picks it by configuration."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from tagql.llm.scripted import ScriptedLLM
from tagql.service.state import StateStore
from tagql.tag.cache import CacheStoreError, OpCache, SharedOpCache, open_op_cache
from tagql.tag.operators import SemEngine, SemTable

CITIES = ["Palo Alto", "Fresno", "Cupertino", "Sacramento", "San Jose"]
VALLEY = {"Palo Alto", "Cupertino", "San Jose"}


def _llm():
    return ScriptedLLM(lambda m: "yes" if any(c in m[-1].content for c in VALLEY) else "no")


def _filter(cache):
    llm = _llm()
    engine = SemEngine(llm, cache=cache, cascade="off")
    kept = SemTable(["city"], [(c,) for c in CITIES], engine).sem_filter("{city} is in Silicon Valley")
    return [r[0] for r in kept.rows], llm.usage.calls


def _two_replicas_share(url: str) -> None:
    store = StateStore(url)  # runs the migrations: tag_ops exists
    try:
        first = SharedOpCache(store.engine)
        second = SharedOpCache(sa.create_engine(store.engine.url))  # another process's engine
        kept, calls = _filter(first)
        assert sorted(kept) == sorted(VALLEY) and calls == len(CITIES)
        kept2, calls2 = _filter(second)
        assert kept2 == kept and calls2 == 0  # every verdict came from the store
        assert len(first) == len(second) == len(CITIES)
    finally:
        store.close()


def test_two_caches_over_one_sqlite_state_store_share_verdicts(tmp_path):
    _two_replicas_share(f"sqlite:///{tmp_path / 'state.sqlite'}")


def test_two_caches_over_one_postgresql_state_store_share_verdicts(pg_schema_url):
    _two_replicas_share(pg_schema_url)


def test_concurrent_writers_of_one_key_keep_one_value(tmp_path):
    store = StateStore(f"sqlite:///{tmp_path / 'state.sqlite'}")
    a, b = SharedOpCache(store.engine), SharedOpCache(store.engine)
    a.put("k", "yes")
    b.put("k", "yes")  # the same prompt's answer, written again: no error, one row
    assert len(a) == 1 and SharedOpCache(store.engine).get("k") == "yes"


def test_a_database_without_the_table_is_a_one_line_error(tmp_path):
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'plain.sqlite'}")
    with pytest.raises(CacheStoreError, match="no operator cache table") as info:
        SharedOpCache(engine)
    assert "\n" not in str(info.value) and "state_url" in str(info.value)


def test_a_failing_store_falls_back_to_memory(tmp_path):
    store = StateStore(f"sqlite:///{tmp_path / 'state.sqlite'}")
    cache = SharedOpCache(store.engine)
    with store.engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE tag_ops"))
    cache.put("k", "v")  # the write fails: logged once, kept in memory
    assert cache.get("k") == "v" and cache.problem


def test_open_op_cache_follows_the_configuration(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.sqlite'}"
    StateStore(url).close()
    assert isinstance(open_op_cache(url, tmp_path / "file.sqlite"), SharedOpCache)
    plain = open_op_cache("", tmp_path / "file.sqlite")
    assert type(plain) is OpCache and plain.path == tmp_path / "file.sqlite"
    with pytest.raises(CacheStoreError, match="invalid tag.cache_url"):
        open_op_cache("nosuchdriver://x", None)


def test_the_service_puts_operator_verdicts_in_the_state_store(tmp_path, demo_db_path):
    from tagql.config import load_settings
    from tagql.methods import make_engine
    from tagql.service.app import create_app

    settings = load_settings()
    settings.service.databases = {"superhero": str(demo_db_path)}
    settings.service.tag_cache = "state"
    store = StateStore(f"sqlite:///{tmp_path / 'state.sqlite'}")
    app = create_app(settings, llm=_llm(), store=store, host="127.0.0.1")
    session = app.state.service.registry.sessions["superhero"]
    assert session.settings.tag.cache_url == store.url
    engine = make_engine(session._pipeline("superhero", "tag", None, None).for_tag())
    assert isinstance(engine.cache, SharedOpCache)
    assert _filter(engine.cache)[1] == len(CITIES)
    assert _filter(SharedOpCache(store.engine))[1] == 0  # a second replica's cache sees them
