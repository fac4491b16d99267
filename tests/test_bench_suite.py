"""The benchmark suite under ``bench/`` stays runnable: every module imports (a benchmark broken by a change
in ``src/`` fails here, without being run), every benchmark is a ``python -m bench.<stage>.<name>`` module
listed in ``bench/README.md``, and result files record the run that produced them."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import bench
from bench import common

REPO = Path(__file__).resolve().parents[1]
MODULES = sorted(m.name for m in pkgutil.walk_packages(bench.__path__, "bench."))
STAGES = ("ask", "embed", "knowledge", "routing", "security", "service", "tag", "text")
# run by path with the LOTUS venv's python by bench.tag.operator_lotus, not a benchmark of its own
HELPERS = {"bench.tag.operator_lotus_worker", "bench.service.scripted_server"}


@pytest.mark.parametrize("name", MODULES)
def test_every_bench_module_imports(name: str) -> None:
    importlib.import_module(name)


def benchmarks() -> list[str]:
    """The runnable benchmarks: the stage modules with a ``main``."""
    out = []
    for name in MODULES:
        if name.count(".") == 2 and name.split(".")[1] in STAGES and name not in HELPERS:
            if callable(getattr(importlib.import_module(name), "main", None)):
                out.append(name)
    return out


def test_the_suite_has_a_folder_per_stage_and_no_loose_scripts() -> None:
    assert {n.split(".")[1] for n in benchmarks()} == set(STAGES)
    assert sorted(p.name for p in (REPO / "bench").glob("*.py")) == ["__init__.py", "common.py"]
    assert len(benchmarks()) >= 30


def test_every_benchmark_is_listed_in_the_readme_with_its_command() -> None:
    readme = (REPO / "bench" / "README.md").read_text()
    missing = [n for n in benchmarks() if f"python -m {n}" not in readme]
    assert not missing, f"bench/README.md does not list: {missing}"


def test_no_benchmark_patches_sys_path_or_hard_codes_the_data_path() -> None:
    for path in (REPO / "bench").rglob("*.py"):
        text = path.read_text()
        assert "sys.path" not in text, path
        if path.name != "common.py":  # the one place that knows where the shared data lives
            assert not re.search(r"""["']shared["']\s*/\s*["']data["']""", text), path
            assert "TAGQL_SHARED_DATA\"" not in text, path


def test_data_path_follows_the_environment_variable(tmp_path: Path) -> None:
    code = "from bench import common; print(common.DATA)"
    env = {k: v for k, v in os.environ.items() if k != "TAGQL_SHARED_DATA"}
    default = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                             check=True).stdout.strip()
    assert Path(default) == REPO.parent / "shared" / "data"
    moved = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env | {"TAGQL_SHARED_DATA": str(tmp_path)},
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(moved) == tmp_path


def test_a_result_file_records_command_commit_host_and_date(tmp_path: Path) -> None:
    run = common.Run(SimpleNamespace(name="bench.routing.spider"), ["--methods", "ours,bm25", "--out", "a b.json"])
    path = run.save(tmp_path / "routing" / "spider.json", {"methods": {"ours": 1}})
    saved = json.loads(path.read_text())
    assert saved["methods"] == {"ours": 1}
    facts = saved["run"]
    assert facts["command"] == "python -m bench.routing.spider --methods ours,bm25 --out 'a b.json'"
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", facts["commit"])
    assert facts["host"]["cores"] == os.cpu_count() and facts["host"]["cpu"]
    assert facts["host"]["python"].count(".") == 2 and "llama_cpp" in facts["host"]
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", facts["started"]) and facts["finished"] >= facts["started"]
    assert not list(tmp_path.rglob("*.tmp"))


def test_result_files_live_in_stage_folders() -> None:
    results = REPO / "bench" / "results"
    assert sorted(p.name for p in results.iterdir() if p.is_dir()) == ["archive", *STAGES]
    assert not [p.name for p in results.glob("*.json")]
    for stage in STAGES:
        for path in (results / stage).glob("*.json"):
            json.loads(path.read_text())  # parses
            assert not re.search(r"_s\d+", path.stem), f"{path}: a run-suffixed file belongs in archive/"


def test_the_figures_page_names_only_modules_and_result_files_that_exist() -> None:
    page = (REPO / "docs" / "benchmarks.md").read_text()
    modules = set(re.findall(r"python -m (bench(?:\.\w+)+)", page))
    assert modules and not modules - set(MODULES)
    files = set()
    for path in re.findall(r"bench/results/[\w/{},.-]+\.jsonl?\b", page):
        braces = re.search(r"\{([^}]*)\}", path)
        names = braces.group(1).split(",") if braces else [""]
        files |= {path.replace(braces.group(0), n) if braces else path for n in names}
    missing = sorted(f for f in files if not (REPO / f).is_file())
    assert files and not missing, missing
