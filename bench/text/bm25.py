"""BM25: tagql's own index (:class:`tagql.text.BM25`) beside the ``bm25s`` package, on our corpora.

Three parts, each backend in turn:

1. **Same scores?** Both score every question of the knowledge benchmark (11 BIRD repositories) and
   Spider dev against Spider's table documents; the largest difference after max-normalisation.
2. **Speed**: index build and one query (p50 / p95 over the questions, a loop, warm) on the largest
   knowledge repository (188 statements), a synthetic 20,000-statement one, Spider's 876 table
   documents and its 166 database documents; plus a weighted bag of terms (the router's soft matches),
   which ``bm25s`` has no call for: one ``get_scores`` per term, scaled.
3. **Figures**: the knowledge evidence F1 (``bm25``, ``hybrid-static``; ``bench/knowledge/evidence_f1.py``)
   and Spider routing (``bm25``, ``ours`` at query time on an existing index; ``bench/routing/spider.py``)
   with the stage's BM25 swapped for each backend.

    nice -n 10 python -m bench.text.bm25 [--collection spider-ctl] [--no-figures] [--no-routing]

(needs ``pip install -e ".[bench]"`` for ``bm25s``). Prints tables; writes ``bench/results/text/bm25.json``.

``bm25s`` scores with Lucene's term weight ``idf * tf / (tf + k1 * (1 - b + b * len / avglen))`` and the
same non-negative idf; the adapter multiplies by ``k1 + 1`` so both backends return the same numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from tagql.text import BM25, terms

from bench import common

DATA = common.DATA
OUT = common.result_path("text", "bm25")


class Bm25sIndex:
    """:class:`tagql.text.BM25`'s interface on ``bm25s`` (method ``lucene``, scaled by ``k1 + 1``)."""

    def __init__(self, docs: Sequence[Sequence[str]], k1: float = 1.2, b: float = 0.75) -> None:
        import bm25s

        self.n, self.k1, self.b = len(docs), k1, b
        self._scale = np.float32(k1 + 1)
        self._bm = bm25s.BM25(k1=k1, b=b, method="lucene")
        # an empty document list or documents without tokens: bm25s needs one token in the vocabulary
        self._bm.index([list(d) for d in docs] if any(docs) else [[""]] * max(self.n, 1), show_progress=False)
        self._vocab = self._bm.vocab_dict

    def __len__(self) -> int:
        return self.n

    def __contains__(self, term: str) -> bool:
        return term in self._vocab and term != ""

    def scores(self, query: Iterable[str]) -> np.ndarray:
        q = [w for w in query if w in self]
        if not q or not self.n:
            return np.zeros(self.n, dtype=np.float32)
        return (self._bm.get_scores(q) * self._scale).astype(np.float32)

    def scores_weighted(self, weights: Mapping[str, float]) -> np.ndarray:
        out = np.zeros(self.n, dtype=np.float32)
        for w, x in weights.items():
            if w in self:
                out += np.float32(x) * self._bm.get_scores([w])
        return out * self._scale


BACKENDS = {"tagql": BM25, "bm25s": Bm25sIndex}


@contextmanager
def backend(name: str):
    """The stages' BM25 swapped for ``name`` while the block runs."""
    import tagql.knowledge.retrieval as kr
    import tagql.routing.ours as ours
    import tagql.routing.router as router

    cls = BACKENDS[name]
    saved = kr.BM25, ours.BM25, router.BM25
    kr.BM25 = ours.BM25 = router.BM25 = cls
    try:
        yield cls
    finally:
        kr.BM25, ours.BM25, router.BM25 = saved


def knowledge_corpora() -> tuple[dict[str, tuple[list[list[str]], list[list[str]]]], list[list[str]]]:
    """Per BIRD database: (statement tokens, question tokens) as knowledge retrieval tokenises them; and
    the 20,000-statement synthetic repository's tokens."""
    from tagql.knowledge.canon import tokens
    from tagql.knowledge.importer import load_set1, structured_or_raw

    from bench.knowledge.evidence_f1 import DBS, synthetic_repository

    out = {}
    for db in DBS:
        items = load_set1(DATA, db)
        repo = list(dict.fromkeys(s for it in items for s in it.gold))
        out[db] = ([tokens(structured_or_raw(s).text) for s in repo], [tokens(it.question) for it in items if it.gold])
    texts, _ = synthetic_repository(DATA, 20000)
    return out, [tokens(t) for t in texts]


def spider_corpora() -> dict[str, tuple[list[list[str]], list[list[str]]]]:
    """Spider's table documents and database documents (as the routers build them) with dev's questions."""
    from tagql.db.schema import Schema
    from tagql.routing.retrieval import table_doc
    from tagql.text import split_identifier

    schemas = [Schema.from_spider(e) for e in json.loads((DATA / "spider" / "tables.json").read_text())]
    tables = [terms(table_doc(s, t, with_db=True)) for s in schemas for t in s.tables]
    dbs = [terms(split_identifier(s.name) + ": " + "; ".join(table_doc(s, t) for t in s.tables)) for s in schemas]
    qs = [terms(e["question"]) for e in json.loads((DATA / "spider" / "dev.json").read_text())]
    return {"spider_tables": (tables, qs), "spider_dbs": (dbs, qs)}


def _norm(x: np.ndarray) -> np.ndarray:
    m = float(x.max()) if x.size else 0.0
    return x / m if m > 0 else x


