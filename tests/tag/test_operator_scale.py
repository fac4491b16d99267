"""LM operators over many rows cost one call per distinct input, and the up-front filter judging counts rows in
the database (GROUP BY), so what Python holds grows with the distinct inputs, not the rows
(bench/tag/operator_scale.py measures 10k / 100k / 1M rows)."""

from __future__ import annotations

import json

import pytest

from bench.tag import operator_scale
from tagql.db import open_database
from tagql.tag.cache import OpCache
from tagql.tag.operators import SemEngine
from tagql.tag.udf import execute_with_lm, register_lm_functions


@pytest.mark.parametrize("kind", ["sqlite", "duckdb"])
def test_filter_inputs_are_counted_by_the_database(tmp_path, kind):
    path = tmp_path / f"orders.{kind}"
    (operator_scale.build_sqlite if kind == "sqlite" else operator_scale.build_duckdb)(path, 20_000)
    db = open_database(path)
    fetched = []
    real = db.execute

    def spy(sql, **kw):
        result = real(sql, **kw)
        fetched.append((sql, len(result.rows)))
        return result

    db.execute = spy
    engine = SemEngine(operator_scale.scripted_llm(), cache=OpCache(None), cascade="off")
    register_lm_functions(db, engine)
    result = execute_with_lm(db, operator_scale.FILTER_SQL, engine)
    europe = {c for c, cont in operator_scale.COUNTRIES.items() if cont == "Europe"}
    assert result.rows[0][0] == sum(operator_scale.country_of(i) in europe for i in range(20_000))
    probe = [(sql, n) for sql, n in fetched if "GROUP BY" in sql.upper()]
    assert probe and probe[0][1] == 50  # 50 distinct inputs came back, not 20,000 rows
    assert max(n for _, n in fetched) == 50
    assert engine.stats.lm_calls == 50
    up_front = [r for r in engine.stats.per_operator if "before the statement" in r["op"]][0]
    assert up_front["rows"] == 20_000 and up_front["distinct_inputs"] == 50  # the weights are the row counts


def test_the_bench_shows_constant_calls_over_sizes(tmp_path, capsys):
    out = tmp_path / "scale.json"
    assert operator_scale.main(["--sizes", "2000,20000", "--engines", "duckdb,sqlite", "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert len(results) == 4
    for r in results:
        assert r["filter"]["lm_calls"] == 50 and r["map"]["lm_calls"] == 50
    by = {(r["engine"], r["rows"]): r for r in results}
    assert by[("duckdb", 2000)]["map"]["rows"] == by[("sqlite", 2000)]["map"]["rows"]
