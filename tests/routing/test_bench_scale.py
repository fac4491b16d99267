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
