"""``agg``: summarise or aggregate all rows into one text, hierarchically when they do not fit one call."""

from __future__ import annotations

import time
from collections.abc import Sequence

from tagql.llm.base import system, user
from tagql.tag.operators.base import PROMPTS, EngineBase, TableBase, _one_cache_batch, _text, resolve_columns


class AggEngine(EngineBase):
    def summarize(self, instruction: str, blocks: list[str], *, max_tokens: int = 256) -> str:
        """Hierarchical aggregation: summarise chunks that fit ``agg_chunk_chars``, then the summaries."""
        sys_text = PROMPTS["agg_system"]
        level = 0
        while True:
            chunks: list[list[str]] = [[]]
            size = 0
            for b in blocks:
                if chunks[-1] and size + len(b) > self.agg_chunk_chars:
                    chunks.append([])
                    size = 0
                chunks[-1].append(b[: self.agg_chunk_chars])
                size += len(b)
            outs = []
            for i, ch in enumerate(chunks):
                data = "\n".join(ch)
                note = "" if len(chunks) == 1 and level == 0 else (
                    PROMPTS["agg_note_partials"] if level else
                    PROMPTS.render("agg_note_part", part=i + 1, parts=len(chunks))
                )
                outs.append(self.call(
                    "agg", instruction, data,
                    [system(sys_text),
                     user(PROMPTS.render("agg_user", data=data, instruction=instruction, note=note))],
                    max_tokens=max_tokens,
                ))
                self._tick("agg", i + 1, len(chunks))
            if len(outs) == 1:
                return outs[0]
            blocks = [PROMPTS.render("agg_partial", n=i + 1, summary=o) for i, o in enumerate(outs)]
            level += 1


class AggTable(TableBase):
    @_one_cache_batch
    def sem_agg(self, instruction: str, columns: Sequence[str] | None = None) -> str:
        """Summarise/aggregate all rows into one text (hierarchically when they do not fit)."""
        t0, c0 = time.perf_counter(), self.engine.stats.lm_calls
        cols = list(columns) if columns else self.columns
        idx = [resolve_columns("{" + c + "}", self.columns, op="agg")[c] for c in cols]
        if not self.rows:
            return "There are no rows to summarise."
        blocks = [
            f"Data Point {n + 1}:\n" + "\n".join(f"- {self.columns[i]}: {_text(r[i])}" for i in idx)
            for n, r in enumerate(self.rows)
        ]
        text = self.engine.summarize(instruction, blocks)
        self._record("agg", instruction, len(self.rows), len(self.rows), t0, c0)
        return text
