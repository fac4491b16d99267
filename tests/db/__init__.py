"""Tests of tagql.db: connections, introspection, safety checks, repairs, PostgreSQL."""
