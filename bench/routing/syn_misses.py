"""What the router's Spider-Syn dev misses are made of (issue 4, robustness target).

    python -m bench.routing.syn_misses [--collection spider-ctl] [--method ours]

Routes every Spider-Syn dev question in both versions (nothing is fitted here; this only reads the
router's answers) and sorts the Spider-Syn misses:

* **also missed in plain words** -- the question was hard before any synonym was substituted;
* **literal misdirection** -- a word the substitution brought in (in the Spider-Syn version, not the
  plain one; as the router's BM25 reads words: stemmed, stop words dropped) is a table or column word of the database the router chose and not
  of the gold one ("directors" for orchestra's conductors: imdb has a ``director`` table). For these the
  question, read literally, names the other database;
* **other synonym misses** -- the rest.

Also: where the gold database ranks among the candidates, and the most frequent (gold -> chosen) pairs.
Writes ``bench/results/routing/syn_misses.json``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from tagql.config import load_settings
from tagql.routing.collection import Collection
from tagql.embeddings import make_embedder
from tagql.text import terms

from bench import common

DATA = common.DATA
OUT = common.result_path("routing", "syn_misses")


def words(text: str) -> set[str]:
    """The router's own vocabulary of ``text`` (snake / camel case split, stop words dropped, stemmed)."""
    return set(terms(text))


def schema_words(tables_json: Path) -> dict[str, set[str]]:
    out = {}
    for t in json.loads(tables_json.read_text()):
        names = t["table_names"] + t["table_names_original"]
        names += [c[1] for c in t["column_names"]] + [c[1] for c in t["column_names_original"]]
        out[t["db_id"]] = set().union(*(words(n) for n in names))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collection", default="spider-ctl")
    ap.add_argument("--method", default="ours")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)

    router = Collection.load(args.collection, load_settings()).router(
        args.method, **({} if args.method == "bm25" else {"embedder": make_embedder()}))
    dev = json.loads((DATA / "spider_syn" / "dev.json").read_text())
    schema = schema_words(DATA / "spider" / "tables.json")

    def ranked(questions: list[str]) -> list[list[str]]:
        return [list(dict.fromkeys(c.database for c in cands)) for cands in router.route_many(questions, k=20)]

    syn, plain = ranked([e["SpiderSynQuestion"] for e in dev]), ranked([e["SpiderQuestion"] for e in dev])
    kinds: Counter = Counter()
    gold_rank: Counter = Counter()
    pairs: Counter = Counter()
    examples: dict[str, list] = {"literal misdirection": [], "other synonym misses": []}
    for e, s, p in zip(dev, syn, plain):
        gold = e["db_id"]
        if s[0] == gold:
            continue
        gold_rank[s.index(gold) + 1 if gold in s else 0] += 1
        pairs[f"{gold} -> {s[0]}"] += 1
        if p[0] != gold:
            kinds["also missed in plain words"] += 1
            continue
        brought = words(e["SpiderSynQuestion"]) - words(e["SpiderQuestion"])
        literal = sorted(w for w in brought if w in schema[s[0]] and w not in schema[gold])
        kind = "literal misdirection" if literal else "other synonym misses"
        kinds[kind] += 1
        if len(examples[kind]) < 15:
            examples[kind].append({"question": e["SpiderSynQuestion"], "plain": e["SpiderQuestion"], "gold": gold,
                                   "chosen": s[0], "words": literal or sorted(brought)})
    misses = sum(kinds.values())
    r1 = round(100 * (len(dev) - misses) / len(dev), 2)
    print(f"Spider-Syn dev: {len(dev)} questions, DB R@1 {r1}, {misses} misses")
    for kind in ("also missed in plain words", "literal misdirection", "other synonym misses"):
        print(f"  {kind:<30}{kinds[kind]:>5}")
    print("gold database's rank among the candidates (0 = not among them):",
          ", ".join(f"{k}: {v}" for k, v in sorted(gold_rank.items())))
    print("most frequent gold -> chosen:", "; ".join(f"{k} ({v})" for k, v in pairs.most_common(8)))
    run.save(args.out, {
        "collection": args.collection, "method": args.method, "questions": len(dev), "db_r1": r1, "misses": misses,
        "kinds": dict(kinds), "gold_rank": {str(k): v for k, v in sorted(gold_rank.items())},
        "pairs": dict(pairs.most_common(30)), "examples": examples})


if __name__ == "__main__":
    main()
