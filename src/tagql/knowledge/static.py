"""A static token-embedding model distilled locally from all-MiniLM-L6-v2 (the Model2Vec recipe).

Why: the sub-string retrieval methods compare 100-200 word windows of a question with every
statement. Running MiniLM on each window costs 1-2 s per question on 2 CPU cores; with one vector
per vocabulary token, a window's embedding is the (weighted) mean of its tokens' vectors, and all
windows of a question come from prefix sums in well under a millisecond.

Distillation (once, ~1 min on 2 cores, cached under ``<cache_dir>/static/``, announced through a
progress callback): every WordPiece token of MiniLM's vocabulary is embedded *alone*
(``[CLS] token [SEP]``) through the transformer of the embedder passed in (any
:class:`tagql.embeddings.TokenEmbedder`: ONNX Runtime or torch) with MiniLM's own mean pooling; then, as
in Model2Vec, the vectors are weighted by a Zipf/SIF coefficient derived from the token's rank in the
(frequency-ordered) BERT vocabulary so frequent tokens ("the", "of") weigh less. No hub access.
Inference needs only numpy and the ``tokenizers`` library.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from pathlib import Path

import numpy as np

from tagql.embeddings import EmbeddingUnavailable, Progress, TokenEmbedder

RECIPE_VERSION = 1  # bump when the distillation recipe changes (invalidates caches)
SIF = 1e-3  # Model2Vec's default SIF coefficient


def _fingerprint(embedder: TokenEmbedder) -> str:
    """Cache key: the recipe, the embedder's name and its tokenizer (vectors of another model or
    vocabulary are never reused)."""
    h = hashlib.sha256(f"recipe={RECIPE_VERSION};sif={SIF};model={embedder.name}".encode())
    p = Path(embedder.tokenizer_file)
    if p.exists():
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


STAGE = "distilling static token embeddings (once, for fast knowledge retrieval)"


def distill(embedder: TokenEmbedder, batch_size: int = 1024, progress: Progress | None = None,
            token_ids: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(vectors (V, dim) float32 with the SIF weight folded in, weights (V,)) for the embedder's
    vocabulary (only ``token_ids`` if given; other rows stay zero). ``progress(stage, done, total)``
    hears about every batch (the CLI draws a bar: the whole vocabulary takes ~1 min on 2 cores).

    Deterministic: a fixed token order, inference mode; float32 throughout."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(embedder.tokenizer_file))
    vocab = tok.get_vocab()
    size = max(vocab.values()) + 1
    cls_id, sep_id = vocab["[CLS]"], vocab["[SEP]"]
    special = {i for t, i in vocab.items() if t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")}
    ids = [i for t, i in sorted(vocab.items(), key=lambda kv: kv[1])
           if i not in special and not (t.startswith("[unused") and t.endswith("]"))]
    if token_ids is not None:
        wanted = set(token_ids)
        ids = [i for i in ids if i in wanted]
    out = np.zeros((size, embedder.dim), dtype=np.float32)
    if progress:
        progress(STAGE, 0, len(ids))
    for s in range(0, len(ids), batch_size):
        chunk = ids[s : s + batch_size]
        inp = np.array([[cls_id, t, sep_id] for t in chunk], dtype=np.int64)
        out[chunk] = embedder.pool_ids(inp)  # MiniLM's mean pooling over all 3 positions
        if progress:
            progress(STAGE, min(s + batch_size, len(ids)), len(ids))
    # SIF weighting with Zipf probabilities from the vocabulary rank (BERT's vocabulary is roughly
    # frequency-ordered after its special/single-character block), as Model2Vec does.
    rank = np.arange(1, size + 1, dtype=np.float64)
    proba = (1.0 / rank) / np.sum(1.0 / rank)
    weights = (SIF / (SIF + proba)).astype(np.float32)
    out *= weights[:, None]
    return out, weights


def center(vectors: np.ndarray) -> np.ndarray:
    """Subtract the mean vector of the vocabulary (rows that were distilled) from every token.

    Why: vectors of tokens embedded alone share a large common component, so every window looks
    similar to every statement; removing it spreads the cosines (evidence F1 of ``hybrid-static``
    0.845 -> 0.859, toxicology 0.558 -> 0.589). Done at load time, so the
    cached distillation stays the plain Model2Vec output."""
    v = np.array(vectors, dtype=np.float32, copy=True)
    live = np.abs(v).sum(axis=1) > 0
    if live.any():
        v[live] -= v[live].mean(axis=0)
    return v


class StaticModel:
    """Static token vectors + MiniLM's tokenizer. ``word_sums`` gives, per word, the sum of its
    tokens' vectors and the token count, so any span's mean-pooled embedding is a difference of
    prefix sums."""

    def __init__(self, vectors: np.ndarray, tokenizer_json: Path, path: Path | None = None,
                 name: str = "all-minilm-l6-v2-static") -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbeddingUnavailable("the static model needs the `tokenizers` package") from exc
        self.name = name
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.dim = int(self.vectors.shape[1])
        self.path = path
        self._tok = Tokenizer.from_file(str(tokenizer_json))
        self._tok.no_truncation()
        self._tok.no_padding()
        self._cache: dict[str, tuple[np.ndarray, int]] = {}
        self._lock = threading.Lock()

    # -- words ---------------------------------------------------------------------------------
    def word_sums(self, ws: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(len(ws), dim) sums of token vectors per word and (len(ws),) token counts."""
        with self._lock:  # one lock for lookups and inserts: a concurrent clear() cannot drop a word mid-call
            cache = self._cache
            todo = [w for w in dict.fromkeys(ws) if w not in cache]
            if todo:
                if len(cache) + len(todo) > 200_000:  # bounded memory for long-running processes
                    cache.clear()
                    todo = list(dict.fromkeys(ws))
                for w, e in zip(todo, self._tok.encode_batch(todo, add_special_tokens=False)):
                    ids = e.ids
                    cache[w] = (self.vectors[ids].sum(axis=0) if ids else np.zeros(self.dim, dtype=np.float32),
                                len(ids))
            sums = np.empty((len(ws), self.dim), dtype=np.float32)
            counts = np.empty(len(ws), dtype=np.float32)
            for j, w in enumerate(ws):
                v, c = cache[w]
                sums[j] = v
                counts[j] = c
        return sums, counts

    def embed_words(self, list_of_words: list[list[str]]) -> np.ndarray:
        """L2-normalised mean-pooled embeddings of word sequences (zero rows for empty ones)."""
        out = np.zeros((len(list_of_words), self.dim), dtype=np.float32)
        for i, ws in enumerate(list_of_words):
            if ws:
                s, c = self.word_sums(ws)
                out[i] = s.sum(axis=0) / max(float(c.sum()), 1.0)
        out /= np.linalg.norm(out, axis=1, keepdims=True) + 1e-9
        return out

    def embed(self, texts: list[str], batch_size: int = 0) -> np.ndarray:  # Embedder protocol
        from tagql.knowledge.canon import words

        return self.embed_words([words(t) for t in texts])

    def window_embeddings(self, ws: list[str], lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """All contiguous windows of ``ws`` with lengths in [lo, hi] (the question whole if it is
        shorter than ``lo``): (W, dim) L2-normalised embeddings and (W,) word lengths, from prefix
        sums (no loop over windows)."""
        if not ws:
            return np.zeros((0, self.dim), dtype=np.float32), np.zeros(0, dtype=np.int32)
        sums, counts = self.word_sums(ws)
        nw = len(ws)
        csum = np.zeros((nw + 1, self.dim), dtype=np.float32)
        np.cumsum(sums, axis=0, out=csum[1:])
        ccnt = np.concatenate([[0.0], np.cumsum(counts)]).astype(np.float32)
        lo = max(1, lo)
        hi = min(max(lo, hi), nw)
        if lo > nw:
            starts, lens = np.array([0]), np.array([nw])
        else:
            lens = np.concatenate([np.full(nw - L + 1, L) for L in range(lo, hi + 1)])
            starts = np.concatenate([np.arange(nw - L + 1) for L in range(lo, hi + 1)])
        ends = starts + lens
        e = (csum[ends] - csum[starts]) / np.maximum(ccnt[ends] - ccnt[starts], 1.0)[:, None]
        e /= np.linalg.norm(e, axis=1, keepdims=True) + 1e-9
        return e.astype(np.float32, copy=False), lens.astype(np.int32)


_MODELS: dict[tuple[str, str], StaticModel] = {}
_MODELS_LOCK = threading.Lock()


def load_static(embedder: TokenEmbedder, cache_dir: Path | None = None, *, progress: Progress | None = None,
                rebuild: bool = False) -> StaticModel:
    """The static model of ``embedder``, distilled on first use (announced through ``progress``) and
    cached as ``minilm-l6-static-<key>.npy`` in ``cache_dir`` (default ``<user cache>/static``); a
    damaged cache file is rebuilt. Loaded once per process, embedder and cache dir."""
    from tagql.config import user_cache_dir

    d = Path(cache_dir) if cache_dir is not None else user_cache_dir() / "static"
    key = _fingerprint(embedder)
    with _MODELS_LOCK:
        hit = _MODELS.get((key, str(d)))
        if hit is not None and not rebuild:
            return hit
        path = d / f"minilm-l6-static-{key}.npy"
        vectors = None
        if path.exists() and not rebuild:
            try:
                vectors = np.load(path, allow_pickle=False)
                if vectors.ndim != 2 or vectors.dtype != np.float32 or not np.isfinite(vectors).all():
                    raise ValueError(f"unexpected array {vectors.dtype} {vectors.shape}")
            except Exception as exc:  # noqa: BLE001 - a damaged cache is rebuilt, never used
                print(f"tagql: static embedding cache {path} is unreadable ({exc}); distilling again",
                      file=sys.stderr)
                vectors = None
        if vectors is None:
            vectors, _ = distill(embedder, progress=progress)
            d.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}.npy")
            np.save(tmp, vectors)
            os.replace(tmp, path)  # atomic: a concurrent reader sees the old or the whole new file
            (d / f"minilm-l6-static-{key}.json").write_text(json.dumps(
                {"source": embedder.name, "recipe": RECIPE_VERSION, "sif": SIF, "shape": list(vectors.shape)}))
        model = StaticModel(center(vectors), embedder.tokenizer_file, path, name=f"{embedder.name}-static")
        _MODELS[(key, str(d))] = model
        return model
