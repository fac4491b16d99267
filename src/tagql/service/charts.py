"""Which chart fits a result: a Vega-Lite spec chosen from the columns' types and value counts.

A category and a number -> bar (the category on x, the number on y); a time and a number -> line; two
numbers -> scatter (``point``); anything else -> no chart. The row index is never an axis (the complaint of
vanna #763/#952): every encoded field is a column of the result. Identifier columns (``id``, ``*_id``) are
categories, never measures. The caller can override the mark and the columns (the web UI's switches).

Fields in the spec are ``c0``, ``c1``, ... (the column's position) with the column name as the axis title,
so names like ``COUNT(*)`` or ``T1.name`` need no escaping; the client supplies the rows as
``{"c0": ..., "c1": ...}`` records under the data name ``table``. Pure: no I/O, no model.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

MARKS = ("bar", "line", "point")  # point = scatter
MAX_CATEGORIES = 60  # more distinct categories than this make an unreadable bar chart
_TIME_NAME = re.compile(r"(^|_|\b)(date|time|day|month|year|week|created|updated|timestamp)", re.I)
_ID_NAME = re.compile(r"(^id$|_id$|^id_|\bid\b)", re.I)
_ISO = re.compile(r"^\d{4}-\d{2}(-\d{2})?([ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$")


class ChartError(ValueError):
    """A requested mark or column that does not exist in the result."""


@dataclass(frozen=True)
class ColumnProfile:
    """A column of a result: its Vega-Lite type and how many distinct non-null values it holds."""

    index: int
    name: str
    type: str  # quantitative | temporal | nominal
    distinct: int
    numeric: bool  # all values are numbers (a year as 1999 is numeric and temporal)
    identifier: bool

    @property
    def field(self) -> str:
        return f"c{self.index}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "field": self.field, "type": self.type, "distinct": self.distinct}


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def profile(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[ColumnProfile]:
    """Each column's type from its non-null values (and its name, for times and identifiers)."""
    out = []
    for i, name in enumerate(columns):
        values = [r[i] for r in rows if i < len(r) and r[i] is not None]
        numeric = bool(values) and all(_is_number(v) for v in values)
        identifier = bool(_ID_NAME.search(name))
        timey = bool(_TIME_NAME.search(name))
        if values and all(isinstance(v, (date, datetime)) or (isinstance(v, str) and _ISO.match(v.strip()))
                          for v in values):
            kind = "temporal"
        elif numeric and timey and all(float(v).is_integer() and 1000 <= v <= 3000 for v in values):
            kind = "temporal"  # a year
        elif numeric and not identifier:
            kind = "quantitative"
        else:
            kind = "nominal"
        distinct = len({repr(v) for v in values})
        out.append(ColumnProfile(i, str(name), kind, distinct, numeric, identifier))
    return out


def _axis(p: ColumnProfile) -> dict[str, Any]:
    enc: dict[str, Any] = {"field": p.field, "title": p.name}
    if p.type == "temporal" and p.numeric:
        enc["type"] = "ordinal"  # a year as a number: ordered, not milliseconds since 1970
    else:
        enc["type"] = p.type
    return enc


def choose(profiles: Sequence[ColumnProfile], rows: int) -> tuple[str | None, ColumnProfile | None,
                                                                  ColumnProfile | None]:
    """The proposed (mark, x, y), or (None, None, None) when no chart fits."""
    if rows < 2:
        return None, None, None
    numbers = [p for p in profiles if p.type == "quantitative"]
    times = [p for p in profiles if p.type == "temporal"]
    categories = [p for p in profiles if p.type == "nominal" and 1 < p.distinct <= MAX_CATEGORIES]
    if times and numbers:
        return "line", times[0], numbers[0]
    if categories and numbers:
        # the category that tells rows apart best (a label per row beats a repeated grouping)
        best = max(categories, key=lambda p: (p.distinct, -p.index))
        return "bar", best, numbers[0]
    if len(numbers) >= 2:
        return "point", numbers[0], numbers[1]
    return None, None, None


def chart(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, mark: str | None = None,
          x: str | None = None, y: str | None = None) -> dict[str, Any]:
    """The proposed chart for a result, or the one the caller asked for (``mark`` ``none`` = no chart).

    Returns ``{"mark", "x", "y", "columns", "marks", "spec"}``: ``spec`` is a Vega-Lite spec (None when no
    chart) reading the data named ``table``; ``columns`` are the profiles the choice was made from."""
    profiles = profile(columns, rows)
    by_name = {p.name: p for p in profiles}
    for what, name in (("x", x), ("y", y)):
        if name is not None and name not in by_name:
            raise ChartError(f"no column '{name}' for {what}; the columns are: {', '.join(by_name)}")
    if mark is not None and mark not in (*MARKS, "none"):
        raise ChartError(f"unknown chart type '{mark}'; use one of: {', '.join((*MARKS, 'none'))}")
    auto_mark, auto_x, auto_y = choose(profiles, len(rows))
    if mark == "none" or (mark is None and x is None and y is None and auto_mark is None):
        return _result(None, None, None, profiles)
    px = by_name[x] if x is not None else auto_x
    py = by_name[y] if y is not None else auto_y
    # fill what the caller left open: the other columns, numbers first for y
    rest = [p for p in profiles if p is not px and p is not py]
    if py is None:
        py = next((p for p in rest if p.type == "quantitative"), None) or (rest[0] if rest else None)
        rest = [p for p in rest if p is not py]
    if px is None:
        px = next((p for p in rest if p.type != "quantitative"), None) or (rest[0] if rest else None)
    if px is None or py is None:
        return _result(None, None, None, profiles)
    chosen = mark or auto_mark or ("line" if px.type == "temporal" else "point" if px.type == "quantitative"
                                   else "bar")
    return _result(chosen, px, py, profiles)


def _result(mark: str | None, px: ColumnProfile | None, py: ColumnProfile | None,
            profiles: list[ColumnProfile]) -> dict[str, Any]:
    spec = None
    if mark is not None and px is not None and py is not None:
        x_enc, y_enc = _axis(px), _axis(py)
        if mark == "bar" and x_enc["type"] == "nominal" and y_enc["type"] == "quantitative":
            x_enc["sort"] = "-y"  # biggest first
        spec = {
            "description": f"{py.name} by {px.name}",
            "data": {"name": "table"},
            "mark": {"type": mark, "tooltip": True, **({"point": True} if mark == "line" else {})},
            "encoding": {"x": x_enc, "y": y_enc},
            "width": "container",
            "height": 280,
        }
    return {"mark": mark, "x": px.name if px and mark else None, "y": py.name if py and mark else None,
            "columns": [p.to_dict() for p in profiles], "marks": [*MARKS, "none"], "spec": spec}
