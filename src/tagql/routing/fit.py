"""The two small convex fits the router trains at index time, by damped Newton steps (a few features, so
each step is a tiny linear solve); no scikit-learn or SciPy needed to build an index."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def fit_logistic(x: np.ndarray, y: np.ndarray, c: float = 1.0, iters: int = 100, tol: float = 1e-10) -> np.ndarray:
    """Weights of an L2-regularised logistic regression without intercept (the features carry a bias):
    the minimum of ``0.5 |w|^2 + c * sum(log-loss)``, scikit-learn's ``LogisticRegression(C=c,
    fit_intercept=False)`` objective, by Newton's method (convex: the same unique optimum)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    sign = 2.0 * y - 1.0

    def loss(w: np.ndarray) -> float:
        return 0.5 * float(w @ w) + c * float(np.logaddexp(0.0, -sign * (x @ w)).sum())

    def newton_step(w: np.ndarray) -> np.ndarray:
        p = 0.5 * (1.0 + np.tanh(0.5 * (x @ w)))  # the logistic function, without overflow
        grad = w + c * (x.T @ (p - y))
        hess = np.eye(len(w)) + c * (x.T * (p * (1.0 - p))) @ x
        return np.linalg.solve(hess, grad)

    return _minimise(loss, newton_step, x.shape[1], iters, tol)


def fit_softmax(groups: Sequence[np.ndarray], l2: float = 1e-3, iters: int = 100, tol: float = 1e-10) -> np.ndarray:
    """Weights of a softmax ranking model (a conditional logit): each group is a (candidates, features)
    array whose row 0 is the right candidate, and the fit maximises the mean log-probability of row 0
    under ``softmax(group @ w)``, with an ``0.5 * l2 * |w|^2`` penalty.

    Why not a logistic regression of right-vs-wrong rows: the router's database scorer ranks every
    database against each other for one question, and its hard negatives are picked by one of the
    features (the best table logit). A pointwise fit on them learns that this feature marks the wrong
    rows (a negative weight at 10,000 databases); the ranking loss compares rows of one question only,
    so it keeps what separates the right database from the ones that look like it. Groups may differ in
    size; a feature constant within every group (a bias) gets no weight."""
    n_rows = max(len(g) for g in groups)
    n_feat = groups[0].shape[1]
    x = np.zeros((len(groups), n_rows, n_feat))
    mask = np.zeros((len(groups), n_rows), dtype=bool)
    for i, g in enumerate(groups):
        x[i, : len(g)] = g
        mask[i, : len(g)] = True
    n = len(groups)

    def probs(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        z = np.where(mask, x @ w, -np.inf)
        z -= z.max(axis=1, keepdims=True)
        lse = np.log(np.exp(z).sum(axis=1))
        return np.exp(z - lse[:, None]), z[:, 0] - lse

    def loss(w: np.ndarray) -> float:
        return -float(probs(w)[1].mean()) + 0.5 * l2 * float(w @ w)

    def newton_step(w: np.ndarray) -> np.ndarray:
        p, _ = probs(w)
        mean = np.einsum("nm,nmf->nf", p, x)  # each group's expected row
        grad = -(x[:, 0] - mean).mean(axis=0) + l2 * w
        hess = np.einsum("nm,nmf,nmg->fg", p, x, x) / n - mean.T @ mean / n + l2 * np.eye(len(w))
        return np.linalg.solve(hess, grad)

    return _minimise(loss, newton_step, n_feat, iters, tol)


def fit_calibrated_ranking(groups: Sequence[np.ndarray], rows: Sequence[np.ndarray], labels: Sequence[int],
                           bias: int = -1) -> np.ndarray:
    """Weights ranked by :func:`fit_softmax` over ``groups`` (row 0 right), then scaled, and shifted along
    the feature ``bias`` (a constant 1), so that the score is the log-odds of ``labels`` on ``rows`` (the
    right rows vs the hardest others): scores read as probabilities (the router's confidence and table
    allocation) need a scale, which a ranking fit alone leaves free."""
    rank = fit_softmax(groups)
    x = np.asarray(rows, dtype=np.float64)
    a, b = fit_logistic(np.stack([x @ rank, np.ones(len(x))], axis=1), np.asarray(labels))
    w = a * rank
    w[bias] += b
    return w


def _minimise(loss: Callable[[np.ndarray], float], newton_step: Callable[[np.ndarray], np.ndarray], n_feat: int,
              iters: int, tol: float) -> np.ndarray:
    """Damped Newton from zero weights: each step is halved until the (convex) loss does not rise."""
    w = np.zeros(n_feat)
    for _ in range(iters):
        step = newton_step(w)
        t, now = 1.0, loss(w)
        while t > 1e-8 and loss(w - t * step) > now:  # damped: never a step uphill
            t *= 0.5
        w = w - t * step
        if float(np.abs(t * step).max()) < tol:
            break
    return w
