"""One llama.cpp server vs a pool of two, same LM operators, same inputs (issue 37 item 3).

    flock /work/wt/llm.lock nice -n 10 python -m bench.tag.server_pool            # 0.5B model, 50 countries

Starts llama.cpp's OpenAI-compatible server (``python -m llama_cpp.server``, :class:`tagql.llm.llama_server.
LlamaServer`) on loopback with ONE thread, then a second one, and runs the same operators over the 50 distinct
country names of ``bench/tag/operator_scale.py``, each pass with a fresh in-memory operator cache:

* filter ``{country} is a country in Europe`` (P(yes) from the first token's log-probabilities, split verdicts);
* map ``the continent of {country}`` (a few generated tokens).

Pass 1 talks to one server (:class:`~tagql.llm.openai_compat.OpenAICompatLLM`, one request at a time); pass 2
to both through :class:`~tagql.llm.pool.PooledOpenAILLM` (``concurrency=1`` per endpoint, so the operators run
two calls at once). Both servers answer one warm-up claim first (their shared system prompt evaluated).
The verdicts and the map's values of the two passes must be equal (asserted); the figure is the throughput
ratio (LM calls per second, pool / one server). On a 2-core machine nothing else may run meanwhile: take the lock.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from bench import common
from bench.tag.operator_scale import NAMES

FILTER = "{country} is a country in Europe"
MAP = "the continent of {country}"


def run_pass(llm: Any) -> dict[str, Any]:
    from tagql.llm.base import parallel_calls
    from tagql.tag.cache import OpCache
    from tagql.tag.operators import SemEngine, SemTable

    engine = SemEngine(llm, cache=OpCache(None), cascade="off", max_calls=1000,
                       concurrency=parallel_calls(llm))
    table = SemTable(["country"], [(c,) for c in NAMES], engine)
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    kept = table.sem_filter(FILTER)
    out["filter_s"] = round(time.perf_counter() - t0, 2)
    out["filter_calls"] = engine.stats.lm_calls
    out["kept"] = [r[0] for r in kept.rows]
    # each input's P(yes) as the endpoint's log-probabilities gave it (what the verdicts were cut from)
    out["p_yes"] = [float(engine.cache.get(engine._key("filter_p", FILTER, engine.fill(FILTER, {"country": c})))
                          or "nan") for c in NAMES]
    t1 = time.perf_counter()
    mapped = table.sem_map(MAP, "continent", max_tokens=8)
    out["map_s"] = round(time.perf_counter() - t1, 2)
    out["map_calls"] = engine.stats.lm_calls - out["filter_calls"]
    out["continents"] = [r[1] for r in mapped.rows]
    out["seconds"] = round(time.perf_counter() - t0, 2)
    out["lm_calls"] = engine.stats.lm_calls
    out["calls_per_s"] = round(out["lm_calls"] / out["seconds"], 3)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-0.5b", help="a model pack name or a GGUF path")
    ap.add_argument("--threads", type=int, default=1, help="threads per server")
    ap.add_argument("--json", default=str(common.result_path("tag", "server_pool")))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)

    from tagql.config import load_settings
    from tagql.llm import user
    from tagql.llm.llama_server import LlamaServer
    from tagql.llm.model_pack import resolve_model_path
    from tagql.llm.openai_compat import OpenAICompatLLM
    from tagql.llm.pool import PooledOpenAILLM
    from tagql.tag.operators import judge_messages

    model = Path(args.model) if Path(args.model).exists() else resolve_model_path(args.model, load_settings().cache_dir)

    def warm(url: str) -> None:
        llm = OpenAICompatLLM(url, "m")
        llm.complete(judge_messages("Atlantis is a country in Europe"), max_tokens=1)
        llm.complete([user("warm up")], max_tokens=1)

    with LlamaServer(model, alias="m", n_ctx=2048, n_threads=args.threads) as a:
        warm(a.base_url)
        one = run_pass(OpenAICompatLLM(a.base_url, "m"))
        print(f"one server : {one['lm_calls']} calls in {one['seconds']} s ({one['calls_per_s']} calls/s; "
              f"filter {one['filter_s']} s, map {one['map_s']} s)", flush=True)
        with LlamaServer(model, alias="m", n_ctx=2048, n_threads=args.threads) as b:
            warm(b.base_url)
            pool = PooledOpenAILLM([a.base_url, b.base_url], "m", concurrency=1)
            two = run_pass(pool)
            two["served"] = [s["served"] for s in pool.status()]
            two["peak_in_flight"] = pool.peak_in_flight
    print(f"two servers: {two['lm_calls']} calls in {two['seconds']} s ({two['calls_per_s']} calls/s; "
          f"filter {two['filter_s']} s, map {two['map_s']} s; served {two['served']})")
    same_verdicts = one["kept"] == two["kept"]
    p_diff = max(abs(x - y) for x, y in zip(one["p_yes"], two["p_yes"]))
    same_map = one["continents"] == two["continents"]
    ratio = round(two["calls_per_s"] / one["calls_per_s"], 2)
    print("\n| servers | threads each | LM calls | seconds | calls/s | filter s | map s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n, r in ((1, one), (2, two)):
        print(f"| {n} | {args.threads} | {r['lm_calls']} | {r['seconds']} | {r['calls_per_s']} | {r['filter_s']} | "
              f"{r['map_s']} |")
    print(f"\nthroughput ratio {ratio}x; same verdicts: {same_verdicts} ({len(one['kept'])} kept); "
          f"largest P(yes) difference {p_diff:.2g}; same map values: {same_map}")
    out = run.save(args.json, {"model": str(model), "threads_per_server": args.threads, "inputs": len(NAMES),
                               "one_server": one, "two_servers": two, "throughput_ratio": ratio,
                               "same_verdicts": same_verdicts, "max_p_yes_difference": p_diff,
                               "same_map_values": same_map})
    print(f"wrote {out}")
    assert same_verdicts, (one["kept"], two["kept"])
    assert same_map, "the map's values differ between one server and two"
    return 0


if __name__ == "__main__":
    sys.exit(main())
