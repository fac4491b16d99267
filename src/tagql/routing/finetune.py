"""Fine-tuning the router's sentence encoder so that synonym-substituted questions embed close to
their plain versions (Spider-Syn robustness).

Training pairs: ``(synonym question, plain question)`` from Spider-Syn's **train** split
(``train_spider.json``: each Spider training question and its synonym-substituted version; shipped,
attributed, in ``routing/data/syn_pairs.json.gz``; no dev/test question). The default loss distils both
versions towards the original encoder's vector of the plain one, with anchor texts held in place; the
multiple negatives ranking loss is an option (see :func:`finetune_encoder`). A plain PyTorch loop, one process, fixed seeds (the shuffle,
dropout and initialisation all come from ``seed``), so a build on the same machine gives the same
encoder.
"""

from __future__ import annotations

import gzip
import json
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

_DATA = Path(__file__).parent / "data"
PAIRS_FILE = _DATA / "syn_pairs.json.gz"
Progress = Callable[[str, int, int], None]


def mine_pairs(train_json: str | Path) -> list[tuple[str, str, str]]:
    """``(db_id, plain question, synonym question)`` for the Spider-Syn train rows whose two versions differ."""
    rows = json.loads(Path(train_json).read_text())
    out, seen = [], set()
    for e in rows:
        a, b = (e.get("SpiderQuestion") or "").strip(), (e.get("SpiderSynQuestion") or "").strip()
        if a and b and a != b and (a, b) not in seen:
            seen.add((a, b))
            out.append((e["db_id"], a, b))
    return out


def write_pairs(pairs: Sequence[tuple[str, str, str]], path: str | Path = PAIRS_FILE) -> None:
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump([list(p) for p in pairs], f, ensure_ascii=False, separators=(",", ":"))


