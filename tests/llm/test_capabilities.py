"""Token probabilities are a declared capability of every LLM backend (``supports_choice_probs`` /
``supports_digit_probs``), never found by probing for a method."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tagql.llm.base import LLM
from tagql.llm.local import LocalLLM
from tagql.llm.openai_compat import OpenAICompatLLM
from tagql.llm.scripted import ScriptedLLM
from tagql.tag.operators import SemEngine

SRC = Path(__file__).resolve().parents[1] / "src" / "tagql"
CAPABILITIES = {"supports_choice_probs": "choice_probs", "supports_digit_probs": "digit_probs",
                "supports_stream": "stream", "supports_samples": "sample"}


@pytest.mark.parametrize("backend,declared", [
    (LocalLLM, {"supports_choice_probs": True, "supports_digit_probs": True, "supports_stream": True,
                "supports_samples": True}),
    (OpenAICompatLLM, {"supports_choice_probs": True, "supports_digit_probs": False, "supports_stream": True,
                       "supports_samples": True}),
])
def test_every_backend_declares_what_it_can(backend, declared):
    for flag, method in CAPABILITIES.items():
        assert getattr(backend, flag) is declared[flag]
        assert callable(getattr(backend, method, None)) is declared[flag]  # declared iff it has the method


def test_the_protocol_names_the_capabilities():
    assert set(CAPABILITIES) <= set(LLM.__annotations__)


def test_the_scripted_double_declares_what_it_was_given():
    plain = ScriptedLLM([])
    assert not plain.supports_choice_probs and not plain.supports_digit_probs and not plain.supports_stream
    assert ScriptedLLM([], stream_s=0).supports_stream
    assert not plain.supports_samples and ScriptedLLM([], samples=lambda m, n: ["x"] * n).supports_samples
    both = ScriptedLLM([], digit_probs=lambda m, s: [[0.1] * 10] * s, choice_probs=lambda m, c: [0.5] * len(c))
    assert both.supports_choice_probs and both.supports_digit_probs
    assert isinstance(both, LLM)


def _yes_first(messages, choices):
    return [0.7, 0.1, 0.1, 0.1]


def test_filters_read_probabilities_only_from_an_llm_that_declares_them():
    llm = ScriptedLLM(["yes"] * 3, choice_probs=_yes_first)
    engine = SemEngine(llm, cascade="off")
    assert engine.judge_many("{x} is big", ["a is big", "b is big"]) == [True, True]
    assert llm.constraints == []  # both verdicts from token probabilities, nothing generated
    llm.supports_choice_probs = False  # has the method, does not declare it: not used
    engine = SemEngine(llm, cascade="off")
    assert engine.judge_many("{x} is big", ["c is big"]) == [True]
    assert len(llm.constraints) == 1  # a generated (grammar-forced) reply


def test_top_k_reads_digit_probabilities_only_from_an_llm_that_declares_them():
    def digits(messages, slots):
        return [[0.0] * 9 + [1.0] if "<record>b</record>" in messages[-1].content else [1.0] + [0.0] * 9] * slots

    llm = ScriptedLLM(["3", "7"], digit_probs=digits)
    assert SemEngine(llm, cascade="off").rank_scores("{x} is good", ["a", "b"]) == [0.0, 9.0]
    llm.supports_digit_probs = False
    assert SemEngine(llm, cascade="off").rank_scores("{x} is good", ["c", "d"]) == [3.0, 7.0]  # generated


def test_no_code_probes_an_llm_for_a_capability():
    found = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
                names = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant)]
                if set(names) & (set(CAPABILITIES) | set(CAPABILITIES.values())):
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert found == []
