"""Bounds on a statement before anything parses or runs it, so the time limit and the memory bound hold
for every input: at most one statement, and a bounded size, token count, nesting depth and number of
CTEs. One linear pass over sqlglot's tokens; the parser (``safety.parse_read_only``) and every
engine (``Database.execute``) call it first.

The statement count here gives the clear reason; each engine refuses a second statement by itself too
(SQLite's ``execute``, DuckDB's own parser, PostgreSQL's extended protocol).
"""

from __future__ import annotations

from sqlglot.dialects.dialect import Dialect as SqlglotDialect
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Token, TokenType

from tagql.errors import InvalidQuery, UnsafeQuery

MAX_CHARS = 20_000  # LLM-written SQL for BIRD / Spider stays under 3,000
MAX_TOKENS = 4_000
MAX_DEPTH = 24  # nested parentheses (sqlglot's recursive parser needs ~40 Python frames per level)
MAX_CTES = 32  # PostgreSQL's parse analysis of a long CTE chain ignores the statement timeout

_HINT = "ask a narrower question"


def check_bounds(sql: str, dialect: str) -> list[Token]:
    """Refuse ``sql`` unless it is one statement within the bounds; returns its tokens."""
    if len(sql) > MAX_CHARS:
        raise UnsafeQuery(f"the SQL is {len(sql):,} characters long; at most {MAX_CHARS:,} may run", _HINT)
    try:
        tokens = SqlglotDialect.get_or_raise(dialect).tokenize(sql)
    except (SqlglotError, RecursionError, ValueError) as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        raise InvalidQuery(f"SQL does not parse ({dialect}): {text[:160]}") from None
    statements, current = 0, 0
    for t in tokens:
        if t.token_type == TokenType.SEMICOLON:
            statements += current > 0
            current = 0
        else:
            current += 1
    statements += current > 0
    if statements == 0:
        raise InvalidQuery("no SQL statement found")
    if statements > 1:
        raise UnsafeQuery(f"only a single statement may run, got {statements} (separated by ';')")
    if len(tokens) > MAX_TOKENS:
        raise UnsafeQuery(f"the SQL has {len(tokens):,} tokens; at most {MAX_TOKENS:,} may run", _HINT)
    depth = deepest = ctes = 0
    for i, t in enumerate(tokens):
        if t.token_type == TokenType.L_PAREN:
            depth += 1
            deepest = max(deepest, depth)
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        elif t.token_type == TokenType.ALIAS and _opens_cte(tokens, i + 1):
            ctes += 1
    if deepest > MAX_DEPTH:
        raise UnsafeQuery(f"the SQL nests parentheses {deepest} deep; at most {MAX_DEPTH} may run", _HINT)
    if ctes > MAX_CTES:
        raise UnsafeQuery(f"the SQL defines {ctes} CTEs; at most {MAX_CTES} may run", _HINT)
    return tokens


def _opens_cte(tokens: list[Token], i: int) -> bool:
    """``AS (`` / ``AS [NOT] MATERIALIZED (``: the body of a CTE."""
    while i < len(tokens) and tokens[i].text.upper() in ("NOT", "MATERIALIZED"):
        i += 1
    return i < len(tokens) and tokens[i].token_type == TokenType.L_PAREN
