"""``llm.extra_buffers``: whether llama.cpp may repack the weights for the CPU's fastest kernels (AMX,
REPACK). They round differently, so a small model's near ties can differ between hosts; off gives the
plain kernels everywhere."""

from __future__ import annotations

import pytest

from tagql.config import LLMSettings, load_settings
from tagql.llm import make_llm
from tagql.llm.base import user


def test_setting_defaults_on_and_reads_the_environment(monkeypatch):
    assert LLMSettings().extra_buffers is True
    monkeypatch.setenv("TAGQL_LLM__EXTRA_BUFFERS", "false")
    assert load_settings().llm.extra_buffers is False


@pytest.mark.model
def test_local_model_loads_without_extra_buffers_and_answers():
    plain = make_llm(LLMSettings(extra_buffers=False, persist_prefixes=False), backend="local")
    assert plain.extra_buffers is False and plain._llama.model_params.use_extra_bufts is False
    default = make_llm(LLMSettings(persist_prefixes=False), backend="local")
    assert default._llama.model_params.use_extra_bufts is True and default._llama is not plain._llama
    msgs = [user("Is Paris the capital of France? Answer yes or no.")]
    for llm in (plain, default):  # a question with no near tie: both kernels agree
        assert llm.complete(msgs, max_tokens=2, grammar='root ::= "yes" | "no"').text == "yes"
