"""The cheap-first filter cascade (``tagql.tag.cascade``) vs judging every input with the LM.

Filters whose truth is known, each over every distinct stored value:
* the 8 hand-labelled criteria of ``bench/tag/judge.py`` (states, elements, publishers, expenses, majors;
  12-113 values, labels from ``bench/tag/devset.py``);
* ``{country} is a country in <continent>`` over the 239 countries of Spider ``world_1`` for Europe,
  Africa and South America, labelled by the database's own ``country.Continent`` (no method sees it).

Methods, same local model (temperature 0), same claims: ``plain`` (cascade off: one LM call per input),
``cascade`` (``cascade="on"``, 16-input sample, the default proxy), ``cascade8`` (an 8-input sample). A
claim's verdict comes from one memo of the model's replies, so every method sees the same judgements
and the model runs once per claim; LM calls are counted per method by the engine, as tagql counts them.

    python -m bench.tag.cascade            # table + bench/results/tag/cascade.json
    python -m bench.tag.cascade --only judge

Columns: inputs, LM calls, accuracy vs the truth, agreement with ``plain`` (how often the proxy's own
decisions differ from what the LM would have said).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from typing import Any

from bench import common

METHODS = {"plain": {"cascade": "off"}, "cascade": {"cascade": "on", "cascade_sample": 16},
           "cascade8": {"cascade": "on", "cascade_sample": 8}}
CONTINENTS = ("Europe", "Africa", "South America")


def criteria(only: str) -> list[tuple[str, str, list[str], set[str]]]:
    """(name, instruction, values, true values)."""
    out = []
    if only in ("all", "judge"):
        from bench.tag import judge

        for db, sql, _column, instruction, truth in judge.CRITERIA:
            values = [r[0] for r in judge.devset.q(db, sql)]
            low = {t.lower() for t in truth}
            out.append((f"{db}: {instruction}", instruction, values, {v for v in values if v.lower() in low}))
    if only in ("all", "world"):
        con = sqlite3.connect(f"file:{common.DATA / 'spider/database/world_1/world_1.sqlite'}?mode=ro", uri=True)
        rows = con.execute("SELECT Name, Continent FROM country ORDER BY Name").fetchall()
        con.close()
        for cont in CONTINENTS:
            out.append((f"world_1: {cont}", "{country} is a country in " + cont, [r[0] for r in rows],
                        {r[0] for r in rows if r[1] == cont}))
    return out


class MemoLLM:
    """The model's reply per distinct request, so methods share judgements (and the model's time)."""

    def __init__(self, llm: Any) -> None:
        self.llm, self.name, self.memo = llm, getattr(llm, "name", "llm"), {}
        self.supports_choice_probs = self.supports_digit_probs = False  # generated replies only (memoised)
        self.supports_stream = self.supports_samples = False

    def complete(self, messages: Any, **kw: Any) -> Any:
        key = json.dumps([[m.role, m.content] for m in messages] + [sorted((k, str(v)) for k, v in kw.items())])
        if key not in self.memo:
            self.memo[key] = self.llm.complete(messages, **kw)
        return self.memo[key]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("all", "judge", "world"), default="all")
    ap.add_argument("--json", default=str(common.result_path("tag", "cascade")))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)

    from tagql.config import load_settings
    from tagql.embeddings import make_embedder
    from tagql.llm import make_llm
    from tagql.tag.cache import OpCache
    from tagql.tag.operators import SemEngine, SemTable

    llm, embedder = MemoLLM(make_llm(load_settings(), backend="local")), make_embedder()
    records: list[dict[str, Any]] = []
    sets = criteria(args.only)
    print(f"{'filter':<62} {'method':<9} {'inputs':>6} {'calls':>5} {'acc':>6} {'agree':>6} {'s':>6}")
    for n, (name, instruction, values, truth) in enumerate(sets, 1):
        plain_kept: set[str] = set()
        for method, kw in METHODS.items():
            eng = SemEngine(llm, cache=OpCache(None), max_calls=10_000, embedder=embedder, **kw)
            t0 = time.perf_counter()
            column = instruction[1: instruction.index("}")]
            kept = {r[0] for r in SemTable([column], [(v,) for v in values], eng).sem_filter(instruction).rows}
            if method == "plain":
                plain_kept = kept
            rec = {"filter": name, "method": method, "inputs": len(values), "true": len(truth),
                   "lm_calls": eng.stats.lm_calls, "proxy_decided": eng.stats.cascade_decided,
                   "accuracy": round(sum((v in kept) == (v in truth) for v in values) / len(values), 3),
                   "agreement": round(sum((v in kept) == (v in plain_kept) for v in values) / len(values), 3),
                   "seconds": round(time.perf_counter() - t0, 2), "kept": sorted(kept)}
            records.append(rec)
            print(f"{name[:62]:<62} {method:<9} {len(values):>6} {rec['lm_calls']:>5} {rec['accuracy']:>6.3f} "
                  f"{rec['agreement']:>6.3f} {rec['seconds']:>6.1f}", flush=True)
        print(f"  [{n}/{len(sets)}]", file=sys.stderr, flush=True)
    summary = {}
    for method in METHODS:
        rs = [r for r in records if r["method"] == method]
        summary[method] = {"inputs": sum(r["inputs"] for r in rs), "lm_calls": sum(r["lm_calls"] for r in rs),
                           "mean_accuracy": round(sum(r["accuracy"] for r in rs) / len(rs), 3),
                           "mean_agreement": round(sum(r["agreement"] for r in rs) / len(rs), 3)}
    print("\nmethod     inputs  LM calls  mean accuracy  mean agreement with plain")
    for method, s in summary.items():
        print(f"{method:<10} {s['inputs']:>6} {s['lm_calls']:>9} {s['mean_accuracy']:>14.3f} {s['mean_agreement']:>15.3f}")
    run.save(args.json, {"summary": summary, "records": records})
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
