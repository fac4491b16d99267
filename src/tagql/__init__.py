"""tagql: answer natural-language questions over relational databases.

>>> import tagql
>>> tq = tagql.connect("superhero.sqlite")          # local model by default
>>> a = tq.ask("How many superheroes are there?")
>>> a.sql, a.values, a.answer
"""

from tagql.errors import TagqlError
from tagql.pipeline import Answer, TagQL, connect

__all__ = ["Answer", "TagQL", "TagqlError", "connect"]
__version__ = "0.1.0"
