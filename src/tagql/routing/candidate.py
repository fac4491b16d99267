"""The routers' answer: one candidate query schema (a database and the tables of it a question needs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Candidate:
    """One routed schema: a database and the tables of it the question needs."""

    database: str
    tables: list[str]
    score: float
    trails: list[list[str]] = field(default_factory=list)  # the graph trails merged into ``tables``
    confidence: float | None = None  # ``ours``: probability its best table is needed (calibrated scorer)
    # ``ours``: each listed table's logit; the wide-schema cap (routing/linking.py) ranks with it
    table_scores: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {"database": self.database, "tables": list(self.tables), "score": round(float(self.score), 4)}
        if self.confidence is not None:
            d["confidence"] = round(float(self.confidence), 3)
        return d
