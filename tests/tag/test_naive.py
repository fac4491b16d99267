"""The naive one-call-per-row baseline of the operator benches: its prompts (kept stable so benchmark
runs stay comparable), one call per row, parsing."""

from __future__ import annotations

from tagql.llm.scripted import ScriptedLLM
from tagql.tag.naive import naive_filter, naive_scores, naive_topk

ROWS = [("Lyon", "France"), ("Lima", "Peru"), ("Lyon", "France")]


def test_naive_filter_asks_once_per_row_with_the_whole_prompt_in_one_message():
    llm = ScriptedLLM(lambda m: "Yes." if "France" in m[-1].content else "no")
    seen = []
    keep = naive_filter(llm, ["city", "country"], ROWS, "{country} is in Europe",
                        progress=lambda op, d, n: seen.append((op, d, n)))
    assert keep == [True, False, True] and llm.usage.calls == 3  # no dedupe
    assert [m.role for m in llm.prompts[0]] == ["user"]
    assert llm.prompts[0][0].content == ("Row: city = Lyon, country = France\nCondition: France is in Europe\n"
                                         "Is the condition true for this row? Answer yes or no.")
    assert seen[-1] == ("naive filter", 3, 3)


def test_naive_scores_and_topk():
    replies = iter(["7", "Score: 12", "no idea"])
    llm = ScriptedLLM(lambda m: next(replies))
    assert naive_scores(llm, ["city", "country"], ROWS, "{city} is big") == [7, 10, 0]
    assert llm.prompts[0][0].content.startswith("Row: city = Lyon, country = France\nCriterion: Lyon is big\n"
                                                "Rate from 0 to 10")
    llm2 = ScriptedLLM(["3", "5", "5"])
    assert naive_topk(llm2, ["city", "country"], ROWS, "{city} is big", 2) == [1, 2]  # ties keep row order
