"""bench/routing/scale.py's distractors: recombined, renamed real schemas whose keys still resolve."""

from __future__ import annotations

import json
from pathlib import Path

from bench.routing.scale import distractors
from tagql.db.schema import Schema
from tagql.routing.graph import table_edges


def test_distractors_are_seeded_recombinations_with_valid_keys(spider_dir: Path) -> None:
    entries = json.loads((spider_dir / "tables.json").read_text())[:40]
    sources = [(Schema.from_spider(e), {}) for e in entries]
    out = distractors(sources, 30, seed=0)
    again = distractors(sources, 30, seed=0)
    assert [s.name for s, _ in out] == [s.name for s, _ in again] and len({s.name for s, _ in out}) == 30
    assert [t.name for t in out[7][0].tables] == [t.name for t in again[7][0].tables]
    source_tables = {t.name.lower() for s, _ in sources for t in s.tables}
    renamed = fks = 0
    for s, _ in out:
        names = {t.name for t in s.tables}
        assert 1 <= len(s.tables) <= 12 and len(names) == len(s.tables)
        renamed += sum(t.name.lower() not in source_tables for t in s.tables)
        for t in s.tables:
            cols = [c.name.lower() for c in t.columns]
            assert len(set(cols)) == len(cols)
            for fk in t.foreign_keys:  # every kept key points at a table and column of the distractor
                fks += 1
                ref = s.table(fk.ref_table)
                assert ref is not None and all(ref.column(c) is not None for c in fk.ref_columns)
                assert all(t.column(c) is not None for c in fk.columns)
        assert {e.kind for e in table_edges(s)} <= {"pk_fk", "fk_fk", "names"}
    assert renamed > 10 and fks > 10
    later = distractors(sources, 5, seed=0, start=30)
    assert not {s.name for s, _ in later} & {s.name for s, _ in out}


def test_rerank_distractors_never_hold_a_tables_own_half_or_dev(spider_dir: Path) -> None:
    """The re-ranker's distractor collections (bench/routing/rerank.py --distractors): a half's questions
    meet distractors recombined from the other half only, never from their own databases or Spider dev's."""
    from bench.routing.rerank import distractor_sources
    from bench.routing.spider_train_halves import spider_train_halves

    train, half_a, _ = spider_train_halves(0)
    entries = json.loads((spider_dir / "tables.json").read_text())
    sources = [(Schema.from_spider(e), {}) for e in entries]
    dev_dbs = sorted({e["db_id"] for e in json.loads((spider_dir / "dev.json").read_text())})
    own_b = {e["db_id"] for e in train if e["db_id"] not in half_a}
    pool = distractor_sources(sources, own_b, dev_dbs)
    names = {s.name for s, _ in pool}
    assert names and not names & own_b and not names & set(dev_dbs)
    assert half_a <= names  # the other half feeds them whole
    from tagql.text import split_identifier

    def words(name: str) -> str:  # how a distractor spells a table it keeps unrenamed
        return "_".join(split_identifier(name).split()).lower()

    tables_of = {s.name: {words(t.name) for t in s.tables} for s, _ in sources}
    pool_tables = set().union(*(tables_of[n] for n in names))
    own_only = set().union(*(tables_of[n] for n in own_b)) - pool_tables
    for s, _ in distractors(pool, 20, seed=1, share=0.0):  # unrenamed: every table is a pool table
        got = {words(t.name).removesuffix("_2") for t in s.tables}
        assert got <= pool_tables and not got & own_only


def test_a_database_name_given_twice_counts_once(spider_dir: Path) -> None:
    """Spider and BIRD dev both have ``formula_1``: the collection keeps one, so the figures count one."""
    from bench.routing.scale import counts

    entries = json.loads((spider_dir / "tables.json").read_text())[:3]
    first, second = Schema.from_spider(entries[0]), Schema.from_spider(entries[1])
    twin = Schema(first.name, second.tables)  # the same name, the other schema: added last, it is kept
    got = counts([(first, {}), (second, {}), (twin, {})])
    assert got["databases"] == 2 and got["sources_given"] == 3
    assert got["tables"] == 2 * len(second.tables)
    assert got["columns"] == 2 * sum(len(t.columns) for t in second.tables)
