from tagql.db.connection import open_database


def test_register_function_callable_from_sql(demo_db_path):
    db = open_database(demo_db_path)
    db.register_function("twice", 1, lambda x: None if x is None else x * 2)
    r = db.execute("SELECT twice(21)")
    assert r.rows == [(42,)]
    # still read-only: functions do not open a write path
    import pytest

    from tagql.errors import UnsafeQuery

    with pytest.raises(UnsafeQuery):
        db.execute("DELETE FROM " + db.schema.table_names[0])
