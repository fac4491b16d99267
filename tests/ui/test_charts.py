"""The chart choice on typed results (tagql.service.charts): the mark from the column types and value counts,
the axes always columns of the result (never the row index), the user's overrides checked."""

from __future__ import annotations

import pytest

from tagql.service.charts import ChartError, chart, profile

PUBLISHERS = [["Marvel Comics", 387], ["DC Comics", 224], ["NBC - Heroes", 19], ["Dark Horse Comics", 18]]


def test_count_per_publisher_is_a_bar_with_publisher_on_x_and_count_on_y() -> None:
    c = chart(["publisher_name", "COUNT(*)"], PUBLISHERS)
    assert (c["mark"], c["x"], c["y"]) == ("bar", "publisher_name", "COUNT(*)")
    enc = c["spec"]["encoding"]
    assert enc["x"] == {"field": "c0", "title": "publisher_name", "type": "nominal", "sort": "-y"}
    assert enc["y"] == {"field": "c1", "title": "COUNT(*)", "type": "quantitative"}
    assert c["spec"]["data"] == {"name": "table"} and c["spec"]["mark"]["type"] == "bar"
    # only fields of the result are encoded: no index, no row number
    fields = {e["field"] for e in enc.values()}
    assert fields <= {p.field for p in profile(["publisher_name", "COUNT(*)"], PUBLISHERS)}


def test_the_count_comes_first_too() -> None:
    c = chart(["heroes", "publisher_name"], [[r[1], r[0]] for r in PUBLISHERS])
    assert (c["mark"], c["x"], c["y"]) == ("bar", "publisher_name", "heroes")


def test_an_id_column_is_a_category_not_a_measure() -> None:
    rows = [[1, "Marvel", 387], [2, "DC", 224], [3, "Image", 12]]
    c = chart(["publisher_id", "publisher_name", "n"], rows)
    assert (c["mark"], c["y"]) == ("bar", "n")
    assert [p["type"] for p in c["columns"]] == ["nominal", "nominal", "quantitative"]


def test_time_and_number_is_a_line() -> None:
    c = chart(["day", "orders"], [["2024-01-01", 3], ["2024-01-02", 5], ["2024-01-03", 4]])
    assert (c["mark"], c["x"], c["y"]) == ("line", "day", "orders")
    assert c["spec"]["encoding"]["x"]["type"] == "temporal"
    years = chart(["year", "films"], [[1999, 3], [2000, 5], [2001, 4]])
    assert (years["mark"], years["x"]) == ("line", "year")
    assert years["spec"]["encoding"]["x"]["type"] == "ordinal"  # not milliseconds since 1970


def test_two_numbers_is_a_scatter() -> None:
    c = chart(["height_cm", "weight_kg"], [[180, 80], [200, 120], [150, 50.5]])
    assert (c["mark"], c["x"], c["y"]) == ("point", "height_cm", "weight_kg")


@pytest.mark.parametrize("columns,rows", [
    (["COUNT(*)"], [[750]]),                                     # one value
    (["full_name"], [["Peter Parker"], ["Bruce Wayne"]]),        # text only
    (["name", "n"], [["Marvel", 387]]),                          # one row
    (["name", "n"], [[f"hero {i}", i] for i in range(200)]),     # too many categories for bars
    ([], []),
])
def test_no_chart_when_none_fits(columns: list[str], rows: list[list]) -> None:
    c = chart(columns, rows)
    assert c["mark"] is None and c["spec"] is None


def test_the_user_switches_type_and_columns() -> None:
    c = chart(["publisher_name", "heroes", "avg_height"], [["Marvel", 387, 180.5], ["DC", 224, 178.0]],
              mark="point", x="heroes", y="avg_height")
    assert (c["mark"], c["x"], c["y"]) == ("point", "heroes", "avg_height")
    line = chart(["publisher_name", "heroes"], PUBLISHERS, mark="line")
    assert (line["mark"], line["x"], line["y"]) == ("line", "publisher_name", "heroes")
    y_only = chart(["publisher_name", "heroes", "avg_height"], [["Marvel", 387, 180.5], ["DC", 224, 178.0]],
                   y="avg_height")
    assert (y_only["mark"], y_only["x"], y_only["y"]) == ("bar", "publisher_name", "avg_height")
    assert chart(["publisher_name", "heroes"], PUBLISHERS, mark="none")["spec"] is None
    with pytest.raises(ChartError, match="no column 'nope' for x"):
        chart(["a", "b"], [[1, 2]], x="nope")
    with pytest.raises(ChartError, match="unknown chart type 'pie'"):
        chart(["a", "b"], [[1, 2]], mark="pie")


def test_nulls_do_not_change_the_type() -> None:
    assert [p.type for p in profile(["name", "n"], [["a", None], [None, 2], ["b", 3.5]])] == [
        "nominal", "quantitative"]
