"""In-process llama.cpp backend (``llama-cpp-python``), CPU only, temperature 0 by default.

llama.cpp keeps the KV cache of the previous call and reuses the longest common token prefix,
so prompts put the (long, per-database) schema first and the question last: the first question
on a database pays for the schema, later ones only for their own tokens.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from tagql.errors import LLMOutputError, LLMUnavailable, install_hint
from tagql.llm.base import Completion, Message, Usage
from tagql.llm.lookup import (
    MIN_DRAFT,
    RECENT_OUTPUTS,
    LookupStats,
    RecentOutputs,
    _first_stop,
    eval_prompt,
    greedy_generate,
    looping,
)

# the most candidates one sample() call draws: each needs its own KV sequence, reserved at load
MAX_SAMPLES = 8

_MODELS: dict[tuple[str, int, int, int], Any] = {}
_MODELS_LOCK = threading.Lock()


_SILENCED = False


def _close_all() -> None:
    """Free models before interpreter teardown (llama-cpp-python's __del__ fails once modules are gone)."""
    with _MODELS_LOCK:
        for llama, _, _ in _MODELS.values():
            try:
                llama.close()
            except Exception:  # noqa: BLE001 - best effort at exit
                pass
        _MODELS.clear()


atexit.register(_close_all)


def _silence_llama_logs() -> None:
    """llama.cpp prints context warnings on stderr even with verbose=False; route them nowhere."""
    global _SILENCED
    if _SILENCED:
        return
    import ctypes

    import llama_cpp

    @llama_cpp.llama_log_callback
    def _noop(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        return None

    llama_cpp.llama_log_set(_noop, ctypes.c_void_p(0))
    globals()["_LOG_CALLBACK"] = _noop  # keep a reference so it is not garbage-collected
    _SILENCED = True


@contextmanager
def _default_params(which: str, **fields: Any) -> Iterator[None]:
    """Let ``Llama()`` build its model or context with parameters it has no argument for, by amending
    llama.cpp's defaults (``which``: ``llama_model_default_params`` / ``llama_context_default_params``)
    while it is built."""
    import llama_cpp.llama as llama_module

    lib = llama_module.llama_cpp
    original = getattr(lib, which)

    def amended() -> Any:
        params = original()
        for name, value in fields.items():
            setattr(params, name, value)
        return params

    setattr(lib, which, amended)
    try:
        yield
    finally:
        setattr(lib, which, original)


def _guard_sequence_zero(llama: Any) -> None:
    """llama-cpp-python clears positions of *all* sequences before each ``eval``; the stored prefixes
    live in sequences 1.., so its clears are narrowed to sequence 0 (the one it generates in)."""
    ctx = llama._ctx
    remove = ctx.kv_cache_seq_rm
    ctx._seq_rm_all = remove
    ctx.kv_cache_seq_rm = lambda seq, p0, p1: remove(max(seq, 0), p0, p1)


def _load(path: Path, n_ctx: int, n_threads: int, seed: int, extra_buffers: bool = True
          ) -> tuple[Any, _PrefixStates, threading.Lock]:
    """Load a GGUF once per process (loading takes seconds and ~1 GB). ``extra_buffers``: llama.cpp may
    repack the weights for the CPU's fastest kernels (AMX, REPACK); they round differently, so near-tie
    tokens of a small model can flip between hosts (see ``LLMSettings.extra_buffers``)."""
    try:
        from llama_cpp import Llama
    except ImportError as exc:
        raise LLMUnavailable(
            "the local backend needs llama-cpp-python", install_hint("local")
        ) from exc
    _silence_llama_logs()
    key = (str(path), n_ctx, n_threads, seed, extra_buffers)
    with _MODELS_LOCK:
        if key not in _MODELS:
            try:
                prefixes = _PrefixStates()
                # several KV sequences sharing one unified cache (see _PrefixStates); optionally no repacking
                with _default_params("llama_context_default_params", n_seq_max=prefixes.hot + 1 + MAX_SAMPLES, kv_unified=True), \
                        _default_params("llama_model_default_params", use_extra_bufts=extra_buffers):
                    llama = Llama(
                        model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads,
                        seed=seed, verbose=False,
                    )
                _guard_sequence_zero(llama)
                _MODELS[key] = (llama, prefixes, threading.Lock())
            except (ValueError, RuntimeError) as exc:
                raise LLMUnavailable(f"llama.cpp could not load {path}: {exc}", "check the GGUF file") from exc
        return _MODELS[key]


class _PrefixStates:
    """Evaluated system-message prefixes: the ``hot`` most recent in their own KV sequences, older ones
    spilled to RAM (LRU, ``max_states`` in all).

    llama.cpp only reuses the prefix shared with the *previous* call. tagql alternates prompts with
    different system messages (schema + SQL, answer, operators). A hot prefix stays evaluated in its
    own sequence (1..``hot``) of a unified KV cache, and generation (sequence 0) starts from a copy of
    it: ``llama_memory_seq_cp`` only tags the same cells, so the per-question switch between the schema
    and the answer prefix costs about a millisecond instead of a 50-160 ms whole-state restore. Only
    ``hot`` prefixes stay in the cache because attention spans the cells of every stored sequence
    (masked out): +6.6 ms per generated token beside a 1.75k-token schema. (Flash attention would skip
    them but processes prompts 1.4x slower on this CPU.) Older prefixes are kept as per-sequence state
    blobs and copied back into a sequence when needed again (another database of a collection).
    """

    def __init__(self, max_states: int = 6, hot: int = 2) -> None:
        self.max_states = max_states
        self.hot = hot
        self._slots: OrderedDict[tuple[int, ...], int] = OrderedDict()  # hot: prefix -> sequence id
        self._cold: OrderedDict[tuple[int, ...], bytes] = OrderedDict()  # spilled: prefix -> sequence state
        self._pinned: tuple[int, ...] | None = None  # a spilled prefix being reloaded: never evicted
        self.hits = 0
        self.misses = 0
        self.disk_hits = 0

    def ensure(self, llama: Any, prefix: list[int], total: int | None = None, disk: _DiskStates | None = None) -> None:
        """Make sequence 0 hold ``prefix`` (copying, reloading or evaluating it) unless it already does,
        with room left in the cache for ``total`` tokens of prompt + output. With ``disk``, a prefix
        not in RAM is read from there, and an evaluated one is written there."""
        key = tuple(prefix)
        self._make_room(llama, key, total if total is not None else len(prefix))
        if len(prefix) == 0:
            return
        current = llama.input_ids[: llama.n_tokens].tolist()
        if _common_prefix(current, prefix) >= len(prefix):
            if key in self._slots:
                self._slots.move_to_end(key)
            return
        ctx = llama._ctx
        from_disk = False
        if key not in self._slots and key not in self._cold and disk is not None:
            saved = disk.load(prefix)
            if saved is not None:
                self._cold[key], from_disk = saved, True
        if key in self._slots or key in self._cold:
            if key not in self._slots:
                self._pinned = key  # the spills below must evict other prefixes from RAM, not this one
                try:
                    self._pack_before(llama, key)
                    self._reload(llama, key)
                except RuntimeError:
                    if not from_disk or disk is None:
                        raise  # the caller clears the cache and retries
                    disk.forget(prefix)  # cut short, or written by another llama.cpp build: evaluate
                finally:
                    self._pinned = None
            if key in self._slots:
                if from_disk:
                    self.disk_hits += 1
                else:
                    self.hits += 1
                slot = self._slots[key]
                _seq_rm(ctx, 0, -1, -1)
                ctx.kv_cache_seq_cp(slot, 0, 0, len(prefix))
                llama.n_tokens = len(prefix)
                llama._input_ids[: len(prefix)] = prefix
                self._slots.move_to_end(key)
                return
        self.misses += 1
        self._pack_before(llama, key)
        llama.reset()
        llama.eval(prefix)  # into sequence 0 (``eval`` clears sequence 0 beyond n_tokens first)
        slot = self._free_slot(llama)
        _seq_rm(ctx, slot, -1, -1)  # a free sequence holds no cells (stale ones would be saved with it)
        ctx.kv_cache_seq_cp(0, slot, 0, len(prefix))
        self._slots[key] = slot
        if disk is not None:
            disk.save(prefix, _seq_state(llama, slot))

    def _free_slot(self, llama: Any) -> int:
        if len(self._slots) >= self.hot:
            self._spill(llama, next(iter(self._slots)))
        return min(set(range(1, self.hot + 1)) - set(self._slots.values()))

    def _pack_before(self, llama: Any, key: tuple[int, ...]) -> None:
        """Keep the cells packed, longest prefix first. Attention spans every cell up to the last one
        in use, so a short prefix (the answer prompt) left behind a freed schema would slow every token
        of the next database's questions (+0.57 s per question measured). A prefix shorter than all hot
        ones goes after them; otherwise every hot prefix is spilled and the new one starts at cell 0."""
        if any(len(k) <= len(key) for k in self._slots):
            for k in list(self._slots):
                self._spill(llama, k)

    def _spill(self, llama: Any, key: tuple[int, ...]) -> None:
        """Move a hot prefix out of the KV cache into a RAM blob of its sequence's state."""
        slot = self._slots.pop(key)
        state = _seq_state(llama, slot)
        _seq_rm(llama._ctx, slot, -1, -1)
        if state:
            self._cold[key] = state
        while len(self._cold) + len(self._slots) > self.max_states:
            victim = next((k for k in self._cold if k != self._pinned), None)
            if victim is None:
                break
            del self._cold[victim]

    def _reload(self, llama: Any, key: tuple[int, ...]) -> None:
        """Copy a spilled prefix back into a free sequence."""
        import llama_cpp

        data = self._cold.pop(key)
        slot = self._free_slot(llama)
        _seq_rm(llama._ctx, slot, -1, -1)
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if int(llama_cpp.llama_state_seq_set_data(llama._ctx.ctx, buf, len(data), slot)) == 0:
            _seq_rm(llama._ctx, slot, -1, -1)  # whatever a truncated state left in the sequence
            raise RuntimeError("llama.cpp could not reload a saved prefix")  # handled by the caller's retry
        self._slots[key] = slot

    def _make_room(self, llama: Any, key: tuple[int, ...], total: int) -> None:
        """Spill least recently used prefixes (never ``key``) until they and ``total`` fit in the cache."""
        n_ctx = int(llama.n_ctx())
        while sum(len(k) for k in self._slots if k != key) + total > n_ctx:
            victim = next((k for k in self._slots if k != key), None)
            if victim is None:
                return
            self._spill(llama, victim)

    def clear(self, llama: Any) -> None:
        """Forget every stored prefix (e.g. after the cache could not fit a batch)."""
        for slot in self._slots.values():
            _seq_rm(llama._ctx, slot, -1, -1)
        self._slots.clear()
        self._cold.clear()


def _seq_state(llama: Any, seq: int) -> bytes:
    """The saved state (cells, keys, values) of one KV sequence; b"" if llama.cpp gives none."""
    import llama_cpp

    ctx = llama._ctx.ctx
    size = int(llama_cpp.llama_state_seq_get_size(ctx, seq))
    buf = (ctypes.c_uint8 * size)()
    n = int(llama_cpp.llama_state_seq_get_data(ctx, buf, size, seq))
    return bytes(buf)[:n] if n > 0 else b""


class _DiskStates:
    """Evaluated system prefixes on disk, so a new process (one ``tagql ask`` from the shell) does not
    evaluate a database's schema again: 17 s for student_club's 1.8k tokens here, against a read of
    its ~50 MB state. One file per prefix, named by a hash of its tokens, in a folder per model file
    and llama.cpp version; the least recently used files beyond ``max_files`` are deleted."""

    MIN_TOKENS = 64  # shorter prefixes evaluate in well under a second

    def __init__(self, folder: Path, max_files: int = 16) -> None:
        self.folder = folder
        self.max_files = max_files

    def _file(self, prefix: list[int]) -> Path:
        import numpy as np

        digest = hashlib.sha256(np.asarray(prefix, dtype=np.int32).tobytes()).hexdigest()[:32]
        return self.folder / f"{digest}.kv"

    def load(self, prefix: list[int]) -> bytes | None:
        if len(prefix) < self.MIN_TOKENS:
            return None
        f = self._file(prefix)
        try:
            data = f.read_bytes()
            os.utime(f)  # recently used
        except OSError:
            return None
        return data or None

    def save(self, prefix: list[int], state: bytes) -> None:
        """Best effort: a full disk or a read-only cache only costs the next process the evaluation."""
        if len(prefix) < self.MIN_TOKENS or not state:
            return
        f = self._file(prefix)
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = f.with_suffix(f".{os.getpid()}.tmp")
            # owner-only: the state encodes the prompt, i.e. the schema and sample values of the database
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
                out.write(state)
            tmp.replace(f)
            files = sorted(self.folder.glob("*.kv"), key=lambda p: p.stat().st_mtime)
            for old in files[: max(0, len(files) - self.max_files)]:
                old.unlink(missing_ok=True)
        except OSError:
            pass

    def forget(self, prefix: list[int]) -> None:
        self._file(prefix).unlink(missing_ok=True)


def _seq_rm(ctx: Any, seq: int, p0: int, p1: int) -> None:
    """Remove cells of one sequence, bypassing the sequence-0 guard installed by :func:`_load`."""
    getattr(ctx, "_seq_rm_all", ctx.kv_cache_seq_rm)(seq, p0, p1)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class LocalLLM:
    """A GGUF model run by llama.cpp in this process.

    Prompts are rendered with the model's own chat template (from the GGUF), tokenised here, and
    the system-message prefix is restored from :class:`_PrefixStates` before generation.
    """

    supports_choice_probs = True  # token probabilities straight from the logits
    supports_digit_probs = True
    supports_stream = True  # text handed out after every decoding step; a raising callback stops there
    supports_samples = True  # parallel sequences over one evaluated prompt (MAX_SAMPLES at most)

    def __init__(
        self, model_path: Path, *, n_ctx: int = 8192, n_threads: int | None = None, seed: int = 0,
        temperature: float = 0.0, name: str | None = None, lookup_decoding: bool = True,
        recent_outputs: int = RECENT_OUTPUTS, state_dir: Path | None = None, extra_buffers: bool = True,
    ) -> None:
        self.path = Path(model_path)
        self.name = name or self.path.stem
        self.temperature = temperature
        self.seed = seed
        self.lookup_decoding = lookup_decoding
        self.lookup = LookupStats()  # running totals of prompt-lookup drafting
        self.adaptive_drafts = True  # draft lengths follow acceptance (False: always up to 10; for benchmarks)
        self.min_draft = MIN_DRAFT  # drafts are never cut below this length (1: the pre-floor behaviour)
        self.recent = RecentOutputs(recent_outputs)  # earlier outputs per system prompt, searched for drafts
        self.usage = Usage()
        self.n_threads = n_threads or os.cpu_count() or 2
        self.extra_buffers = extra_buffers
        self._llama, self._prefixes, self._lock = _load(self.path, n_ctx, self.n_threads, seed, extra_buffers)
        self._disk: _DiskStates | None = None  # evaluated system prefixes kept across processes
        if state_dir is not None:
            import llama_cpp

            stat = self.path.stat()
            stamp = f"{self.path.stem}-{stat.st_size}-{stat.st_mtime_ns}-llama-cpp-{llama_cpp.__version__}"
            stamp += "" if extra_buffers else "-plain"  # KV states computed by other kernels are not reused
            self._disk = _DiskStates(Path(state_dir) / stamp)
        self._formatter, self._prefix_formatter = _formatters(self._llama)

    @property
    def n_ctx(self) -> int:
        return int(self._llama.n_ctx())

    def count_tokens(self, text: str) -> int:
        return len(self._tokenize(text))

    def _tokenize(self, text: str) -> list[int]:
        return self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def complete(
        self,
        messages: list[Message],
        *,
        max_tokens: int = 256,
        json_schema: dict[str, Any] | None = None,
        grammar: str | None = None,
        stop: list[str] | None = None,
    ) -> Completion:
        return self._run(messages, max_tokens=max_tokens, json_schema=json_schema, grammar=grammar, stop=stop)

    def stream(self, messages: list[Message], *, on_text: Callable[[str], None], max_tokens: int = 256,
               stop: list[str] | None = None) -> Completion:
        """:meth:`complete` (the same tokens: greedy decoding does not change), the text handed to
        ``on_text`` as it grows, after every decoding step; an exception from ``on_text`` stops the model
        there (the KV cache stays consistent for the next call) and propagates."""
        return self._run(messages, max_tokens=max_tokens, stop=stop, on_text=on_text)

    def _run(self, messages: list[Message], *, max_tokens: int, json_schema: dict[str, Any] | None = None,
             grammar: str | None = None, stop: list[str] | None = None,
             on_text: Callable[[str], None] | None = None) -> Completion:
        from llama_cpp import LlamaGrammar

        rendered, tokens, prefix = self._prompt(messages, max_tokens)
        g = None
        if grammar is not None:
            g = LlamaGrammar.from_string(grammar, verbose=False)
        elif json_schema is not None:
            g = LlamaGrammar.from_json_schema(json.dumps(json_schema), verbose=False)
        stops = list(rendered.stop or []) if isinstance(rendered.stop, list) else ([rendered.stop] if rendered.stop else [])
        stops += list(stop or [])
        start = time.perf_counter()
        with self._lock, _Aborter(self._llama, on_text) as aborter:
            for attempt in range(2):
                try:
                    self._prefixes.ensure(self._llama, prefix, len(tokens) + max_tokens, self._disk)
                    text, n_out = self._generate(tokens, prefix, max_tokens, stops, g, on_text)
                    break
                # llama_decode found no room in the KV cache (fragmented by stored prefixes), or a spilled
                # prefix could not be reloaded: start over from an empty cache once
                except RuntimeError:
                    if aborter.stopped is not None:  # on_text asked to stop during a decode: it was aborted
                        _seq_rm(self._llama._ctx, 0, -1, -1)  # the generating sequence's cells are half-written
                        self._llama.reset()
                        raise aborter.stopped from None
                    if attempt:
                        raise
                    self._prefixes.clear(self._llama)
                    self._llama.reset()
        completion = Completion(
            text=text, prompt_tokens=len(tokens), completion_tokens=n_out, seconds=time.perf_counter() - start,
        )
        self.usage.add(completion)
        return completion


    def sample(self, messages: list[Message], *, n: int, max_tokens: int = 256, temperature: float = 0.7,
               top_p: float = 0.95, seed: int | None = None, stop: list[str] | None = None) -> list[Completion]:
        """``n`` replies sampled at ``temperature`` in parallel sequences of one llama.cpp context: the prompt
        is evaluated once (its KV cells are shared by every sequence, ``llama_memory_seq_cp`` only tags them)
        and each decoding step is one batch with a token per live sequence, so the weights are read once per
        step for all of them (a batch of 8 tokens costs ~2x one token here, not 8x). Deterministic: the
        random stream is seeded from ``seed`` (default: the model's) and the prompt's tokens."""
        if not 1 <= n <= MAX_SAMPLES:
            raise ValueError(f"n must be 1..{MAX_SAMPLES}")
        rendered, tokens, prefix = self._prompt(messages, max_tokens)
        stops = list(rendered.stop or []) if isinstance(rendered.stop, list) else ([rendered.stop] if rendered.stop else [])
        stops += list(stop or [])
        if len(tokens) + n * max_tokens > self.n_ctx:
            raise LLMOutputError(f"{n} samples of {max_tokens} tokens after a {len(tokens)}-token prompt exceed the "
                                 f"{self.n_ctx}-token context", "ask for fewer candidates or raise TAGQL_LLM__N_CTX")
        rng = np.random.default_rng([self.seed if seed is None else seed, *_digest(tokens)])
        start = time.perf_counter()
        with self._lock:
            for attempt in range(2):
                try:
                    self._prefixes.ensure(self._llama, prefix, len(tokens) + n * max_tokens, self._disk)
                    outs = _sample_sequences(self._llama, tokens, n=n, first_seq=self._prefixes.hot + 1,
                                             max_tokens=max_tokens, stops=stops, temperature=temperature,
                                             top_p=top_p, rng=rng)
                    break
                except RuntimeError:  # no room in the KV cache: start over from an empty cache once
                    if attempt:
                        raise
                    self._prefixes.clear(self._llama)
                    self._llama.reset()
        seconds = time.perf_counter() - start
        completions = []
        for out in outs:
            text = self._llama.detokenize(out).decode("utf-8", errors="ignore")
            cut = _first_stop(text, stops)
            completions.append(Completion(text if cut is None else text[:cut], len(tokens), len(out), seconds / n))
        for c in completions:
            self.usage.add(c)
        return completions

    def forget_last_prompt(self) -> None:
        """Keep the stored system prefixes but not the prompt that ran last, so that the next call evaluates
        its prompt after the prefix as it would after any other prompt (a benchmark that asks one question
        twice would otherwise time a prompt that is already in the cache)."""
        with self._lock:
            self._llama.n_tokens = 0

    def forget_cached_prompts(self) -> None:
        """Start the next call from an empty KV cache. Reusing a cached prompt changes how the rest is
        split into batches, and on some CPUs (seen on an AMD EPYC build) that moves the last bits of the
        logits enough to flip a near-tie token; comparisons of decoding methods start from here."""
        with self._lock:
            self._prefixes.clear(self._llama)
            self._llama.reset()

    def _generate(
        self, tokens: list[int], prefix: list[int], max_tokens: int, stops: list[str], grammar: Any,
        on_text: Callable[[str], None] | None = None,
    ) -> tuple[str, int]:
        """(text, number of generated tokens) after ``tokens``; the caller holds the lock and placed the
        prefix. Outputs are remembered per system prefix as draft material for the next calls. With
        ``on_text``, the text so far goes out after every decoding step (what is new since the last)."""
        sent = ""

        def hand_out(text: str) -> None:
            nonlocal sent
            if on_text is not None and len(text) > len(sent) and text.startswith(sent):
                piece, sent = text[len(sent):], text
                on_text(piece)

        if self.lookup_decoding and self.temperature == 0 and grammar is None:
            step = None
            if on_text is not None:
                def step(out: list[int]) -> None:
                    hand_out(self._llama.detokenize(out).decode("utf-8", errors="ignore"))
            text, out, stats = greedy_generate(
                self._llama, tokens, max_tokens=max_tokens, stop=stops,
                stats=LookupStats(trace=[] if self.lookup.trace is not None else None),
                adaptive=self.adaptive_drafts, min_draft=self.min_draft, recent=self.recent.history(prefix),
                on_step=step,
            )
            self.lookup.add(stats)
            self.recent.add(prefix, out)
            hand_out(text)
            return text, len(out)
        from llama_cpp import StoppingCriteriaList

        start = len(tokens)
        kwargs = {"prompt": tokens, "temperature": self.temperature, "max_tokens": max_tokens, "stop": stops,
                  "seed": self.seed, "grammar": grammar,
                  "stopping_criteria": StoppingCriteriaList([lambda ids, _logits: looping(ids[start:])])}
        if on_text is None:
            out = self._llama.create_completion(**kwargs)
            return out["choices"][0]["text"] or "", int(out.get("usage", {}).get("completion_tokens", 0))
        text, n_out = "", 0
        chunks = self._llama.create_completion(**kwargs, stream=True)
        try:
            for chunk in chunks:
                text += chunk["choices"][0]["text"] or ""
                n_out += 1
                hand_out(text)
        finally:
            chunks.close()  # a raising on_text: llama-cpp-python's generator stops at once
        return text, n_out

    def _prompt(self, messages: list[Message], max_tokens: int) -> tuple[Any, list[int], list[int]]:
        """(rendered chat prompt, its tokens, the tokens of its system-message prefix or [])."""
        chat = [{"role": m.role, "content": m.content} for m in messages]
        rendered = self._formatter(messages=chat)
        tokens = self._tokenize(rendered.prompt)
        prefix: list[int] = []
        if messages and messages[0].role == "system":
            head = self._prefix_formatter(messages=chat[:1]).prompt
            if rendered.prompt.startswith(head):
                head_tokens = self._tokenize(head)
                if tokens[: len(head_tokens)] == head_tokens:
                    prefix = head_tokens
        if len(tokens) + max_tokens > self.n_ctx:
            raise LLMOutputError(
                f"prompt of {len(tokens)} tokens (+{max_tokens} to generate) exceeds the {self.n_ctx}-token context",
                "raise TAGQL_LLM__N_CTX or ask about fewer rows",
            )
        return rendered, tokens, prefix

    def _single_token_ids(self, choices: list[str]) -> list[int]:
        ids = [self._tokenize(c) for c in choices]
        bad = [c for c, t in zip(choices, ids) if len(t) != 1]
        if bad:
            raise LLMOutputError(f"{self.name} does not spell {', '.join(map(repr, bad))} as single tokens",
                                 "score with complete() instead")
        return [t[0] for t in ids]

    def digit_probs(self, messages: list[Message], *, slots: int = 1) -> list[list[float]]:
        """The model's probabilities of the digits 0-9 for a reply that is one digit (``slots == 1``) or
        ``slots`` numbered lines ``1: d``, ``2: d``, ... (one LM call, counted in ``usage``).

        The prompt is evaluated once (reusing the KV cache and the saved system prefix like
        :meth:`complete`); per slot the fixed ``N: `` scaffold is fed, the logits of the ten digit
        tokens are read and renormalised (float64, so near-certain answers still differ), and the most
        likely digit is appended - the reply greedy decoding under the equivalent grammar would give.
        """
        return self._choice_probs(messages, [str(d) for d in range(10)], slots)

    def choice_probs(self, messages: list[Message], choices: list[str]) -> list[float]:
        """The model's probabilities of each of ``choices`` (single tokens, e.g. ``yes``/``no``) as the
        whole reply, renormalised over them: what a grammar allowing only those replies would pick
        from, as numbers (one LM call)."""
        return self._choice_probs(messages, choices, 1)[0]

    def _choice_probs(self, messages: list[Message], choices: list[str], slots: int) -> list[list[float]]:
        import numpy as np

        choice_ids = self._single_token_ids(choices)
        _, tokens, prefix = self._prompt(messages, 6 * slots + 2)
        start = time.perf_counter()
        out: list[list[float]] = []
        n_out = 0
        with self._lock:
            llama = self._llama
            self._prefixes.ensure(llama, prefix, len(tokens) + 6 * slots + 2, self._disk)
            keep = min(_common_prefix(llama.input_ids[: llama.n_tokens].tolist(), tokens), len(tokens) - 1)
            llama.n_tokens = keep
            llama.eval(tokens[keep:])  # at least the last prompt token, so its logits exist
            n_vocab = llama.n_vocab()
            for j in range(slots):
                if slots > 1:
                    scaffold = self._tokenize(f"{j + 1}: " if j == 0 else f"\n{j + 1}: ")
                    llama.eval(scaffold)
                    n_out += len(scaffold)
                logits = np.ctypeslib.as_array(llama._ctx.get_logits_ith(-1), shape=(n_vocab,))
                sel = logits[choice_ids].astype(np.float64)
                p = np.exp(sel - sel.max())
                p /= p.sum()
                out.append(p.tolist())
                if j + 1 < slots:
                    llama.eval([choice_ids[int(np.argmax(p))]])
                n_out += 1
        self.usage.add(Completion(text="", prompt_tokens=len(tokens), completion_tokens=n_out,
                                  seconds=time.perf_counter() - start))
        return out


def _flag_reader() -> Any:
    """A C function ``bool f(void *flag)`` that is true when the flag byte is set, for llama.cpp's abort
    callback, or None. It is libc's ``strlen`` over a two-byte buffer: ``"\\0"`` (0: go on) or ``"x"`` (1:
    abort). Why not a Python callback: llama.cpp calls it after every graph node (~1,000 per decode) from its
    compute thread, and each call would take the GIL (waiting up to the 5 ms switch interval whenever another
    thread, e.g. the service's event loop, runs Python), stalling every compute thread at the next barrier."""
    import ctypes
    import ctypes.util

    import llama_cpp

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else ctypes.CDLL(None)
        return ctypes.cast(libc.strlen, llama_cpp.ggml_abort_callback)
    except (OSError, AttributeError):
        return None


class _Aborter:
    """While a streaming call runs, a watcher thread asks ``on_text("")`` every ``every_s`` whether to go on
    (a piece with no text); once that raises, it sets a flag llama.cpp's abort callback reads without Python
    (:func:`_flag_reader`), so the decode in progress -- a whole prompt evaluation is one decode -- aborts
    after its current graph node, and every later one at once. The exception is kept in ``stopped`` for the
    caller to raise. Aborting never changes what a decode that completes computes."""

    every_s = 0.05
    _reader: Any = None

    def __init__(self, llama: Any, on_text: Callable[[str], None] | None) -> None:
        self.llama, self.on_text = llama, on_text
        self.stopped: BaseException | None = None
        self._watcher: threading.Thread | None = None
        self._done = threading.Event()

    def __enter__(self) -> _Aborter:
        if self.on_text is None:
            return self
        import ctypes

        import llama_cpp

        if _Aborter._reader is None:
            _Aborter._reader = _flag_reader() or False
        if not _Aborter._reader:
            return self  # no libc to read the flag: stops come between decoding steps only
        self._flag = ctypes.create_string_buffer(2)
        llama_cpp.llama_set_abort_callback(self.llama._ctx.ctx, _Aborter._reader,
                                           ctypes.cast(self._flag, ctypes.c_void_p))
        self._watcher = threading.Thread(target=self._watch, name="tagql-llm-stop", daemon=True)
        self._watcher.start()
        return self

    def _watch(self) -> None:
        while not self._done.wait(self.every_s):
            try:
                self.on_text("")  # type: ignore[misc]
            except BaseException as exc:  # noqa: BLE001 - kept and raised by the generating thread
                self.stopped = exc
                self._flag[0] = b"x"
                return

    def __exit__(self, *exc: Any) -> None:
        if self._watcher is not None:
            import llama_cpp

            self._done.set()
            self._watcher.join()
            llama_cpp.llama_set_abort_callback(self.llama._ctx.ctx, llama_cpp.ggml_abort_callback(), None)
            self._watcher = None


def _digest(tokens: list[int]) -> list[int]:
    """Four 32-bit words that identify a prompt, mixed into the sampling seed (each prompt its own stream)."""
    raw = hashlib.blake2b(np.asarray(tokens, dtype=np.int64).tobytes(), digest_size=16).digest()
    return [int.from_bytes(raw[i:i + 4], "little") for i in range(0, 16, 4)]


def _draw(logits: np.ndarray, temperature: float, top_p: float, rng: np.random.Generator) -> int:
    """One token from ``softmax(logits / temperature)`` cut to its top-``top_p`` nucleus."""
    top = np.argpartition(logits, -64)[-64:]  # the nucleus of a 0.95 cut lies far inside the top 64
    top = top[np.argsort(-logits[top], kind="stable")]
    z = (logits[top] - logits[top[0]]) / max(temperature, 1e-5)
    p = np.exp(z)
    p /= p.sum()
    keep = int(np.searchsorted(np.cumsum(p), top_p)) + 1
    p = p[:keep] / p[:keep].sum()
    return int(top[rng.choice(keep, p=p)])


def _sample_sequences(llama: Any, prompt: list[int], *, n: int, first_seq: int, max_tokens: int, stops: list[str],
                      temperature: float, top_p: float, rng: np.random.Generator) -> list[list[int]]:
    """The token lists of ``n`` sampled continuations of ``prompt`` (see :meth:`LocalLLM.sample`). Sequence 0
    ends holding the prompt (``llama``'s counters in step, for the next call's prefix reuse); the sampling
    sequences ``first_seq ..`` are emptied again."""
    import llama_cpp

    ctx = llama._ctx
    vocab = llama._model.vocab
    n_vocab = llama.n_vocab()
    eval_prompt(llama, prompt)  # sequence 0; the last prompt token's logits are the first step's
    first = np.ctypeslib.as_array(ctx.get_logits_ith(-1), shape=(n_vocab,)).copy()
    seqs = list(range(first_seq, first_seq + n))
    batch = llama_cpp.llama_batch_init(n, 0, 1)
    outs: list[list[int]] = [[] for _ in seqs]
    try:
        for seq in seqs:
            _seq_rm(ctx, seq, -1, -1)
            ctx.kv_cache_seq_cp(0, seq, 0, len(prompt))
        pending = [_draw(first, temperature, top_p, rng) for _ in seqs]
        live = list(range(n))
        while True:
            still = []
            for i in live:
                tok = pending[i]
                if llama_cpp.llama_vocab_is_eog(vocab, tok) or len(outs[i]) >= max_tokens:
                    continue
                outs[i].append(tok)
                text = llama.detokenize(outs[i]).decode("utf-8", errors="ignore")
                if _first_stop(text, stops) is None and not looping(outs[i]) and len(outs[i]) < max_tokens:
                    still.append(i)
            live = still
            if not live:
                break
            batch.n_tokens = len(live)
            for row, i in enumerate(live):
                batch.token[row] = outs[i][-1]
                batch.pos[row] = len(prompt) + len(outs[i]) - 1
                batch.n_seq_id[row] = 1
                batch.seq_id[row][0] = seqs[i]
                batch.logits[row] = True
            if int(llama_cpp.llama_decode(ctx.ctx, batch)) != 0:
                raise RuntimeError("llama_decode found no room for the sampled sequences")
            for row, i in enumerate(live):
                logits = np.ctypeslib.as_array(ctx.get_logits_ith(row), shape=(n_vocab,))
                pending[i] = _draw(logits, temperature, top_p, rng)
    finally:
        llama_cpp.llama_batch_free(batch)
        for seq in seqs:
            _seq_rm(ctx, seq, -1, -1)
    return outs


def _formatters(llama: Any) -> tuple[Any, Any]:
    """Chat formatters from the GGUF's own template: one for prompts, one for the system prefix."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    template = llama.metadata.get("tokenizer.chat_template")
    if not template:
        raise LLMUnavailable("the GGUF has no chat template", "use an instruct/chat model")
    eos_id, bos_id = llama.token_eos(), llama.token_bos()
    eos = llama._model.token_get_text(eos_id) if eos_id >= 0 else ""
    bos = llama._model.token_get_text(bos_id) if bos_id >= 0 else ""
    kw = {"template": template, "eos_token": eos, "bos_token": bos, "stop_token_ids": [eos_id]}
    return Jinja2ChatFormatter(**kw), Jinja2ChatFormatter(**kw, add_generation_prompt=False)
