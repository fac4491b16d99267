"""``join``: the pairs of rows of two tables for which a natural-language predicate holds (judged like a
filter, each distinct pair once)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from tagql.tag.operators.base import (
    OperatorError,
    TableBase,
    _one_cache_batch,
    resolve_or_none,
    template_fields,
)

if TYPE_CHECKING:
    from tagql.tag.operators.table import SemTable


class JoinTable(TableBase):
    @_one_cache_batch
    def sem_join(self, other: SemTable, instruction: str) -> SemTable:
        """Rows of ``self`` x ``other`` for which the predicate holds. Reference columns as
        ``{Col:left}`` / ``{Col:right}`` (or a plain ``{Col}`` that only one side has)."""
        t0, c0 = time.perf_counter(), self.engine.stats.lm_calls
        left_map: dict[str, int] = {}
        right_map: dict[str, int] = {}
        for name in template_fields(instruction):
            base, _, side = name.partition(":")
            in_l = resolve_or_none(base, self.columns)
            in_r = resolve_or_none(base, other.columns)
            if side == "left" or (not side and in_l is not None and in_r is None):
                if in_l is None:
                    raise OperatorError(f"join instruction references left column '{base}', which is missing",
                                        f"the left columns are: {', '.join(self.columns)}")
                left_map[name] = in_l
            elif side == "right" or (not side and in_r is not None and in_l is None):
                if in_r is None:
                    raise OperatorError(f"join instruction references right column '{base}', which is missing",
                                        f"the right columns are: {', '.join(other.columns)}")
                right_map[name] = in_r
            elif in_l is not None:
                raise OperatorError(f"join column '{base}' is on both sides", "write {Col:left} or {Col:right}")
            else:
                raise OperatorError(f"join instruction references column '{base}', which neither side has")
        if not left_map or not right_map:
            raise OperatorError("a join instruction must reference a column of each side",
                                "e.g. {Name:left} is the capital of {Country:right}")
        lkeys = [self.engine.fill(instruction, {n: r[i] for n, i in left_map.items()}) for r in self.rows]
        pairs: dict[str, str] = {}
        for lk in dict.fromkeys(lkeys):
            for r in other.rows:
                pairs.setdefault(self.engine.fill(lk, {n: r[i] for n, i in right_map.items()}), "")
        claims = list(pairs)
        n_all = len(self.rows) * len(other.rows)
        self.engine.stats.deduped += n_all - len(claims)
        verdict = dict(zip(claims, self.engine.judge_many(instruction, claims, op="join")))
        rows = []
        for lrow, lk in zip(self.rows, lkeys):
            for rrow in other.rows:
                if verdict[self.engine.fill(lk, {n: rrow[i] for n, i in right_map.items()})]:
                    rows.append(lrow + rrow)
        cols = self.columns + [c if c not in self.columns else f"{c}_right" for c in other.columns]
        self._record("join", instruction, n_all, len(claims), t0, c0)
        return type(self)(cols, rows, self.engine)
