"""Evidence-F1 benchmark of knowledge retrieval (the paper's protocol, corrected statements).

For each of the 11 BIRD dev databases the repository is the union of the DBA-screened structured
statements (``generic_evidence``) of ``Templatized_Domain_Statement/<db>_set1.json``; every question
with >= 1 gold statement (711) retrieves top-K, K = its number of gold statements; F1 against the
gold set; macro over questions (also with K left to the retriever, as ``tagql ask`` does: at most
DEFAULT_K statements, none below the method's score floor). All methods run side by side; also retrieval latency per question
(p50/p95, in a loop, models warm) on the largest repository (thrombosis_prediction, 188 statements)
and on a synthetic 20,000-statement one, and one summary table of both.

    nice -n 10 python -m bench.knowledge.evidence_f1 [--data $TAGQL_SHARED_DATA] [--methods ...] [--no-latency]
        [--cache /tmp/emb.pkl]   # memoise MiniLM embeddings across runs (F1 part only)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

from tagql.embeddings import BACKENDS, make_embedder
from tagql.knowledge.canon import canonicalise
from tagql.knowledge.importer import load_set1, structured_or_raw
from tagql.knowledge.retrieval import Corpus, IndexRetriever, make_method

from bench import common

DBS = ["california_schools", "card_games", "codebase_community", "debit_card_specializing",
       "european_football_2", "financial", "formula_1", "student_club", "superhero",
       "thrombosis_prediction", "toxicology"]
# sbr-mpnet (the paper's SbR with all-mpnet-base-v2) is opt-in: --methods ... sbr-mpnet (slow, ~420 MB model)
METHODS = ["none", "all", "bm25", "dense", "sbr", "hybrid", "hybrid-fast", "hybrid-static"]


class CachingEmbedder:
    """Memoises texts across methods (the F1 part only; latency uses the real embedder)."""

    def __init__(self, inner, path: Path | None = None) -> None:
        self.inner, self.name, self.dim, self.cache = inner, inner.name, inner.dim, {}
        self.tokenizer_file = inner.tokenizer_file  # a TokenEmbedder: hybrid-fast / hybrid-static reach tokens
        self.path = path
        if path and path.exists():
            import pickle

            self.cache = pickle.loads(path.read_bytes())

    def save(self) -> None:
        if self.path:
            import pickle

            self.path.write_bytes(pickle.dumps(self.cache))

    def token_vectors(self, text: str):
        return self.inner.token_vectors(text)

    def pool_ids(self, ids):
        return self.inner.pool_ids(ids)

    def embed(self, texts: list[str], batch_size: int = 128) -> np.ndarray:
        todo = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if todo:
            for t, v in zip(todo, self.inner.embed(todo, batch_size=batch_size)):
                self.cache[t] = v
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self.cache[t] for t in texts])


def build_corpus(statements: list[str], embedder) -> Corpus:
    parts = [structured_or_raw(s) for s in statements]
    texts = [p.text for p in parts]
    emb = embedder.embed([canonicalise(t) for t in texts])
    return Corpus(texts=texts, sqls=[p.sql for p in parts], embeddings=emb)


def f1(pred: list[str], gold: set[str]) -> float:
    if not gold:
        return 0.0
    tp = len(set(pred) & gold)
    if tp == 0:
        return 0.0
    p, r = tp / len(set(pred)), tp / len(gold)
    return 2 * p * r / (p + r)


def parse_method(spec: str) -> tuple[str, str, dict]:
    """'sbr' or 'sbr:n=3' or 'hybrid:w_bm25=0.5,n=1' -> (label, name, params)."""
    name, _, rest = spec.partition(":")
    params = {}
    for kv in filter(None, rest.split(",")):
        k, v = kv.split("=")
        params[k] = float(v) if "." in v else int(v)
    return spec, name, params


def evidence_f1(data: Path, methods: list[str], embedder, dbs: list[str] = DBS) -> dict:
    per_db: dict[str, dict[str, float]] = {}
    allq: dict[str, list[float]] = {m: [] for m in methods}
    autoq: dict[str, list[float]] = {m: [] for m in methods}  # K left to the retriever, as `ask` does
    for db in dbs:
        items = load_set1(data, db)
        repo = list(dict.fromkeys(s for it in items for s in it.gold))
        corpus = build_corpus(repo, embedder)
        key = [f"'{t}' refers to {s}" for t, s in zip(corpus.texts, corpus.sqls)]
        ident = {k: r for k, r in zip(key, repo)}
        per_db[db] = {"questions": sum(1 for it in items if it.gold), "statements": len(repo)}
        for spec in methods:
            _, name, params = parse_method(spec)
            ret = IndexRetriever(corpus, make_method(name, **params), embedder=embedder)
            scores, auto = [], []
            for it in items:
                if not it.gold:
                    continue
                for k, out in ((len(it.gold), scores), (None, auto)):
                    got = ret.retrieve(it.question, k=k)
                    pred = [ident[f"'{g.text}' refers to {g.sql}"] for g in got]
                    out.append(f1(pred, set(it.gold)))
            per_db[db][spec] = float(np.mean(scores))
            per_db[db][spec + "/auto"] = float(np.mean(auto))
            allq[spec].extend(scores)
            autoq[spec].extend(auto)
    macro = {m: float(np.mean(v)) for m, v in allq.items()}
    macro_auto = {m: float(np.mean(v)) for m, v in autoq.items()}
    return {"macro_f1": macro, "macro_f1_auto": macro_auto, "per_db": per_db, "questions": len(allq[methods[0]])}


def synthetic_repository(data: Path, size: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """(texts, sqls) of a synthetic large repository: the 11 real repositories' statements,
    recombined with 0-3 random words from all questions so texts are distinct and realistic."""
    rng = random.Random(seed)
    allst = []
    for db in DBS:
        allst += [s for it in load_set1(data, db) for s in it.gold]
    vocab = [w for db in DBS for it in load_set1(data, db) for w in it.question.split()]
    big_parts = [structured_or_raw(s) for s in allst]
    texts, sqls = [], []
    while len(texts) < size:
        p = rng.choice(big_parts)
        extra = " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 3)))
        texts.append(f"{p.text} {extra}".strip())
        sqls.append(p.sql)
    return texts, sqls


def latency(data: Path, methods: list[str], n_questions: int, synthetic: int, backend: str | None = None) -> dict:
    """p50/p95 of ``retrieve(question, k=4)`` per question, in a loop, models warm (one untimed
    call first, which also builds any per-corpus index such as the static statement vectors)."""
    emb = make_embedder(backend=backend)  # no cache: what a user sees
    items = [it for it in load_set1(data, "thrombosis_prediction") if it.gold]
    repo = list(dict.fromkeys(s for it in items for s in it.gold))
    questions = [it.question for it in items][:n_questions]
    out: dict[str, dict] = {}
    corpus = build_corpus(repo, emb)
    texts, sqls = synthetic_repository(data, synthetic)
    t0 = time.perf_counter()
    if any(make_method(parse_method(m)[1], **parse_method(m)[2]).needs_embedder for m in methods):
        big_emb = emb.embed([canonicalise(t) for t in texts], batch_size=256)
        out["synthetic_embed_build_s"] = time.perf_counter() - t0
    else:  # only methods with their own statement vectors are timed: skip the ~2 min MiniLM pass
        big_emb = np.zeros((len(texts), 1), dtype=np.float32)
    t0 = time.perf_counter()
    big = Corpus(texts=texts, sqls=sqls, embeddings=big_emb)
    out["synthetic_corpus_build_s"] = time.perf_counter() - t0
    for label, c in (("repo_188", corpus), (f"repo_{synthetic}", big)):
        out[label] = {"statements": len(c)}
        for spec in methods:
            _, name, params = parse_method(spec)
            ret = IndexRetriever(c, make_method(name, **params), embedder=emb)
            t = time.perf_counter()
            ret.retrieve(questions[0], k=4)  # warm-up (and per-corpus index build)
            first_ms = (time.perf_counter() - t) * 1000
            ts = []
            for q in questions:
                t = time.perf_counter()
                ret.retrieve(q, k=4)
                ts.append((time.perf_counter() - t) * 1000)
            out[label][spec] = {"p50_ms": float(np.percentile(ts, 50)), "p95_ms": float(np.percentile(ts, 95)),
                                "first_call_ms": first_ms}
    return out


def load() -> str:
    la = os.getloadavg()
    return f"{la[0]:.2f} {la[1]:.2f} {la[2]:.2f}"


def merge(old: dict, new: dict, methods: list[str]) -> dict:
    """``old`` with ``methods``' F1 (macro, per database, worst database) and latency from ``new``;
    the rest of ``old`` is kept and the new run's metadata recorded under ``merged_from``."""
    out = dict(old)
    for m in methods:
        out["macro_f1"][m] = new["macro_f1"][m]
        out.setdefault("macro_f1_auto", {})[m] = new["macro_f1_auto"][m]
        out["min_db_f1"][m] = new["min_db_f1"][m]
        for db, r in new["per_db"].items():
            row = out["per_db"].setdefault(db, {k: v for k, v in r.items() if k in ("questions", "statements")})
            row[m], row[m + "/auto"] = r[m], r[m + "/auto"]
        for label, rows in new.get("latency", {}).items():
            if isinstance(rows, dict) and m in rows:
                out.setdefault("latency", {}).setdefault(label, {"statements": rows.get("statements")})[m] = rows[m]
    out.setdefault("merged_from", []).append({k: new[k] for k in ("load_avg_start", "load_avg_end", "seconds")}
                                             | {"methods": methods, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=common.DATA)
    ap.add_argument("--methods", nargs="+", default=METHODS)
    ap.add_argument("--latency-methods", nargs="+", default=None,
                    help="methods timed (default: all of --methods except none/all)")
    ap.add_argument("--dbs", nargs="+", default=DBS)
    ap.add_argument("--no-latency", action="store_true")
    ap.add_argument("--latency-questions", type=int, default=60)
    ap.add_argument("--synthetic", type=int, default=20000)
    ap.add_argument("--backend", choices=BACKENDS, default=None, help="embedding backend (default: the configured one)")
    ap.add_argument("--cache", type=Path, default=None, help="pickle file to memoise embeddings across runs")
    ap.add_argument("--out", type=Path, default=common.result_path("knowledge", "evidence_f1"))
    ap.add_argument("--merge", action="store_true",
                    help="re-measure only --methods and keep the other methods' figures already in --out "
                         "(their run's date and load are kept under 'merged_from')")
    a = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    t0 = time.time()
    res: dict = {"load_avg_start": load(), "cores": os.cpu_count()}
    inner = make_embedder(backend=a.backend)
    res["embedder"] = inner.name
    cache = CachingEmbedder(inner, a.cache)
    res.update(evidence_f1(a.data, a.methods, cache, a.dbs))
    cache.save()
    print(f"evidence F1 (macro over {res['questions']} questions), embedder {inner.name}")
    hdr = f"{'database':26s} {'#q':>4s} {'#st':>4s} " + " ".join(f"{m[:13]:>13s}" for m in a.methods)
    print(hdr)
    for db, r in res["per_db"].items():
        print(f"{db:26s} {r['questions']:4d} {r['statements']:4d} " + " ".join(f"{r[m]:13.3f}" for m in a.methods))
    print(f"{'MACRO':26s} {res['questions']:4d} {'':4s} " + " ".join(f"{res['macro_f1'][m]:13.3f}" for m in a.methods))
    print(f"{'MACRO, K by the retriever':36s} " + " ".join(f"{res['macro_f1_auto'][m]:13.3f}" for m in a.methods))
    res["min_db_f1"] = {m: min(r[m] for r in res["per_db"].values()) for m in a.methods}
    timed = a.latency_methods or [m for m in a.methods if m.split(":")[0] not in ("none", "all")]
    if not a.no_latency:
        lat = latency(a.data, timed, a.latency_questions, a.synthetic, a.backend)
        res["latency"] = lat
    res["load_avg_end"] = load()
    big = f"repo_{a.synthetic}"
    print("\nsummary: F1" + ("" if a.no_latency else f" and retrieval latency per question (ms, p50 / p95 over"
          f" {a.latency_questions} questions, k=4, models warm)") + f"; load average {res['load_avg_start']} ->"
          f" {res['load_avg_end']} on {os.cpu_count()} cores")
    print(f"{'method':16s} {'macro F1':>8s} {'min DB':>7s} {'188 st. p50/p95':>17s} {big + ' p50/p95':>19s}")
    for m in a.methods:
        row = f"{m:16s} {res['macro_f1'][m]:8.3f} {res['min_db_f1'][m]:7.3f}"
        if "latency" in res and m in res["latency"]["repo_188"]:
            r1, r2 = res["latency"]["repo_188"][m], res["latency"][big][m]
            row += f" {r1['p50_ms']:8.1f} /{r1['p95_ms']:7.1f} {r2['p50_ms']:9.1f} /{r2['p95_ms']:7.1f}"
        print(row)
    res["seconds"] = time.time() - t0
    if a.merge and a.out.exists():
        res = merge(json.loads(a.out.read_text()), res, a.methods)
        print("merged with the other methods of " + str(a.out), file=sys.stderr)
    run.save(a.out, res, indent=2)
    print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
