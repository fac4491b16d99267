"""JSON round-trip of :class:`tagql.db.schema.Schema` (collections store schemas on disk)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from tagql.db.schema import Column, ForeignKey, Schema, Table


def schema_to_dict(schema: Schema) -> dict[str, Any]:
    data = asdict(schema)
    for t in data["tables"]:
        for c in t["columns"]:
            c["samples"] = [v for v in c["samples"] if isinstance(v, (str, int, float))][:5]
    return data


def schema_from_dict(data: dict[str, Any]) -> Schema:
    tables = []
    for t in data["tables"]:
        cols = [Column(**c) for c in t["columns"]]
        fks = [ForeignKey(**f) for f in t["foreign_keys"]]
        tables.append(Table(t["name"], cols, fks, t.get("description", "")))
    return Schema(data["name"], tables, data.get("dialect", "sqlite"))
