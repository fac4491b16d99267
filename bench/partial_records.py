"""The record stream of a resumable benchmark: one JSON object per line in ``<out>.partial.jsonl``."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from pathlib import Path


def read_partial(path: Path, key: Callable[[dict], Hashable]) -> dict:
    """``key(record)`` -> the last record written for it; a torn last line (a run stopped mid-write) is ignored."""
    out: dict = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            out[key(r)] = r
    return out