def timed(corpus: list[list[str]], questions: list[list[str]], weighted: bool = False) -> dict:
    out = {"documents": len(corpus)}
    for name, cls in BACKENDS.items():
        builds = []
        for _ in range(5):
            t = time.perf_counter()
            index = cls(corpus, k1=1.2)
            builds.append(1000 * (time.perf_counter() - t))
        index.scores(questions[0])  # warm
        lat = []
        for q in questions:
            t = time.perf_counter()
            index.scores(q)
            lat.append(1e6 * (time.perf_counter() - t))
        lat.sort()
        row = {"build_ms": round(min(builds), 2), "query_p50_us": round(statistics.median(lat), 1),
               "query_p95_us": round(lat[int(0.95 * (len(lat) - 1))], 1)}
        if weighted:  # a weighted bag: every question term 1.0 plus three soft matches at 0.7
            vocab = sorted({w for d in corpus for w in d})
            rng = np.random.default_rng(0)
            bags = [{**{w: 1.0 for w in q}, **{vocab[i]: 0.7 for i in rng.integers(0, len(vocab), 3)}}
                    for q in questions]
            lat = []
            for bag in bags:
                t = time.perf_counter()
                index.scores_weighted(bag)
                lat.append(1e6 * (time.perf_counter() - t))
            lat.sort()
            row["weighted_p50_us"] = round(statistics.median(lat), 1)
        out[name] = row
    return out


def agreement(corpus: list[list[str]], questions: list[list[str]]) -> dict:
    ours, theirs = BM25(corpus, k1=1.5), Bm25sIndex(corpus, k1=1.5)
    diff, top1 = 0.0, 0
    for q in questions:
        a, b = ours.scores(q), theirs.scores(q)
        diff = max(diff, float(np.abs(_norm(a) - _norm(b)).max()) if a.size else 0.0)
        top1 += int(np.argmax(a) == np.argmax(b))
    return {"max_abs_diff_normalised": diff, "same_top1": top1, "questions": len(questions)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--collection", default="spider-ctl", help="a Spider collection with a built 'ours' index")
    ap.add_argument("--no-figures", action="store_true", help="speed and agreement only")
    ap.add_argument("--no-routing", action="store_true", help="skip the Spider routing figures")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    import bm25s

    results: dict = {"bm25s_version": bm25s.__version__, "agreement": {}, "speed": {}, "figures": {}}
    know, synthetic = knowledge_corpora()
    spider = spider_corpora()
    allq = [q for _, qs in know.values() for q in qs]
    for db, (corpus, qs) in know.items():
        results["agreement"][db] = agreement(corpus, qs)
    for label, (corpus, qs) in spider.items():
        results["agreement"][label] = agreement(corpus, qs)
    results["speed"]["knowledge_188"] = timed(*know["thrombosis_prediction"])
    results["speed"]["knowledge_20000"] = timed(synthetic, allq)
    results["speed"]["spider_tables"] = timed(*spider["spider_tables"], weighted=True)
    results["speed"]["spider_dbs"] = timed(*spider["spider_dbs"], weighted=True)

    if not args.no_figures:
        from bench.knowledge import evidence_f1
        from bench.routing import spider as routing_spider

        tmp = args.out.parent / "bm25_parts"
        for name in BACKENDS:
            with backend(name):
                kout = tmp / f"knowledge_{name}.json"
                sys.argv = ["knowledge_evidence_f1.py", "--data", str(DATA), "--methods", "bm25", "hybrid-static",
                            "--no-latency", "--out", str(kout)]
                evidence_f1.main()
                k = json.loads(kout.read_text())
                results["figures"][name] = {"knowledge_macro_f1": k["macro_f1"]}
                if not args.no_routing:
                    rout = tmp / f"routing_{name}.json"
                    sys.argv = ["routing_spider.py", "--collection", args.collection, "--methods", "bm25,ours", "--syn",
                                "--latency-questions", "50", "--out", str(rout)]
                    routing_spider.main()
                    r = json.loads(rout.read_text())["methods"]
                    results["figures"][name]["routing"] = {
                        m: {s: {k: r[m][s][k] for k in ("db_r@1", "table_r@5", "p50_ms")}
                            for s in ("spider", "spider_syn")} for m in r}

    print(f"\n{'corpus':<18}{'docs':>7}  {'backend':<7}{'build ms':>10}{'query p50 us':>14}{'p95 us':>10}"
          f"{'weighted p50 us':>17}")
    for label, row in results["speed"].items():
        for name in BACKENDS:
            r = row[name]
            print(f"{label:<18}{row['documents']:>7}  {name:<7}{r['build_ms']:>10}{r['query_p50_us']:>14}"
                  f"{r['query_p95_us']:>10}{r.get('weighted_p50_us', ''):>17}")
    worst = max(v["max_abs_diff_normalised"] for v in results["agreement"].values())
    same = sum(v["same_top1"] for v in results["agreement"].values())
    total = sum(v["questions"] for v in results["agreement"].values())
    print(f"\nagreement: largest normalised score difference {worst:.2e}; same top-1 document {same}/{total}")
    for name, f in results["figures"].items():
        line = f"{name:<7} knowledge F1 bm25 {f['knowledge_macro_f1']['bm25']:.3f} hybrid-static " \
               f"{f['knowledge_macro_f1']['hybrid-static']:.3f}"
        for m, sets in f.get("routing", {}).items():
            line += f"; {m} R@1 {sets['spider']['db_r@1']} / Syn {sets['spider_syn']['db_r@1']}"
        print(line)
    run.save(args.out, results, indent=2)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
