"""Draft policies for prompt-lookup decoding, compared by exact offline replay.

Greedy output does not depend on how drafts are chosen (every drafted token is checked against the
model's argmax), so once the real calls of `tagql ask` are recorded - prompt tokens and output
tokens - any draft policy can be replayed offline: which drafts it proposes, how many tokens of each
the model would accept, how many verify batches of which size it runs. The time of a batch of b
tokens is measured on this machine first (b = 1..16), and a policy's cost is the sum over its
batches. This is how `MIN_DRAFT` and `RECENT_OUTPUTS` in `tagql.llm.lookup` were chosen;
`bench/ask/decoding.py` then times the chosen policy for real.

The questions are asked as `bench/ask/bird.py` asks them: per database, all questions without evidence,
then all with it. Remembered outputs therefore come from other questions only, except that the
evidence pass of a question may find the no-evidence SQL of the same question in memory when fewer
than `RECENT_OUTPUTS` questions lie between them (not with the default --limit 25).

    python -m bench.ask.decoding_policies --start 20 --limit 25

Prints a table and writes bench/results/ask/decoding_policies.json.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from tagql.config import load_settings
from tagql.db import open_database
from tagql.errors import TagqlError
from tagql.knowledge import ScoredStatement, StaticStatements
from tagql.llm import make_llm
from tagql.llm.lookup import RecentOutputs, find_draft, next_draft_length
from tagql.pipeline import TagQL

from bench import common

DATA = common.DATA
DBS = ["student_club", "superhero", "toxicology"]


class Policy:
    """Drafts from the prompt and output so far, plus the last ``recent`` outputs of the same kind of
    call; adaptive lengths never below ``min_draft`` (the shipped rule with these two parameters)."""

    def __init__(self, *, min_draft: int = 1, recent: int = 0, first: int = 4, max_draft: int = 10) -> None:
        self.min_draft, self.recent, self.first, self.max_draft = min_draft, recent, first, max_draft

    def replay(self, prompt: list[int], out: list[int], past: list[int], cost: list[float]) -> float:
        """Decode time of one call; ``past`` is :meth:`RecentOutputs.history` of the earlier calls."""
        hist = np.array(past + prompt + out, dtype=np.int64)
        base, i, total, length = len(past) + len(prompt), 0, 0.0, self.first
        while i < len(out):  # out[i] is chosen and about to be evaluated with a draft after it
            draft = find_draft(hist[: base + i + 1], max_draft=max(length, self.min_draft))[1] if self.max_draft else []
            accepted = 0
            while accepted < len(draft) and i + 1 + accepted < len(out) and draft[accepted] == out[i + 1 + accepted]:
                accepted += 1
            total += cost[min(len(draft) + 1, len(cost)) - 1] + 4.0 * max(0, len(draft) + 1 - len(cost))
            length = next_draft_length(length, len(draft), accepted, self.max_draft, self.min_draft)
            i += 1 + accepted
        return total


POLICIES = {
    "plain": Policy(max_draft=0),
    "prompt (sessions 5-8)": Policy(),
    "prompt, min draft 3": Policy(min_draft=3),
    "recent 5, min draft 3": Policy(min_draft=3, recent=5),
    "recent 20": Policy(recent=20),
    "recent 20, min draft 3 (default)": Policy(min_draft=3, recent=20),
    "recent 20, min draft 4": Policy(min_draft=4, recent=20),
    "recent 50, min draft 3": Policy(min_draft=3, recent=50),
}


def batch_costs(llm, repeats: int = 4) -> list[float]:
    """Milliseconds to evaluate a batch of b = 1..16 tokens after a 1,800-token context."""
    llama = llm._llama
    with llm._lock:
        llm._prefixes.clear(llama)
        llama.reset()
        context = llama.tokenize((common.REPO / "README.md").read_bytes(), add_bos=False)[:1800]
        llama.eval(context)
        base = llama.n_tokens
        extra = llama.tokenize(b" the quick brown fox jumps over the lazy dog and then some more words follow", add_bos=False)
        costs = []
        for b in range(1, 17):
            times = []
            for _ in range(repeats):
                llama.n_tokens = base
                llama._ctx.kv_cache_seq_rm(-1, base, -1)
                t = time.perf_counter()
                llama.eval(extra[:b])
                times.append(time.perf_counter() - t)
            costs.append(1000 * min(times))
        llama.reset()
    return costs


def record(llm, settings, start: int, limit: int, progress: Progress) -> list[dict]:
    """Every LLM call of `ask` on the chosen questions, in bench/ask/bird.py's order."""
    calls: list[dict] = []

    class Recorder:
        def __init__(self) -> None:
            self.first = True
            self.name, self.usage = llm.name, llm.usage

        def complete(self, messages, **kw):
            reply = llm.complete(messages, **kw)
            _, tokens, _ = llm._prompt(messages, kw.get("max_tokens", 256))
            calls.append({"db": db_id, "condition": condition, "kind": "sql" if self.first else "later",
                          "prompt": tokens, "out": llm._tokenize(reply.text)})
            self.first = False
            return reply

    questions = json.loads((DATA / "bird" / "dev.json").read_text())
    task = progress.add_task("recording calls", total=2 * limit * len(DBS))
    for db_id in DBS:
        db = open_database(DATA / "bird" / "dev_databases" / db_id / f"{db_id}.sqlite", settings=settings.db)
        for condition in ("none", "evidence"):
            for q in [q for q in questions if q["db_id"] == db_id][start: start + limit]:
                knowledge = None
                if condition == "evidence" and q.get("evidence"):
                    knowledge = StaticStatements([ScoredStatement(q["evidence"], "", 1.0)])
                try:
                    TagQL(db, Recorder(), settings=settings, knowledge=knowledge).ask(q["question"])
                except TagqlError:
                    pass
                progress.advance(task)
    return calls


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--start", type=int, default=20, help="first question per database (in bird/dev.json order)")
    ap.add_argument("--limit", type=int, default=25, help="questions per database")
    ap.add_argument("--out", default=str(common.result_path("ask", "decoding_policies")))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)

    settings = load_settings()
    llm = make_llm(settings, backend="local")
    llm.recent.keep = 0  # recorded outputs then depend on their prompt only (see docs/configuration.md)
    console = Console()
    with Progress(console=console) as progress:
        calls = record(llm, settings, args.start, args.limit, progress)
    cost = batch_costs(llm)
    console.print("verify batch of b tokens (ms): " + ", ".join(f"{b + 1}: {c:.0f}" for b, c in enumerate(cost)))

    results = {}
    for name, policy in POLICIES.items():
        per_kind: dict[str, list[float]] = {"sql": [], "later": []}
        memory = RecentOutputs(keep=policy.recent)  # the shipped memory, keyed by (database, kind of call)
        kinds: dict[tuple[str, str], list[int]] = {}  # ... as a one-token stand-in for the system prompt
        for c in calls:  # in asking order: memory holds the outputs of earlier calls only
            key = kinds.setdefault((c["db"] if c["kind"] == "sql" else "", c["kind"]), [len(kinds)])
            per_kind[c["kind"]].append(policy.replay(c["prompt"], c["out"], memory.history(key), cost))
            memory.add(key, c["out"])
        results[name] = {k: float(np.mean(v)) for k, v in per_kind.items() if v}
    plain = results["plain"]
    table = Table(title=f"draft policies, offline replay of {len(calls)} recorded calls (decode time per call)")
    for col in ("policy", "SQL ms/call", "SQL speed-up", "later ms/call", "later speed-up"):
        table.add_column(col, justify="right")
    for name, r in results.items():
        table.add_row(name, f"{r['sql']:.0f}", f"{plain['sql'] / r['sql']:.3f}x",
                      f"{r.get('later', 0):.0f}", f"{plain.get('later', 1) / r.get('later', 1):.3f}x")
    console.print(table)
    run.save(args.out, {
        "model": llm.name, "start": args.start, "limit_per_db": args.limit, "calls": len(calls),
        "sql_calls": sum(c["kind"] == "sql" for c in calls), "batch_cost_ms": cost, "results": results,
    })
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
