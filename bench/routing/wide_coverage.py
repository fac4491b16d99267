"""What the SQL prompt of a wide database shows (issue 37 item 2), without the model: for every question,
the router's tables in the merged Spider database of ``bench.routing.wide_ex`` and, per cap, whether the
prompt (routed tables + foreign-key bridges, ``routing/linking.py``) holds every table the gold SQL reads.

Conditions side by side on the same routing of the same questions:

* ``all``   -- every table the router lists (``answer.max_routed_tables = 0``);
* ``@N``    -- what ``answer.max_routed_tables = N`` does: N of the router's tables ranked in context
  (``linking.context_ranked``: a table's logit plus 0.4 x the best of it and its key neighbours, +1 for a
  table joined to one already picked);
* ``@No``   -- the router's first N tables, in its order (the rule before ``context_ranked``);
* ``@Nj``   -- a variant: the best table, then the next ones it can be joined to within 3 key joins;
* ``@Ng``   -- a variant: the first N tables of the key-connected group the router ranks highest overall;
* ``@N+M``  -- a variant: the first N, then up to M later ones a key joins directly to a table kept.

Reported per condition: gold tables all shown (%), tables in the prompt (mean, p95), prompt characters
(p50, p95; the schema part only). Coverage bounds EX from above: a prompt without a gold table cannot be
right (bar a lucky equivalent). ``--questions train`` uses the Spider *train* questions of 19 train
databases (for choosing N); ``dev`` every Spider dev question whose database ships (reported).

    python -m bench.routing.wide_coverage --work /tmp/wide_ex --questions train
    python -m bench.routing.wide_coverage --work /tmp/wide_ex --questions dev

Needs the merged database and its index (``python -m bench.routing.wide_ex --prepare --work ...``). Prints
a table and writes bench/results/routing/wide_coverage_<questions>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

from bench import common
from bench.routing.wide_ex import SEP, pick_questions
from tagql.routing.linking import key_neighbours


def gold_tables(db: str, sql: str) -> set[str] | None:
    """The merged names (``<db>__<table>``, lower case) of the tables ``sql`` reads; None if unparsable."""
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except sqlglot.errors.ParseError:
        return None
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    return {f"{db}{SEP}{t.name}".lower() for t in tree.find_all(exp.Table) if t.name.lower() not in ctes}


def reachable(adj: dict[str, set[str]], start: str, max_hops: int) -> set[str]:
    seen, frontier = {start}, {start}
    for _ in range(max_hops):
        frontier = {n for t in frontier for n in adj.get(t, ())} - seen
        seen |= frontier
    return seen


def joinable_best(adj: dict[str, set[str]], tables: list[str], limit: int, max_hops: int = 3) -> list[str]:
    """Variant ``@Nj``: the best table, then the next ones within ``max_hops`` key joins of it (a best table
    without keys: the first ``limit`` as listed)."""
    if not tables or not adj.get(tables[0].lower()):
        return tables[:limit]
    near = reachable(adj, tables[0].lower(), max_hops)
    return [t for t in tables if t.lower() in near][:limit]


def group_best(adj: dict[str, set[str]], tables: list[str], limit: int) -> list[str]:
    """Variant ``@Ng``: the tables of the key-connected group the router ranks highest overall (each table
    weighs 1 / its rank), best first."""
    group_of: dict[str, frozenset[str]] = {}
    weight: dict[frozenset[str], float] = {}
    for rank, t in enumerate(tables):
        low = t.lower()
        if low not in group_of:
            group = frozenset(reachable(adj, low, len(adj)))
            group_of.update({m: group for m in group})
        weight[group_of[low]] = weight.get(group_of[low], 0.0) + 1.0 / (rank + 1)
    if not weight:
        return []
    best = max(weight, key=lambda g: weight[g])
    return [t for t in tables if t.lower() in best][:limit]


def adjacent_extra(adj: dict[str, set[str]], tables: list[str], limit: int, extra: int) -> list[str]:
    """Variant ``@N+M``: the first ``limit``, then up to ``extra`` of the later ones that one key join links
    to a table already kept (the 4th table of a 4-table question, not another database's)."""
    kept = list(tables[:limit])
    for t in tables[limit:]:
        if len(kept) >= limit + extra:
            break
        if any(t.lower() in adj.get(k.lower(), ()) for k in kept):
            kept.append(t)
    return kept


def shown_tables(schema: Any, adj: dict[str, set[str]], routed: list[str], question: str, cap: str, bridges: int,
                 max_columns: int, scores: dict[str, float] | None = None) -> Any:
    """The prompt schema of ``cap``: ``all``/``@N`` as ``tagql`` builds it (``scores``: the router's table
    logits), ``@No``/``@Nj``/``@Ng``/``@N+M`` the variants."""
    from tagql.routing.linking import capped_tables, linked_schema

    if cap == "all":
        tables = routed
    elif "+" in cap:
        n, m = cap[1:].split("+")
        tables = adjacent_extra(adj, routed, int(n), int(m))
    elif cap.endswith("g"):
        tables = group_best(adj, routed, int(cap[1:-1]))
    elif cap.endswith("j"):
        tables = joinable_best(adj, routed, int(cap[1:-1]))
    elif cap.endswith("o"):
        tables = routed[: int(cap[1:-1])]
    else:  # the merged database is wide
        tables = capped_tables(schema, routed, int(cap[1:]), wide_above=0, scores=scores)
    return linked_schema(schema, tables, question, max_bridges=bridges, max_columns=max_columns)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="/tmp/tagql_wide_ex", help="the folder bench.routing.wide_ex prepared")
    ap.add_argument("--questions", choices=("dev", "train"), default="dev")
    ap.add_argument("--per-db", type=int, default=1000, help="questions per database (default: all)")
    ap.add_argument("--caps", default="all,@2o,@2,@3o,@3,@3j,@3g,@3+1,@4o,@4,@5o,@5,@5j")
    ap.add_argument("--seed", type=int, default=37)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    work = Path(args.work)
    os.environ["TAGQL_COLLECTIONS_DIR"] = str(work / "collections")
    name = "spider_all_wide"
    if not (work / f"{name}.json").exists():
        raise SystemExit(f"no merged database in {work}: run python -m bench.routing.wide_ex --prepare --work {work}")
    import tagql
    from tagql.config import load_settings

    settings = load_settings()
    session = tagql.connect(collection=name, settings=settings)
    schema = session.database(name).schema
    adj = key_neighbours(schema)
    chosen, _ = pick_questions(args.questions, args.per_db, args.seed)
    caps = args.caps.split(",")
    rows: dict[str, list[dict[str, Any]]] = {c: [] for c in caps}
    unparsed = 0
    route_ms: list[float] = []
    for i, e in enumerate(chosen):
        gold = gold_tables(e["db_id"], e["query"])
        if not gold:
            unparsed += 1
            continue
        t = time.perf_counter()
        candidates = session.route(e["question"], 1)
        route_ms.append(1000 * (time.perf_counter() - t))
        routed = candidates[0].tables if candidates else []
        scores = candidates[0].table_scores if candidates else {}
        for c in caps:
            linked = shown_tables(schema, adj, routed, e["question"], c, settings.answer.join_path_tables,
                                  settings.answer.max_prompt_columns, scores)
            names = {t.name.lower() for t in linked.tables}
            rows[c].append({"covered": gold <= names, "tables": len(names), "chars": len(linked.to_prompt())})
        if (i + 1) % 100 == 0 or i + 1 == len(chosen):
            print(f"  {i + 1}/{len(chosen)} routed", flush=True)
    summary = {}
    print(f"{'cap':<6}{'n':>6}{'gold shown %':>14}{'tables mean':>13}{'p95':>6}{'chars p50':>11}{'p95':>8}")
    for c in caps:
        rs = rows[c]
        s = {"n": len(rs), "gold_shown_pct": round(100 * sum(r["covered"] for r in rs) / len(rs), 2),
             "tables_mean": round(statistics.mean(r["tables"] for r in rs), 2),
             "tables_p95": common.pct([r["tables"] for r in rs], 0.95),
             "chars_p50": statistics.median(r["chars"] for r in rs), "chars_p95": common.pct([r["chars"] for r in rs], 0.95)}
        summary[c] = s
        print(f"{c:<6}{s['n']:>6}{s['gold_shown_pct']:>14.2f}{s['tables_mean']:>13.2f}{s['tables_p95']!s:>6}"
              f"{s['chars_p50']!s:>11}{s['chars_p95']!s:>8}")
    out = args.out or common.result_path("routing", f"wide_coverage_{args.questions}")
    run.save(out, {"questions": args.questions, "unparsed_gold": unparsed, "seed": args.seed,
                   "route_ms_p50": round(statistics.median(route_ms), 1) if route_ms else None,
                   "summary": summary})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
