"""Plain greedy decoding vs prompt-lookup decoding on the LLM calls `tagql ask` really makes.

Asks the first N BIRD dev questions of each database once (with the dataset's evidence), records
every LLM call (SQL generation, repair, answer), then replays each call, in order, with each decoder
from the same starting state (system prefix cached, nothing else), side by side:

- ``plain``: one token per step;
- ``prompt``: drafts from the prompt and the output so far, draft lengths down to 1 (session 5-8
  default);
- ``recent``: drafts also from the outputs of the *earlier* calls under the same system prompt, and
  never shorter than ``MIN_DRAFT`` (the default since session 9).

Reports time per call, tokens per second, the speed-up ratio and how often the outputs are
identical (greedy verification should make them equal, up to floating-point ties).

    python -m bench.ask.decoding --limit 5

Prints a table and writes bench/results/ask/decoding.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from tagql.config import load_settings
from tagql.db import open_database
from tagql.errors import TagqlError
from tagql.knowledge import ScoredStatement, StaticStatements
from tagql.llm import make_llm
from tagql.llm.lookup import MIN_DRAFT, RecentOutputs
from tagql.pipeline import TagQL

from bench import common

DATA = common.DATA
DBS = ["student_club", "superhero", "toxicology"]
MODES = ("plain", "prompt", "recent")


class Recorder:
    """Passes calls through to the real model and keeps their arguments for the replay."""

    def __init__(self, llm) -> None:
        self.llm, self.calls = llm, []
        self.name, self.usage = llm.name, llm.usage

    def complete(self, messages, **kw):
        self.calls.append((messages, kw))
        return self.llm.complete(messages, **kw)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=5, help="first N questions per database")
    ap.add_argument("--model", default="", help="model name or GGUF path (default: the configured one)")
    ap.add_argument("--out", default=str(common.result_path("ask", "decoding")))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)

    settings = load_settings()
    settings.llm.model = args.model or settings.llm.model
    llm = make_llm(settings, backend="local")
    questions = json.loads((DATA / "bird" / "dev.json").read_text())
    console = Console()
    calls = []
    with Progress(console=console) as progress:
        task = progress.add_task("recording calls", total=args.limit * len(DBS))
        for db_id in DBS:
            db = open_database(DATA / "bird" / "dev_databases" / db_id / f"{db_id}.sqlite", settings=settings.db)
            for q in [q for q in questions if q["db_id"] == db_id][: args.limit]:
                rec = Recorder(llm)
                knowledge = StaticStatements([ScoredStatement(q["evidence"], "", 1.0)]) if q.get("evidence") else None
                try:
                    TagQL(db, rec, settings=settings, knowledge=knowledge).ask(q["question"])
                except TagqlError:
                    pass
                calls += [(db_id, i, m, kw) for i, (m, kw) in enumerate(rec.calls)]
                progress.advance(task)

        records = []
        task = progress.add_task("replaying", total=len(calls))
        memory = RecentOutputs()  # the replayed calls' outputs, for the ``recent`` mode only
        for db_id, i, messages, kw in calls:
            rec = {"db": db_id, "kind": "sql" if i == 0 else "later"}
            for mode in MODES:
                llm.lookup_decoding = mode != "plain"
                llm.recent = memory if mode == "recent" else RecentOutputs(keep=0)
                llm.min_draft = MIN_DRAFT if mode == "recent" else 1
                _rewind_to_system_prefix(llm, messages)
                before = (llm.lookup.drafted, llm.lookup.accepted)
                llm.lookup.trace = []
                start = time.perf_counter()
                out = llm.complete(messages, **kw)
                rec[mode] = {"s": time.perf_counter() - start, "tokens": out.completion_tokens, "text": out.text}
                if mode != "plain":
                    rec[mode].update(drafted=llm.lookup.drafted - before[0], accepted=llm.lookup.accepted - before[1],
                                     drafts=llm.lookup.trace)  # (matched n-gram, drafted, accepted) per draft
                llm.lookup.trace = None
            records.append(rec)
            progress.advance(task)
    llm.lookup_decoding, llm.recent, llm.min_draft = True, RecentOutputs(), MIN_DRAFT

    table = Table(title="decoding: plain greedy vs prompt lookup, without and with recent outputs (same calls, same model)")
    for col in ("calls", "plain s/call", "prompt s/call", "recent s/call", "prompt speed-up", "recent speed-up",
                "plain tok/s", "recent tok/s", "accepted/drafted prompt", "recent", "same output"):
        table.add_column(col, justify="right")
    summary = {}
    for kind in ("sql", "later", "all"):
        rs = [r for r in records if kind == "all" or r["kind"] == kind]
        if not rs:
            continue
        secs = {m: sum(r[m]["s"] for r in rs) for m in MODES}
        s = {"calls": len(rs), "plain_tok_s": sum(r["plain"]["tokens"] for r in rs) / secs["plain"]}
        for m in MODES:
            s[f"{m}_s_per_call"] = secs[m] / len(rs)
        for m in MODES[1:]:
            s[f"{m}_speedup"] = secs["plain"] / secs[m]
            s[f"{m}_median_call_speedup"] = statistics.median(r["plain"]["s"] / r[m]["s"] for r in rs)
            s[f"{m}_tok_s"] = sum(r[m]["tokens"] for r in rs) / secs[m]
            s[f"{m}_acceptance"] = sum(r[m]["accepted"] for r in rs) / max(1, sum(r[m]["drafted"] for r in rs))
            s[f"{m}_same_output"] = sum(r["plain"]["text"] == r[m]["text"] for r in rs) / len(rs)
        summary[kind] = s
        table.add_row(f"{kind} ({s['calls']})", *(f"{s[f'{m}_s_per_call']:.2f}" for m in MODES),
                      f"{s['prompt_speedup']:.2f}x", f"{s['recent_speedup']:.2f}x", f"{s['plain_tok_s']:.1f}",
                      f"{s['recent_tok_s']:.1f}", f"{s['prompt_acceptance']:.2f}", f"{s['recent_acceptance']:.2f}",
                      f"{min(s['prompt_same_output'], s['recent_same_output']):.0%}")
    console.print(table)
    by_n = Table(title="drafts with recent outputs, by matched n-gram length")
    for col in ("kind", "n-gram", "drafts", "first token accepted", "mean accepted"):
        by_n.add_column(col, justify="right")
    for kind in ("sql", "later"):
        drafts = [d for r in records if r["kind"] == kind for d in r["recent"]["drafts"]]
        for n in sorted({d[0] for d in drafts}):
            ds = [d for d in drafts if d[0] == n]
            by_n.add_row(kind, str(n), str(len(ds)), f"{sum(d[2] > 0 for d in ds) / len(ds):.0%}",
                         f"{sum(d[2] for d in ds) / len(ds):.2f}")
    console.print(by_n)
    run.save(args.out, {"model": llm.name, "limit_per_db": args.limit, "summary": summary, "records": records})
    console.print(f"wrote {args.out}")


def _rewind_to_system_prefix(llm, messages) -> None:
    """Start both replays from the same state: the cached system prefix and nothing after it."""
    head = llm._prefix_formatter(messages=[{"role": m.role, "content": m.content} for m in messages[:1]]).prompt
    llm._prefixes.ensure(llm._llama, llm._tokenize(head))
    llm._llama.n_tokens = min(llm._llama.n_tokens, len(llm._tokenize(head)))


if __name__ == "__main__":
    main()
