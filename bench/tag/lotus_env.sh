#!/usr/bin/env bash
# Benchmark-only virtual environment for LOTUS (lotus-ai), used by bench/tag/operator_efficiency.py
# --methods ...,lotus. LOTUS is never a dependency of tagql: it lives only in this venv.
#
#   bash bench/tag/lotus_env.sh            # create/update the venv, print its python
#   TAGQL_LOTUS_VENV=/path bash bench/tag/lotus_env.sh
#
# torch is pinned to the same CPU build as tagql's `embed` extra (sentence-transformers, a LOTUS
# dependency, would otherwise pull a multi-GB CUDA build).
set -euo pipefail
VENV="${TAGQL_LOTUS_VENV:-$HOME/.cache/tagql/venvs/lotus}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
"$VENV/bin/python" -m pip install -q "torch==2.13.0" "lotus-ai==1.2.4"
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md

import lotus  # noqa: F401
from lotus.models import LM  # noqa: F401

print(f"lotus-ai {md.version('lotus-ai')}, litellm {md.version('litellm')}, pandas {md.version('pandas')}")
PY
echo "$VENV/bin/python"
