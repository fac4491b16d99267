"""Schema linking for routed questions (routing/linking.py): the tables that join the routed ones, and only
the columns that matter of a very wide table."""

from __future__ import annotations

from pathlib import Path

import tagql
from tagql.config import load_settings
from tagql.db.schema import Column, ForeignKey, Schema, Table
from tagql.llm.scripted import ScriptedLLM
from tagql.models import RouteCandidate
from tagql.routing.collection import Collection
from tagql.routing.linking import capped_tables, context_ranked, join_path_tables, key_neighbours, link_columns, linked_schema


def concerts() -> Schema:
    return Schema("concert_singer", [
        Table("stadium", [Column("stadium_id", "INT", True), Column("name", "TEXT")]),
        Table("singer", [Column("singer_id", "INT", True), Column("name", "TEXT"), Column("country", "TEXT")]),
        Table("concert", [Column("concert_id", "INT", True), Column("stadium_id", "INT")],
              [ForeignKey(["stadium_id"], "stadium", ["stadium_id"])]),
        Table("singer_in_concert", [Column("concert_id", "INT"), Column("singer_id", "INT")],
              [ForeignKey(["concert_id"], "concert", ["concert_id"]), ForeignKey(["singer_id"], "singer", ["singer_id"])]),
        Table("ticket", [Column("ticket_id", "INT", True)]),
    ])


def music() -> Schema:
    """Two parts of one wide schema: chinook's media types and tracks (key-joined), and another database's
    media types table on its own."""
    return Schema("wide", [
        Table("MediaType", [Column("MediaTypeId", "INT", True), Column("Name", "TEXT")]),
        Table("Track", [Column("TrackId", "INT", True), Column("MediaTypeId", "INT")],
              [ForeignKey(["MediaTypeId"], "MediaType", ["MediaTypeId"])]),
        Table("media_types", [Column("id", "INT", True), Column("name", "TEXT")]),
        Table("albums", [Column("id", "INT", True)]),
    ])


def test_a_wide_cap_ranks_tables_in_the_context_of_their_key_neighbours() -> None:
    schema, listed = music(), ["MediaType", "media_types", "Track"]
    scores = {"MediaType": 2.0, "media_types": 1.2, "Track": 1.0}
    # Track scored below media_types, but its neighbour MediaType is the best table: 1 + .4 x 2 > 1.2 + .4 x 1.2
    assert capped_tables(schema, listed, 2, wide_above=3, scores=scores) == ["MediaType", "Track"]
    assert capped_tables(schema, listed, 2, wide_above=3) == ["MediaType", "media_types"]  # no scores: router order
    assert capped_tables(schema, listed, 2, wide_above=4, scores=scores) == listed  # not wide: every table
    assert capped_tables(schema, listed, 0, wide_above=3, scores=scores) == listed  # 0: no cap
    # a table the router did not score: its order, not a guess
    assert capped_tables(schema, [*listed, "albums"], 2, wide_above=3, scores=scores) == ["MediaType", "media_types"]


def test_the_join_bonus_the_offset_and_ties() -> None:
    adj = key_neighbours(music())
    listed = ["MediaType", "media_types", "Track"]
    scores = {"MediaType": 2.0, "media_types": 1.35, "Track": 1.0}  # media_types ahead in context: 1.89 > 1.8
    assert context_ranked(adj, listed, scores, 2, bonus=0.0) == ["MediaType", "media_types"]
    assert context_ranked(adj, listed, scores, 2) == ["MediaType", "Track"]  # joined to the pick: +1
    shifted = {t: v - 7.5 for t, v in scores.items()}  # logits of another offset rank alike
    assert context_ranked(adj, listed, shifted, 3) == context_ranked(adj, listed, scores, 3)
    even = dict.fromkeys(["albums", "media_types"], 0.5)
    assert context_ranked(adj, ["albums", "media_types"], even, 2) == ["albums", "media_types"]
    assert context_ranked(adj, ["media_types", "albums"], even, 1) == ["media_types"]


def test_the_table_that_joins_two_routed_tables_is_added() -> None:
    assert join_path_tables(concerts(), ["singer", "concert"]) == ["singer_in_concert"]
    # two hops: singer -> singer_in_concert -> concert -> stadium
    assert join_path_tables(concerts(), ["singer", "stadium"]) == ["singer_in_concert", "concert"]


def test_no_bridge_when_joined_already_or_unreachable_or_over_the_budget() -> None:
    s = concerts()
    assert join_path_tables(s, ["concert", "stadium"]) == []  # a direct key
    assert join_path_tables(s, ["singer", "concert", "singer_in_concert"]) == []
    assert join_path_tables(s, ["singer", "ticket"]) == []  # no key path at all
    assert join_path_tables(s, ["singer", "stadium"], max_bridges=1) == []  # needs two
    assert join_path_tables(s, ["singer", "concert"], max_bridges=0) == []


def wide_table() -> Table:
    cols = [Column("id", "INT", True), Column("region_id", "INT")] + [Column(f"d_2020_{i:04d}", "REAL") for i in range(1200)]
    cols.append(Column("revenue_total", "REAL", description="total revenue of the year"))
    return Table("metrics", cols, [ForeignKey(["region_id"], "region", ["id"])])


