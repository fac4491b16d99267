"""tagql: answer natural-language questions over relational databases.

>>> import tagql
>>> tq = tagql.connect("superhero.sqlite")          # or collection="NAME"; local model by default
>>> a = tq.ask("How many superheroes are there?")
>>> a.sql, a.values, a.answer

The public names load on first use (PEP 562), so ``import tagql`` stays cheap for the command line.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_PUBLIC = {
    "connect": "tagql.api", "Session": "tagql.api", "NoConfidentRoute": "tagql.api", "UsageError": "tagql.api",
    "Conversation": "tagql.api", "Turn": "tagql.text2sql.context", "Example": "tagql.models",
    "TagqlError": "tagql.errors",
    "Answer": "tagql.models", "Attempt": "tagql.models", "Plan": "tagql.models", "RouteCandidate": "tagql.models",
    "SqlResult": "tagql.models", "Statement": "tagql.models",
}

if TYPE_CHECKING:
    from tagql.api import Conversation, NoConfidentRoute, Session, UsageError, connect
    from tagql.errors import TagqlError
    from tagql.models import Answer, Attempt, Example, Plan, RouteCandidate, SqlResult, Statement
    from tagql.text2sql.context import Turn


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'tagql' has no attribute {name!r}")


__all__ = ["Answer", "Attempt", "Conversation", "Example", "NoConfidentRoute", "Plan", "RouteCandidate", "Session",
           "SqlResult", "Statement", "TagqlError", "Turn", "UsageError", "connect"]
__version__ = "0.1.0"
