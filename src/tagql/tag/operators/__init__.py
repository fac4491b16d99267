"""LM operators over rows (LOTUS-style semantic operators), executed efficiently.

Each operator takes a natural-language instruction whose ``{Column}`` fields name columns of the table:

    t = SemTable.from_result(db.execute("SELECT DISTINCT City FROM schools"), engine)
    sv = t.sem_filter("{City} is a city in the Silicon Valley region")
    top = t.sem_topk("{Title} is technical", k=3)
    text = t.sem_agg("Summarize the comments")

Efficiency (what a naive one-call-per-row loop does not do):

* **dedupe** - the LM sees each distinct combination of the *referenced* columns once
  (filtering 1,000 schools on ``{City}`` costs one call per distinct city);
* **persistent cache** keyed by the prompt texts + model + operator + instruction + input
  (:class:`~tagql.tag.cache.OpCache`;
  one write transaction per operator call);
* **constrained outputs** - a filter answers ``yes``/``no`` under a GBNF grammar (one token), a score is
  a digit, extraction is JSON-schema constrained;
* **shared system prefix** - the fixed instruction is the system message, the row is the user message, so
  llama.cpp reuses the evaluated instruction for every row;
* **batching** - ``batch_size > 1`` packs several rows into one call with a grammar for the numbered answers;
* a per-question **LM-call cap** (:class:`LMCallLimitExceeded`) and a progress callback.

Row values are data, never instructions: they are quoted in the user message and outputs are
grammar-constrained, so "ignore previous instructions" in a cell can at most flip that row's label.

Layout: one engine (:mod:`~tagql.tag.operators.base`: LM calls through the cache under the call cap,
batching, progress, stats; :class:`SemEngine` in :mod:`~tagql.tag.operators.engine`), one module per
operator (:mod:`~tagql.tag.operators.sem_filter`, :mod:`~tagql.tag.operators.sem_map` (also ``LM_NUMBER``),
:mod:`~tagql.tag.operators.sem_extract`, :mod:`~tagql.tag.operators.sem_topk`,
:mod:`~tagql.tag.operators.sem_agg`, :mod:`~tagql.tag.operators.sem_join`), each with its engine methods and
its :class:`SemTable` method; the prompts and grammars in ``prompts.toml`` beside them.
"""

from tagql.tag.operators.base import (
    CASCADE_MODES,
    PROMPTS,
    EngineStats,
    LMCallLimitExceeded,
    OperatorError,
    Progress,
    drop_unmatched_braces,
    fill,
    repair_braces,
    resolve_columns,
    resolve_or_none,
    stderr_progress,
    template_fields,
)
from tagql.tag.operators.engine import SemEngine
from tagql.tag.operators.sem_filter import JUDGE_SYSTEM, YES_NO_CHOICES, YES_NO_GRAMMAR, judge_messages
from tagql.tag.operators.sem_map import _plain_number, _scaled_number
from tagql.tag.operators.sem_topk import AB_GRAMMAR, PAIRWISE_MAX, SCORE_GRAMMAR
from tagql.tag.operators.table import SemTable

__all__ = [
    "AB_GRAMMAR",
    "CASCADE_MODES",
    "JUDGE_SYSTEM",
    "PAIRWISE_MAX",
    "PROMPTS",
    "SCORE_GRAMMAR",
    "YES_NO_CHOICES",
    "YES_NO_GRAMMAR",
    "EngineStats",
    "LMCallLimitExceeded",
    "OperatorError",
    "Progress",
    "SemEngine",
    "SemTable",
    "_plain_number",
    "_scaled_number",
    "drop_unmatched_braces",
    "fill",
    "judge_messages",
    "repair_braces",
    "resolve_columns",
    "resolve_or_none",
    "stderr_progress",
    "template_fields",
]
