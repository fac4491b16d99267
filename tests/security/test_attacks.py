"""The attack suite in CI: >= 1,000 generated attacks per dialect, harmful = 0, every refusal one line.
(``attack_suite.py`` generates and judges them; run it as a script for the table and JSON.)"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from attack_suite import (
    Outcome, postgres_urls, run_duckdb, run_postgres, run_sqlite, run_statements, statements,
)

from tagql.db.connection import Result


def _clean(out: Outcome) -> None:
    assert out.tried >= 1000
    assert out.harmful == 0, out.examples
    assert out.engine_alone["harmful"] == 0, out.examples
    assert out.crashes == 0 and out.multiline_refusals == 0, out.examples
    assert out.refused_by_parser + out.refused_by_engine + out.executed_harmlessly == out.tried


def test_sqlite_attacks(demo_db_path: Path) -> None:
    out = run_sqlite(demo_db_path)
    _clean(out)
    assert out.engine_alone["refused"] >= 0.99 * out.tried  # the engine alone refuses nearly all of them


def test_duckdb_attacks(demo_db_path: Path) -> None:
    pytest.importorskip("duckdb")
    out = run_duckdb(demo_db_path)
    _clean(out)


@pytest.fixture(scope="module")
def attack_urls(postgres_url: str, demo_db_path: Path) -> dict[str, str]:
    return postgres_urls(demo_db_path)


@pytest.mark.postgres
def test_postgres_attacks_as_a_select_only_role(attack_urls: dict[str, str]) -> None:
    out = run_postgres(attack_urls["select-only"], attack_urls.get("owner"))
    assert not out.refused_at_connect
    _clean(out)


@pytest.mark.postgres
@pytest.mark.parametrize("role", ["owner", "superuser"])
def test_postgres_misconfigured_roles_are_refused_at_connect(attack_urls: dict[str, str], role: str) -> None:
    if role not in attack_urls:
        pytest.skip(f"no {role} URL (see .ci/run)")
    out = run_postgres(attack_urls[role], attack_urls.get("owner"), limit=10)
    assert out.refused_at_connect.startswith("refusing to run queries as a role that can write")


class _Unguarded:
    """A database without tagql's engine guarantees: the suite must call what it does harmful."""

    dialect = "sqlite"

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)

    def execute(self, sql: str, **_: Any) -> Result:
        cur = self.conn.execute(sql)
        return Result(sql, [], [tuple(r) for r in cur.fetchall()])


def test_the_suite_sees_harm(tmp_path: Path, demo_db_path: Path) -> None:
    path = tmp_path / "superhero.sqlite"
    shutil.copy(demo_db_path, path)
    (tmp_path / "secret.txt").write_text("x")
    items = [(c, d, s) for c, d, s in statements("sqlite", dir=tmp_path) if d == "plain"
             and (s == "DELETE FROM colour" or s.startswith("VACUUM INTO"))]
    out = Outcome("sqlite")
    run_statements(out, _Unguarded(path), items, lambda: (path.read_bytes(), sorted(os.listdir(tmp_path))))
    assert out.harmful == len(items) == 2  # a changed file, a new file
