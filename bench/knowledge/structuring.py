"""Structuring quality: NL statements (``actual_evidence``) structured by the local model, compared
with the DBA-screened structured ones (``generic_evidence``) of the same question and position.

Metrics per database: word overlap (F1 of lowercased word multisets, the paper's "lexical overlap"),
embedding cosine (all-MiniLM-L6-v2, the paper's "semantic overlap"), and the share of snippets that
validate against the schema. The paper's own GPT-structured statements (``generic_evidence_automated``)
are scored the same way on the same pairs as a reference. A fixed subset (seeded) keeps LLM time bounded.

    nice -n 10 python -m bench.knowledge.structuring --per-db 12
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from collections import Counter
from pathlib import Path

import numpy as np

from tagql.config import load_settings
from tagql.embeddings import make_embedder
from tagql.knowledge.importer import bird_schema, set1_path
from tagql.knowledge.structuring import Structurer
from tagql.llm import make_llm

from bench import common

DBS = ["thrombosis_prediction", "student_club", "superhero"]  # GPT reference exists for the last two


def word_f1(a: str, b: str) -> float:
    wa, wb = Counter(re.findall(r"\w+", a.lower())), Counter(re.findall(r"\w+", b.lower()))
    common = sum((wa & wb).values())
    if not common:
        return 0.0
    p, r = common / sum(wa.values()), common / sum(wb.values())
    return 2 * p * r / (p + r)


def pairs(data: Path, db: str) -> list[tuple[str, str, str]]:
    """(nl, dba structured, gpt structured) aligned by position within a question."""
    raw = json.loads(set1_path(data, db).read_text())
    out = []
    for v in raw.values():
        nl, gen, auto = v.get("actual_evidence") or [], v.get("generic_evidence") or [], v.get("generic_evidence_automated") or []
        if len(nl) == len(gen):
            autos = auto if len(auto) == len(gen) else [""] * len(gen)  # not every file has GPT's
            out += [(n.strip(), g.strip(), a.strip()) for n, g, a in zip(nl, gen, autos) if n.strip()]
    return list(dict.fromkeys(out))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=common.DATA)
    ap.add_argument("--dbs", nargs="+", default=DBS)
    ap.add_argument("--per-db", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=common.result_path("knowledge", "structuring"))
    a = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    settings = load_settings()
    llm, emb = make_llm(settings), make_embedder()
    res: dict = {"per_db": {}, "records": [], "model": settings.llm.model, "per_db_n": a.per_db, "seed": a.seed}
    t0 = time.time()
    for db in a.dbs:
        ps = pairs(a.data, db)
        random.Random(a.seed).shuffle(ps)
        ps = ps[: a.per_db]
        st = Structurer(llm, bird_schema(a.data, db))
        rows = []
        for nl, gold, auto in ps:
            t = time.time()
            r = st.structure(nl)
            pred = f"'{r.text}' refers to {r.sql}" if r.sql else r.text
            rows.append({"nl": nl, "gold": gold, "ours": pred, "gpt": auto, "valid": r.valid, "problem": r.problem,
                         "seconds": round(time.time() - t, 1)})
            print(f"{db[:14]:14s} {rows[-1]['seconds']:5.1f}s valid={r.valid!s:5s} {pred[:90]}", flush=True)
        e = emb.embed([x for r in rows for x in (r["gold"], r["ours"], r["gpt"] or "-")]).reshape(len(rows), 3, -1)
        for r, v in zip(rows, e):
            r["lex_ours"], r["sem_ours"] = word_f1(r["ours"], r["gold"]), float(v[0] @ v[1])
            r["lex_gpt"] = word_f1(r["gpt"], r["gold"]) if r["gpt"] else None
            r["sem_gpt"] = float(v[0] @ v[2]) if r["gpt"] else None

        def avg(k: str) -> float:
            xs = [r[k] for r in rows if r[k] is not None]
            return float(np.mean(xs)) if xs else float("nan")

        res["per_db"][db] = {k: avg(k) for k in ("lex_ours", "sem_ours", "lex_gpt", "sem_gpt", "valid")}
        res["per_db"][db]["n"] = len(rows)
        res["records"] += [{"db": db, **r} for r in rows]
    keys = ("lex_ours", "sem_ours", "lex_gpt", "sem_gpt", "valid")
    res["mean"] = {k: float(np.nanmean([v[k] for v in res["per_db"].values()])) for k in keys}
    res["seconds"] = round(time.time() - t0)
    print(f"\nstructuring vs DBA-screened ({a.per_db} NL statements per db, local {settings.llm.model}; gpt = paper's own)")
    print(f"{'database':24s} {'lex ours':>9s} {'sem ours':>9s} {'lex gpt':>9s} {'sem gpt':>9s} {'valid':>6s}")
    for db, v in list(res["per_db"].items()) + [("MEAN", res["mean"])]:
        print(f"{db:24s} {v['lex_ours']:9.3f} {v['sem_ours']:9.3f} {v['lex_gpt']:9.3f} {v['sem_gpt']:9.3f} {v['valid']:6.2f}")
    run.save(a.out, res)


if __name__ == "__main__":
    main()
