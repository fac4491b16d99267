"""Schema graph (Algorithm 1), DFS serialization (Algorithm 2) and random-walk sampling."""

from __future__ import annotations

import random

import pytest

from tagql.routing.ddl import schema_from_ddl
from tagql.routing.graph import SchemaGraph, table_edges
from tagql.routing.sampling import QuerySchema, deserialize, dfs_order, sample_schemas, serialize

DDL = """
CREATE TABLE state (state_name TEXT PRIMARY KEY, population INT);
CREATE TABLE city (city_name TEXT, population INT, state_name TEXT REFERENCES state(state_name));
CREATE TABLE river (river_name TEXT, traverse TEXT, FOREIGN KEY (traverse) REFERENCES state(state_name));
CREATE TABLE customer (customer_id INT PRIMARY KEY, name TEXT);
CREATE TABLE invoice (invoice_no INT PRIMARY KEY, customer_id INT, total REAL);
CREATE TABLE log (id INT PRIMARY KEY, message TEXT);
"""


def test_edges_pk_fk_fk_fk_and_names() -> None:
    s = schema_from_ddl(DDL, "geo")
    kinds = {(e.a, e.b): e.kind for e in table_edges(s)}
    assert kinds[("city", "state")] == "pk_fk"
    assert kinds[("river", "state")] == "pk_fk"
    assert kinds[("city", "river")] == "fk_fk"  # both reference state.state_name: implicit link
    assert kinds[("customer", "invoice")] == "names"  # no declared key, same column name and type
    assert not any("log" in k for k in kinds)  # 'id' alone is no evidence


def test_value_jaccard_joinable() -> None:
    s = schema_from_ddl("CREATE TABLE a (sku TEXT); CREATE TABLE b (sku TEXT); CREATE TABLE c (sku TEXT);", "v")
    vals = {("a", "sku"): ["x1", "x2", "x3", "x4"], ("b", "sku"): ["x1", "x2", "x3", "x4"],
            ("c", "sku"): ["y1", "y2", "y3", "y4"]}
    kinds = {(e.a, e.b): e.kind for e in table_edges(s, vals)}
    assert kinds[("a", "b")] == "values"
    assert ("a", "c") not in kinds  # same name, disjoint values: the data says they do not join
    # schema only: the shared name is the evidence
    assert {(e.a, e.b): e.kind for e in table_edges(s)}[("a", "c")] == "names"


def test_spider_graph_structure(small_collection) -> None:
    g = small_collection.graph
    assert set(g.databases) == set(small_collection.databases)
    assert set(g.neighbours("concert_singer", "singer_in_concert")) == {"singer", "concert"}
    assert g.is_trail("concert_singer", ["singer", "singer_in_concert", "concert"])
    assert not g.is_trail("concert_singer", ["singer", "concert", "singer_in_concert"])  # concert not next to singer
    assert not g.is_trail("concert_singer", ["singer", "Pets"])  # table of another database
    assert g.is_connected_schema("concert_singer", ["singer", "concert", "singer_in_concert"])


def test_dfs_serialization_round_trip_and_order(small_collection) -> None:
    g = small_collection.graph
    samples = sample_schemas(g, 300, seed=1)
    assert len(samples) == 300
    orders = set()
    for qs in samples:
        assert g.is_connected_schema(qs.database, qs.tables)  # random walks only produce valid schemas
        text = serialize(qs, g, random.Random(7))
        back = deserialize(text, g)
        assert back.database == qs.database and set(back.tables) == set(qs.tables)
        assert g.is_trail(back.database, back.tables)  # a DFS order is itself a trail
    s3 = QuerySchema("concert_singer", ("singer", "singer_in_concert", "concert"))
    for seed in range(20):
        orders.add(tuple(dfs_order(s3, g, random.Random(seed))))
    assert len(orders) > 1  # the random successor order pi gives several sequences for one schema
    with pytest.raises(ValueError):
        deserialize("concert_singer | singer | concert", g)
    with pytest.raises(ValueError):
        serialize(QuerySchema("concert_singer", ("singer", "concert")), g)


def test_sample_sizes_follow_query_statistics(small_collection) -> None:
    sizes = [len(s.tables) for s in sample_schemas(small_collection.graph, 2000, seed=3)]
    share1 = sizes.count(1) / len(sizes)
    assert 0.5 < share1 < 0.63  # Spider train: 56% single-table
    assert max(sizes) <= 5 and sizes.count(2) > sizes.count(3) > 0


def test_graph_remove_database() -> None:
    g = SchemaGraph()
    g.add_database("a", ["t1", "t2"], [])
    g.add_database("b", ["t1"], [])
    g.remove_database("a")
    assert g.databases == ["b"] and g.tables("a") == []
