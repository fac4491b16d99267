"""What every benchmark shares: where the shared data sets are, where results go, and how a result file
records the run that produced it (command line, git commit, host, date).

    from bench import common

    DATA = common.DATA                                    # $TAGQL_SHARED_DATA or ../shared/data
    run = common.Run(__spec__, argv)                      # at the start of main(argv)
    run.save(common.result_path("routing", "spider"), results)   # -> bench/results/routing/spider.json
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Hashable, Sequence
from datetime import datetime, timezone
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
RESULTS = BENCH / "results"
# BIRD, Spider, Spider-Syn, TAG-Bench and the domain-knowledge statements; never copied into the repository
DATA = Path(os.environ.get("TAGQL_SHARED_DATA") or REPO.parent / "shared" / "data")


def result_path(stage: str, name: str) -> Path:
    """The default result file of a benchmark: ``bench/results/<stage>/<name>.json``."""
    return RESULTS / stage / f"{name}.json"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@cache
def host() -> dict[str, Any]:
    """The facts that make figures comparable across machines."""
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "machine": platform.machine(),
            "python": platform.python_version(), "llama_cpp": package_version("llama-cpp-python"),
            "tagql": package_version("tagql")}


def git_commit() -> str | None:
    """The commit of the measured code, ``+dirty`` when the worktree has uncommitted changes (result files
    under ``bench/results/`` and Markdown pages do not count: they do not change what is measured)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)bench/results", ":(exclude,glob)**/*.md"],
                               cwd=REPO, capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Run:
    """One benchmark run: created at the start of ``main``, it stamps every result file it saves.

    ``spec`` is the module's ``__spec__`` (names the module for the command line), ``argv`` the arguments
    ``main`` was given (``None``: the process's own)."""

    def __init__(self, spec: Any, argv: Sequence[str] | None = None) -> None:
        module = getattr(spec, "name", None) or "bench"
        args = list(sys.argv[1:] if argv is None else argv)
        self.command = " ".join(["python", "-m", module, *map(shlex.quote, args)])
        self.started = now()
        self.commit = git_commit()  # the code as it was when the run started
        self._t0 = time.perf_counter()

    def facts(self) -> dict[str, Any]:
        return {"command": self.command, "commit": self.commit, "started": self.started, "finished": now(),
                "seconds": round(time.perf_counter() - self._t0, 1), "host": host(),
                "load_avg": [round(x, 2) for x in os.getloadavg()]}

    def save(self, path: Path | str, payload: dict[str, Any], *, indent: int | None = 1) -> Path:
        """Write ``{"run": <facts>, **payload}`` as JSON (atomically: a stopped run leaves the old file)."""
        return write_json(path, {"run": self.facts(), **payload}, indent=indent)


def pct(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (0.95 for p95), a measured value rather than an interpolation, so a
    reported p95 is a latency that happened; NaN for no values. Every bench reports percentiles with this."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def write_json(path: Path | str, payload: Any, *, indent: int | None = 1) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=indent, default=str))
    tmp.replace(path)
    return path


def read_partial(path: Path, key: Callable[[dict], Hashable]) -> dict:
    """The record stream of a resumable benchmark (one JSON object per line in ``<out>.partial.jsonl``):
    ``key(record)`` -> the last record written for it; a torn last line (a run stopped mid-write) is
    ignored."""
    out: dict = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            out[key(r)] = r
    return out
