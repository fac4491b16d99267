"""`ask` over a collection: route to the database and tables, answer there, report the candidates."""

from __future__ import annotations

from pathlib import Path

import pytest

from tagql.config import load_settings
from tagql.llm.scripted import ScriptedLLM
import tagql
from tagql.api import NoConfidentRoute
from tagql.routing.collection import Collection


@pytest.fixture()
def collection(tmp_path: Path, demo_db_path: Path, shared_data: Path) -> Collection:
    coll = Collection.create("test", path=tmp_path / "coll")
    coll.add_database(str(demo_db_path))
    coll.add_database(str(shared_data / "spider" / "database" / "concert_singer" / "concert_singer.sqlite"))
    coll.save()
    return coll


def test_routed_question_is_answered_on_the_routed_database(collection: Collection) -> None:
    llm = ScriptedLLM(["SELECT COUNT(*) FROM singer"])
    routed = tagql.connect(collection=collection, llm=llm, settings=load_settings(), route_method="bm25")
    events: list[str] = []
    answer = routed.ask("How many singers do we have?", on_event=lambda name, data: events.append(name))
    assert answer.database == "concert_singer" and answer.values == [6]
    assert answer.routing[0].database == "concert_singer"
    assert events == ["routed", "statements", "sql", "rows", "answer", "done"]
    prompt = llm.prompts[0][0].content
    assert "CREATE TABLE singer" in prompt and "CREATE TABLE superhero" not in prompt
    assert answer.timings["route_s"] >= 0


def test_human_in_the_loop_choice_wins(collection: Collection) -> None:
    llm = ScriptedLLM(["SELECT COUNT(*) FROM superhero", "750."])
    pick_superhero = lambda cands: next(c for c in cands if c.database == "superhero")
    routed = tagql.connect(collection=collection, llm=llm, settings=load_settings(), route_method="bm25")
    answer = routed.ask("How many singers do we have?", choose=pick_superhero)
    assert answer.database == "superhero" and answer.values == [750]


def test_bad_inputs_empty_collection_and_database_gone(tmp_path: Path, shared_data: Path) -> None:
    import shutil

    from tagql.routing.errors import DatabaseGone, EmptyCollection

    empty = Collection.create("empty", path=tmp_path / "empty")
    with pytest.raises(EmptyCollection):
        tagql.connect(collection=empty, llm=ScriptedLLM([]), settings=load_settings(), route_method="bm25")
    copy = tmp_path / "concert_singer.sqlite"
    shutil.copy(shared_data / "spider" / "database" / "concert_singer" / "concert_singer.sqlite", copy)
    coll = Collection.create("gone", path=tmp_path / "gone")
    coll.add_database(str(copy))
    coll.save()
    copy.unlink()  # the database disappears after indexing: routing still works, answering says so
    routed = tagql.connect(collection=coll, llm=ScriptedLLM(["SELECT COUNT(*) FROM singer", "6."]),
                           settings=load_settings(), route_method="bm25")
    with pytest.raises(DatabaseGone, match="disappeared since indexing"):
        routed.ask("How many singers do we have?")


def test_question_about_none_of_the_databases_is_flagged(collection: Collection) -> None:
    from tagql.embeddings import make_embedder
    from tagql.routing.ours import BuildConfig, GraphRouter

    # built with the embedder the session will load (settings.embed.backend)
    GraphRouter.build(collection, BuildConfig(questions_per_table=8, augment_share=0.0, finetune=False),  # rewrites: not needed here
                      embedder=make_embedder(load_settings()))
    llm = ScriptedLLM(["SELECT COUNT(*) FROM singer", "There are 6 singers.", "SELECT 1", "1."])
    routed = tagql.connect(collection=collection, llm=llm, settings=load_settings())
    on_topic = routed.ask("How many singers do we have?")
    assert on_topic.database == "concert_singer" and not any("none of the databases" in n for n in on_topic.notes)
    with pytest.raises(NoConfidentRoute, match="none of the databases"):
        routed.ask("What is a good recipe for sourdough bread?")  # refused: no answer from a random database
    # asked to answer anyway: it does, and the answer carries the warning
    off_topic = routed.ask("What is a good recipe for sourdough bread?", force=True)
    assert any("none of the databases" in n for n in off_topic.notes), off_topic.notes
