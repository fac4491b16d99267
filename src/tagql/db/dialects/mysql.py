"""MySQL / MariaDB (any SQLAlchemy MySQL driver): each query runs in a ``READ ONLY`` transaction under
``MAX_EXECUTION_TIME`` and is rolled back."""

from __future__ import annotations

from typing import Any

from tagql.db.dialects.base import Dialect


class MySQL(Dialect):
    name = "mysql"
    sample_values = True

    def begin_read_only(self, cur: Any, timeout_ms: int) -> None:
        cur.execute("SET SESSION TRANSACTION READ ONLY")
        cur.execute(f"SET SESSION MAX_EXECUTION_TIME = {timeout_ms}")
        cur.execute("START TRANSACTION READ ONLY")
