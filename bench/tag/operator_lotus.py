"""Operator efficiency on 1,000 rows of real text: tagql's LM operators vs a naive loop vs LOTUS.

    bash bench/tag/lotus_env.sh                                  # once: LOTUS in its own venv
    python -m bench.tag.operator_lotus --rows 1000           # full comparison (slow: see docs/benchmarks.md)
    python -m bench.tag.operator_lotus --rows 50             # smoke run, a few minutes
    python -m bench.tag.operator_lotus --scripted            # exact LM-call counts of tagql/naive, no model
    python -m bench.tag.operator_lotus --check-lotus         # LOTUS configured against the server, 2 calls

Data: Spider ``world_1`` (``../shared/data/spider/database/world_1``): ``city`` joined with ``country``,
a seeded random sample (``random.Random(0)``) of ``--rows`` of the 4,079 cities; each row is
``(id, city, country)``. ``--rows 50`` is the first 50 rows of the 1,000-row sample.

Workloads and labels (derived by rule from columns of the same database that no method sees):
* filters (``--filters``, default all four; each is one sem_filter over the same rows, labels by SQL):
  ``europe`` / ``africa`` / ``asia``: ``"{country} is a country in <continent>"``, true iff
  ``country.Continent`` is it (world_1's own assignment, e.g. Russian Federation = Europe, Turkey and
  Cyprus = Asia); ``english``: ``"{country} is a country where English is an official language"``, true
  iff ``countrylanguage`` marks English official there. Accuracy = share of rows labelled correctly
  (also precision/recall of the kept rows); the summary row per method adds calls and seconds over the
  filters and averages their accuracy. One filter's accuracy turns on a few borderline countries (Turkey,
  16 rows, is Asia here), so the target is judged on the mean over the filters.
* top-k ``"{city}, {country} is one of the most populous cities in the world"``, k=10: the truth is
  the k rows with the largest ``city.Population``; precision@k = share of the returned k rows in it.
  ``hit_top50`` = share of the returned rows among the 50 most populous of the sample (a looser check).

Methods, all on the same GGUF model (the tagql default, Q4_0 Qwen2.5-Coder-1.5B, temperature 0):
* ``tagql``: ``SemTable.sem_filter`` / ``sem_topk`` in process: dedupe on the referenced columns,
  one-token grammar (filter: yes/no; top-k: the expected 0-9 score from the digit token probabilities,
  see ``SemTable.sem_topk``), instruction as a shared system prefix, cold cache;
* ``tagql_generated``: the filter as before session 22: each generated yes/no on its own (``split=False``)
  and the cheap-first filter cascade (``tagql.tag.cascade``: the 141 distinct countries are >= 40 inputs);
  ``tagql`` cuts the P(yes) of all inputs (``tagql.tag.verdicts``), which judges every distinct input;
* ``tagql_nocascade``: ``tagql_generated`` without the cascade;
* ``tagql_batch8``: the same with ``batch_size=8`` (8 numbered inputs per call, grammar per line);
* ``tagql_warm``: ``tagql`` re-run on its persistent cache (a fresh engine);
* ``naive``: one unconstrained call per row, the whole prompt in one user message (filter: yes/no;
  top-k: a 0-10 score per row, then sort);
* ``lotus``: LOTUS (``lotus-ai``, in the venv of ``bench/tag/lotus_env.sh``, run by
  ``bench/tag/operator_lotus_worker.py``) against ``python -m llama_cpp.server`` serving the same GGUF
  with the same thread count (``tagql.llm.llama_server.LlamaServer``); LOTUS defaults (its prompts,
  ``sem_topk`` method ``quick``), temperature 0, its cache off, ``--lotus-batch`` concurrent requests
  (the server runs them one at a time), numpy seeded with 0 (its quickselect draws random pivots).

LM calls are requests to the model; wall time is end to end per operator (LOTUS: in its process,
excluding server start-up). Results: printed table + ``bench/results/tag/operator_lotus.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common

DB = common.DATA / "spider" / "database" / "world_1" / "world_1.sqlite"
LOTUS_VENV = Path(os.environ.get("TAGQL_LOTUS_VENV", Path.home() / ".cache" / "tagql" / "venvs" / "lotus"))
WORKER = common.BENCH / "tag" / "operator_lotus_worker.py"  # run by path with the LOTUS venv's python

# name -> (instruction, SQL over the sample's country ``co`` that is true for the rows the filter keeps)
FILTERS: dict[str, tuple[str, str]] = {
    "europe": ("{country} is a country in Europe", "co.Continent = 'Europe'"),
    "africa": ("{country} is a country in Africa", "co.Continent = 'Africa'"),
    "asia": ("{country} is a country in Asia", "co.Continent = 'Asia'"),
    "english": ("{country} is a country where English is an official language",
                "EXISTS (SELECT 1 FROM countrylanguage cl WHERE cl.CountryCode = co.Code "
                "AND cl.Language = 'English' AND cl.IsOfficial = 'T')"),
}
TOPK = "{city}, {country} is one of the most populous cities in the world"
COLUMNS = ["id", "city", "country"]
METHODS = ("tagql", "tagql_generated", "tagql_nocascade", "tagql_batch8", "tagql_warm", "naive", "lotus")
SERVER_ALIAS = "tagql-bench"  # the model name LOTUS asks llama.cpp's server for


# -- data and labels ----------------------------------------------------------------------------------
def load(n: int, seed: int = 0) -> tuple[list[tuple[int, str, str]], dict[int, int]]:
    """(rows, population per id) for the first ``n`` of a seeded 1,000-row sample (more than 1,000 rows:
    a larger sample); the filters' labels: :func:`filter_labels`."""
    con = sqlite3.connect(f"file:{DB}?mode=ro", uri=True)
    allrows = con.execute("SELECT ci.ID, ci.Name, co.Name, ci.Population FROM city ci "
                          "JOIN country co ON ci.CountryCode = co.Code ORDER BY ci.ID").fetchall()
    con.close()
    sample = random.Random(seed).sample(allrows, max(1000, n))[:n]
    return [(r[0], r[1], r[2]) for r in sample], {r[0]: r[3] for r in sample}


