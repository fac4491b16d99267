"""bench/routing/wide_ex.py's merged database must answer like the small ones it merges."""

from __future__ import annotations

import sqlite3


def test_merge_keeps_every_row_and_the_files_composite_keys(shared_data, tmp_path):
    from bench.routing.wide_ex import merge_databases

    out = tmp_path / "wide.sqlite"
    info = merge_databases(["course_teach", "museum_visit"], out)
    assert info["tables_without_rows"] == [] and info["tables"] == 6
    merged = sqlite3.connect(out)
    for db, table in [("course_teach", "course_arrange"), ("museum_visit", "visit"), ("course_teach", "teacher")]:
        source = sqlite3.connect(shared_data / "spider" / "database" / db / f"{db}.sqlite")
        assert (sorted(merged.execute(f'SELECT * FROM "{db}__{table}"').fetchall())
                == sorted(source.execute(f'SELECT * FROM "{table}"').fetchall()))
    # tables.json names only Course_ID; the file's key (and so the merged one) has three columns
    keys = merged.execute("SELECT name FROM pragma_table_info('course_teach__course_arrange') WHERE pk > 0 "
                          "ORDER BY pk").fetchall()
    assert [k for (k,) in keys] == ["Course_ID", "Teacher_ID", "Grade"]
