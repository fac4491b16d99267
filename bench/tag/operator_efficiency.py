"""Operator efficiency: tagql's filter / top-k vs a naive one-LM-call-per-row loop, on real BIRD text.

    python -m bench.tag.operator_efficiency                    # exact LM-call counts (counting double, instant)
    python -m bench.tag.operator_efficiency --real --sample 12 # + wall time and accuracy with the local model

Workloads (superhero database):
* filter: 200 heroes (id order) with their publisher, "{publisher_name} is DC Comics itself or one of
  DC Comics' imprints" (hand labels: DC Comics, Wildstorm).
* top-k: the first 40 superpowers, "{power_name} is a power of the mind", k=3 (hand labels below).

Modes: ``naive`` = one unconstrained call per row with the whole prompt in one user message;
``tagql`` = dedupe on referenced columns + one-token grammar + shared system prefix (cold cache);
``tagql_batch8`` = the same packing 8 inputs per call; ``tagql_warm`` = re-run on the persistent cache.
LM-call counts are exact for all rows (they do not depend on the model). With ``--real``, the local
model runs tagql (cold) on the full workload and the naive loop on ``--sample`` rows; naive wall time for
all rows is extrapolated from its measured seconds per call and reported as such.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from bench import common

DB = common.DATA / "bird" / "dev_databases" / "superhero" / "superhero.sqlite"

FILTER = "{publisher_name} is DC Comics itself or one of DC Comics' imprints"
FILTER_TRUE = {"DC Comics", "Wildstorm"}
TOPK = "{power_name} is a power of the mind"
MIND = {"Telepathy", "Intelligence", "Clairvoyance", "Possession", "Danger Sense", "Astral Travel",
        "Telekinesis", "Dimensional Awareness", "Psionic Powers", "Mind Control", "Precognition", "Empathy"}


def load() -> tuple[list[tuple], list[tuple]]:
    con = sqlite3.connect(f"file:{DB}?mode=ro", uri=True)
    heroes = con.execute("SELECT s.superhero_name, COALESCE(p.publisher_name, '') FROM superhero s LEFT JOIN "
                         "publisher p ON s.publisher_id = p.id ORDER BY s.id LIMIT 200").fetchall()
    powers = con.execute("SELECT power_name FROM superpower ORDER BY id LIMIT 40").fetchall()
    con.close()
    return heroes, powers


def counting_llm():
    """A stand-in that answers instantly (labels from the hand sets) and counts calls."""
    from tagql.llm.scripted import ScriptedLLM

    def fn(messages):
        text = messages[-1].content
        if "N: yes" in text:
            claims = re.findall(r"(\d+)\. <statement>(.*?)</statement>", text)
            return "\n".join(f"{n}: {'yes' if c.split(' is ')[0] in FILTER_TRUE else 'no'}" for n, c in claims)
        if "<statement>" in text:
            claim = re.search(r"<statement>(.*?)</statement>", text).group(1)
            return "yes" if claim.split(" is ")[0] in FILTER_TRUE else "no"
        if "Condition" in text:
            return "yes" if re.search(r"publisher_name = (.*)\n", text).group(1) in FILTER_TRUE else "no"
        if "Score each numbered" in text:
            recs = re.findall(r"(\d+)\. <record>(.*?) is a power", text)
            return "\n".join(f"{n}: {8 if r in MIND else 2}" for n, r in recs)
        if "<A>" in text:
            return "A"
        m = re.search(r"<record>(.*?) is a power", text)
        return "8" if m and m.group(1) in MIND else "2"

    return ScriptedLLM(fn)


def run_modes(make_llm_fn, heroes, powers, *, real: bool, sample: int, topk: bool = True) -> dict:
    from tagql.tag.cache import OpCache
    from tagql.tag.naive import naive_filter
    from tagql.tag.operators import SemEngine, SemTable

    res: dict = {}
    truth = [pub in FILTER_TRUE for _, pub in heroes]
    with tempfile.TemporaryDirectory() as tmp:
        for mode, batch in (("tagql", 1), ("tagql_batch8", 8)):
            llm = make_llm_fn()
            cache = OpCache(Path(tmp) / f"{mode}.sqlite")
            eng = SemEngine(llm, cache=cache, batch_size=batch, max_calls=10_000)
            c0 = llm.usage.calls
            t0 = time.perf_counter()
            t = SemTable(["superhero_name", "publisher_name"], heroes, eng)
            kept = {r for r in t.sem_filter(FILTER).rows}
            f_s = time.perf_counter() - t0
            f_calls = llm.usage.calls - c0
            pred = [r in kept for r in heroes]
            res[mode] = {
                "filter": {"rows": len(heroes), "lm_calls": f_calls, "seconds": round(f_s, 2),
                           "accuracy": round(sum(p == y for p, y in zip(pred, truth)) / len(truth), 3)},
            }
            if topk:
                t1 = time.perf_counter()
                top = SemTable(["power_name"], powers, eng).sem_topk(TOPK, 3)
                k_s = time.perf_counter() - t1
                k_calls = llm.usage.calls - c0 - f_calls
                res[mode]["topk"] = {
                    "rows": len(powers), "lm_calls": k_calls, "seconds": round(k_s, 2),
                    "top": [r[0] for r in top.rows],
                    "precision": round(sum(r[0] in MIND for r in top.rows) / max(1, len(top.rows)), 3)}
            if mode == "tagql":  # warm: same cache, a fresh engine
                eng2 = SemEngine(llm, cache=cache)
                c1 = llm.usage.calls
                t2 = time.perf_counter()
                SemTable(["superhero_name", "publisher_name"], heroes, eng2).sem_filter(FILTER)
                if topk:
                    SemTable(["power_name"], powers, eng2).sem_topk(TOPK, 3)
                res["tagql_warm"] = {"lm_calls": llm.usage.calls - c1, "seconds": round(time.perf_counter() - t2, 3)}
    llm = make_llm_fn()
    rows = heroes[:sample] if real else heroes
    t0 = time.perf_counter()
    pred = naive_filter(llm, ["superhero_name", "publisher_name"], rows, FILTER)
    secs = time.perf_counter() - t0
    truth_s = truth[: len(rows)]
    # naive top-k: one scoring call per row (no dedupe, no grammar), i.e. at least len(powers) calls
    res["naive"] = {
        "filter": {"rows": len(heroes), "lm_calls": len(heroes), "measured_rows": len(rows),
                   "seconds_measured": round(secs, 2),
                   "seconds_all_rows_est": round(secs / max(1, len(rows)) * len(heroes), 1),
                   "accuracy_measured": round(sum(p == y for p, y in zip(pred, truth_s)) / len(rows), 3)},
        "topk": {"rows": len(powers), "lm_calls_min": len(powers)},
    }
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--real", action="store_true", help="also run the local model (slow)")
    ap.add_argument("--sample", type=int, default=12, help="rows for the naive loop with the real model")
    ap.add_argument("--real-topk", action="store_true", help="also run top-k with the real model (many calls)")
    ap.add_argument("--json", default=str(common.result_path("tag", "operator_efficiency")))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    heroes, powers = load()
    out = {"counts": run_modes(counting_llm, heroes, powers, real=False, sample=len(heroes))}
    if args.real:
        from tagql.config import load_settings
        from tagql.llm import make_llm

        model = make_llm(load_settings(), backend="local")
        out["model"] = model.name
        out["real"] = run_modes(lambda: model, heroes, powers, real=True, sample=args.sample,
                                topk=args.real_topk)
    print(json.dumps(out, indent=1))
    c = out["counts"]
    print(f"\nfilter over {len(heroes)} rows: naive {c['naive']['filter']['lm_calls']} calls, tagql "
          f"{c['tagql']['filter']['lm_calls']}, batched {c['tagql_batch8']['filter']['lm_calls']}, warm cache "
          f"{c['tagql_warm']['lm_calls']} (filter+topk)")
    run.save(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
