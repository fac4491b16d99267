"""The router's index-time fits (:mod:`tagql.routing.fit`): each reaches its objective's optimum, without
scikit-learn or SciPy."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from tagql.routing.fit import fit_calibrated_ranking, fit_logistic, fit_softmax


def test_fit_logistic_is_the_regularised_optimum():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 11))
    x[:, -1] = 1.0
    y = (x @ rng.normal(size=11) * 3 + rng.normal(size=3000) > 0).astype(int)
    w = fit_logistic(x, y)
    p = 1 / (1 + np.exp(-(x @ w)))
    assert np.abs(w + x.T @ (p - y)).max() < 1e-6  # gradient of 0.5|w|^2 + sum(log-loss) is zero
    # separable data: the L2 term keeps the weights finite (no divergence)
    ws = fit_logistic(x, (x[:, 0] > 0).astype(int))
    assert np.isfinite(ws).all() and ws[0] > 1.0


@pytest.mark.skipif(importlib.util.find_spec("sklearn") is None, reason="scikit-learn not installed")
def test_fit_logistic_matches_scikit_learn():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(1)
    x = rng.normal(size=(2000, 8))
    y = (x @ rng.normal(size=8) + rng.normal(size=2000) > 0).astype(int)
    ref = LogisticRegression(C=1.0, fit_intercept=False, tol=1e-10, max_iter=5000).fit(x, y).coef_[0]
    assert np.allclose(fit_logistic(x, y), ref, atol=1e-6)


def _groups(rng: np.random.Generator, w: np.ndarray, n: int, size: int) -> list[np.ndarray]:
    """``n`` groups drawn from the softmax model with weights ``w``, the drawn row moved to row 0."""
    out = []
    for _ in range(n):
        x = rng.normal(size=(size, len(w)))
        z = x @ w
        p = np.exp(z - z.max())
        pick = rng.choice(size, p=p / p.sum())
        out.append(np.concatenate([x[pick:pick + 1], np.delete(x, pick, axis=0)]))
    return out


def test_fit_softmax_is_the_regularised_optimum_and_recovers_the_model():
    rng = np.random.default_rng(0)
    truth = np.array([1.5, -0.5, 0.0, 2.0])
    groups = _groups(rng, truth, 4000, 12) + _groups(rng, truth, 1000, 5)  # groups of two sizes
    w = fit_softmax(groups, l2=1e-3)
    grad = 1e-3 * w
    for g in groups:
        z = g @ w
        p = np.exp(z - z.max())
        p /= p.sum()
        grad -= (g[0] - p @ g) / len(groups)
    assert np.abs(grad).max() < 1e-8  # the penalised mean log-likelihood is at its optimum
    assert np.allclose(w, truth, atol=0.15), w


def test_fit_softmax_gives_a_feature_constant_within_each_group_no_weight():
    rng = np.random.default_rng(1)
    groups = _groups(rng, np.array([1.0, 1.0]), 500, 8)
    groups = [np.column_stack([g, np.full(len(g), float(i % 3))]) for i, g in enumerate(groups)]
    w = fit_softmax(groups)
    assert abs(w[2]) < 1e-9 and w[0] > 0.5 and w[1] > 0.5


def test_ranking_fit_keeps_the_feature_that_picked_the_hard_negatives():
    """Why the router's database scorer is a ranking fit: negatives picked as the best by feature 0
    out-score the right row on it, so right-vs-hard-negative logistic regression learns a negative weight
    for the feature that ranks the right row first most often; the ranking fit over hard and random
    negatives keeps it positive and ranks better."""
    rng = np.random.default_rng(2)
    groups, rows, labels = [], [], []
    for _ in range(1500):
        gold = rng.normal([1.5, 2.0], 1.0)
        others = rng.normal(0.0, 1.0, size=(199, 2))
        hard = others[np.argsort(-others[:, 0])[:15]]
        group = np.vstack([gold, others])
        groups.append(np.column_stack([group, np.ones(len(group))]))
        rows += [np.append(gold, 1.0)] + [np.append(h, 1.0) for h in hard]
        labels += [1] + [0] * len(hard)
    pointwise = fit_logistic(np.array(rows), np.array(labels))
    ranking = fit_softmax([np.vstack([g[:16], g[16:116]]) for g in groups])

    def top1(w: np.ndarray) -> float:
        return float(np.mean([np.argmax(g @ w) == 0 for g in groups]))

    assert pointwise[0] < 0 < ranking[0], (pointwise, ranking)
    assert top1(ranking) > top1(pointwise) + 0.1, (top1(ranking), top1(pointwise))


def test_calibrated_ranking_keeps_the_ranking_and_reads_as_probabilities():
    rng = np.random.default_rng(3)
    truth = np.array([1.0, 2.0, 0.0])
    groups = [np.column_stack([g, np.ones(len(g))]) for g in _groups(rng, truth[:2], 2000, 20)]
    rows, labels = [], []
    for g in groups:  # the right row and the 5 best-scored others, as the router's calibration rows
        hard = 1 + np.argsort(-(g[1:] @ truth))[:5]
        rows += [g[0]] + list(g[hard])
        labels += [1] + [0] * 5
    w = fit_calibrated_ranking(groups, rows, labels)
    rank = fit_softmax(groups)
    cos = w[:2] @ rank[:2] / np.linalg.norm(w[:2]) / np.linalg.norm(rank[:2])
    assert cos > 1 - 1e-9 and w[:2] @ rank[:2] > 0  # the same order of every group's rows
    p = 1 / (1 + np.exp(-(np.array(rows) @ w)))
    assert abs(p.mean() - np.mean(labels)) < 0.01  # calibrated: as many right rows expected as there are
    assert p[np.array(labels) == 1].mean() > p[np.array(labels) == 0].mean() + 0.05
