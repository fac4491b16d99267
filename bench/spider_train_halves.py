"""The train-only tuning split of the routing benchmarks: Spider's 140 train databases in two seeded halves.

Tuning scripts (``routing_finetune.py``, ``routing_wordnet.py``) fit on half A (pairs, mined
substitutions) and measure on train questions of half B whose Spider-Syn version differs; dev is
never read.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


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
