"""LM operators as SQLite user-defined functions.

After :func:`register_lm_functions`, SQL can call:

* ``LM_FILTER('{City} is a city in the Silicon Valley region', City)`` -> 1 / 0
* ``LM_MAP('the state {City} is in', City)`` -> text
* ``LM_SCORE('{Title} is technical', Title)`` -> 0..10 (for ``ORDER BY ... DESC``)

Arguments after the instruction fill its ``{fields}`` in order of first appearance. Calls go through
the same :class:`~tagql.tag.operators.SemEngine` (cache, dedupe across rows, LM-call cap). SQLite
swallows Python exceptions raised in functions, so :func:`execute_with_lm` re-raises the real one.
"""

from __future__ import annotations

from typing import Any

from tagql.db.connection import Database, Result
from tagql.errors import QueryFailed
from tagql.tag.operators import OperatorError, SemEngine, fill, template_fields

FUNCTIONS = ("LM_FILTER", "LM_MAP", "LM_SCORE")


def _bind(instruction: Any, args: tuple[Any, ...], name: str) -> str:
    if not isinstance(instruction, str):
        raise OperatorError(f"{name} needs the instruction text as its first argument")
    fields = template_fields(instruction)
    if len(fields) != len(args):
        raise OperatorError(
            f"{name}({instruction!r}, ...) has {len(fields)} {{field}}(s) but {len(args)} value argument(s)",
            "pass one column per {field}, in order",
        )
    return fill(instruction, dict(zip(fields, args)))


def register_lm_functions(db: Database, engine: SemEngine) -> None:
    """Make ``LM_FILTER``/``LM_MAP``/``LM_SCORE`` callable from SQL on ``db`` (SQLite)."""

    def guarded(fn: Any) -> Any:
        def wrapper(*a: Any) -> Any:
            if engine.pending_error is not None:
                return None  # already failed: finish the statement quickly, then re-raise
            try:
                return fn(*a)
            except Exception as exc:  # noqa: BLE001 - re-raised by execute_with_lm
                engine.pending_error = exc
                return None
        return wrapper

    def lm_filter(instruction: Any, *args: Any) -> int:
        claim = _bind(instruction, args, "LM_FILTER")
        return int(engine.judge_many(instruction, [claim], op="sql_filter")[0])

    def lm_map(instruction: Any, *args: Any) -> str:
        item = _bind(instruction, args, "LM_MAP")
        return engine.map_many(instruction, [item])[0]

    def lm_score(instruction: Any, *args: Any) -> int:
        item = _bind(instruction, args, "LM_SCORE")
        return engine.score_many(instruction, [item])[0]

    for name, fn in (("LM_FILTER", lm_filter), ("LM_MAP", lm_map), ("LM_SCORE", lm_score)):
        db.register_function(name, -1, guarded(fn))


def uses_lm_functions(sql: str) -> bool:
    up = sql.upper()
    return any(f + "(" in up.replace(" (", "(") for f in FUNCTIONS)


def execute_with_lm(db: Database, sql: str, engine: SemEngine, *, timeout_s: float = 600.0) -> Result:
    """Run ``sql`` (which may call LM functions) and surface any operator error it hit."""
    engine.pending_error = None
    try:
        result = db.execute(sql, timeout_s=timeout_s)
    except QueryFailed:
        if engine.pending_error is not None:
            raise engine.pending_error from None
        raise
    if engine.pending_error is not None:
        err, engine.pending_error = engine.pending_error, None
        raise err
    return result