def filter_labels(ids: list[int], names: list[str]) -> dict[str, dict[int, bool]]:
    """Per filter of ``names``: the truth for each city id of ``ids`` (SQL over world_1, see FILTERS)."""
    con = sqlite3.connect(f"file:{DB}?mode=ro", uri=True)
    out = {}
    for name in names:
        where = FILTERS[name][1]
        true = {r[0] for r in con.execute(
            f"SELECT ci.ID FROM city ci JOIN country co ON ci.CountryCode = co.Code WHERE {where}")}
        out[name] = {i: i in true for i in ids}
    con.close()
    return out


def filter_metrics(kept: set[int], truth: dict[int, bool]) -> dict[str, Any]:
    tp = sum(1 for i in kept if truth[i])
    pos = sum(truth.values())
    correct = sum((i in kept) == y for i, y in truth.items())
    return {"accuracy": round(correct / len(truth), 3), "kept": len(kept), "true_positives": tp,
            "precision": round(tp / len(kept), 3) if kept else 0.0, "recall": round(tp / pos, 3) if pos else 0.0}


def topk_metrics(ids: list[int], population: dict[int, int], k: int) -> dict[str, Any]:
    order = sorted(population, key=lambda i: -population[i])
    truth, top50 = set(order[:k]), set(order[:50])
    return {"returned": len(ids), "precision_at_k": round(sum(i in truth for i in ids[:k]) / k, 3),
            "hit_top50": round(sum(i in top50 for i in ids[:k]) / max(1, len(ids[:k])), 3),
            "top": ids[:k]}


