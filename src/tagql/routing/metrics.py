"""Routing metrics (issue 4): database recall@k, table recall@k over flattened candidates, mAP."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp, parse_one

from tagql.routing.candidate import Candidate


@dataclass(frozen=True)
class Gold:
    database: str
    tables: frozenset[str]  # lower-case table names


def gold_tables(sql: str, table_names: Sequence[str]) -> frozenset[str]:
    """Tables a gold SQL query uses (sqlglot), mapped to the schema's names (lower case)."""
    known = {t.lower() for t in table_names}
    try:
        tree = parse_one(sql, read="sqlite")
        found = {t.name.lower() for t in tree.find_all(exp.Table)}
    except Exception:  # noqa: BLE001 -- fall back to a token scan for the odd unparsable query
        found = {w.strip('`"').lower() for w in sql.replace("(", " ").replace(")", " ").split()}
    return frozenset(found & known)


def flatten(cands: Sequence[Candidate]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    seen = set()
    for c in cands:
        for t in c.tables:
            key = (c.database, t.lower())
            if key not in seen:
                seen.add(key)
                out.append(key)
    return out


def db_recall(cands: Sequence[Candidate], gold: Gold, k: int) -> float:
    dbs = list(dict.fromkeys(c.database for c in cands))[:k]
    return float(gold.database in dbs)


def table_recall(cands: Sequence[Candidate], gold: Gold, k: int) -> float:
    pairs = set(flatten(cands)[:k])
    want = {(gold.database, t) for t in gold.tables}
    return len(want & pairs) / len(want) if want else 1.0


def average_precision(cands: Sequence[Candidate], gold: Gold) -> float:
    want = {(gold.database, t) for t in gold.tables}
    if not want:
        return 1.0
    hits, total = 0, 0.0
    for i, p in enumerate(flatten(cands), 1):
        if p in want:
            hits += 1
            total += hits / i
    return total / len(want)


def summarize(all_cands: Sequence[Sequence[Candidate]], golds: Sequence[Gold]) -> dict[str, float]:
    n = len(golds)

    def mean(f) -> float:
        return round(100 * sum(f(c, g) for c, g in zip(all_cands, golds)) / n, 2) if n else 0.0

    return {
        "db_r@1": mean(lambda c, g: db_recall(c, g, 1)), "db_r@5": mean(lambda c, g: db_recall(c, g, 5)),
        "table_r@5": mean(lambda c, g: table_recall(c, g, 5)),
        "table_r@15": mean(lambda c, g: table_recall(c, g, 15)),
        "mAP": mean(average_precision), "n": n,
    }
