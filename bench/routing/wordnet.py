"""WordNet relations in the router's soft lexicon, tuned on Spider **train** questions (issue 4).

    python -m bench.routing.wordnet [--collection spider-ctl] [--questions 600]

Like ``bench/routing/finetune.py``: the 140 train databases are split in two halves (seed 0); the
measured questions are ``--questions`` train questions of half B whose Spider-Syn version differs,
routed in their plain and synonym versions against the collection's 166 databases. The mined
substitutions (``SoftLexicon(mined=...)``) are mined from half A only (cross-fit), so they cannot
know these questions' own substitutions. Each variant swaps the lexicon of the loaded router (no
rebuild). No dev question is used: dev figures come from ``bench/routing/spider.py``.
"""

from __future__ import annotations

import argparse
import sys
import time

from bench.routing.spider_train_halves import lexicon_tuning_set, recall_columns, route_with_lexicon

from tagql.config import load_settings
from tagql.routing.collection import Collection
from tagql.routing.lexicon import related_schema_words
from tagql.routing.synonyms import mined_reverse
from tagql.routing.wordnet import load_wordnet
from tagql.embeddings import make_embedder

from bench import common

OUT = common.result_path("routing", "wordnet")

# name -> (relation weights, senses); "off" is the lexicon as built
VARIANTS: dict[str, tuple[dict[str, float], int]] = {
    "off": ({}, 0),
    "syn.85 s3": ({"synonym": 0.85}, 3),
    "syn.85 hyper.7 s3": ({"synonym": 0.85, "hypernym": 0.7}, 3),
    "syn.85 hyper.7 hypo.6 s3": ({"synonym": 0.85, "hypernym": 0.7, "hyponym": 0.6}, 3),
    "syn.85 hyper.7 hypo.6 sis.5 s3": ({"synonym": 0.85, "hypernym": 0.7, "hyponym": 0.6, "sister": 0.5}, 3),
    "syn.85 hyper.7 s1": ({"synonym": 0.85, "hypernym": 0.7}, 1),
    "syn.85 hyper.7 s2": ({"synonym": 0.85, "hypernym": 0.7}, 2),
    "syn.85 hyper.7 s5": ({"synonym": 0.85, "hypernym": 0.7}, 5),
    "syn.6 hyper.5 s3": ({"synonym": 0.6, "hypernym": 0.5}, 3),
    "syn1 hyper.85 s3": ({"synonym": 1.0, "hypernym": 0.85}, 3),
    "syn.85 s1": ({"synonym": 0.85}, 1),
    "syn.5 s1": ({"synonym": 0.5}, 1),
    "syn.3 hyper.2 s3": ({"synonym": 0.3, "hypernym": 0.2}, 3),
    "syn.5 hyper.4 s1": ({"synonym": 0.5, "hypernym": 0.4}, 1),
    "syn.2 hyper.1 s3": ({"synonym": 0.2, "hypernym": 0.1}, 3),
    "syn.4 hyper.3 s3": ({"synonym": 0.4, "hypernym": 0.3}, 3),
    "syn.3 hyper.2 s5": ({"synonym": 0.3, "hypernym": 0.2}, 5),
    "syn.3 hyper.2 hypo.1 s3": ({"synonym": 0.3, "hypernym": 0.2, "hyponym": 0.1}, 3),
    "syn.3 s3": ({"synonym": 0.3}, 3),
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collection", default="spider-ctl")
    ap.add_argument("--questions", type=int, default=600)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)

    coll = Collection.load(args.collection, load_settings())
    router = coll.router("ours", embedder=make_embedder())
    lex = router.lexicon
    golds, sets, mined_a = lexicon_tuning_set(coll, args.questions)
    # the mined substitutions from half A, as the built lexicon would hold them
    base = lex.variant(mined=mined_reverse(router.cfg.mined_min_count, synonyms=mined_a), related={})
    wn = load_wordnet()
    results: dict = {"collection": args.collection, "questions": len(golds), "mined_half_a": len(mined_a),
                     "variants": {}}
    print(f"{'variant':<34}{'plain R@1':>10}{'syn R@1':>10}{'plain R@5':>10}{'syn R@5':>10}{'build s':>9}",
          flush=True)
    for name in args.variants.split(","):
        weights, senses = VARIANTS[name]
        t = time.perf_counter()
        base.related = related_schema_words(lex.words, wn, weights, senses=senses) if weights else {}
        build_s = time.perf_counter() - t
        row = {"weights": weights, "senses": senses, "build_s": round(build_s, 2),
               "related_keys": len(base.related), **route_with_lexicon(router, base, sets, golds)}
        results["variants"][name] = row
        print(f"{name:<34}{recall_columns(row)}{build_s:>9.2f}", flush=True)
    run.save(args.out, results, indent=2)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
