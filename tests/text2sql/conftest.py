"""Databases the text-to-SQL tests repair queries on: the demo database (BIRD superhero) and two more
BIRD dev databases from the shared data."""

from __future__ import annotations

import pytest

from tagql.db import open_database


@pytest.fixture(scope="module")
def hero(demo_db_path):
    return open_database(demo_db_path)


@pytest.fixture(scope="module")
def club(shared_data):
    return open_database(shared_data / "bird" / "dev_databases" / "student_club" / "student_club.sqlite")


@pytest.fixture(scope="module")
def tox(shared_data):
    return open_database(shared_data / "bird" / "dev_databases" / "toxicology" / "toxicology.sqlite")