# -- methods ------------------------------------------------------------------------------------------
def run_tagql(llm: Any, rows: list[tuple], k: int, batch: int, cache_path: Path, ops: list[str],
              cascade: str = "on", filters: tuple[str, ...] = ("europe",), split: bool = True) -> dict[str, Any]:
    from tagql.tag.cache import OpCache
    from tagql.tag.operators import SemEngine, SemTable, stderr_progress

    out: dict[str, Any] = {}
    eng = SemEngine(llm, cache=OpCache(cache_path), batch_size=batch, max_calls=1_000_000,
                    progress=stderr_progress(100), cascade=cascade, split=split)
    table = SemTable(COLUMNS, rows, eng)
    for name in filters if "filter" in ops else ():
        c0, t0 = llm.usage.calls, time.perf_counter()
        kept = table.sem_filter(FILTERS[name][0])
        out.setdefault("filters", {})[name] = {
            "lm_calls": llm.usage.calls - c0, "seconds": round(time.perf_counter() - t0, 2),
            "distinct_inputs": eng.stats.per_operator[-1]["distinct_inputs"], "ids": [r[0] for r in kept.rows]}
    if "topk" in ops:
        c0, t0 = llm.usage.calls, time.perf_counter()
        top = table.sem_topk(TOPK, k)
        out["topk"] = {"lm_calls": llm.usage.calls - c0, "seconds": round(time.perf_counter() - t0, 2),
                       "distinct_inputs": eng.stats.per_operator[-1]["distinct_inputs"],
                       "ids": [r[0] for r in top.rows]}
    return out


def run_naive(llm: Any, rows: list[tuple], k: int, ops: list[str], filters: tuple[str, ...] = ("europe",)
              ) -> dict[str, Any]:
    from tagql.tag.naive import naive_filter, naive_topk
    from tagql.tag.operators import stderr_progress

    out: dict[str, Any] = {}
    shown = [(city, country) for _, city, country in rows]  # the row as the LM sees it (no id)
    for name in filters if "filter" in ops else ():
        c0, t0 = llm.usage.calls, time.perf_counter()
        keep = naive_filter(llm, COLUMNS[1:], shown, FILTERS[name][0], progress=stderr_progress(100))
        out.setdefault("filters", {})[name] = {"lm_calls": llm.usage.calls - c0,
                                               "seconds": round(time.perf_counter() - t0, 2),
                                               "ids": [r[0] for r, y in zip(rows, keep) if y]}
    if "topk" in ops:
        c0, t0 = llm.usage.calls, time.perf_counter()
        top = naive_topk(llm, COLUMNS[1:], shown, TOPK, k, progress=stderr_progress(100))
        out["topk"] = {"lm_calls": llm.usage.calls - c0, "seconds": round(time.perf_counter() - t0, 2),
                       "ids": [rows[i][0] for i in top]}
    return out


def lotus_python() -> Path:
    py = LOTUS_VENV / "bin" / "python"
    if not py.exists():
        raise SystemExit(f"no LOTUS venv at {LOTUS_VENV}: run bash bench/tag/lotus_env.sh first")
    return py


def lotus_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def run_lotus(model_path: Path, rows: list[tuple], k: int, ops: list[str], batch: int,
              budget_s: float | None = None, filters: tuple[str, ...] = ("europe",),
              n_threads: int | None = None) -> dict[str, Any]:
    py = lotus_python()
    job_ops = [{"op": "filter", "instruction": FILTERS[name][0]} for name in filters] if "filter" in ops else []
    job_ops += [{"op": "topk", "instruction": TOPK, "k": k}] if "topk" in ops else []
    from tagql.llm.llama_server import LlamaServer

    with LlamaServer(model_path, alias=SERVER_ALIAS, n_threads=n_threads) as server, \
            tempfile.TemporaryDirectory() as tmp:
        job = {"base_url": server.base_url, "model": server.alias, "columns": COLUMNS,
               "rows": [list(r) for r in rows], "ops": job_ops, "max_batch_size": batch, "seed": 0,
               "budget_s": budget_s}
        (Path(tmp) / "job.json").write_text(json.dumps(job))
        # LOTUS's progress bars go to this process's stderr
        proc = subprocess.run([str(py), str(WORKER), str(Path(tmp) / "job.json"), str(Path(tmp) / "out.json")],
                              env=lotus_env(), check=False)
        if proc.returncode != 0:
            raise SystemExit("the LOTUS worker failed (its error is above)")
        res = json.loads((Path(tmp) / "out.json").read_text())
    out: dict[str, Any] = {"versions": {"lotus-ai": res["lotus_version"], "litellm": res["litellm_version"]}}
    by_instruction = {FILTERS[name][0]: name for name in filters}
    for op in res["ops"]:
        got = {key: op[key] for key in ("lm_calls", "seconds", "ids", "prompt_tokens", "completion_tokens",
                                        "flattened_messages", "finished")}
        if op["op"] == "filter":
            out.setdefault("filters", {})[by_instruction[op["instruction"]]] = got
        else:
            out[op["op"]] = got
    return out


