"""The foreign-key views every stage shares: links with their columns (for join conditions) and the plain
table adjacency (for reachability)."""

from tagql.db.schema import Column, ForeignKey, KeyLink, Schema, Table, key_links, key_neighbours


def shop() -> Schema:
    return Schema("shop", [
        Table("customer", [Column("id", primary_key=True), Column("name")]),
        Table("orders", [Column("id", primary_key=True), Column("customer_id"), Column("parent_id")],
              [ForeignKey(["customer_id"], "customer", ["id"]), ForeignKey(["parent_id"], "orders", ["id"])]),
        Table("note", [Column("order_id")], [ForeignKey(["order_id"], "orders", [])]),  # REFERENCES orders
        Table("audit", [Column("x")], [ForeignKey(["x"], "gone", ["id"])]),  # a table the schema lacks
    ])


def test_every_key_is_a_link_both_ways_with_its_columns() -> None:
    links = key_links(shop())
    assert KeyLink("orders", ("customer_id",), "customer", ("id",)) in links["orders"]
    assert KeyLink("customer", ("id",), "orders", ("customer_id",), up=False) in links["customer"]


def test_keys_without_columns_or_target_give_no_link_but_still_neighbours() -> None:
    links = key_links(shop())
    assert "note" not in links and "audit" not in links
    adj = key_neighbours(shop())
    assert adj["note"] == {"orders"}
    assert adj["orders"] == {"customer", "note"}  # the self-key (parent_id) is left out
    assert adj["audit"] == set()
