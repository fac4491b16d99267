"""Question likelihood as a database re-ranker for the router's unsure questions (UPR-style), on train only.

For a question the router is unsure of (its top database probability below ``--unsure``), the local
LLM scores each of the top-5 databases by log P(question | that database's schema): the question is
the assistant's reply to "write a question this database answers", and the log-probabilities of its
tokens are summed (the same tokens under every schema, so the sums compare directly). The new
database score is log P_router(db) + w * log P_LM(question | db); w is scanned.

Questions: half-B Spider **train** questions whose Spider-Syn version differs
(``spider_train_halves.py``), plain and Syn; dev is never read. Diagnosis, nothing wired in.

    python -m bench.routing.likelihood [--collection spider-ctl] [--questions 600] [--max-unsure 60]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bench.routing.spider import ensure_router, spider_collection
from bench.routing.spider_train_halves import lexicon_tuning_set

from tagql.config import load_settings
from tagql.embeddings import make_embedder

from bench import common

OUT = common.result_path("routing", "likelihood")
WEIGHTS = [0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0]


def schema_text(coll, db: str) -> str:
    schema = coll.schema(db)
    lines = [f"Database: {db.replace('_', ' ')}"]
    for t in schema.tables:
        cols = ", ".join(c.name.replace("_", " ") for c in t.columns)
        lines.append(f"- {t.name.replace('_', ' ')}: {cols}")
    return "\n".join(lines)


class Likelihood:
    """log P(question | schema) under a GGUF chat model (llama.cpp, all logits kept)."""

    def __init__(self, model_path: Path, n_ctx: int = 2048) -> None:
        from llama_cpp import Llama

        self.llm = Llama(model_path=str(model_path), n_ctx=n_ctx, logits_all=True, n_threads=2, seed=0,
                         verbose=False)

    def tokens(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode(), add_bos=False, special=True)

    def score(self, schema: str, question: str) -> float:
        prefix = self.tokens("<|im_start|>system\nYou write questions that users ask about a database.<|im_end|>\n"
                             f"<|im_start|>user\n{schema}\nWrite one question this database answers.<|im_end|>\n"
                             "<|im_start|>assistant\n")
        q = self.tokens(question)
        toks = prefix + q
        self.llm.reset()
        self.llm.eval(toks)
        logits = np.asarray(self.llm.scores[len(prefix) - 1: len(toks) - 1], dtype=np.float64)
        logits -= logits.max(axis=1, keepdims=True)
        logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        return float(logp[np.arange(len(q)), q].sum())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collection", default="spider-ctl")
    ap.add_argument("--questions", type=int, default=600)
    ap.add_argument("--max-unsure", type=int, default=60)
    ap.add_argument("--unsure", type=float, default=0.9)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b-q4_0")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    settings = load_settings()
    coll = spider_collection(args.collection, settings)
    built = ensure_router(coll, finetune=False)
    if built:
        print(f"router built in {built} s", flush=True)
    router = coll.router("ours", embedder=make_embedder())
    golds, sets, _ = lexicon_tuning_set(coll, args.questions)
    model = Path(settings.cache_dir) / "models" / f"{args.model}.gguf"
    lm = Likelihood(model)
    texts: dict[str, str] = {}
    results: dict = {"collection": args.collection, "questions": len(golds), "model": args.model,
                     "unsure_below": args.unsure, "sets": {}}
    for name, qs in sets.items():
        cands = router.route_many(qs, k=5)
        t0 = time.perf_counter()
        rows = []
        done = 0  # unsure questions scored so far
        for q, cs, g in zip(qs, cands, golds):
            dl = np.array([c.score for c in cs])
            p = np.exp((dl - dl.max()) / router.cfg.db_temp)
            p /= p.sum()  # over the top 5 (the ranking among them is what changes)
            ll = None
            if p[0] < args.unsure and done < args.max_unsure:
                ll = []
                for c in cs:
                    if c.database not in texts:
                        texts[c.database] = schema_text(coll, c.database)
                    ll.append(lm.score(texts[c.database], q))
            rows.append({"dbs": [c.database for c in cs], "logp": np.log(p).tolist(), "lm": ll, "gold": g.database})
            if ll is not None:
                done += 1
                if done % 10 == 0:
                    print(f"{name}: {done} unsure questions scored ({time.perf_counter() - t0:.0f} s)", flush=True)
        unsure = [r for r in rows if r["lm"]]
        table = {}
        for w in WEIGHTS:
            right_unsure = sum(r["dbs"][int(np.argmax(np.array(r["logp"]) + w * np.array(r["lm"])))] == r["gold"]
                               for r in unsure)
            right_sure = sum(r["dbs"][0] == r["gold"] for r in rows if not r["lm"])
            # questions past --max-unsure keep the router's answer too
            table[str(w)] = {"unsure_right": right_unsure, "r@1_all": round(100 * (right_unsure + right_sure) / len(rows), 2)}
        lm_only = sum(r["dbs"][int(np.argmax(r["lm"]))] == r["gold"] for r in unsure)
        results["sets"][name] = {"unsure_scored": len(unsure), "lm_only_right": lm_only,
                                 "gold_in_top5": sum(r["gold"] in r["dbs"] for r in unsure),
                                 "seconds_per_question": round((time.perf_counter() - t0) / max(1, len(unsure)), 2),
                                 "by_weight": table}
        print(f"\n{name}: {len(unsure)} unsure questions; router right {table['0.0']['unsure_right']}, "
              f"LM alone {lm_only}, gold in top 5 {results['sets'][name]['gold_in_top5']}", flush=True)
        print(f"{'w':>6} {'unsure right':>13} {'R@1 (all ' + str(len(rows)) + ')':>16}")
        for w, v in table.items():
            print(f"{w:>6} {v['unsure_right']:>13} {v['r@1_all']:>16}")
    run.save(args.out, results, indent=1)


if __name__ == "__main__":
    main()
