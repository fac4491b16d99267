"""Shared fixtures: where the benchmark data lives, the demo database, real models (session-scoped)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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
