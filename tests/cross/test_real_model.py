"""One question across two real Spider databases, end to end with the real local model."""

from __future__ import annotations

from pathlib import Path

import pytest

import tagql
from tagql.config import load_settings
from tagql.routing.collection import Collection

pytestmark = pytest.mark.model


def test_a_question_across_singer_and_world_1(shared_data: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TAGQL_TAG__CACHE", "false")  # the value matching really runs
    spider = shared_data / "spider" / "database"
    coll = Collection.create("cross-real", path=tmp_path / "cross-real")
    for name in ("singer", "world_1", "concert_singer"):
        coll.add_database(str(spider / name / f"{name}.sqlite"))
    coll.save()
    session = tagql.connect(collection=coll, llm="local", settings=load_settings(), route_method="bm25")
    a = session.ask("What are the names of the singers who are citizens of a country in South America?",
                    method="cross")
    # gold (bench/ask/data/cross_questions.json x18, a dev question): Iris Fontbona, a citizen of Chile
    assert set(a.database.split(" + ")) == {"singer", "world_1"}, a.plan
    assert ["Iris Fontbona"] in a.rows or a.values == ["Iris Fontbona"], (a.sql, a.rows, a.plan)
    # found in the data: every singer's citizenship is a country name of world_1
    assert "singer.Citizenship -> country.Name" in a.plan.model_dump()["cross"]["links"]
