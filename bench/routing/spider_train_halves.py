"""The train-only tuning split of the routing benchmarks: Spider's 140 train databases in two seeded halves.

Tuning scripts (``routing_finetune.py``, ``routing_wordnet.py``, ``routing_llm_synonyms.py``) fit on
half A (pairs, mined substitutions) and measure on train questions of half B whose Spider-Syn version
differs; dev is never read.
"""

from __future__ import annotations

import json
import random

from bench import common

DATA = common.DATA


def spider_train_halves(questions: int, rng: random.Random | None = None) -> tuple[list[dict], set[str], list[dict]]:
    """(all Spider-Syn train entries, the half-A database names, ``questions`` shuffled half-B entries
    whose plain and synonym versions differ). ``rng`` (default ``Random(0)``) draws both shuffles, so a
    caller can go on drawing from it."""
    rng = rng or random.Random(0)
    train = json.loads((DATA / "spider_syn" / "train_spider.json").read_text())
    dbs = sorted({e["db_id"] for e in train})
    rng.shuffle(dbs)
    half_a = set(dbs[: len(dbs) // 2])
    test = [e for e in train if e["db_id"] not in half_a and e["SpiderQuestion"] != e["SpiderSynQuestion"]]
    rng.shuffle(test)
    return train, half_a, test[:questions]


def lexicon_tuning_set(collection, questions: int) -> tuple[list, dict[str, list[str]], list]:
    """(gold routes, {"plain": questions, "syn": their Spider-Syn versions}, the substitutions mined from
    half A) for routing lexicon variants of ``collection``'s router."""
    from tagql.routing.metrics import Gold, gold_tables
    from tagql.routing.synonyms import mine_synonyms

    train, half_a, test = spider_train_halves(questions)
    mined_a = mine_synonyms([e for e in train if e["db_id"] in half_a])
    tables = {db: collection.schema(db).table_names for db in collection.databases}
    golds = [Gold(e["db_id"], gold_tables(e["query"], tables[e["db_id"]])) for e in test]
    sets = {"plain": [e["SpiderQuestion"] for e in test], "syn": [e["SpiderSynQuestion"] for e in test]}
    return golds, sets, mined_a


def route_with_lexicon(router, lexicon, sets: dict[str, list[str]], golds: list) -> dict[str, dict]:
    """Routing summaries per question set with ``lexicon`` swapped into ``router`` (no rebuild)."""
    from tagql.routing.metrics import summarize

    router.lexicon = lexicon
    return {name: summarize(router.route_many(qs, k=20), golds) for name, qs in sets.items()}


def recall_columns(row: dict[str, dict]) -> str:
    """Plain / Syn DB R@1 and R@5 of a :func:`route_with_lexicon` row, as table columns."""
    return (f"{row['plain']['db_r@1']:>10}{row['syn']['db_r@1']:>10}{row['plain']['db_r@5']:>10}"
            f"{row['syn']['db_r@5']:>10}")
