from __future__ import annotations

import json
from pathlib import Path

import pytest

from tagql.db.schema import Schema


@pytest.fixture(scope="session")
def embedder():
    from tagql.embeddings import make_embedder

    return make_embedder()  # the default backend (what `pip install -e ".[local]"` installs)


@pytest.fixture(scope="session")
def tox_schema(shared_data: Path) -> Schema:
    entries = json.loads((shared_data / "bird" / "dev_tables.json").read_text())
    return Schema.from_spider(next(e for e in entries if e["db_id"] == "toxicology"))


TOX = [
    "'non-carcinogenic' refers to molecule.label = '-'",
    "'carcinogenic' refers to molecule.label = '+'",
    "'sodium atoms' refers to atom.element = 'na'",
    "'triple bond' refers to bond.bond_type = '#'",
    "'single-bonded molecules' refers to bond.bond_type = '-'",
]
