"""The fixed train / dev / test split of the 432 BIRD dev questions that `bench/ask.py` runs
(student_club, superhero, toxicology), made once and committed as bench/ask/data/bird_ask_split.json.

Fixes to SQL synthesis (prompts, repair rules) are designed on train and dev questions only; test
is reported beside dev and never read question by question. Stratified by database: for each
database its questions (bird/dev.json order) are shuffled with random.Random(SEED) and cut 50 / 25 / 25.

    python -m bench.ask.bird_split            # rewrites the file (identical output: the seed is fixed)
    python -m bench.ask.bird_split --check    # exits 1 if the committed file differs from a fresh split
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from bench import common

DATA = common.DATA
OUT = common.BENCH / "ask" / "data" / "bird_ask_split.json"
DBS = ["student_club", "superhero", "toxicology"]
SEED = 31


def make_split(questions: list[dict]) -> dict[str, list[int]]:
    split: dict[str, list[int]] = {"train": [], "dev": [], "test": []}
    for db in DBS:
        ids = [q["question_id"] for q in questions if q["db_id"] == db]
        random.Random(f"{SEED}/{db}").shuffle(ids)
        a, b = len(ids) // 2, len(ids) // 2 + len(ids) // 4
        split["train"] += sorted(ids[:a])
        split["dev"] += sorted(ids[a:b])
        split["test"] += sorted(ids[b:])
    return {k: sorted(v) for k, v in split.items()}


def load_split(path: Path = OUT) -> dict[int, str]:
    """question_id -> "train" / "dev" / "test"."""
    data = json.loads(path.read_text())
    return {qid: name for name in ("train", "dev", "test") for qid in data[name]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    questions = json.loads((DATA / "bird" / "dev.json").read_text())
    split = make_split(questions)
    text = json.dumps({"seed": SEED, "dbs": DBS, "method": "per database: shuffle, cut 50/25/25", **split}) + "\n"
    if args.check:
        sys.exit(0 if OUT.read_text() == text else 1)
    OUT.write_text(text)
    print({k: len(v) for k, v in split.items()}, "->", OUT)


if __name__ == "__main__":
    main()
