"""Table-list allocation of the ``ours`` router: exact expected-recall optimum, minimums, graph order.

Pure functions on hand-made inputs (no model, no collection): milliseconds."""

from __future__ import annotations

import itertools
import random
from types import SimpleNamespace

import numpy as np

from tagql.routing.ours import BuildConfig, GraphRouter


def _alloc(probs, gains, mins, recall_at=(5, 15)):
    fake = SimpleNamespace(cfg=BuildConfig(recall_at=recall_at))
    return GraphRouter.allocate(fake, probs, [np.asarray(g, dtype=float) for g in gains], mins)


def _value(sizes, probs, gains, recall_at):
    pos, v = 0, 0.0
    for n, p, g in zip(sizes, probs, gains):
        for i in range(n):
            v += p * g[i] * sum(1 for k in recall_at if pos < k)
            pos += 1
    return v


def test_sure_database_lists_its_likely_tables_unsure_one_leaves_room() -> None:
    gains = [[0.6, 0.3, 0.05, 0.03, 0.02], [0.6, 0.3, 0.05, 0.03, 0.02]]
    sure = _alloc([0.99, 0.01], gains, [1, 1], recall_at=(5,))
    assert sure == [5, 1]  # nothing of the second database is worth a top-5 slot (1 = its trail, after)
    unsure = _alloc([0.55, 0.45], gains, [1, 1], recall_at=(5,))
    assert unsure == [3, 2]  # the runner-up's two likely tables enter the first five


def test_minimum_is_the_best_trail_even_when_worthless() -> None:
    sizes = _alloc([0.5, 0.3, 0.2], [[0.5, 0.5, 0.0], [1.0, 0.0], [0.4, 0.3, 0.3]], [3, 2, 1])
    assert sizes[0] >= 3 and sizes[1] >= 2 and sizes[2] >= 1


def test_allocation_is_the_exact_optimum_on_random_instances() -> None:
    rng = random.Random(3)
    for _ in range(200):
        nd = rng.randint(1, 4)
        probs = [rng.random() for _ in range(nd)]
        gains = []
        for _ in range(nd):
            g = np.array(sorted((rng.random() for _ in range(rng.randint(1, 6))), reverse=True))
            gains.append(g / g.sum())
        mins = [rng.randint(1, len(g)) for g in gains]
        ks = (3, 7)
        got = _alloc(probs, gains, mins, recall_at=ks)
        assert all(m <= n <= len(g) for n, m, g in zip(got, mins, gains))
        best = max(_value(s, probs, gains, ks)
                   for s in itertools.product(*[range(m, len(g) + 1) for m, g in zip(mins, gains)]))
        assert abs(_value(got, probs, gains, ks) - best) < 1e-9


class _Graph:
    def __init__(self, edges):
        self.adj = {}
        for a, b in edges:
            self.adj.setdefault(a, set()).add(b)
            self.adj.setdefault(b, set()).add(a)

    def neighbours(self, db, t):
        return sorted(self.adj.get(t, ()))


def test_table_order_grows_along_graph_edges() -> None:
    # student -- takes -- course -- department ; lonely is unconnected and scores high
    g = _Graph([("student", "takes"), ("takes", "course"), ("course", "department")])
    fake = SimpleNamespace(graph=g)
    logit = {"student": 3.0, "takes": -1.0, "course": 2.0, "department": 0.5, "lonely": 2.5}
    order = GraphRouter.table_order(fake, "db", ["student"], logit)
    # the bridge table 'takes' comes before higher-scored but unconnected tables
    assert order == ["student", "takes", "course", "department", "lonely"]
    for i in range(1, 4):
        assert any(t in g.adj[order[i]] for t in order[:i])
