"""The text-to-SQL tests' databases: the demo database (BIRD superhero) as ``hero``; ``club`` and ``tox``
(BIRD student_club, toxicology) come from tests/conftest.py."""

from __future__ import annotations

import pytest

from tagql.db import open_database


@pytest.fixture(scope="module")
def hero(demo_db_path):
    return open_database(demo_db_path)
