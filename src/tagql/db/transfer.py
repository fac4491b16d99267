"""Copy a SQLite database into a server database (PostgreSQL, MySQL, ...) through SQLAlchemy.

Used to load the demo database into PostgreSQL for tests and to try tagql on a real server:
``python -m tagql.db.transfer SRC.sqlite postgresql://user:pw@host/db``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import sqlalchemy as sa

from tagql.db.connection import open_database


def copy_database(source: str | Path, target_url: str, *, replace: bool = True, batch: int = 1000) -> dict[str, int]:
    """Create the source's tables (columns, primary and foreign keys) in the target and copy all rows.
    Returns row counts per table."""
    src = open_database(source)
    meta = sa.MetaData()
    meta.reflect(bind=src.engine)
    dst = sa.create_engine(target_url)
    for table in meta.tables.values():  # SQLite types that other engines lack
        for col in table.columns:
            if isinstance(col.type, sa.types.NullType):
                col.type = sa.Text()
            col.server_default = None
    counts: dict[str, int] = {}
    with dst.begin() as conn:
        if replace:
            meta.drop_all(conn, checkfirst=True)
        meta.create_all(conn)
        with src.engine.connect() as sconn:
            for table in meta.sorted_tables:
                rows = [dict(r._mapping) for r in sconn.execute(table.select())]
                for i in range(0, len(rows), batch):
                    conn.execute(table.insert(), rows[i: i + batch])
                counts[table.name] = len(rows)
    dst.dispose()
    src.close()
    return counts


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m tagql.db.transfer SOURCE.sqlite TARGET_URL", file=sys.stderr)
        return 2
    counts = copy_database(args[0], args[1])
    print(f"copied {sum(counts.values())} rows in {len(counts)} tables")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
