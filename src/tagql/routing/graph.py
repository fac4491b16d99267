"""The schema graph (DBCopilot Algorithm 1): root -> databases -> tables, plus table-table relations.

Any valid single-database query schema is a *trail* on this graph: the root, one database, then
tables each connected to a table already chosen. Relations between tables (both directions):

* ``pk_fk``   -- a declared foreign key;
* ``fk_fk``   -- two tables whose foreign keys reference the same column of a third table
                 (joined implicitly, like ``city`` and ``river`` through ``state``);
* ``values``  -- joinable: two columns whose distinct values overlap with Jaccard > 0.85 (needs data);
* ``names``   -- joinable by name/type evidence when only the schema is known
                 (``orders.customer_id`` ~ ``customer.customer_id`` / ``customer.id``).

Edges are computed per database (:func:`table_edges`) so adding or removing one database never
touches the others.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import networkx as nx

from tagql.db.schema import Schema
from tagql.text import split_identifier

ROOT = ("root",)
JACCARD = 0.85
_GENERIC = {"id", "name", "title", "type", "description", "date", "code", "year", "status", "value", "other", "details"}
_NUMERIC = ("INT", "NUM", "REAL", "FLOA", "DOUB", "DEC")


def db_node(db: str) -> tuple[str, str]:
    return ("db", db)


def table_node(db: str, table: str) -> tuple[str, str, str]:
    return ("table", db, table)


@dataclass(frozen=True)
class Edge:
    a: str
    b: str
    kind: str  # pk_fk | fk_fk | values | names
    evidence: str = ""


def _kind(t: str) -> str:
    t = (t or "").upper()
    return "num" if any(x in t for x in _NUMERIC) else "text"


def table_edges(schema: Schema, values: Mapping[tuple[str, str], Iterable[str]] | None = None) -> list[Edge]:
    """All table-table relations of one database; ``values`` maps (table, column) to distinct values.

    Near-linear in the number of columns: joinable column pairs are only looked for among *candidates*
    that share a normalised name (or follow the ``customer.id ~ orders.customer_id`` rule), found by
    indexing column names, never by comparing every column pair of every table pair; value overlap is
    then checked within a name block with a prefix filter on the value sets (exact: a pair with Jaccard
    above the threshold always shares a token of the two sets' rarest ones). The edges are exactly those
    of :func:`table_edges_exhaustive` (the pairwise reference, tested equal), in the same order and with
    the same evidence."""
    found, add = _edge_set(schema)
    if values:
        sets, keys = _value_sets(values)
        norm = [_norm(c) for _t, c in keys]
        cands: set[tuple[int, int]] = set()
        for block in _name_blocks([t for t, _c in keys], norm, strict=False):
            cands |= _overlapping(block, [sets[keys[i]] for i in block], JACCARD)
        for i, j in sorted(cands):  # the reference's order: the first overlapping columns give the evidence
            (ta, ca), (tb, cb) = keys[i], keys[j]
            if ta == tb or frozenset((ta, tb)) in found:
                continue
            va, vb = sets[(ta, ca)], sets[(tb, cb)]
            jac = len(va & vb) / len(va | vb)
            if jac > JACCARD:
                add(ta, tb, "values", f"{ta}.{ca} ~ {tb}.{cb} (jaccard {jac:.2f})")
    has_data = {k for k, v in (values or {}).items() if len(set(v)) >= 3}
    flat = [(ti, ci) for ti, t in enumerate(schema.tables) for ci in range(len(t.columns))]
    tabs = [schema.tables[ti].name for ti, _ in flat]
    norm = [_norm(schema.tables[ti].columns[ci].name) for ti, ci in flat]
    best: dict[tuple[int, int], tuple[int, int]] = {}  # table pair -> first (column of a, column of b)
    for block in _name_blocks(tabs, norm, strict=True):
        for x in range(len(block)):
            for y in range(x + 1, len(block)):
                p, q = flat[block[x]], flat[block[y]]
                if p[0] == q[0]:
                    continue
                if p[0] > q[0]:
                    p, q = q, p
                key = (p[0], q[0])
                if best.get(key, (1 << 62, 0)) <= (p[1], q[1]):
                    continue
                ca, cb = schema.tables[p[0]].columns[p[1]], schema.tables[q[0]].columns[q[1]]
                ta, tb = schema.tables[p[0]].name, schema.tables[q[0]].name
                if (_kind(ca.type) == _kind(cb.type) and not ((ta, ca.name) in has_data and (tb, cb.name) in has_data)
                        and _names_related(schema, ta, ca.name, tb, cb.name, strict=True)):
                    best[key] = (p[1], q[1])
    for (i, j), (x, y) in sorted(best.items()):
        ta, tb = schema.tables[i], schema.tables[j]
        if frozenset((ta.name, tb.name)) not in found:
            add(ta.name, tb.name, "names", f"{ta.name}.{ta.columns[x].name} ~ {tb.name}.{tb.columns[y].name}")
    return sorted(found.values(), key=lambda e: (e.a, e.b))


def _edge_set(schema: Schema) -> tuple[dict[frozenset[str], Edge], Callable[[str, str, str, str], None]]:
    """The edges found so far (one per table pair: the first evidence found is kept) and the function that
    adds one, seeded with the declared keys' edges (:func:`_key_edges`)."""
    found: dict[frozenset[str], Edge] = {}

    def add(a: str, b: str, kind: str, evidence: str) -> None:
        if a == b:
            return
        key = frozenset((a, b))
        if key not in found:
            found[key] = Edge(*sorted((a, b)), kind, evidence)

    _key_edges(schema, add)
    return found, add


def _value_sets(values: Mapping[tuple[str, str], Iterable[str]]
                ) -> tuple[dict[tuple[str, str], set[str]], list[tuple[str, str]]]:
    """Each column's distinct values as strings, and the columns with at least 3 (fewer prove no link)."""
    sets = {k: set(map(str, v)) for k, v in values.items()}
    return sets, [k for k, v in sets.items() if len(v) >= 3]


def _key_edges(schema: Schema, add: Callable[[str, str, str, str], None]) -> None:
    """Declared foreign keys (``pk_fk``) and pairs of tables referencing the same column (``fk_fk``)."""
    names = {t.name.lower(): t.name for t in schema.tables}
    refs: dict[tuple[str, str], set[str]] = defaultdict(set)  # (ref table, ref col) -> referencing tables
    for t in schema.tables:
        for fk in t.foreign_keys:
            ref = names.get(fk.ref_table.lower())
            if ref is None:
                continue
            add(t.name, ref, "pk_fk", f"{t.name}.{','.join(fk.columns)} -> {ref}.{','.join(fk.ref_columns)}")
            refs[(ref, ",".join(fk.ref_columns).lower())].add(t.name)
    for (ref, col), tabs in refs.items():
        tabs_sorted = sorted(tabs)
        for i, a in enumerate(tabs_sorted):
            for b in tabs_sorted[i + 1:]:
                add(a, b, "fk_fk", f"both reference {ref}.{col}")


def _norm(name: str) -> str:
    return split_identifier(name).replace(" ", "")


def _name_blocks(tables: Sequence[str], norm: Sequence[str], *, strict: bool) -> list[list[int]]:
    """Groups of column indices (``tables[i]``'s column with normalised name ``norm[i]``) such that every
    pair :func:`_names_related` accepts lies within one group: columns of the same name (not a generic
    one when ``strict``), and for a table ``customer`` its ``id`` / ``customer_id`` with the other
    tables' ``customer_id`` columns. Found through a name index: no pair of columns is compared."""
    by_name: dict[str, list[int]] = defaultdict(list)
    for i, n in enumerate(norm):
        by_name[n].append(i)
    blocks = [ix for n, ix in by_name.items() if len(ix) > 1 and not (strict and n in _GENERIC)]
    ents: dict[str, tuple[str, ...]] = {}
    for i, t in enumerate(tables):
        for e in ents.setdefault(t, _entities(t)):
            if norm[i] in ("id", e + "id"):
                others = [j for n in dict.fromkeys((e + "id", e.rstrip("s") + "id")) if n != norm[i]
                          for j in by_name.get(n, ()) if tables[j] != t]
                if others:
                    blocks.append([i] + others)
    return blocks


def _overlapping(block: Sequence[int], sets: Sequence[set[str]], threshold: float) -> set[tuple[int, int]]:
    """Pairs ``(i, j)``, i < j, of ``block``'s indices whose value sets may have Jaccard >= threshold: a
    superset of them, by the prefix filter (order the values rarest first within the block; two sets
    with Jaccard >= t share one of the first ``n - ceil(t n) + 1`` values of each). Sizes must also be
    within the ratio t. Blocks of a few columns are compared pairwise."""
    m = len(block)
    if m < 2:
        return set()
    if m <= 8:
        return {(min(block[x], block[y]), max(block[x], block[y])) for x in range(m) for y in range(x + 1, m)}
    freq: dict[str, int] = defaultdict(int)
    for s in sets:
        for v in s:
            freq[v] += 1
    index: dict[str, list[int]] = defaultdict(list)
    out: set[tuple[int, int]] = set()
    for x in sorted(range(m), key=lambda x: len(sets[x])):  # shorter first: a later set is never shorter
        s = sets[x]
        n = len(s)
        prefix = sorted(s, key=lambda v: (freq[v], v))[: n - math.ceil(threshold * n) + 1]
        seen: set[int] = set()
        for v in prefix:
            for y in index[v]:
                if y not in seen and len(sets[y]) >= threshold * n:
                    seen.add(y)
                    out.add((min(block[x], block[y]), max(block[x], block[y])))
            index[v].append(x)
    return out


def table_edges_exhaustive(schema: Schema, values: Mapping[tuple[str, str], Iterable[str]] | None = None
                           ) -> list[Edge]:
    """The pairwise reference of :func:`table_edges`: every column pair of every table pair (quadratic in
    the columns; kept for tests and ``bench/routing/wide.py``'s before/after timing)."""
    found, add = _edge_set(schema)
    if values:
        sets, keys = _value_sets(values)
        for i, (ta, ca) in enumerate(keys):
            for tb, cb in keys[i + 1:]:
                if ta == tb or frozenset((ta, tb)) in found:
                    continue
                va, vb = sets[(ta, ca)], sets[(tb, cb)]
                # value overlap alone links every pair of 1..n id columns; require related names too
                if not _names_related(schema, ta, ca, tb, cb, strict=False):
                    continue
                jac = len(va & vb) / len(va | vb)
                if jac > JACCARD:
                    add(ta, tb, "values", f"{ta}.{ca} ~ {tb}.{cb} (jaccard {jac:.2f})")
    has_data = {k for k, v in (values or {}).items() if len(set(v)) >= 3}
    for i, ta in enumerate(schema.tables):
        for tb in schema.tables[i + 1:]:
            if frozenset((ta.name, tb.name)) in found:
                continue
            for ca in ta.columns:
                # where both columns have data, the value overlap above decided; names are the fallback
                cb = next((c for c in tb.columns if _kind(c.type) == _kind(ca.type)
                           and not ((ta.name, ca.name) in has_data and (tb.name, c.name) in has_data)
                           and _names_related(schema, ta.name, ca.name, tb.name, c.name, strict=True)), None)
                if cb is not None:
                    add(ta.name, tb.name, "names", f"{ta.name}.{ca.name} ~ {tb.name}.{cb.name}")
                    break
    return sorted(found.values(), key=lambda e: (e.a, e.b))


def _names_related(schema: Schema, ta: str, ca: str, tb: str, cb: str, *, strict: bool) -> bool:
    """Name evidence that two columns hold the same entity key."""
    a, b = split_identifier(ca).replace(" ", ""), split_identifier(cb).replace(" ", "")
    if a == b:
        return a not in _GENERIC if strict else True
    # customer.id ~ orders.customer_id
    for t1, c1, c2 in ((ta, a, b), (tb, b, a)):
        for ent in _entities(t1):
            if c1 in ("id", ent + "id") and c2 in (ent + "id", ent.rstrip("s") + "id"):
                return True
    return False


def _entities(table: str) -> tuple[str, ...]:
    """The entity names a table's key columns may carry: its normalised name, and for a namespaced name
    (``sales.customer``, ``crm__customer``: schemas or databases merged into one) the last part too."""
    full = _norm(table)
    last = re.split(r"__|\.", table)[-1]
    return (full, _norm(last)) if last and last != table else (full,)


class SchemaGraph:
    """A directed networkx graph over the collection; table-table edges are stored in both directions."""

    def __init__(self) -> None:
        self.g = nx.DiGraph()
        self.g.add_node(ROOT)

    def add_database(self, db: str, tables: Sequence[str], edges: Iterable[Edge]) -> None:
        self.remove_database(db)
        d = db_node(db)
        self.g.add_edge(ROOT, d, kind="contains")
        for t in tables:
            self.g.add_edge(d, table_node(db, t), kind="contains")
        for e in edges:
            a, b = table_node(db, e.a), table_node(db, e.b)
            self.g.add_edge(a, b, kind=e.kind, evidence=e.evidence)
            self.g.add_edge(b, a, kind=e.kind, evidence=e.evidence)

    def remove_database(self, db: str) -> None:
        d = db_node(db)
        if d in self.g:
            self.g.remove_nodes_from([n for n in list(self.g.successors(d))] + [d])

    @property
    def databases(self) -> list[str]:
        return [n[1] for n in self.g.successors(ROOT)]

    def tables(self, db: str) -> list[str]:
        d = db_node(db)
        return [n[2] for n in self.g.successors(d)] if d in self.g else []

    def neighbours(self, db: str, table: str) -> list[str]:
        n = table_node(db, table)
        return [m[2] for m in self.g.successors(n)] if n in self.g else []

    def is_trail(self, db: str, tables: Sequence[str]) -> bool:
        """True if ``tables`` belong to ``db`` and each one after the first touches an earlier one."""
        if not tables or len(set(tables)) != len(tables):
            return False
        if any(table_node(db, t) not in self.g for t in tables) or not self.g.has_edge(ROOT, db_node(db)):
            return False
        for i, t in enumerate(tables[1:], 1):
            if not any(self.g.has_edge(table_node(db, t), table_node(db, p)) for p in tables[:i]):
                return False
        return True

    def is_connected_schema(self, db: str, tables: Iterable[str]) -> bool:
        """True if some order of ``tables`` is a trail (the induced table subgraph is connected)."""
        ts = list(dict.fromkeys(tables))
        if not ts or any(table_node(db, t) not in self.g for t in ts):
            return False
        sub = self.g.subgraph([table_node(db, t) for t in ts]).to_undirected()
        return nx.is_connected(sub)
