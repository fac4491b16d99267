"""Cheap-first filter cascade: an embedding proxy decides the claims it is sure of, the LM judges the rest.

Why: a filter over hundreds of distinct values (750 hero names) costs one LM call each and runs into
the per-question cap. Sentence embeddings rank values against the filter's predicate well (the
value's vector against "a US state that borders Canada": ROC AUC 0.61-1.00 over the 8 hand-labelled
criteria of ``bench/tag/judge.py``), but not well enough to replace the LM, so the LM labels a sample
and the proxy only decides where the sample leaves no doubt (LOTUS-style approximate filter, without
its statistical guarantee):

* the proxy score of a claim is the cosine between its values (the claim minus the instruction's
  fixed text) and the predicate (the instruction without its fields and leading verb);
* the sample is the highest-scoring third plus claims spread evenly over the rest of the ranking, so
  rare positives near the top are seen, plus every claim that stands for many rows (2x the mean);
* a claim scoring below the highest sampled "no" that lies under the lowest sampled "yes" is "no"; one
  scoring above the lowest sampled "yes" over the highest sampled "no" is "yes" (one sampled point of
  margin on each side); everything in between is judged by the LM;
* a sample without a "yes" or without a "no" shows nothing about the proxy: every claim is judged.

``bench/tag/cascade.py`` measures LM calls and accuracy with and without it.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence

import numpy as np

from tagql.embeddings import Embedder

_LEADING_VERB = re.compile(r"^(?:is|are|was|were|has|have|does|do)\s+", re.IGNORECASE)


def predicate(instruction: str) -> str:
    """``'{state} is a US state that borders Canada'`` -> ``'a US state that borders Canada'``."""
    text = " ".join(lit for lit, _, _, _ in string.Formatter().parse(instruction))
    text = re.sub(r"\s+", " ", text).strip(" ,.:;")
    return _LEADING_VERB.sub("", text) or instruction


def claim_values(instruction: str, claim: str) -> str:
    """What the fields were filled with (``'Texas'`` from ``'Texas is a US state that borders Canada'``),
    joined by ", "; the whole claim when it does not follow the template."""
    parts = list(string.Formatter().parse(instruction))
    pattern = "".join(re.escape(lit) + ("(.*?)" if field is not None else "") for lit, field, _, _ in parts)
    m = re.fullmatch(pattern, claim, re.DOTALL)
    if m is None or not m.groups():
        return claim
    return ", ".join(g.strip() for g in m.groups())


def proxy_scores(embedder: Embedder, instruction: str, claims: Sequence[str]) -> np.ndarray:
    """Cosine of each claim's values with the instruction's predicate."""
    vecs = embedder.embed([predicate(instruction)] + [claim_values(instruction, c) for c in claims])
    return vecs[1:] @ vecs[0]


def sample_indexes(scores: np.ndarray, n: int) -> list[int]:
    """``n`` claims for the LM to label first: the top third by score, then evenly spaced over the rest."""
    order = [int(i) for i in np.argsort(-scores, kind="stable")]
    if n >= len(order):
        return order
    top = max(1, n // 3)
    rest, k = order[top:], n - top
    spread = [rest[round(j * (len(rest) - 1) / (k - 1))] for j in range(k)] if k > 1 else rest[:1]
    return list(dict.fromkeys(order[:top] + spread))


def heavy_indexes(weights: Sequence[int], factor: float = 2.0) -> list[int]:
    """Claims that stand for at least ``factor`` times the mean rows per claim (and 2+ rows): the LM
    judges them, so no proxy mistake costs many rows (1,000 cities over 141 countries: the proxy alone
    decided "no" for the Russian Federation, 62 of the rows)."""
    if not weights:
        return []
    mean = sum(weights) / len(weights)
    return [i for i, w in enumerate(weights) if w >= 2 and w >= factor * mean]


def decide(scores: np.ndarray, labels: Mapping[int, bool]) -> dict[int, bool]:
    """Verdicts for the unlabelled claims the labelled sample leaves no doubt about (see module doc)."""
    yes = [float(scores[i]) for i, v in labels.items() if v]
    no = [float(scores[i]) for i, v in labels.items() if not v]
    if not yes or not no:
        return {}
    no_under = [s for s in no if s < min(yes)]
    yes_over = [s for s in yes if s > max(no)]
    out: dict[int, bool] = {}
    for i, s in enumerate(scores):
        if i in labels:
            continue
        if no_under and s < max(no_under):
            out[i] = False
        elif yes_over and s > min(yes_over):
            out[i] = True
    return out
