"""LOTUS side of bench/tag/operator_lotus.py. Runs INSIDE the LOTUS venv (bench/tag/lotus_env.sh), never in
tagql's environment: it imports nothing from tagql.

    $LOTUS_PY bench/tag/operator_lotus_worker.py JOB.json OUT.json
    $LOTUS_PY bench/tag/operator_lotus_worker.py --check http://127.0.0.1:PORT/v1 MODEL_ALIAS

JOB.json: {"base_url", "model", "columns": [...], "rows": [[...], ...], "ops": [{"op": "filter"|"topk",
"instruction", "k"}], "max_batch_size", "seed", "budget_s"}. An operator still running after
``budget_s`` seconds is stopped before its next request and reported with ``finished: false``,
``ids: null`` and the calls and time it used. OUT.json: per op, the result (row ids kept / ranked), LM calls
(counted at litellm's batch_completion, the one place LOTUS sends requests), tokens and wall time.
LOTUS runs with its defaults (prompts, max_tokens, sem_topk method "quick") except temperature 0 and
its cache off, so every call reaches the server.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch of litellm's price list
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def flatten(message: dict) -> dict:
    """LOTUS sends some user messages (e.g. sem_topk's comparisons) as a list of text parts; llama.cpp's
    OpenAI-compatible server fails on that with the Qwen chat template ("can only concatenate str (not
    \"list\") to str"). Join the text parts: the same text, in the same order, as one string."""
    content = message.get("content")
    if not isinstance(content, list):
        return message
    if any(p.get("type") != "text" for p in content):
        raise SystemExit("a non-text message part: this benchmark has text only")
    return {**message, "content": "".join(p["text"] for p in content)}


class BudgetExceeded(Exception):
    """An operator ran past its time budget (raised before the next batch of requests is sent)."""


class CallCounter:
    """Wraps litellm.batch_completion as LOTUS imported it: counts requests (one per message list),
    flattens text-part lists (see ``flatten``) and stops an operator that runs past ``deadline``
    (time.perf_counter() value; None: no limit)."""

    def __init__(self) -> None:
        import lotus.models.lm as lm_mod

        self.calls = 0
        self.flattened = 0
        self.deadline: float | None = None
        self._mod = lm_mod
        self._orig = lm_mod.batch_completion

        def counted(model, messages, *a, **kw):
            if self.deadline is not None and time.perf_counter() > self.deadline:
                raise BudgetExceeded
            self.calls += len(messages)
            flat = [[flatten(m) for m in msgs] for msgs in messages]
            self.flattened += sum(f != m for fl, ms in zip(flat, messages) for f, m in zip(fl, ms))
            return self._orig(model, flat, *a, **kw)

        lm_mod.batch_completion = counted


def make_lm(base_url: str, model: str, max_batch_size: int):
    import warnings

    import litellm
    import lotus
    from lotus.models import LM

    # a local model has no price: register it at 0 (else litellm looks it up and logs on every call)
    litellm.suppress_debug_info = True
    litellm.register_model({f"openai/{model}": {"input_cost_per_token": 0.0, "output_cost_per_token": 0.0,
                                                 "litellm_provider": "openai", "mode": "chat"}})
    warnings.filterwarnings("ignore", message="No pricing information")
    lm = LM(model=f"openai/{model}", api_base=base_url, api_key="not-needed", temperature=0.0,
            max_batch_size=max_batch_size)
    lotus.settings.configure(lm=lm, enable_cache=False)
    return lm


def run(job: dict) -> dict:
    import numpy as np
    import pandas as pd

    np.random.seed(int(job.get("seed", 0)))  # sem_topk "quick" picks random pivots (np.random)

    counter = CallCounter()
    lm = make_lm(job["base_url"], job["model"], int(job.get("max_batch_size", 4)))
    df = pd.DataFrame(job["rows"], columns=job["columns"])
    out: dict = {"lotus_version": _version("lotus-ai"), "litellm_version": _version("litellm"), "ops": []}
    for op in job["ops"]:
        c0 = counter.calls
        u0 = lm.stats.physical_usage.prompt_tokens, lm.stats.physical_usage.completion_tokens
        t0 = time.perf_counter()
        budget = job.get("budget_s")
        counter.deadline = t0 + float(budget) if budget else None
        finished = True
        try:
            if op["op"] == "filter":
                res = df.sem_filter(op["instruction"])
            elif op["op"] == "topk":
                res = df.sem_topk(op["instruction"], K=int(op["k"]))
            else:
                raise SystemExit(f"unknown op {op['op']!r}")
            ids = [int(x) for x in res[job["columns"][0]].tolist()]
        except BudgetExceeded:
            finished, ids = False, None
            print(f"\n{op['op']}: stopped after its budget of {budget} s ({counter.calls - c0} LM calls)",
                  file=sys.stderr, flush=True)
        counter.deadline = None
        out["ops"].append({
            "op": op["op"], "instruction": op["instruction"], "ids": ids, "finished": finished,
            "lm_calls": counter.calls - c0, "seconds": round(time.perf_counter() - t0, 2),
            "flattened_messages": counter.flattened,
            "prompt_tokens": lm.stats.physical_usage.prompt_tokens - u0[0],
            "completion_tokens": lm.stats.physical_usage.completion_tokens - u0[1],
        })
    return out


def check(base_url: str, model: str) -> dict:
    """Configure LOTUS against the server and run one tiny filter (2 calls)."""
    import pandas as pd

    counter = CallCounter()
    make_lm(base_url, model, 2)
    df = pd.DataFrame({"country": ["France", "Peru"]})
    kept = df.sem_filter("{country} is a country in Europe")["country"].tolist()
    return {"lotus_version": _version("lotus-ai"), "kept": kept, "lm_calls": counter.calls}


def _version(dist: str) -> str:
    import importlib.metadata as md

    return md.version(dist)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--check"]:
        print(json.dumps(check(argv[1], argv[2])))
        return 0
    with open(argv[0]) as f:
        job = json.load(f)
    result = run(job)
    with open(argv[1], "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
