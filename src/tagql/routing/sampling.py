"""DFS serialization of a query schema (DBCopilot Algorithm 2), its inverse, and schema sampling.

A query schema is ``(database, tables)``. Serializing walks the schema graph depth-first from the
root with a random successor order, so related tables are adjacent in the sequence and one schema
has several valid sequences. Sampling draws finite random walks whose sizes follow real query
statistics (how many tables Spider's training queries touch).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tagql.routing.graph import ROOT, SchemaGraph, db_node, table_node

SEP = " | "

# Share of Spider train queries (7000, tables counted with sqlglot) touching 1..5 tables.
SPIDER_TABLE_COUNTS: dict[int, float] = {1: 0.5616, 2: 0.3336, 3: 0.0954, 4: 0.0083, 5: 0.0011}


@dataclass(frozen=True)
class QuerySchema:
    database: str
    tables: tuple[str, ...]


def dfs_order(schema: QuerySchema, graph: SchemaGraph, rng: random.Random | None = None) -> list[str]:
    """Algorithm 2: DFS from the root over the schema's nodes, successors in a random order ``pi``."""
    rng = rng or random.Random(0)
    if not graph.is_connected_schema(schema.database, schema.tables):
        raise ValueError(f"{schema} is not a connected schema of the graph")
    nodes = {ROOT, db_node(schema.database)} | {table_node(schema.database, t) for t in schema.tables}
    visited: list[tuple] = []
    seen: set[tuple] = set()
    stack = [ROOT]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        visited.append(node)
        seen.add(node)
        if seen == nodes:
            break
        succ = [s for s in graph.g.successors(node) if s in nodes and s not in seen]
        rng.shuffle(succ)
        stack.extend(succ)
    if seen != nodes:
        raise ValueError(f"{schema} is not a connected schema of the graph")
    return [n[1] if n[0] == "db" else n[2] for n in visited[1:]]


def serialize(schema: QuerySchema, graph: SchemaGraph, rng: random.Random | None = None) -> str:
    return SEP.join(dfs_order(schema, graph, rng))


def deserialize(text: str, graph: SchemaGraph) -> QuerySchema:
    """Inverse of :func:`serialize`; raises ``ValueError`` unless the sequence is a trail of the graph."""
    parts = [p.strip() for p in text.split(SEP.strip())]
    if not parts or not parts[0]:
        raise ValueError("empty schema sequence")
    db, tables = parts[0], parts[1:]
    if not graph.is_trail(db, tables):
        raise ValueError(f"not a trail of the schema graph: {text!r}")
    return QuerySchema(db, tuple(tables))


def sample_schemas(
    graph: SchemaGraph, n: int, *, seed: int = 0, sizes: dict[int, float] | None = None,
    databases: Sequence[str] | None = None,
) -> list[QuerySchema]:
    """``n`` random walks: root -> a database -> a table -> random unvisited neighbours of the walk.

    Every table of the chosen databases is used as a start in turn (so rare tables get questions);
    the walk length is drawn from ``sizes`` and a walk that gets stuck stops early.
    """
    rng = random.Random(seed)
    sizes = sizes or SPIDER_TABLE_COUNTS
    ks, ws = zip(*sorted(sizes.items()))
    starts = [(db, t) for db in (databases or graph.databases) for t in graph.tables(db)]
    if not starts:
        return []
    out: list[QuerySchema] = []
    order: list[tuple[str, str]] = []
    while len(out) < n:
        if not order:
            order = starts[:]
            rng.shuffle(order)
        db, first = order.pop()
        k = rng.choices(ks, ws)[0]
        walk = [first]
        while len(walk) < k:
            frontier = sorted({m for t in walk for m in graph.neighbours(db, t)} - set(walk))
            if not frontier:
                break
            walk.append(rng.choice(frontier))
        out.append(QuerySchema(db, tuple(walk)))
    return out


def measure_table_counts(train_json: Path) -> dict[int, float]:
    """Recompute :data:`SPIDER_TABLE_COUNTS` from a Spider-style training file (``query`` field)."""
    import sqlglot
    from sqlglot import exp

    counts: Counter[int] = Counter()
    for e in json.loads(Path(train_json).read_text()):
        try:
            tree = sqlglot.parse_one(e["query"], read="sqlite")
        except Exception:  # noqa: BLE001 -- a few Spider queries do not parse; skip them
            continue
        counts[len({t.name.lower() for t in tree.find_all(exp.Table)})] += 1
    total = sum(counts.values())
    return {k: v / total for k, v in sorted(counts.items()) if k > 0}
