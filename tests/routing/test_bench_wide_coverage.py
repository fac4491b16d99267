"""bench.routing.wide_coverage: the gold tables of a query and the cap variants it compares."""

from __future__ import annotations

from bench.routing.wide_coverage import adjacent_extra, gold_tables, group_best, joinable_best, shown_tables
from tagql.db.schema import Column, ForeignKey, Schema, Table
from tagql.routing.linking import key_neighbours


def merged() -> Schema:
    return Schema("wide", [
        Table("a__singer", [Column("singer_id", "INT", True)]),
        Table("a__song", [Column("song_id", "INT", True), Column("singer_id", "INT")],
              [ForeignKey(["singer_id"], "a__singer", ["singer_id"])]),
        Table("a__album", [Column("album_id", "INT", True), Column("song_id", "INT")],
              [ForeignKey(["song_id"], "a__song", ["song_id"])]),
        Table("b__songs", [Column("id", "INT", True)]),
        Table("b__vocals", [Column("id", "INT", True), Column("song", "INT")], [ForeignKey(["song"], "b__songs", ["id"])]),
    ])


def test_gold_tables_are_the_merged_names_the_query_reads_without_its_ctes() -> None:
    sql = "WITH t AS (SELECT * FROM Singer) SELECT T1.x FROM song AS T1 JOIN t ON 1"
    assert gold_tables("a", sql) == {"a__singer", "a__song"}
    assert gold_tables("a", "SELECT FROM WHERE (") is None


def test_the_variants_keep_the_best_tables_group_and_the_slice_keeps_the_order() -> None:
    s = merged()
    adj = key_neighbours(s)
    routed = ["a__song", "b__songs", "a__singer", "b__vocals", "a__album"]
    assert joinable_best(adj, routed, 2) == ["a__song", "a__singer"]  # b__songs joins nothing of a
    # b's two tables ranked 2nd and 4th (1/2 + 1/4) lose to a's 1st, 3rd and 5th (1 + 1/3 + 1/5)
    assert group_best(adj, routed, 3) == ["a__song", "a__singer", "a__album"]
    assert group_best(adj, ["b__songs", "a__song", "b__vocals"], 3) == ["b__songs", "b__vocals"]
    shown = shown_tables(s, adj, routed, "songs?", "@2", bridges=3, max_columns=40)
    assert [t.name for t in shown.tables] == ["a__song", "b__songs"]  # the database's order
    assert [t.name for t in shown_tables(s, adj, routed, "q", "all", 3, 40).tables] == [t.name for t in s.tables]


def test_the_extra_tables_are_the_later_ones_a_key_joins_to_a_kept_one() -> None:
    adj = key_neighbours(merged())
    routed = ["a__singer", "b__songs", "b__vocals", "a__album", "a__song"]
    assert adjacent_extra(adj, routed, 1, 2) == ["a__singer", "a__song"]  # album joins song, not singer
    assert adjacent_extra(adj, routed, 2, 2) == ["a__singer", "b__songs", "b__vocals", "a__song"]
    assert adjacent_extra(adj, routed, 2, 1) == ["a__singer", "b__songs", "b__vocals"]
