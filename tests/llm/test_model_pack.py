"""Model assembly from chunk packages: order, sha256 check, reuse, and clear errors."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from tagql.errors import LLMUnavailable, ModelIntegrityError
from tagql.llm.model_pack import ModelPack, ensure_model, resolve_model_path


def fake_pack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunks: list[bytes], *, sha: str | None = None) -> ModelPack:
    """Install N tiny chunk packages on sys.path, laid out like the real ones."""
    site = tmp_path / "site"
    for k, data in enumerate(chunks, start=1):
        pkg = site / f"fakemodel_part{k}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{k:02d}.bin").write_bytes(data)
    monkeypatch.syspath_prepend(str(site))
    for k in range(1, len(chunks) + 1):
        sys.modules.pop(f"fakemodel_part{k}", None)
    whole = b"".join(chunks)
    return ModelPack("fake", "test pack", "fakemodel-part", "fakemodel_part", "0.0", len(chunks),
                     sha or hashlib.sha256(whole).hexdigest(), len(whole), "local")


def test_assembles_in_order_and_verifies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pack = fake_pack(tmp_path, monkeypatch, [b"GGUF-aaa", b"bbb", b"cc"])
    seen: list[tuple[int, int]] = []
    path = ensure_model(pack, tmp_path / "cache", progress=lambda d, t: seen.append((d, t)))
    assert path.read_bytes() == b"GGUF-aaabbbcc"
    assert seen[-1] == (13, 13)
    # second call reuses the verified file without reading the chunks again
    mtime = path.stat().st_mtime_ns
    assert ensure_model(pack, tmp_path / "cache") == path and path.stat().st_mtime_ns == mtime


def test_corrupt_chunks_are_rejected_and_nothing_is_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pack = fake_pack(tmp_path, monkeypatch, [b"GGUF-aaa", b"bbb"], sha="0" * 64)
    with pytest.raises(ModelIntegrityError, match="sha256"):
        ensure_model(pack, tmp_path / "cache")
    assert list((tmp_path / "cache" / "models").iterdir()) == []


def test_missing_package_says_how_to_install(tmp_path: Path) -> None:
    pack = ModelPack("ghost", "", "ghost-part", "ghost_model_part_xyz", "0", 2, "0" * 64, 0, "local")
    with pytest.raises(LLMUnavailable, match=r'not installed .*pip install -e "\.\[local\]"'):
        ensure_model(pack, tmp_path)


def test_model_path_must_be_a_pack_or_a_gguf(tmp_path: Path) -> None:
    with pytest.raises(LLMUnavailable, match="neither a known pack"):
        resolve_model_path(str(tmp_path / "missing.gguf"), tmp_path)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model")
    with pytest.raises(LLMUnavailable, match="not a GGUF"):
        resolve_model_path(str(junk), tmp_path)


@pytest.mark.model
def test_requantized_model_is_derived_once_from_the_verified_pack(tmp_path: Path) -> None:
    """The default model: the shipped pack re-quantized to Q4_0 by llama.cpp, stamped, then reused."""
    import shutil

    from tagql.config import load_settings
    from tagql.llm.model_pack import PACKS, REQUANTIZED, ensure_requantized

    spec = REQUANTIZED["qwen2.5-coder-1.5b-q4_0"]
    base = ensure_model(PACKS[spec.base], load_settings().cache_dir)  # the verified shipped GGUF
    cache = tmp_path / "cache"
    (cache / "models").mkdir(parents=True)
    (cache / "models" / base.name).symlink_to(base)  # reuse it without copying 1 GB
    shutil.copy(base.with_suffix(".verified.json"), cache / "models" / base.with_suffix(".verified.json").name)

    path = ensure_requantized(spec, cache)
    with path.open("rb") as f:
        assert f.read(4) == b"GGUF"
    assert 0.8e9 < path.stat().st_size < base.stat().st_size  # Q4_0 everywhere is smaller than Q4_K_M + Q6_K
    mtime = path.stat().st_mtime_ns
    assert ensure_requantized(spec, cache) == path and path.stat().st_mtime_ns == mtime  # reused, not redone
    path.with_suffix(".verified.json").write_text("{broken")
    assert ensure_requantized(spec, cache).stat().st_mtime_ns != mtime  # a damaged stamp: derived again
    assert resolve_model_path(spec.name, cache) == path
