"""Collection storage (issue 37): one file per database entry, so adding one database to a large
collection writes that entry and the index, not every entry; format 1 collections still load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tagql.db.schema import Schema
from tagql.routing import collection as collection_mod
from tagql.routing.collection import Collection
from tagql.routing.errors import BadSource


@pytest.fixture()
def schemas(spider_dir: Path) -> list[Schema]:
    return [Schema.from_spider(e) for e in json.loads((spider_dir / "tables.json").read_text())[:21]]


def _writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = collection_mod._atomic_write

    def spy(path: Path, text: str) -> None:
        seen.append(f"{path.parent.name}/{path.name}")
        real(path, text)

    monkeypatch.setattr(collection_mod, "_atomic_write", spy)
    return seen


def test_adding_one_database_writes_its_entry_and_the_index(tmp_path: Path, schemas, monkeypatch) -> None:
    c = Collection.create("store", path=tmp_path / "store")
    for s in schemas[:20]:
        c.add(s, kind="ddl", target=None)
    c.save()
    assert len(list((tmp_path / "store" / "entries").glob("*.json"))) == 20
    loaded = Collection.load("store", path=tmp_path / "store")
    assert loaded.databases == [s.name for s in schemas[:20]]
    assert loaded.entries[schemas[3].name].to_dict() == c.entries[schemas[3].name].to_dict()
    writes = _writes(monkeypatch)
    loaded.add(schemas[20], kind="ddl", target=None)
    loaded.save()
    assert sorted(w for w in writes if not w.startswith("values/")) == [f"entries/{schemas[20].name}.json", "store/collection.json"]
    writes.clear()
    loaded.remove(schemas[0].name)
    loaded.save()
    assert writes == ["store/collection.json"]
    assert not (tmp_path / "store" / "entries" / f"{schemas[0].name}.json").exists()
    again = Collection.load("store", path=tmp_path / "store")
    assert again.databases == [s.name for s in schemas[1:21]]
    assert again.graph.tables(schemas[20].name) == schemas[20].table_names


def test_format_1_collections_load_and_are_rewritten(tmp_path: Path, schemas) -> None:
    c = Collection.create("old", path=tmp_path / "old")
    for s in schemas[:3]:
        c.add(s, kind="ddl", target=None)
    legacy = {"format": 1, "name": "old", "databases": [e.to_dict() for e in c.entries.values()]}
    (tmp_path / "old" / "collection.json").write_text(json.dumps(legacy))
    old = Collection.load("old", path=tmp_path / "old")
    assert old.databases == [s.name for s in schemas[:3]]
    old.save()
    assert json.loads((tmp_path / "old" / "collection.json").read_text())["format"] == 2
    assert Collection.load("old", path=tmp_path / "old").entries[schemas[1].name].to_dict() == c.entries[schemas[1].name].to_dict()


def test_a_missing_entry_file_is_a_one_line_error(tmp_path: Path, schemas) -> None:
    c = Collection.create("broken", path=tmp_path / "broken")
    c.add(schemas[0], kind="ddl", target=None)
    c.save()
    (tmp_path / "broken" / "entries" / f"{schemas[0].name}.json").unlink()
    with pytest.raises(BadSource, match="damaged"):
        Collection.load("broken", path=tmp_path / "broken")
