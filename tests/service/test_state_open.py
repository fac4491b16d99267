"""Opening the state store while other processes create it: SQLite may refuse at once ("database is locked")
when waiting could deadlock; the store waits and retries its migrations instead of failing the replica."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from tagql.service import state as state_module
from tagql.service.state import StateError, StateStore


def _locked() -> sa.exc.OperationalError:
    return sa.exc.OperationalError("PRAGMA journal_mode=WAL", {}, Exception("database is locked"))


def test_a_locked_new_store_is_retried_until_free(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = StateStore.migrate
    refusals = [_locked(), _locked()]

    def contended(self: StateStore) -> list[int]:
        if refusals:
            raise refusals.pop(0)
        return real(self)

    monkeypatch.setattr(StateStore, "migrate", contended)
    store = StateStore(f"sqlite:///{tmp_path / 'state.sqlite'}")
    assert not refusals and store.version() == state_module.SCHEMA_VERSION
    store.close()


def test_other_errors_are_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def broken(self: StateStore) -> list[int]:
        calls.append(1)
        raise sa.exc.OperationalError("CREATE TABLE", {}, Exception("disk I/O error"))

    monkeypatch.setattr(StateStore, "migrate", broken)
    with pytest.raises(StateError, match="disk I/O error"):
        StateStore(f"sqlite:///{tmp_path / 'state.sqlite'}")
    assert calls == [1]


def test_a_lock_that_outlasts_the_patience_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def always_locked(self: StateStore) -> list[int]:
        raise _locked()

    monkeypatch.setattr(StateStore, "migrate", always_locked)
    monkeypatch.setattr(StateStore, "open_patience_s", 0.3)
    with pytest.raises(StateError, match="database is locked") as err:
        StateStore(f"sqlite:///{tmp_path / 'state.sqlite'}")
    assert "check service.state_url" in err.value.one_line()
