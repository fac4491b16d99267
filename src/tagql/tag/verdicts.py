"""Yes/no verdicts of one filter from the LM's P(yes) over all its distinct inputs, not one at a time.

Why: the 1.5B judge is biased towards "no", by an amount that depends on the criterion, while it still
ranks the inputs well. "South America is a region of South America" gets P(yes) 0.30, the next region
0.26; "Massachusetts is a New England state" 0.36, New York 0.035. A fixed 0.5 cut says no to all of
them. Within one filter the true inputs stand apart from the false ones by a gap in P(yes), so the cut
goes into the widest gap between neighbouring inputs (in log-odds), when that gap is wide enough and lies
where the model is unsure; otherwise it stays at 0.5.

Measured with ``bench/tag/judge.py --criteria all`` (the rule's constants were chosen on its 8 dev
criteria; its 7 held-out criteria over world_1's regions and languages, labelled by world_1's columns,
played no part): with value glosses, dev mean accuracy 0.842 -> 0.918, F1 0.527 -> 0.831, exact sets
1 -> 4 of 8; held-out accuracy 0.932 either way, F1 0.643 -> 0.665, exact sets 4 -> 3 of 7 (North America
gains a region, Asia loses one; bench/results/tag_judge_s22*.json). On the 141 countries of
``bench/tag/operator_lotus.py`` the cut stays at 0.5 almost everywhere (no gap wide enough).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MIN_GAP = 0.5  # log-odds between the neighbours a cut goes between
UNSURE = (0.15, 0.9)  # a cut only between inputs the model is unsure of: upper above 0.15, lower below 0.9
MIN_INPUTS = 3  # with fewer inputs, a gap says nothing
DEFAULT = 0.5


def _logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


def cut(p_yes: Sequence[float]) -> float:
    """The P(yes) above which an input of this filter is a yes (:data:`DEFAULT` unless a gap decides)."""
    if len(p_yes) < MIN_INPUTS:
        return DEFAULT
    levels = sorted({_logit(p) for p in p_yes}, reverse=True)
    low, high = _logit(UNSURE[0]), _logit(UNSURE[1])
    best_gap, best_cut = 0.0, _logit(DEFAULT)
    for upper, lower in zip(levels, levels[1:]):
        if upper < low or lower > high:
            continue
        if upper - lower > best_gap:
            best_gap, best_cut = upper - lower, (upper + lower) / 2
    if best_gap < MIN_GAP:
        return DEFAULT
    return 1 / (1 + math.exp(-best_cut))


def split_verdicts(p_yes: Sequence[float]) -> list[bool]:
    """Yes for the inputs above :func:`cut`."""
    threshold = cut(p_yes)
    return [p > threshold for p in p_yes]
