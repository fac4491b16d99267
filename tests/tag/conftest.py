"""Fixtures shared by the TAG tests that run a scripted model and those that run the real one."""

from __future__ import annotations

import sqlite3

import pytest

from tagql.db.connection import open_database


@pytest.fixture
def offices(tmp_path):
    """Staff at offices whose country key is lost: the country is stored as 'United States of America' in a
    table no key reaches, an office is named by its street address, and its city is beside it."""
    path = tmp_path / "offices.sqlite"
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE countries (id INTEGER PRIMARY KEY, country_name TEXT);
        CREATE TABLE locations (id INTEGER PRIMARY KEY, street_address TEXT, city TEXT);
        CREATE TABLE staff (id INTEGER PRIMARY KEY, name TEXT, location_id INTEGER REFERENCES locations(id));
        INSERT INTO countries VALUES (1, 'United States of America'), (2, 'Canada'), (3, 'United Kingdom');
        INSERT INTO locations VALUES (1, '2004 Charade Rd', 'Seattle'), (2, '147 Spadina Ave', 'Toronto'),
                                     (3, '8204 Arthur St', 'London');
        INSERT INTO staff VALUES (1, 'Ann', 1), (2, 'Bo', 2), (3, 'Cy', 1), (4, 'Di', 3);
    """)
    con.commit()
    con.close()
    return open_database(str(path))
