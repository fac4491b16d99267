"""Two tiny SQLite databases that share an entity written two ways (a nationality and a country name)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

DRIVERS = [(1, "Alonso", "Spanish"), (2, "Sainz", "Spanish"), (3, "Fangio", "Argentine"), (4, "Hamilton", "British"),
           (5, "Perez", "Mexican"), (6, "Vettel", "German"), (7, "Senna", "Brazilian")]
COUNTRIES = [("Spain", "Europe", "Spanish"), ("Argentina", "South America", "Spanish"),
             ("United Kingdom", "Europe", "English"), ("Mexico", "North America", "Spanish"),
             ("Germany", "Europe", "German"), ("Brazil", "South America", "Portuguese"), ("Japan", "Asia", "Japanese")]
SINGERS = [(1, "Ana", "Spain"), (2, "Bo", "Germany"), (3, "Cy", "Japan"), (4, "Di", "Spain")]


@pytest.fixture()
def two_dbs(tmp_path: Path) -> dict[str, Path]:
    racing, geo, music = tmp_path / "racing.sqlite", tmp_path / "geo.sqlite", tmp_path / "music.sqlite"
    with sqlite3.connect(racing) as con:
        con.execute("CREATE TABLE drivers (driverId INTEGER PRIMARY KEY, surname TEXT, nationality TEXT)")
        con.executemany("INSERT INTO drivers VALUES (?, ?, ?)", DRIVERS)
    with sqlite3.connect(geo) as con:
        con.execute("CREATE TABLE country (Name TEXT PRIMARY KEY, Continent TEXT, Language TEXT)")
        con.executemany("INSERT INTO country VALUES (?, ?, ?)", COUNTRIES)
    with sqlite3.connect(music) as con:
        con.execute("CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT, citizenship TEXT)")
        con.executemany("INSERT INTO singer VALUES (?, ?, ?)", SINGERS)
    return {"racing": racing, "geo": geo, "music": music}
