"""Schema routing over many databases (DBCopilot): collections, schema graph, synthetic questions,
a router trained on them with graph-constrained decoding, and SQL-generation prompts.

    from tagql.routing import Collection
    coll = Collection.load("spider")                 # built by `tagql route index spider ...`
    cands = coll.router("ours").route(question, k=5)  # [Candidate(database, tables, score, confidence)]
    schema = coll.schema(cands[0].database, cands[0].tables)   # routed Schema subset
    db = coll.open(cands[0].database)                # tagql.db.Database (DatabaseGone if missing)

See docs/routing.md.
"""

from tagql.routing.collection import Collection, DatabaseEntry
from tagql.routing.errors import BadSource, CollectionNotFound, DatabaseGone, EmptyCollection, IndexMissing
from tagql.routing.router import METHODS, Candidate, Router, make_router

__all__ = [
    "METHODS",
    "BadSource",
    "Candidate",
    "Collection",
    "CollectionNotFound",
    "DatabaseEntry",
    "DatabaseGone",
    "EmptyCollection",
    "IndexMissing",
    "Router",
    "make_router",
]
