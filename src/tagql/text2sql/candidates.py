"""Execution-guided choice among several SQL candidates for one question (self-consistency over results).

A small model's greedy SQL is often one plausible reading among several. Sampling a few more candidates
(at a temperature, from the same prompt) and running them all shows which *result* most candidates
agree on; a wrong join or a wrong literal tends to produce a result no other candidate shares. The
choice is by agreement of results, not of SQL text: ``COUNT(*)`` and ``COUNT(id)`` vote together.

Policies (measured side by side by ``bench/ask/candidates.py``):

* ``majority``: the largest group of candidates with the same result wins; a tie goes to the group
  holding the greedy candidate, then to the group that came first.
* ``majority_nonempty``: the same, but groups whose result is empty count only when every candidate that
  ran returned nothing (an empty result is what a wrong literal or a wrong join usually returns).
* ``fallback``: the greedy candidate unless it failed; then the first group of the others by ``majority``.

A candidate that fails to parse, validate or run has no vote. Candidates never change the schema or
prompt the greedy query was written with; the greedy query keeps its repair round.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tagql.db.connection import Result

Policy = Literal["majority", "majority_nonempty", "fallback"]
POLICIES: tuple[Policy, ...] = ("majority", "majority_nonempty", "fallback")


@dataclass
class Candidate:
    """One SQL candidate: what it returned, or why it could not run."""

    sql: str
    result: Result | None = None
    error: str | None = None
    greedy: bool = False

    @property
    def ran(self) -> bool:
        return self.result is not None


def _value(v: Any) -> Any:
    """A cell as compared across candidates: floats to 6 significant digits (1/3 computed two ways)."""
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return float(f"{v:.6g}")
    if isinstance(v, bytes):
        return v.hex()
    return v


def result_key(result: Result) -> frozenset[tuple[Any, ...]]:
    """What two candidates must share to agree: the set of their rows (BIRD's execution match)."""
    return frozenset(tuple(_value(v) for v in row) for row in result.rows)


def choose(candidates: Sequence[Candidate], policy: Policy = "majority") -> tuple[int, int] | None:
    """(index of the chosen candidate, how many candidates returned its result), or None when none ran."""
    if policy not in POLICIES:
        raise ValueError(f"unknown candidate policy {policy!r}: use one of {', '.join(POLICIES)}")
    ran = [i for i, c in enumerate(candidates) if c.ran]
    if not ran:
        return None
    if policy == "fallback":
        greedy = [i for i in ran if candidates[i].greedy]
        if greedy:
            return greedy[0], sum(result_key(candidates[i].result) == result_key(candidates[greedy[0]].result)  # type: ignore[arg-type]
                                  for i in ran)
        return _index_without_greedy(candidates)
    groups: dict[frozenset[tuple[Any, ...]], list[int]] = {}
    for i in ran:
        groups.setdefault(result_key(candidates[i].result), []).append(i)  # type: ignore[arg-type]
    members = list(groups.values())  # in order of first appearance
    if policy == "majority_nonempty":
        filled = [m for m in members if candidates[m[0]].result.rows]  # type: ignore[union-attr]
        members = filled or members
    best = max(members, key=lambda m: (len(m), any(candidates[i].greedy for i in m), -m[0]))
    greedy_in = [i for i in best if candidates[i].greedy]
    return (greedy_in[0] if greedy_in else best[0]), len(best)


def _index_without_greedy(candidates: Sequence[Candidate]) -> tuple[int, int] | None:
    """``majority`` over the non-greedy candidates, as indices of the full list (``fallback``'s second step)."""
    others = [i for i, c in enumerate(candidates) if not c.greedy]
    picked = choose([candidates[i] for i in others], "majority")
    if picked is None:
        return None
    return others[picked[0]], picked[1]