def load_pairs(path: str | Path = PAIRS_FILE) -> list[tuple[str, str, str]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [tuple(x) for x in json.load(f)]  # type: ignore[misc]


def finetune_encoder(pairs: Sequence[tuple[str, str]], out_dir: str | Path, *, model_dir: str | None = None,
                     epochs: int = 1, batch_size: int = 32, lr: float = 2e-5, scale: float = 20.0,
                     warmup: float = 0.1, max_len: int = 64, seed: int = 0, loss: str = "distill",
                     anchors: Sequence[str] = (), progress: Progress | None = None) -> dict[str, Any]:
    """Fine-tune the sentence encoder at ``model_dir`` (default: MiniLM) on ``(synonym question, plain
    question)`` pairs and save it to ``out_dir``; returns the cost.

    ``loss="distill"``: both the synonym and the plain version are pulled (mean squared error) to the
    *original* encoder's vector of the plain version -- synonym questions move to where their plain
    versions are, plain questions stay where they were (so nothing else the router stored drifts).
    ``loss="mnrl"``: symmetric multiple negatives ranking loss over the pairs (in-batch negatives);
    ``"both"``: their sum. ``anchors`` (e.g. the collection's table documents and synthetic questions):
    texts held at the original encoder's vectors, as many per batch as pairs, so the space the router
    stores does not drift."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    t0 = time.perf_counter()
    random.seed(seed)
    np.random.seed(seed)
    pairs = [(a, b) for a, b in pairs if a and b]
    rng = random.Random(seed)
    batches: list[list[tuple[str, str]]] = []
    for _ in range(epochs):
        order = list(pairs)
        rng.shuffle(order)
        batches += [order[i:i + batch_size] for i in range(0, len(order), batch_size) if len(order[i:i + batch_size]) > 1]
    model, opt, sched = _trainable(model_dir, max_len, lr, len(batches), int(warmup * len(batches)), seed)
    teacher = None
    anchors = list(dict.fromkeys(anchors))
    rng.shuffle(anchors)
    if loss in ("distill", "both") or anchors:
        plain = list(dict.fromkeys([b for _, b in pairs] + anchors))
        with torch.no_grad():
            tv = model.encode(plain, batch_size=128, convert_to_tensor=True, normalize_embeddings=True,
                              show_progress_bar=False)
        teacher = dict(zip(plain, tv))
    # distillation targets come from the encoder without dropout: train without it too (otherwise the loss
    # is mostly dropout noise); the ranking loss keeps the usual dropout
    model.train(loss != "distill")
    losses = []
    for step, batch in enumerate(batches):
        texts = [a for a, _ in batch] + [b for _, b in batch]
        held = [anchors[(step * batch_size + i) % len(anchors)] for i in range(len(batch))] if anchors else []
        texts += held
        emb = _unit_vectors(model, texts)
        n = len(batch)
        value = torch.zeros(())
        if loss in ("mnrl", "both"):
            sims = scale * emb[:n] @ emb[n:2 * n].T
            labels = torch.arange(n)
            value = value + (F.cross_entropy(sims, labels) + F.cross_entropy(sims.T, labels)) / 2
        if held:
            value = value + ((emb[2 * n:] - torch.stack([teacher[t] for t in held])) ** 2).sum(-1).mean()
        if teacher is not None and loss in ("distill", "both"):
            target = torch.stack([teacher[b] for _, b in batch])
            # squared distance of unit vectors, summed over dimensions (= 2 - 2 cos), mean over the batch
            value = value + ((emb[:n] - target) ** 2).sum(-1).mean() + ((emb[n:2 * n] - target) ** 2).sum(-1).mean()
        losses.append(_update(model, opt, sched, value))
        if progress:
            progress("fine-tuning the encoder", step + 1, len(batches))
    _save(model, out_dir)
    return {"pairs": len(pairs), "steps": len(batches), "epochs": epochs, "lr": lr, "batch_size": batch_size,
            "seed": seed, "loss": loss, "anchors": len(anchors), "loss_first": round(float(np.mean(losses[:10])), 4) if losses else None,
            "loss_last": round(float(np.mean(losses[-10:])), 4) if losses else None,
            "finetune_s": round(time.perf_counter() - t0, 1)}


def _trainable(model_dir: str | None, max_len: int, lr: float, steps: int, warm: int, seed: int
               ) -> tuple[Any, Any, Any]:
    """(encoder, AdamW, schedule) for ``steps`` optimiser steps: the encoder at ``model_dir`` (default
    MiniLM) loaded after seeding torch, the learning rate warmed up linearly over ``warm`` steps (at least
    one), then decayed linearly to 0."""
    import torch
    from sentence_transformers import SentenceTransformer

    from tagql.embeddings import minilm_dir

    torch.manual_seed(seed)
    model = SentenceTransformer(model_dir or str(minilm_dir()), device="cpu")
    model.max_seq_length = max_len
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    n_warm = max(1, warm)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / n_warm, max(0.0, (steps - s) / max(1, steps - n_warm))))
    return model, opt, sched


def _unit_vectors(model: Any, texts: list[str]) -> Any:
    """The encoder's sentence embeddings of ``texts`` with gradients, L2-normalised."""
    import torch.nn.functional as F

    feats = model.preprocess(texts) if hasattr(model, "preprocess") else model.tokenize(texts)
    return F.normalize(model(feats)["sentence_embedding"], dim=-1)


def _update(model: Any, opt: Any, sched: Any, value: Any) -> float:
    """One optimiser step on the loss ``value`` (gradients clipped to norm 1); the loss as a float."""
    import torch

    opt.zero_grad()
    value.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return float(value.detach())


def _save(model: Any, out_dir: str | Path) -> None:
    """The trained encoder in eval mode, saved as a sentence-transformers folder at ``out_dir``."""
    model.eval()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save(str(out))


def contrastive_encoder(pairs: Sequence[tuple[str, str]], out_dir: str | Path, *, steps: int,
                        batch_size: int = 32, lr: float = 3e-5, scale: float = 20.0, max_len: int = 96,
                        seed: int = 0, model_dir: str | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Fine-tune a copy of the sentence encoder on ``(synthetic question, its table document)`` pairs with
    the multiple negatives ranking loss (the other documents of the batch are the negatives) and save it
    to ``out_dir``; returns the cost.

    This is DBCopilot's "the router learns the collection from its synthetic questions" as a *second*
    encoder: the router keeps the original one for its memory and features (the ranking loss reshapes the
    space, see ``finetune_encoder``) and adds this one's similarities as database-scorer features.
    ``steps`` batches are drawn in a seeded order (pairs cycle when there are fewer); a document that
    occurs twice in a batch is one target, so no question is pushed away from its own table."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    t0 = time.perf_counter()
    order = [p for p in pairs if p[0] and p[1]]
    random.Random(seed).shuffle(order)
    if not order or steps <= 0:
        raise ValueError("contrastive fine-tuning needs pairs and steps > 0")
    model, opt, sched = _trainable(model_dir, max_len, lr, steps, steps // 10, seed)
    model.train()
    losses = []
    for step in range(steps):
        batch = [order[(step * batch_size + i) % len(order)] for i in range(batch_size)]
        docs = list(dict.fromkeys(d for _, d in batch))
        emb = _unit_vectors(model, [q for q, _ in batch] + docs)
        sims = scale * emb[:batch_size] @ emb[batch_size:].T
        value = F.cross_entropy(sims, torch.tensor([docs.index(d) for _, d in batch]))
        losses.append(_update(model, opt, sched, value))
        if progress:
            progress("fine-tuning the table encoder", step + 1, steps)
    _save(model, out_dir)
    return {"pairs": len(order), "steps": steps, "batch_size": batch_size, "lr": lr, "seed": seed,
            "loss_first": round(float(np.mean(losses[:10])), 4), "loss_last": round(float(np.mean(losses[-10:])), 4),
            "tuned_s": round(time.perf_counter() - t0, 1)}
