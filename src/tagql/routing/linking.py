"""Schema linking for wide databases: what of the routed tables the SQL prompt shows.

A database of a thousand tables cannot go into a prompt, and the router's tables alone miss the table
that joins two of them (``singer_in_concert`` between ``singer`` and ``concert``). So the prompt gets:

1. the routed tables;
2. the tables on the shortest foreign-key paths between them (:func:`join_path_tables`, at most
   ``max_bridges`` added), so every routed table can be joined to the others as the schema declares;
3. within each table of more than ``max_columns`` columns (one column per date, a 1,269-column fact
   table), only its keys, the columns the question names (a word of the question in the column's name or
   description, up to a plural/verb ending) and then the first columns in declared order up to the cap
   (:func:`link_columns`). A table within the cap is shown whole, so the small schemas most databases
   have are rendered byte for byte as before.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from tagql.db.schema import Column, Schema, Table, key_neighbours

if TYPE_CHECKING:
    from tagql.config import AnswerSettings

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an the of in on at to for by with and or is are was were be what which who whom how many "
                  "much list show give find all each every their its this that those these than from as".split())


def _stems(text: str) -> set[str]:
    out = set()
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", text).lower().replace("_", " ")
    for w in _WORD.findall(spaced):
        if w in _STOP or len(w) < 2:
            continue
        out.add(w)
        for end in ("ies", "es", "s", "ing", "ed"):
            if w.endswith(end) and len(w) - len(end) >= 3:
                out.add(w[: -len(end)] + ("y" if end == "ies" else ""))
    return out


def _between(adj: dict[str, set[str]], start: str, goal: str, max_hops: int) -> list[str] | None:
    """The tables strictly between ``start`` and ``goal`` on a shortest path of at most ``max_hops`` joins."""
    prev: dict[str, str | None] = {start: None}
    queue = deque([(start, 0)])
    while queue:
        node, hops = queue.popleft()
        if node == goal:
            inner = []
            step = prev[node]
            while step is not None and step != start:
                inner.append(step)
                step = prev[step]
            return inner[::-1]
        if hops == max_hops:
            continue
        for nxt in sorted(adj.get(node, ())):
            if nxt not in prev:
                prev[nxt] = node
                queue.append((nxt, hops + 1))
    return None


def join_path_tables(schema: Schema, tables: Sequence[str], *, max_bridges: int = 3, max_hops: int = 3) -> list[str]:
    """Tables not among ``tables`` on the shortest foreign-key path (at most ``max_hops`` joins) between two
    of them, in order of discovery, at most ``max_bridges``. Two tables joined directly, or through a table
    already shown, need none."""
    adj = key_neighbours(schema)
    chosen = list(dict.fromkeys(t.lower() for t in tables if t.lower() in adj))
    added: list[str] = []
    shown = set(chosen)
    for i, a in enumerate(chosen):
        for b in chosen[i + 1:]:
            if b in adj[a] or any(a in adj[m] and b in adj[m] for m in shown):
                continue
            inner = _between(adj, a, b, max_hops)
            new = [t for t in inner or [] if t not in shown]
            if inner and len(added) + len(new) <= max_bridges:
                added += new
                shown.update(new)
    names = {t.name.lower(): t.name for t in schema.tables}
    return [names[t] for t in added]


# the wide-schema cap's ranking (:func:`context_ranked`), chosen on the Spider train questions of
# bench.routing.wide_coverage (a grid of 2 x 2 values and 4 forms; docs/routing.md), never on dev
CONTEXT_WEIGHT = 0.4
JOIN_BONUS = 1.0


def context_ranked(adj: dict[str, set[str]], tables: Sequence[str], scores: dict[str, float], limit: int, *,
                   weight: float = CONTEXT_WEIGHT, bonus: float = JOIN_BONUS) -> list[str]:
    """``limit`` of ``tables`` picked by their scores in context. A table's own score gains ``weight`` x the
    best score among it and its listed key neighbours: the tables of a question come in key-joined groups, and
    a table whose neighbour is also likely (``chinook_1__Track`` beside ``chinook_1__MediaType``) beats an
    isolated one of another part of the schema that scored a little higher (``store_1__media_types``). Picked
    one at a time; a table one key join links to one already picked gains ``bonus``. Shift-invariant in the
    scores (logits of any offset rank alike); ties keep the listed order."""
    s = {t.lower(): float(scores[t]) for t in tables}
    names = {t.lower(): t for t in tables}
    ctx = {t: v + weight * max([v, *(s[m] for m in adj.get(t, ()) if m in s)]) for t, v in s.items()}
    order = sorted(s, key=lambda t: -ctx[t])
    chosen: list[str] = []
    while order and len(chosen) < limit:
        near = set().union(*(adj.get(c, set()) for c in chosen))
        pick = max(order, key=lambda t: ctx[t] + (bonus if t in near else 0.0))
        chosen.append(pick)
        order.remove(pick)
    return [names[t] for t in chosen]


def capped_tables(schema: Schema, tables: Sequence[str], limit: int, *, wide_above: int,
                  scores: dict[str, float] | None = None) -> list[str]:
    """In a database of more than ``wide_above`` tables, ``limit`` of the router's tables: ranked in context
    (:func:`context_ranked`) when the router scored every one of them (``ours``), else its first ``limit``
    (its order, best first). Every table otherwise, or with ``limit`` 0 (``answer.max_routed_tables``,
    ``wide_schema_tables``)."""
    if not limit or len(schema.tables) <= wide_above:
        return list(tables)
    if scores and all(t in scores for t in tables):
        return context_ranked(key_neighbours(schema), tables, scores, limit)
    return list(tables[:limit])


def link_columns(table: Table, question: str, *, max_columns: int = 40) -> Table:
    """``table`` with at most ``max_columns`` columns: its keys, then the columns the question names, then the
    first ones in declared order (shown in declared order); the table itself when within the cap."""
    if len(table.columns) <= max_columns:
        return table
    fk_cols = {c.lower() for fk in table.foreign_keys for c in fk.columns}
    words = _stems(question)
    keys = [c for c in table.columns if c.primary_key or c.name.lower() in fk_cols]
    named = [c for c in table.columns if c not in keys
             and (_stems(c.name) & words or (c.description and _stems(c.description) & words))]
    rest = [c for c in table.columns if c not in keys and c not in named]
    picked = {id(c) for c in [*keys, *named, *rest][:max_columns]}
    shown: list[Column] = [c for c in table.columns if id(c) in picked]
    kept = {c.name.lower() for c in shown}
    fks = [fk for fk in table.foreign_keys if all(c.lower() in kept for c in fk.columns)]
    note = f"{len(table.columns) - len(shown)} more columns not shown"
    return Table(table.name, shown, fks, f"{table.description} ({note})" if table.description else f"({note})")


def linked_schema(schema: Schema, tables: Iterable[str], question: str, *, max_bridges: int = 3,
                  max_columns: int = 40) -> Schema:
    """What the SQL prompt shows of ``schema`` for ``question`` routed to ``tables`` (see the module)."""
    tables = list(tables)
    wanted = {t.lower() for t in [*tables, *join_path_tables(schema, tables, max_bridges=max_bridges)]}
    return Schema(schema.name, [link_columns(t, question, max_columns=max_columns)
                                for t in schema.tables if t.name.lower() in wanted], schema.dialect)


def routed_prompt_schema(schema: Schema, tables: Sequence[str], question: str, answer: AnswerSettings,
                         scores: dict[str, float] | None = None) -> Schema:
    """What the SQL prompt shows of ``schema`` for ``question`` routed to ``tables`` under the ``[answer]``
    settings: the cap of a wide database (:func:`capped_tables`, ranked by ``scores`` when
    ``wide_table_ranking`` is ``context``), then the bridges and linked columns (:func:`linked_schema`)."""
    kept = capped_tables(schema, tables, answer.max_routed_tables, wide_above=answer.wide_schema_tables,
                         scores=scores if answer.wide_table_ranking == "context" else None)
    return linked_schema(schema, kept, question, max_bridges=answer.join_path_tables,
                         max_columns=answer.max_prompt_columns)