def check_lotus(model_path: Path) -> dict[str, Any]:
    from tagql.llm.llama_server import LlamaServer

    with LlamaServer(model_path, alias=SERVER_ALIAS) as server:
        proc = subprocess.run([str(lotus_python()), str(WORKER), "--check", server.base_url, server.alias],
                              env=lotus_env(), capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"LOTUS check failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- scripted stand-in (exact call counts, no model) -----------------------------------------------------
def scripted_llm(truth: dict[str, bool], population: dict[str, int]) -> Any:
    """Answers from the labels instantly (a perfect model): call counts are exact, accuracy is 1 by design.
    ``truth``: each filled-in filter claim ("France is a country in Europe") and whether it holds. Like the
    local model it offers digit probabilities (a surer "9" for a bigger city)."""
    from tagql.llm.scripted import ScriptedLLM

    ranked = [name for name, _ in sorted(population.items(), key=lambda x: -x[1])]
    big = set(ranked[:50])
    sure = {name: 1 - i / (len(ranked) + 1) for i, name in enumerate(ranked)}

    def probs(messages: list, slots: int) -> list[list[float]]:
        names = [r.split(" is one of")[0] for r in re.findall(r"<record>(.*?)</record>", messages[-1].content)]
        assert len(names) == slots
        return [[0.0] * 8 + [1 - sure[n], sure[n]] for n in names]

    def score(item: str) -> int:
        return 9 if item.split(" is one of")[0] in big else 2

    def fn(messages: list) -> str:
        text = messages[-1].content
        if "N: yes" in text:
            claims = re.findall(r"(\d+)\. <statement>(.*?)</statement>", text)
            return "\n".join(f"{n}: {'yes' if truth[c] else 'no'}" for n, c in claims)
        if "<statement>" in text:
            return "yes" if truth[re.search(r"<statement>(.*?)</statement>", text).group(1)] else "no"
        if "Score each numbered" in text:
            return "\n".join(f"{n}: {score(r)}" for n, r in re.findall(r"(\d+)\. <record>(.*?)</record>", text))
        if "<A>" in text:
            return "A"
        if "<record>" in text:
            return str(score(re.search(r"<record>(.*?)</record>", text).group(1)))
        if text.startswith("Row:"):
            if "Is the condition true" in text:
                return "yes" if truth[re.search(r"Condition: (.*)\n", text).group(1)] else "no"
            return str(score(re.search(r"Criterion: (.*?) is one of", text).group(1) + ""))
        raise AssertionError(f"unexpected prompt {text[:80]!r}")

    return ScriptedLLM(fn, digit_probs=probs)


# -- main ---------------------------------------------------------------------------------------------
def summarize(results: dict[str, Any], labels: dict[str, dict[int, bool]], population: dict[int, int],
              k: int) -> None:
    """Metrics in place of the row ids each method returned; ``filter`` becomes the summary over the
    filters it ran (calls and seconds added up, accuracy averaged; unfinished if any filter was)."""
    for res in results.values():
        for name, r in res.get("filters", {}).items():
            ids = r.pop("ids", None)
            if ids is not None:  # None: stopped by its time budget, no answer
                r.update(filter_metrics(set(ids), labels[name]))
        done = res.get("filters", {})
        if done:
            accs = [r["accuracy"] for r in done.values() if "accuracy" in r]
            res["filter"] = {"filters": list(done), "lm_calls": sum(r["lm_calls"] for r in done.values()),
                             "seconds": round(sum(r["seconds"] for r in done.values()), 2)}
            if len(accs) == len(done):
                res["filter"]["accuracy"] = round(sum(accs) / len(accs), 3)
            if any(r.get("finished") is False for r in done.values()):
                res["filter"]["finished"] = False
        if "topk" in res and "ids" in res["topk"]:
            ids = res["topk"].pop("ids")
            if ids is not None:
                res["topk"].update(topk_metrics(ids, population, k))


def table(results: dict[str, Any], n: int, k: int) -> str:
    head = (f"{'method':<14} | {'filter calls':>12} {'time s':>8} {'acc':>6} | "
            f"{'top-k calls':>11} {'time s':>8} {'P@' + str(k):>6} {'top50':>6}")
    lines = [head]
    lines.append("-" * len(lines[0]))
    def more(r: dict, key: str) -> str:  # an operator stopped by its budget used at least this much
        return f">{r[key]}" if r.get("finished") is False else str(r.get(key, ""))

    for m, res in results.items():
        f, t = res.get("filter", {}), res.get("topk", {})
        lines.append(f"{m:<14} | {more(f, 'lm_calls'):>12} {more(f, 'seconds'):>8} {f.get('accuracy', '-'):>6} | "
                     f"{more(t, 'lm_calls'):>11} {more(t, 'seconds'):>8} {t.get('precision_at_k', '-'):>6} "
                     f"{t.get('hit_top50', '-'):>6}")
    names = list(dict.fromkeys(name for res in results.values() for name in res.get("filters", {})))
    if names:  # each filter's accuracy (the summary above averages them)
        lines += ["", f"{'filter accuracy':<14} | " + " ".join(f"{name:>8}" for name in names)]
        for m, res in results.items():
            fs = res.get("filters", {})
            lines.append(f"{m:<14} | " + " ".join(f"{fs.get(name, {}).get('accuracy', '-'):>8}" for name in names))
    return (f"{n} rows of world_1 cities, k={k}; filter = {len(names) or 1} filter(s): calls and seconds summed, "
            f"accuracy averaged ('>': stopped by its time budget without an answer)\n" + "\n".join(lines))


def targets(results: dict[str, Any]) -> dict[str, Any]:
    """The issue's target per operator: tagql >= 3x fewer LM calls and >= 2x faster than LOTUS at equal
    or better accuracy (tagql = the better of tagql / tagql_batch8 by wall time)."""
    if "lotus" not in results:
        return {}
    out = {}
    for op, acc in (("filter", "accuracy"), ("topk", "precision_at_k")):
        lo = results["lotus"].get(op)
        cands = [(m, results[m][op]) for m in ("tagql", "tagql_batch8") if op in results.get(m, {})]
        if not lo or not cands:
            continue
        m, best = min(cands, key=lambda c: c[1]["seconds"])
        finished = lo.get("finished", True)
        # LOTUS stopped by its budget: its calls and time are lower bounds and it gave no answer (accuracy 0)
        out[op] = {"tagql_method": m, "calls_ratio": round(lo["lm_calls"] / max(1, best["lm_calls"]), 2),
                   "speedup": round(lo["seconds"] / max(1e-9, best["seconds"]), 2),
                   "accuracy_tagql": best[acc], "accuracy_lotus": lo.get(acc), "lotus_finished": finished}
        if op == "filter":  # per filter: is tagql at least as accurate as LOTUS there?
            mine, theirs = results[m].get("filters", {}), results["lotus"].get("filters", {})
            out[op]["filters_at_least_lotus"] = {
                name: mine[name].get("accuracy", 0) >= theirs[name].get("accuracy", 0)
                for name in mine if name in theirs}
        if not finished:
            out[op]["note"] = "LOTUS stopped by its time budget: ratios are lower bounds, no LOTUS answer"
        out[op]["met"] = (out[op]["calls_ratio"] >= 3 and out[op]["speedup"] >= 2
                          and best[acc] >= (lo.get(acc) or 0.0))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--methods", default=",".join(METHODS), help=f"comma list of {', '.join(METHODS)}")
    ap.add_argument("--ops", default="filter,topk")
    ap.add_argument("--filters", default=",".join(FILTERS), help=f"comma list of {', '.join(FILTERS)}")
    ap.add_argument("--lotus-batch", type=int, default=4, help="LOTUS concurrent requests (max_batch_size)")
    ap.add_argument("--lotus-budget-s", type=float, default=1800,
                    help="stop a LOTUS operator still running after this many seconds (checked before each of its "
                         "request batches; 0: no limit). Its sem_topk can need ~n^2/2 comparisons when the model "
                         "answers every comparison the same way")
    ap.add_argument("--resume", action="store_true",
                    help="reuse the methods already in the .partial.json of an earlier run with the same --rows")
    ap.add_argument("--scripted", action="store_true", help="a perfect scripted LM: exact call counts, no model")
    ap.add_argument("--check-lotus", action="store_true", help="only check LOTUS against the llama.cpp server")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    methods = [m for m in args.methods.split(",") if m]
    ops = [o for o in args.ops.split(",") if o]
    unknown = set(methods) - set(METHODS)
    if unknown:
        ap.error(f"unknown method(s): {', '.join(sorted(unknown))}")
    filters = tuple(f for f in args.filters.split(",") if f)
    if set(filters) - set(FILTERS) or not filters:
        ap.error(f"--filters: choose from {', '.join(FILTERS)}")

    if args.check_lotus:
        from tagql.config import load_settings
        from tagql.llm import make_llm

        print(json.dumps(check_lotus(make_llm(load_settings(), backend="local").path)))
        return 0

    rows, population = load(args.rows)
    labels = filter_labels([r[0] for r in rows], list(filters))
    out: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": len(rows), "k": args.k,
        "filters": {name: {"instruction": FILTERS[name][0], "true_rows": sum(labels[name].values())}
                    for name in filters},
        "topk": TOPK, "distinct_countries": len({r[2] for r in rows}), "load_avg_start": os.getloadavg()[0],
    }
    results: dict[str, Any] = {}
    if args.scripted:
        name_pop = {f"{city}, {country}": population[rid] for rid, city, country in rows}
        from tagql.tag.operators import fill

        truth = {fill(FILTERS[name][0], {"country": country}): labels[name][rid]
                 for name in filters for rid, _, country in rows}
        make = lambda: scripted_llm(truth, name_pop)
        out["model"] = "scripted (labels; accuracy 1 by construction)"
        methods = [m for m in methods if m != "lotus"]
    else:
        from tagql.config import load_settings
        from tagql.llm import make_llm

        model = make_llm(load_settings(), backend="local")
        make = lambda: model
        out["n_threads"] = getattr(model, "n_threads", None)
        out["model"] = model.name
        out["model_path"] = str(model.path)
    default = "operator_lotus_scripted" if args.scripted else "operator_lotus"
    path = Path(args.out) if args.out else common.result_path("tag", default)
    partial = path.with_suffix(".partial.json")
    if args.resume and partial.exists():
        old = json.loads(partial.read_text())
        if old.get("rows") == len(rows):
            results.update({m: r for m, r in old.get("results_so_far", {}).items() if m in methods})
            print(f"reusing {', '.join(results) or 'nothing'} from {partial}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        for m in methods:
            if m in results:
                continue
            print(f"== {m}", file=sys.stderr, flush=True)
            llm = make()
            if m in ("tagql", "tagql_generated", "tagql_nocascade", "tagql_batch8"):
                results[m] = run_tagql(llm, rows, args.k, 8 if m == "tagql_batch8" else 1, Path(tmp) / f"{m}.sqlite", ops,
                                       cascade="off" if m == "tagql_nocascade" else "on", filters=filters,
                                       split=m == "tagql")
            elif m == "tagql_warm":
                if "tagql" not in results:  # warm needs the cold run's cache
                    run_tagql(llm, rows, args.k, 1, Path(tmp) / "tagql.sqlite", ops, filters=filters)
                results[m] = run_tagql(llm, rows, args.k, 1, Path(tmp) / "tagql.sqlite", ops, filters=filters)
            elif m == "naive":
                results[m] = run_naive(llm, rows, args.k, ops, filters=filters)
            elif m == "lotus":
                results[m] = run_lotus(Path(out["model_path"]), rows, args.k, ops, args.lotus_batch,
                                       args.lotus_budget_s or None, filters=filters, n_threads=out.get("n_threads"))
            partial.write_text(json.dumps({**out, "results_so_far": results}, indent=1))  # a long run can stop
    summarize(results, labels, population, args.k)
    out["results"] = results
    out["targets"] = targets(results)
    out["load_avg_end"] = os.getloadavg()[0]
    print(table(results, len(rows), args.k))
    if out["targets"]:
        print(json.dumps(out["targets"], indent=1))
    run.save(path, out)
    partial.unlink(missing_ok=True)
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
