"""tagql: answer natural-language questions over relational databases.

>>> import tagql
>>> tq = tagql.connect("superhero.sqlite")          # or collection="NAME"; local model by default
>>> a = tq.ask("How many superheroes are there?")
>>> a.sql, a.values, a.answer
"""

from tagql.api import NoConfidentRoute, Session, UsageError, connect
from tagql.errors import TagqlError
from tagql.models import Answer, Attempt, Plan, RouteCandidate, SqlResult, Statement

__all__ = ["Answer", "Attempt", "NoConfidentRoute", "Plan", "RouteCandidate", "Session", "SqlResult", "Statement",
           "TagqlError", "UsageError", "connect"]
__version__ = "0.1.0"
