"""Shared fixtures: where the benchmark data lives, the demo database, real models (session-scoped)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("TAGQL_CONFIG", str(REPO / "tests" / "tagql-test.toml"))


def shared_data_dir() -> Path:
    """``../shared/data`` beside the repository (CI lays a copy there), or $TAGQL_SHARED_DATA."""
    env = os.environ.get("TAGQL_SHARED_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if not path.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"benchmark data not found at {path}")
        pytest.skip(f"benchmark data not found at {path} (set TAGQL_SHARED_DATA)")
    return path


@pytest.fixture(scope="session")
def demo_db_path() -> Path:
    from tagql.demo import demo_database_path

    return demo_database_path()


def bird_database(shared_data: Path, name: str):
    """A BIRD dev database from the shared data, opened read-only as every test uses it."""
    from tagql.db import open_database

    return open_database(shared_data / "bird" / "dev_databases" / name / f"{name}.sqlite")


@pytest.fixture(scope="module")
def club(shared_data: Path):
    """BIRD's student_club (the repairs' and grounding's second database)."""
    return bird_database(shared_data, "student_club")


@pytest.fixture(scope="module")
def tox(shared_data: Path):
    """BIRD's toxicology."""
    return bird_database(shared_data, "toxicology")


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """A PostgreSQL database holding the demo data (``.ci/run`` starts one and loads it), read through a
    SELECT-only role; ``TAGQL_TEST_POSTGRES_OWNER_URL`` is its owner's URL (loads the data)."""
    url = os.environ.get("TAGQL_TEST_POSTGRES_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("CI must provide TAGQL_TEST_POSTGRES_URL (see .ci/run)")
        pytest.skip("no PostgreSQL server: set TAGQL_TEST_POSTGRES_URL (see .ci/run)")
    from tagql.db.transfer import copy_database
    from tagql.demo import demo_database_path

    # tagql refuses a role that can write: the data is loaded as the owner, the tests read as a
    # SELECT-only role (.ci/run creates both; docs/security.md)
    copy_database(demo_database_path(), os.environ.get("TAGQL_TEST_POSTGRES_OWNER_URL") or url, replace=True)
    return url


@pytest.fixture(scope="session")
def postgres_owner_url(postgres_url: str) -> str:
    """A PostgreSQL URL that may write (state stores, fixtures): the demo database's owner. tagql itself
    refuses it for questions; ``postgres_url`` is the SELECT-only role."""
    return os.environ.get("TAGQL_TEST_POSTGRES_OWNER_URL") or postgres_url


@pytest.fixture
def pg_schema_url(postgres_owner_url: str):
    """A PostgreSQL URL whose tables land in a new, empty schema (``search_path``), dropped after the test:
    a fresh state store per test on the one CI server."""
    import uuid

    import sqlalchemy as sa

    schema = "tagql_test_" + uuid.uuid4().hex[:8]
    url = sa.engine.make_url(postgres_owner_url).set(drivername="postgresql+psycopg")
    admin = sa.create_engine(url)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    yield url.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
    with admin.begin() as conn:
        conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()


def pytest_report_header(config: pytest.Config) -> str:
    path = shared_data_dir()
    if path.is_dir():
        return f"benchmark data: {path}"
    return (f"benchmark data: NOT FOUND at {path} -- the tests that read BIRD/Spider/TAG data will skip "
            f"(lay the shared data beside the repository or set TAGQL_SHARED_DATA; CI fails instead)")


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    skipped = terminalreporter.stats.get("skipped", [])
    missing = sum("benchmark data not found" in str(getattr(r, "longrepr", "")) for r in skipped)
    if missing:
        terminalreporter.write_line(
            f"{missing} test(s) skipped because the benchmark data is missing at {shared_data_dir()} "
            f"(set TAGQL_SHARED_DATA to run them)", yellow=True, bold=True)