def test_a_wide_table_shows_its_keys_the_named_columns_and_the_first_ones_up_to_the_cap() -> None:
    t = link_columns(wide_table(), "What was the total revenue per region?", max_columns=10)
    names = [c.name for c in t.columns]
    assert len(names) == 10 and names[:2] == ["id", "region_id"] and names[-1] == "revenue_total"
    assert names[2:9] == [f"d_2020_{i:04d}" for i in range(7)]  # declared order kept
    assert t.foreign_keys and "1193 more columns not shown" in t.description


def test_a_table_within_the_cap_is_shown_unchanged() -> None:
    s = concerts()
    assert link_columns(s.tables[1], "anything", max_columns=3) is s.tables[1]
    linked = linked_schema(s, ["singer", "concert"], "Which singers sang in a concert?")
    assert [t.name for t in linked.tables] == ["singer", "concert", "singer_in_concert"]
    assert linked.subset(["singer"]).to_prompt() == s.subset(["singer"]).to_prompt()


def test_a_routed_question_gets_the_join_table_in_its_prompt(tmp_path: Path, shared_data: Path) -> None:
    coll = Collection.create("one", path=tmp_path / "coll")
    coll.add_database(str(shared_data / "spider" / "database" / "concert_singer" / "concert_singer.sqlite"))
    coll.save()
    llm = ScriptedLLM(["SELECT COUNT(*) FROM singer", "6."])
    routed = tagql.connect(collection=coll, llm=llm, settings=load_settings(), route_method="bm25")
    pick = lambda cands: RouteCandidate(database="concert_singer", tables=["singer", "concert"])  # noqa: E731
    routed.ask("How many singers performed in a concert in 2014?", choose=pick)
    prompt = llm.prompts[0][0].content
    shown = [line.split()[2] for line in prompt.splitlines() if line.startswith("CREATE TABLE")]
    assert shown == ["concert", "singer", "singer_in_concert"]  # in the database's order, the bridge added


def test_max_routed_tables_keeps_the_router_s_best_tables_then_adds_bridges(tmp_path: Path, shared_data: Path) -> None:
    coll = Collection.create("one", path=tmp_path / "coll")
    coll.add_database(str(shared_data / "spider" / "database" / "concert_singer" / "concert_singer.sqlite"))
    coll.save()
    settings = load_settings()
    settings.answer.max_routed_tables = 1
    pick = lambda cands: RouteCandidate(database="concert_singer", tables=["singer", "stadium", "concert"])  # noqa: E731

    def shown_tables() -> list[str]:
        llm = ScriptedLLM(["SELECT COUNT(*) FROM singer", "6."])
        tagql.connect(collection=coll, llm=llm, settings=settings, route_method="bm25").ask(
            "How many singers sang at a stadium?", choose=pick)
        return [line.split()[2] for line in llm.prompts[0][0].content.splitlines() if line.startswith("CREATE TABLE")]

    # a database of 4 tables is not wide (answer.wide_schema_tables = 50): every routed table is kept
    assert shown_tables() == ["concert", "singer", "singer_in_concert", "stadium"]
    settings.answer.wide_schema_tables = 3  # now it is
    assert shown_tables() == ["singer"]
    settings.answer.max_routed_tables = 2
    shown = shown_tables()
    # concert (the router's third) is cut, then comes back as the bridge from singer to stadium
    assert shown == ["concert", "singer", "singer_in_concert", "stadium"]  # in the database's order


def test_the_router_s_table_scores_reach_the_wide_cap(tmp_path: Path, shared_data: Path) -> None:
    coll = Collection.create("one", path=tmp_path / "coll")
    coll.add_database(str(shared_data / "spider" / "database" / "concert_singer" / "concert_singer.sqlite"))
    coll.save()
    settings = load_settings()
    settings.answer.max_routed_tables, settings.answer.wide_schema_tables = 2, 3
    routed = ["singer", "stadium", "singer_in_concert"]

    def shown_tables(scores: dict[str, float]) -> list[str]:
        llm = ScriptedLLM(["SELECT COUNT(*) FROM singer", "6."])
        pick = lambda cands: RouteCandidate(database="concert_singer", tables=routed, table_scores=scores)  # noqa: E731
        tagql.connect(collection=coll, llm=llm, settings=settings, route_method="bm25").ask(
            "How many singers sang in a concert?", choose=pick)
        return [line.split()[2] for line in llm.prompts[0][0].content.splitlines() if line.startswith("CREATE TABLE")]

    # no scores: the first 2, then the bridge between them (in the database's order)
    assert shown_tables({}) == ["concert", "singer", "singer_in_concert", "stadium"]
    # singer_in_concert joins the best table: 1.0 + .4 x 2.0 beats stadium's 1.2 + .4 x 1.2
    assert shown_tables({"singer": 2.0, "stadium": 1.2, "singer_in_concert": 1.0}) == ["singer", "singer_in_concert"]
    settings.answer.wide_table_ranking = "router"  # the same scores, ignored: the router's first 2
    assert shown_tables({"singer": 2.0, "stadium": 1.2, "singer_in_concert": 1.0}) == shown_tables({})
