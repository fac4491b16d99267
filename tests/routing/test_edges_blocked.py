"""Joinable-link discovery by blocking (issue 37): the same edges as the pairwise reference, without
comparing every column pair."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tagql.db.schema import Column, ForeignKey, Schema, Table
from tagql.routing import graph
from tagql.routing.collection import _text_values, read_values
from tagql.routing.graph import table_edges, table_edges_exhaustive

from .conftest import DBS

_WORDS = ["customer", "order", "orders", "product", "people", "person", "city", "id", "name", "code", "date",
          "store", "stores", "item", "year", "value", "region", "staff"]


def _random_schema(rng: random.Random, n_tables: int) -> tuple[Schema, dict[tuple[str, str], list[str]]]:
    """Tables and columns drawn from a small vocabulary, so that names collide (``customer_id``,
    ``CustomerId``, ``id``, plural table names) and value sets overlap (shared pools, near-copies)."""
    pools = [[f"{w}{i}" for i in range(rng.randint(3, 30))] for w in ("a", "b", "c")] + [list(map(str, range(1, 40)))]
    tables, values = [], {}
    names = rng.sample([w for w in _WORDS if w not in ("id", "name", "code", "date", "year", "value")], k=min(n_tables, 12))
    names += [f"{rng.choice(_WORDS)}_{i}" for i in range(n_tables - len(names))]
    for tn in names:
        cols = []
        for _ in range(rng.randint(1, 6)):
            w = rng.choice(_WORDS)
            form = rng.choice(["{w}", "{w}_id", "{W}Id", "{w}id", "id"])
            cn = form.format(w=w, W=w.capitalize())
            if any(c.name == cn for c in cols):
                continue
            cols.append(Column(cn, rng.choice(["INT", "TEXT", "number", "varchar(20)"])))
            if rng.random() < 0.7:
                pool = rng.choice(pools)
                vals = rng.sample(pool, k=rng.randint(min(3, len(pool)), len(pool)))
                values[(tn, cn)] = [str(v) for v in vals]
        fks = []
        if tables and rng.random() < 0.3:
            ref = rng.choice(tables)
            fks.append(ForeignKey([cols[0].name], ref.name, [ref.columns[0].name]))
        tables.append(Table(tn, cols, fks))
    return Schema("random", tables), values


@pytest.mark.parametrize("seed", range(40))
def test_blocked_edges_equal_the_pairwise_reference_on_random_schemas(seed: int) -> None:
    rng = random.Random(seed)
    schema, values = _random_schema(rng, rng.randint(2, 30))
    for vals in (values, None):
        assert table_edges(schema, vals) == table_edges_exhaustive(schema, vals)


def test_blocked_edges_equal_the_reference_on_spider_databases_with_data(spider_dir: Path) -> None:
    entries = [e for e in json.loads((spider_dir / "tables.json").read_text()) if e["db_id"] in DBS]
    kinds = set()
    for e in entries:
        s = Schema.from_spider(e)
        vals = _text_values(read_values(str(spider_dir / "database" / e["db_id"] / f"{e['db_id']}.sqlite"), s))
        edges = table_edges(s, vals)
        assert edges == table_edges_exhaustive(s, vals), e["db_id"]
        kinds |= {x.kind for x in edges}
    assert {"pk_fk", "fk_fk", "names"} <= kinds


def test_prefix_filter_keeps_every_pair_above_the_threshold() -> None:
    rng = random.Random(3)
    base = [str(i) for i in range(100)]
    sets = []
    for _ in range(60):  # near-copies of one set and unrelated ones
        s = set(rng.sample(base, 95)) if rng.random() < 0.5 else {f"x{rng.randint(0, 10**6)}" for _ in range(50)}
        sets.append(s)
    block = list(range(len(sets)))
    got = graph._overlapping(block, sets, 0.85)
    want = {(i, j) for i in block for j in block if i < j and len(sets[i] & sets[j]) / len(sets[i] | sets[j]) >= 0.85}
    assert want and want <= got
    assert len(got) < len(sets) * (len(sets) - 1) // 2  # the filter does prune


def test_link_discovery_compares_candidates_not_all_column_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wide database (600 tables x 40 columns): name evidence is checked for candidate pairs only,
    a few per column, where the pairwise reference checks ~2.9 x 10^8 column pairs."""
    tables = []
    for i in range(600):
        cols = [Column(f"t{i}_c{j}", "TEXT") for j in range(38)] + [Column("id", "INT"), Column(f"t{(i + 1) % 600}_id", "INT")]
        tables.append(Table(f"t{i}", cols))
    schema = Schema("wide", tables)
    calls = [0]
    real = graph._names_related

    def counted(*a, **k):
        calls[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(graph, "_names_related", counted)
    edges = table_edges(schema)
    assert len(edges) == 600 and {e.kind for e in edges} == {"names"}  # t{i}.id ~ t{i-1}.t{i}_id
    assert calls[0] <= 2 * 600 * 40
