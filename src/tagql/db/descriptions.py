"""Column descriptions in BIRD's ``database_description/<table>.csv`` format.

Columns: original_column_name, column_name, column_description, data_format, value_description.
The files come in mixed encodings (UTF-8 with/without BOM, Latin-1), so decoding falls back.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from tagql.db.schema import Schema


def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    for enc in ("utf-8-sig", "cp1252", "latin-1"):
        try:
            return raw.decode(enc)
        except UnicodeDecodeError:
            continue
    return raw.decode("latin-1", errors="replace")


def load_descriptions(folder: Path) -> dict[str, dict[str, tuple[str, str]]]:
    """``{table_lower: {column_lower: (description, value_description)}}``."""
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for path in sorted(Path(folder).glob("*.csv")):
        rows = csv.DictReader(io.StringIO(_read_text(path)))
        table: dict[str, tuple[str, str]] = {}
        for row in rows:
            row = {(k or "").strip().lower(): (v or "").strip() for k, v in row.items()}
            name = row.get("original_column_name", "")
            if not name:
                continue
            desc = row.get("column_description") or row.get("column_name") or ""
            table[name.lower()] = (desc, row.get("value_description", ""))
        out[path.stem.lower()] = table
    return out


def apply_descriptions(schema: Schema, folder: Path) -> Schema:
    """Attach descriptions found in ``folder`` to the matching tables/columns (in place)."""
    found = load_descriptions(folder)
    for t in schema.tables:
        cols = found.get(t.name.lower(), {})
        for c in t.columns:
            if c.name.lower() in cols:
                c.description, c.value_description = cols[c.name.lower()]
    return schema
