"""bench.tag.exemplar_overlap ranks exemplars exactly as the planner does."""

from __future__ import annotations

from bench.tag.exemplar_overlap import CLOSE, measure, nearest, question_sets
from tagql.tag.exemplars import exemplar_index


def test_nearest_is_the_exemplar_the_planner_would_show_first():
    index = exemplar_index()
    sets = question_sets()
    for q, db in sets["tag held-out (15)"][:5] + sets["pool test"][:5]:
        score, question = nearest(index, q, db)
        assert question == index.nearest(q, 1, exclude_db=db)[0].question and 0 < score <= 1.0 + 1e-9


def test_a_set_of_exemplar_paraphrases_scores_close():
    index = exemplar_index()
    own = [(e.question, "elsewhere") for e in index.exemplars[:6]]
    s = measure(index, {"own": own})["own"]
    assert s["share_close"] == 1.0 and s["median"] > 0.99 and CLOSE == 0.5
