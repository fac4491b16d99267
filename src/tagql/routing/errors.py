"""Routing errors users see (one line each)."""

from __future__ import annotations

from tagql.errors import TagqlError


class CollectionNotFound(TagqlError):
    hint = "build it with: tagql route index NAME --spider-tables FILE | --ddl FILE | --db PATH_OR_URL"


class EmptyCollection(TagqlError):
    hint = "add databases with: tagql route index NAME --db PATH_OR_URL"


class DatabaseGone(TagqlError):
    hint = "re-index it with: tagql route index NAME --db PATH_OR_URL, or remove it with --remove DB"


class BadSource(TagqlError):
    """A tables.json / DDL file / database given to ``route index`` cannot be read."""


class IndexMissing(TagqlError):
    hint = "build the router with: tagql route index NAME (it trains after adding databases)"
