"""The tests mirror ``src/tagql``: a sub-package's tests live in ``tests/<sub-package>/``; the top level
keeps the tests of the pipeline, the public API, the CLI, the configuration and the benchmark suite."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOP_LEVEL = {"cli"}  # the CLI's tests stay at the top level, beside the pipeline's and the API's


def test_no_top_level_test_file_belongs_to_a_sub_package() -> None:
    packages = {p.name for p in (REPO / "src" / "tagql").iterdir() if (p / "__init__.py").is_file()} - TOP_LEVEL
    misplaced = [p.name for p in (REPO / "tests").glob("test_*.py")
                 if any(p.stem == f"test_{pkg}" or p.stem.startswith(f"test_{pkg}_") for pkg in packages)]
    assert not misplaced, f"move these into tests/<sub-package>/: {misplaced}"
