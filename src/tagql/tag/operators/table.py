"""The row table with every LM operator (LOTUS-style: each returns a new table), from the operators'
modules."""

from __future__ import annotations

from tagql.tag.operators.sem_agg import AggTable
from tagql.tag.operators.sem_extract import ExtractTable
from tagql.tag.operators.sem_filter import FilterTable
from tagql.tag.operators.sem_join import JoinTable
from tagql.tag.operators.sem_map import MapTable
from tagql.tag.operators.sem_topk import TopKTable


class SemTable(FilterTable, MapTable, ExtractTable, TopKTable, AggTable, JoinTable):
    """Rows plus column names, with LM operators that each return a new table (LOTUS-style)."""
