"""How much of ``hybrid-static``'s evidence F1 comes from choices made on the benchmark itself.

Runs, on the same protocol as ``bench/knowledge/evidence_f1.py`` (711 questions, K = #gold):
1. a small grid (w_bm25 x w_text x n x stem x w_case) and leave-one-database-out selection over it: for each held-out
   database the setting best on the other ten is scored on it (the cross-validated macro F1);
2. the centering ablation at the default setting (static vectors as distilled vs mean-centred);
3. F1 with duplicate statements collapsed (repository entries that parse to the same text and SQL
   snippet count as one statement), next to the protocol's own scoring.

No transformer runs per question, so the whole script takes a few minutes.

    nice -n 10 python -m bench.knowledge.static_tune [--data $TAGQL_SHARED_DATA]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np

from tagql.embeddings import make_embedder
from tagql.knowledge.importer import load_set1, structured_or_raw
from tagql.knowledge.retrieval import Corpus, IndexRetriever, StaticHybridMethod
from tagql.knowledge.static import StaticModel, load_static

from bench import common
from bench.knowledge.evidence_f1 import DBS, f1

GRID = {"w_bm25": [0.2, 0.3, 0.5], "w_text": [0.0, 0.1, 0.2], "n": [1, 2], "stem": [0, 1],
        "w_case": [0.0, 0.003, 0.01, 0.03]}


def key(s: str) -> str:
    p = structured_or_raw(s)
    return f"'{p.text}' refers to {p.sql}"


def setups(data: Path) -> list[tuple[str, list, Corpus, dict]]:
    out = []
    for db in DBS:
        items = [it for it in load_set1(data, db) if it.gold]
        repo = list(dict.fromkeys(s for it in items for s in it.gold))
        parts = [structured_or_raw(s) for s in repo]
        c = Corpus([p.text for p in parts], [p.sql for p in parts], np.zeros((len(parts), 1), dtype=np.float32))
        ident = {f"'{t}' refers to {s}": r for t, s, r in zip(c.texts, c.sqls, repo)}  # the bench's mapping
        out.append((db, items, c, ident))
    return out


def score(sets, method_factory, dedup: bool = False) -> dict[str, list[float]]:
    per = {}
    for db, items, c, ident in sets:
        ret = IndexRetriever(c, method_factory())
        scores = []
        for it in items:
            got = [f"'{g.text}' refers to {g.sql}" for g in ret.retrieve(it.question, k=len(it.gold))]
            if dedup:
                scores.append(f1(got, {key(g) for g in it.gold}))
            else:
                scores.append(f1([ident[g] for g in got], set(it.gold)))
        per[db] = scores
    return per


def summary(per: dict[str, list[float]]) -> tuple[float, float, dict[str, float]]:
    dbm = {d: float(np.mean(v)) for d, v in per.items()}
    return float(np.mean([x for v in per.values() for x in v])), min(dbm.values()), dbm


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=common.DATA)
    ap.add_argument("--out", type=Path, default=common.result_path("knowledge", "static_tune"))
    a = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    model = load_static(make_embedder())
    sets = setups(a.data)
    res: dict = {"grid": {}}
    print("1. grid (macro F1, worst database)")
    for vals in itertools.product(*GRID.values()):
        p = dict(zip(GRID, vals))
        per = score(sets, lambda p=p: StaticHybridMethod(model=model, **p))
        m, lo, dbm = summary(per)
        res["grid"][json.dumps(p)] = {"macro": m, "min_db": lo, "per_db": dbm, "_q": per}
        print(f"   {m:.4f}  {lo:.3f}  {p}", flush=True)
    cv, chosen, cv_db = [], {}, {}
    for held in DBS:
        best = max(res["grid"], key=lambda k: np.mean([x for d in DBS if d != held for x in res["grid"][k]["_q"][d]]))
        chosen[held] = best
        cv += res["grid"][best]["_q"][held]
        cv_db[held] = float(np.mean(res["grid"][best]["_q"][held]))
    res["lodo_cv_macro"], res["lodo_chosen"], res["lodo_cv_per_db"] = float(np.mean(cv)), chosen, cv_db
    print(f"   leave-one-database-out macro F1 {res['lodo_cv_macro']:.4f}, worst held-out database "
          f"{min(cv_db.values()):.3f} ({min(cv_db, key=cv_db.get)}); settings chosen: {sorted(set(chosen.values()))}")
    print("   ablation at w_bm25 0.3, w_text 0.1, n 2 (macro, toxicology, worst):")
    res["ablation"] = {}
    for stem, w_case in ((0, 0.0), (1, 0.0), (0, 0.01), (1, 0.01)):
        k = json.dumps({"w_bm25": 0.3, "w_text": 0.1, "n": 2, "stem": stem, "w_case": w_case})
        g = res["grid"][k]
        res["ablation"][f"stem={stem} w_case={w_case}"] = {x: g[x] for x in ("macro", "min_db")}
        print(f"   stem {stem} w_case {w_case:<5}: {g['macro']:.4f}  {g['per_db']['toxicology']:.3f}  {g['min_db']:.3f}")
    print("2. centering (default setting)")
    raw = StaticModel(np.load(model.path), make_embedder().tokenizer_file)
    res["centering"] = {}
    for label, mdl in (("as distilled", raw), ("centred (used)", model)):
        m, lo, dbm = summary(score(sets, lambda mdl=mdl: StaticHybridMethod(model=mdl)))
        res["centering"][label] = {"macro": m, "min_db": lo, "per_db": dbm}
        print(f"   {label:16s} macro {m:.4f}  toxicology {dbm['toxicology']:.3f}  worst {lo:.3f}")
    print("3. duplicates collapsed (default setting)")
    m, lo, dbm = summary(score(sets, lambda: StaticHybridMethod(model=model), dedup=True))
    dups = {db: len(c) - len(set(zip(c.texts, c.sqls))) for db, _, c, _ in sets}
    res["dedup"] = {"macro": m, "min_db": lo, "per_db": dbm, "duplicates": dups}
    print(f"   macro {m:.4f}  toxicology {dbm['toxicology']:.3f}  worst {lo:.3f}; duplicate statements {dups}")
    for g in res["grid"].values():
        del g["_q"]
    run.save(a.out, res, indent=2)
    print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
