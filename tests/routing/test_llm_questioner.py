"""The LLM schema->question generator with the real local model (2 calls) and a scripted double."""

from __future__ import annotations

from pathlib import Path

import pytest

from tagql.llm.scripted import ScriptedLLM
from tagql.routing.sampling import QuerySchema
from tagql.routing.synth import LLMQuestioner, keep_question


def _questioner(llm, small_collection, shared_data: Path) -> LLMQuestioner:
    schemas = {d: small_collection.schema(d) for d in small_collection.databases}
    return LLMQuestioner(llm, schemas, shared_data / "spider_syn" / "train_spider.json", seed=0)


def test_prompt_uses_train_exemplars_of_same_size(small_collection, shared_data: Path) -> None:
    llm = ScriptedLLM(["Question: Which stadium hosted the most concerts?\n"])
    lq = _questioner(llm, small_collection, shared_data)
    qs = QuerySchema("concert_singer", ("concert", "stadium"))
    msgs = lq.messages(qs)
    body = msgs[-1].content
    assert body.count("Question:") == 4  # 3 exemplars + the open slot
    assert body.rstrip().endswith("concert(concert_ID, concert_Name, Theme, Stadium_ID, Year)\n"
                                  "stadium(Stadium_ID, Location, Name, Capacity, Highest, Lowest, Average)\nQuestion:")
    q = lq.generate([qs])[0]
    assert q.question == "Which stadium hosted the most concerts?" and q.source == "llm"


@pytest.mark.model
def test_real_llm_writes_questions_that_pass_the_filter(small_collection, shared_data: Path) -> None:
    from tagql.config import load_settings
    from tagql.llm import make_llm

    lq = _questioner(make_llm(load_settings()), small_collection, shared_data)
    schemas = [QuerySchema("concert_singer", ("concert", "stadium")), QuerySchema("pets_1", ("Student",))]
    out = lq.generate(schemas)
    assert all(len(q.question) > 10 for q in out)
    kept = [q for q in out if keep_question(q.question, small_collection.schema(q.schema.database), q.schema)]
    assert kept, [q.question for q in out]
