"""One engine for every LM operator: the core (:class:`~tagql.tag.operators.base.EngineBase`: LM, cache,
call cap, batching, progress, stats) with each operator's engine methods, from its own module."""

from __future__ import annotations

from tagql.tag.operators.sem_agg import AggEngine
from tagql.tag.operators.sem_extract import ExtractEngine
from tagql.tag.operators.sem_filter import FilterEngine
from tagql.tag.operators.sem_map import MapEngine
from tagql.tag.operators.sem_topk import TopKEngine


class SemEngine(FilterEngine, TopKEngine, MapEngine, ExtractEngine, AggEngine):
    """Runs LM operators for one session/question: LM, cache, call cap, batching, progress, stats."""
