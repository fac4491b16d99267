"""Databases: open (read-only), introspect, validate and execute queries safely."""

from tagql.db.connection import Database, Result, open_database
from tagql.db.safety import parse_read_only, validate_against_schema
from tagql.db.schema import Column, ForeignKey, Schema, Table

__all__ = [
    "Column",
    "Database",
    "ForeignKey",
    "Result",
    "Schema",
    "Table",
    "open_database",
    "parse_read_only",
    "validate_against_schema",
]
