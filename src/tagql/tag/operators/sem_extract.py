"""``extract``: named fields of each row's text, as JSON-schema constrained output."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from tagql.errors import LLMOutputError
from tagql.llm.base import system, user
from tagql.tag.operators.base import PROMPTS, EngineBase, OperatorError, TableBase, _one_cache_batch

if TYPE_CHECKING:
    from tagql.tag.operators.table import SemTable


class ExtractEngine(EngineBase):
    def extract_many(self, instruction: str, fields: list[str], items: list[str]) -> list[dict[str, Any]]:
        schema = {
            "type": "object", "properties": {f: {"type": ["string", "null"]} for f in fields},
            "required": fields,
        }
        sys_text = PROMPTS.render("extract_system", fields=", ".join(fields), instruction=instruction)
        out: list[dict[str, Any]] = []
        for i, item in enumerate(items):
            text = self.call(
                "extract", instruction + "|" + ",".join(fields), item,
                [system(sys_text), user(PROMPTS.render("extract_user", record=item))], max_tokens=160,
                json_schema=schema,
            )
            try:
                obj = json.loads(text[text.find("{"): text.rfind("}") + 1])
            except ValueError as exc:
                raise LLMOutputError(f"the LM did not return JSON for extraction: {text[:80]!r}") from exc
            out.append({f: obj.get(f) if isinstance(obj, dict) else None for f in fields})
            self._tick("extract", i + 1, len(items))
        return out


class ExtractTable(TableBase):
    @_one_cache_batch
    def sem_extract(self, instruction: str, fields: list[str]) -> SemTable:
        if not fields:
            raise OperatorError("extract needs at least one output field name")
        t0, c0 = time.perf_counter(), self.engine.stats.lm_calls
        per_row, distinct = self._distinct(instruction, "extract")
        values = dict(zip(distinct, self.engine.extract_many(instruction, fields, distinct)))
        rows = [r + tuple(values[k][f] for f in fields) for r, k in zip(self.rows, per_row)]
        out = type(self)(self.columns + list(fields), rows, self.engine)
        self._record("extract", instruction, len(self.rows), len(distinct), t0, c0)
        return out
