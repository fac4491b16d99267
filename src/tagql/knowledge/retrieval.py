"""Retrieval methods over a repository of structured statements, selectable by name.

Every method scores all candidate statements for a question; :class:`IndexRetriever` turns the
scores into the top-K :class:`ScoredStatement` list the pipeline consumes. The statement side
(canonical text parts, their embeddings, BM25 statistics) is prepared once in :class:`Corpus`;
the question side is computed per call, in one embedding batch.

Methods:
- ``none`` / ``all``: the paper's no-knowledge and whole-repository baselines.
- ``bm25``: Okapi BM25 of the whole question against the text parts.
- ``dense``: cosine of the whole-question embedding with the text-part embeddings.
- ``sbr``: the paper's sub-string retrieval: contiguous word windows of the canonical question with
  lengths in ``[min|d.x| - n, max|d.x| + n]``, one batch; a statement's score is its best window
  among those with length within ``|d.x| ± n`` (the paper's equation).
- ``hybrid`` (ours, the default): SbR's best-window cosine fused with normalised BM25 and a
  value-aware bonus for quoted constants of the SQL snippet that occur in the question, after a
  cheap lexical+dense first stage that caps the candidates, so large repositories stay fast; then
  a re-ranking that demotes statements repeating an already chosen SQL snippet.
- ``hybrid-fast``: the same, with window embeddings pooled from ONE transformer pass over the
  question (lower latency, lower F1).
- ``hybrid-static``: the same fusion with a static token-embedding model distilled from MiniLM
  (:mod:`tagql.knowledge.static`): window embeddings are prefix-sum means of token vectors, so no
  transformer runs per question (~1 ms at 188 statements), plus a bonus when a statement's whole
  text part occurs verbatim in the question (a smaller one when it occurs with the same letter
  case), and BM25 over Snowball stems (:func:`tagql.text.stem`: "elements" matches "element").

The per-question path is vectorised (BM25 by one gather + bincount in :class:`tagql.text.BM25`, phrase
bonuses through an index keyed by first token, partial sorting of the top candidates), so it does not
loop over statements.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from tagql.embeddings import Embedder, EmbeddingUnavailable, Progress, TokenEmbedder
from tagql.errors import TagqlError
from tagql.knowledge import ScoredStatement
from tagql.knowledge.canon import canonicalise, tokens, words
from tagql.text import BM25, stem

METHODS = ("none", "all", "bm25", "dense", "sbr", "hybrid", "hybrid-fast", "hybrid-static", "sbr-mpnet")
DEFAULT_K = 3  # at most this many statements when the caller leaves K to the retriever
DEFAULT_METHOD = "hybrid-static"  # best macro F1 (0.859) at ~1 ms per question; docs/knowledge.md
MAX_QUESTION_WORDS = 64  # longer questions: windows over the first 64 words only (bounded latency); BM25 sees all


class UnknownMethod(TagqlError):
    hint = "use one of: " + ", ".join(METHODS)


_SQL_TOKEN = re.compile(r"'[^']*'|\w+")
_LITERAL = re.compile(r"'([^']{2,60})'|\"([^\"]{2,60})\"")


def sql_literals(sql: str) -> list[str]:
    """Quoted string constants of an SQL snippet that are words (not codes like '+', '%Y')."""
    out = []
    for a, b in _LITERAL.findall(sql or ""):
        lit = (a or b).strip()
        if re.search(r"[A-Za-z]{2,}", lit) and not lit.startswith("%"):
            out.append(lit.lower())
    return out


@dataclass
class Corpus:
    """The statement side of retrieval, built once per repository snapshot."""

    texts: list[str]  # text parts (as stored)
    sqls: list[str]
    embeddings: np.ndarray  # (n, dim) L2-normalised embeddings of canonicalise(text)
    ids: list[int] = field(default_factory=list)
    # indexes of statements left out when the retriever picks K for a prompt: their validation reason
    # holds them back (validate.holds_back: a missing table or column, a constant the data lacks; an
    # explicit K, the evidence-F1 protocol, still sees them)
    held_back: frozenset[int] = frozenset()
    k1: float = 1.5
    b: float = 0.75

    def __post_init__(self) -> None:
        n = len(self.texts)
        if not self.ids:
            self.ids = list(range(n))
        self.lengths = np.array([max(1, len(words(t))) for t in self.texts], dtype=np.int32)
        self._tok = [tokens(t) for t in self.texts]
        # inverted index with precomputed BM25 term weights: a question costs one gather per
        # distinct question token and one bincount
        self._bm25 = BM25(self._tok, self.k1, self.b)
        self._stem_bm25: BM25 | None = None  # the same over stemmed tokens, built on first use
        self._case_index: _PhraseIndex | None = None
        # statements whose text part names a specific instance by an identifier ('bond TR001_10_11')
        self._instance_ids = {i: ids for i, t in enumerate(self._tok) if (ids := instance_ids(t))}
        self._literals = [sql_literals(s) for s in self.sqls]
        # phrase indexes: first token -> [(the phrase's tokens, statement index)], for the SQL
        # snippet's quoted word-constants and for the whole text part
        self._lit_index = _phrase_index((tokens(lit), i) for i, lits in enumerate(self._literals) for lit in lits)
        self._text_index = _phrase_index((toks, i) for i, toks in enumerate(self._tok))
        self._sql_toks: dict[int, set[str]] = {}
        self._static: tuple[object, np.ndarray] | None = None
        self._static_low: tuple[np.ndarray, np.ndarray] | None = None

    def sql_tokens(self, i: int) -> set[str]:
        """Token set of statement i's SQL snippet (its text when it has none), memoised."""
        t = self._sql_toks.get(i)
        if t is None:
            t = self._sql_toks[i] = set(_SQL_TOKEN.findall((self.sqls[i] or self.texts[i]).lower()))
        return t

    def static_embeddings(self, model) -> np.ndarray:
        """(n, dim) static-model embeddings of the canonical text parts, computed once per corpus."""
        if self._static is None or self._static[0] is not model:
            self._static = (model, model.embed_words([words(t) for t in self.texts]))
            self._static_low = None
        return self._static[1]

    def static_low(self, model, dims: int = 64) -> tuple[np.ndarray, np.ndarray]:
        """(basis (dim, dims), statements projected (n, dims)): the top principal directions of the
        statement vectors, for a first stage that reads 6x less memory per question than the full
        vectors (the candidates it keeps are then scored with the full vectors). Computed once."""
        emb = self.static_embeddings(model)
        if getattr(self, "_static_low", None) is None:
            sample = emb[:: max(1, len(emb) // 4096)]  # a deterministic subsample bounds the SVD cost
            _, _, vt = np.linalg.svd(sample - sample.mean(axis=0), full_matrices=False)
            basis = np.ascontiguousarray(vt[:dims].T, dtype=np.float32)
            self._static_low = (basis, np.ascontiguousarray(emb @ basis))
        return self._static_low

    def __len__(self) -> int:
        return len(self.texts)

    # -- lexical ---------------------------------------------------------------------------------
    def bm25(self, question: str) -> np.ndarray:
        """Okapi BM25 of the question (each occurrence of a question token counts) for every statement."""
        return self._bm25.scores(tokens(question))

    def stemmed_bm25(self, question: str) -> np.ndarray:
        """:meth:`bm25` over Snowball stems ("elements" matches "element", "carbons" "carbon")."""
        if self._stem_bm25 is None:
            self._stem_bm25 = BM25([[stem(w) for w in t] for t in self._tok], self.k1, self.b)
        return self._stem_bm25.scores([stem(w) for w in tokens(question)])

    def literal_hits(self, question: str, candidates: np.ndarray) -> np.ndarray:
        """1.0 where a quoted word-constant of the statement's SQL occurs in the question (token-wise)."""
        return _phrase_hits(self._lit_index, tokens(question), candidates)

    def text_hits(self, question: str, candidates: np.ndarray) -> np.ndarray:
        """1.0 where the statement's whole text part occurs verbatim (token-wise) in the question."""
        return _phrase_hits(self._text_index, tokens(question), candidates)

    def case_hits(self, question: str, candidates: np.ndarray) -> np.ndarray:
        """1.0 where the statement's whole text part occurs in the question with the same letter case
        ('chlorine' in "atoms with chlorine element", not 'Chlorine'): a tie-break between statements
        whose text parts differ only in case."""
        if self._case_index is None:
            self._case_index = _phrase_index((cased_tokens(t), i) for i, t in enumerate(self.texts))
        return _phrase_hits(self._case_index, cased_tokens(question), candidates)

    def foreign_instances(self, question: str) -> np.ndarray:
        """Indices of statements whose text part names an identifier (see :func:`instance_ids`)
        that the question does not name: statements about another instance."""
        if not self._instance_ids:
            return np.zeros(0, dtype=np.int64)
        q = set(tokens(question))
        return np.array([i for i, ids in self._instance_ids.items() if not ids <= q], dtype=np.int64)


_IDENT = re.compile(r"(?=[a-z_]*\d)(?=\d*[a-z])\w{4,}")  # letters and digits, >= 4 characters
_ORDINAL_OR_UNIT = re.compile(r"\d+[a-z]{1,2}")  # 1st, 2nd, 100m, 5k: quantities, not names


def instance_ids(toks: list[str]) -> frozenset[str]:
    """Identifier tokens among lowercased tokens: letters and digits mixed, >= 4 characters, not an
    ordinal or a number with a unit ('tr001_10_11', 'tr060', 'rec4bldzhs2blfp4v'; not 'a12', '1st',
    '100' placeholders)."""
    return frozenset(w for w in toks if _IDENT.fullmatch(w) and not _ORDINAL_OR_UNIT.fullmatch(w))


_CASED = re.compile(r"\w+")


def cased_tokens(text: str) -> list[str]:
    """``\\w+`` tokens of the canonical text, letter case kept."""
    return _CASED.findall(canonicalise(text))


class _PhraseIndex:
    """Exact phrase -> statement indices, with the set of phrase lengths present, so a question is
    matched by looking up its n-grams of those lengths: O(question tokens x distinct lengths),
    independent of the corpus size and of how many phrases share a first word."""

    def __init__(self, phrases) -> None:
        self.map: dict[tuple[str, ...], list[int]] = {}
        for toks, i in phrases:
            if toks:
                self.map.setdefault(tuple(toks), []).append(i)
        self.lengths = sorted({len(t) for t in self.map})

    def hits(self, qt: list[str]) -> set[int]:
        out: set[int] = set()
        get = self.map.get
        for n in self.lengths:
            if n > len(qt):
                break
            for j in range(len(qt) - n + 1):
                ids = get(tuple(qt[j : j + n]))
                if ids:
                    out.update(ids)
        return out


def _phrase_index(phrases) -> _PhraseIndex:
    return _PhraseIndex(phrases)


def _phrase_hits(index: _PhraseIndex, qt: list[str], candidates: np.ndarray) -> np.ndarray:
    """Per candidate, 1.0 if one of its phrases occurs contiguously in the question tokens ``qt``."""
    hit = index.hits(qt)
    if not hit:
        return np.zeros(len(candidates), dtype=np.float32)
    return np.fromiter((1.0 if int(i) in hit else 0.0 for i in candidates), dtype=np.float32, count=len(candidates))


def question_windows(question: str, lo: int, hi: int) -> tuple[list[str], np.ndarray]:
    """Contiguous word windows of the canonical question with lengths in [lo, hi]."""
    ws = words(question)[:MAX_QUESTION_WORDS]
    lo = max(1, lo)
    hi = min(max(lo, hi), len(ws))
    texts, lens = [], []
    for L in range(lo, hi + 1):
        for i in range(len(ws) - L + 1):
            texts.append(" ".join(ws[i : i + L]))
            lens.append(L)
    if not texts and ws:  # a question shorter than every window length: use it whole
        texts, lens = [" ".join(ws)], [len(ws)]
    return texts, np.array(lens, dtype=np.int32)


def pooled_windows(embedder: Embedder, question: str, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Window embeddings from ONE transformer pass: mean of the contextual token vectors of each
    window's words (MiniLM's own pooling is a mean, so this approximates embedding each window
    alone, with the rest of the question as context). ~10x cheaper than embedding every window.
    None when the embedder is no :class:`~tagql.embeddings.TokenEmbedder` (then embed windows one by one)."""
    if not isinstance(embedder, TokenEmbedder):
        return None
    ws = words(question)[:MAX_QUESTION_WORDS]
    if not ws:
        return np.zeros((0, embedder.dim), dtype=np.float32), np.zeros(0, dtype=np.int32)
    text = " ".join(ws)
    starts = np.cumsum([0] + [len(w) + 1 for w in ws[:-1]])
    vec, offs = embedder.token_vectors(text)
    n = min(len(offs), len(vec))
    word_of = np.full(n, -1)
    for t in range(n):
        a, b = offs[t]
        if b > a:
            word_of[t] = int(np.searchsorted(starts, a, side="right") - 1)
    nw = int(word_of.max()) + 1 if (word_of >= 0).any() else 0
    if nw == 0:
        return np.zeros((0, embedder.dim), dtype=np.float32), np.zeros(0, dtype=np.int32)
    sums = np.zeros((nw, vec.shape[1]), dtype=np.float32)
    cnts = np.zeros(nw, dtype=np.float32)
    for t in range(n):
        if word_of[t] >= 0:
            sums[word_of[t]] += vec[t]
            cnts[word_of[t]] += 1
    csum = np.vstack([np.zeros((1, vec.shape[1]), dtype=np.float32), np.cumsum(sums, axis=0)])
    ccnt = np.concatenate([[0.0], np.cumsum(cnts)])
    lo, hi = max(1, lo), min(max(1, hi), nw)
    embs, lens = [], []
    for L in range(lo, hi + 1):
        e = (csum[L:] - csum[:-L]) / np.maximum(ccnt[L:] - ccnt[:-L], 1.0)[:, None]
        embs.append(e)
        lens.append(np.full(len(e), L, dtype=np.int32))
    if not embs:
        e = csum[-1:] / max(ccnt[-1], 1.0)
        embs, lens = [e], [np.array([nw], dtype=np.int32)]
    out = np.vstack(embs)
    out /= np.linalg.norm(out, axis=1, keepdims=True) + 1e-9
    return out.astype(np.float32), np.concatenate(lens)


def best_window_scores(
    win_emb: np.ndarray, win_len: np.ndarray, stmt_emb: np.ndarray, stmt_len: np.ndarray, n: int
) -> np.ndarray:
    """The paper's equation: per statement, max cosine over windows with | |w| - |d.x| | <= n."""
    if len(win_emb) == 0 or len(stmt_emb) == 0:
        return np.zeros(len(stmt_emb), dtype=np.float32)
    sims = win_emb @ stmt_emb.T  # (W, D)
    ok = np.abs(win_len[:, None] - stmt_len[None, :]) <= n
    sims = np.where(ok, sims, -1.0)
    return sims.max(axis=0)


@dataclass
class Method:
    """Scores candidate statements for a question. ``needs_embedder`` tells the caller to load one."""

    name: str
    needs_embedder: bool = False
    # Statements scoring below this are not offered when the caller leaves K to the retriever
    # (None: no floor). Scores are on the method's own scale, so each method sets its own.
    floor: float | None = None

    def score(self, corpus: Corpus, question: str, embedder: Embedder | None) -> tuple[np.ndarray, np.ndarray]:
        """(candidate indices, scores), higher is better."""
        raise NotImplementedError

    def rerank(self, corpus: Corpus, ranked: list[tuple[int, float]], k: int) -> list[tuple[int, float]]:
        """Optional final re-ordering of the ranked list for a top-k cut (identity by default)."""
        return ranked

    def bind(self, embedder: Embedder, *, cache_dir=None, progress: Progress | None = None) -> None:
        """Optional: derive the method's own model from the caller's embedder (e.g. static token
        vectors distilled from it, once; ``progress`` hears about a long first-use step)."""

    def prepare(self, corpus: Corpus, memo: dict) -> int:
        """Optional per-corpus index built ahead of the first question, reusing ``memo`` (kept by
        the caller across corpus rebuilds, e.g. a live store). Returns how many items were computed."""
        return 0


class NoneMethod(Method):
    def __init__(self) -> None:
        super().__init__("none")

    def score(self, corpus, question, embedder):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)


class AllMethod(Method):
    def __init__(self) -> None:
        super().__init__("all")

    def score(self, corpus, question, embedder):
        return np.arange(len(corpus)), np.ones(len(corpus), dtype=np.float32)


class BM25Method(Method):
    def __init__(self) -> None:
        super().__init__("bm25")

    def score(self, corpus, question, embedder):
        return np.arange(len(corpus)), corpus.bm25(question)


class DenseMethod(Method):
    def __init__(self) -> None:
        super().__init__("dense", needs_embedder=True)

    def score(self, corpus, question, embedder):
        q = embedder.embed([canonicalise(question)[:2000]])[0]
        return np.arange(len(corpus)), corpus.embeddings @ q


class SbRMethod(Method):
    """The paper's sub-string retrieval, unchanged."""

    def __init__(self, n: int = 2) -> None:
        super().__init__("sbr", needs_embedder=True)
        self.n = n

    def score(self, corpus, question, embedder):
        idx = np.arange(len(corpus))
        if not len(corpus):
            return idx, np.zeros(0, dtype=np.float32)
        lo, hi = int(corpus.lengths.min()) - self.n, int(corpus.lengths.max()) + self.n
        texts, lens = question_windows(question, lo, hi)
        emb = embedder.embed(texts)
        return idx, best_window_scores(emb, lens, corpus.embeddings, corpus.lengths, self.n)


class SbRModelMethod(SbRMethod):
    """The paper's SbR with the paper's own embedder (``sbr-mpnet``: all-mpnet-base-v2), a baseline.
    Statements are embedded by that model once per corpus; the caller's embedder is not used."""

    def __init__(self, n: int = 2, model: str = "mpnet") -> None:
        super().__init__(n=n)
        self.name, self.needs_embedder, self._emb = f"sbr-{model}", False, None

    def embedder(self) -> Embedder:
        if self._emb is None:
            from tagql.knowledge.mpnet import mpnet_embedder

            self._emb = mpnet_embedder()
        return self._emb

    def score(self, corpus, question, embedder):
        emb = self.embedder()
        cached = getattr(corpus, "_sbr_model", None)
        if cached is None or cached[0] is not emb:
            cached = (emb, emb.embed([canonicalise(t) for t in corpus.texts]) if len(corpus)
                      else np.zeros((0, emb.dim), dtype=np.float32))
            corpus._sbr_model = cached  # type: ignore[attr-defined]
        idx = np.arange(len(corpus))
        if not len(corpus):
            return idx, np.zeros(0, dtype=np.float32)
        lo, hi = int(corpus.lengths.min()) - self.n, int(corpus.lengths.max()) + self.n
        texts, lens = question_windows(question, lo, hi)
        return idx, best_window_scores(emb.embed(texts), lens, cached[1], corpus.lengths, self.n)


class HybridMethod(Method):
    """Ours: SbR windows + normalised BM25 + value-aware literal bonus, with a first stage.

    Why each part: BM25 catches rare exact words (codes, names) that MiniLM blurs; SbR catches
    paraphrases and statements that match only part of the question; the literal bonus rewards a
    statement whose SQL constant (e.g. 'Shrine Keeper') is literally asked about. The first stage
    (BM25 + whole-question cosine, top ``candidates``) keeps the window x statement matrix small on
    large repositories. Window lengths are capped at ``max_window`` words: longer text parts are
    still matched (by their best short window and by BM25), and the embedding batch stays small.
    """

    def __init__(self, n: int = 2, w_bm25: float = 0.3, w_literal: float = 0.1, candidates: int = 256,
                 max_window: int = 12, pooled: int = 0, diversity: float = 0.3) -> None:
        super().__init__("hybrid-fast" if pooled else "hybrid", needs_embedder=True)
        self.n, self.w_bm25, self.w_literal, self.diversity = n, w_bm25, w_literal, diversity
        self.candidates, self.max_window, self.pooled = candidates, max_window, pooled

    def score(self, corpus, question, embedder):
        if not len(corpus):
            return np.arange(0), np.zeros(0, dtype=np.float32)
        bm = corpus.bm25(question)
        lo = int(corpus.lengths.min()) - self.n
        hi = min(int(corpus.lengths.max()) + self.n, self.max_window)
        pooled = pooled_windows(embedder, question, lo, hi) if self.pooled else None
        if pooled is not None:
            win_emb, lens = pooled
            q_emb = embedder.embed([canonicalise(question)[:2000]])[0] if len(corpus) > self.candidates else None
        else:
            texts, lens = question_windows(question, lo, hi)
            # the whole question rides along in the same batch for the first stage
            emb = embedder.embed(texts + [canonicalise(question)[:2000]])
            win_emb, q_emb = emb[:-1], emb[-1]
        if len(corpus) > self.candidates:
            bm_n = bm / (bm.max() + 1e-6)
            first = corpus.embeddings @ q_emb + bm_n
            cand = np.argpartition(-first, self.candidates - 1)[: self.candidates]
        else:
            cand = np.arange(len(corpus))
        stmt_len = np.minimum(corpus.lengths[cand], hi)
        sbr = best_window_scores(win_emb, lens, corpus.embeddings[cand], stmt_len, self.n)
        bmc = bm[cand]
        bm_n = bmc / (bmc.max() + 1e-6) if len(bmc) else bmc
        lit = corpus.literal_hits(question, cand)
        return cand, sbr + self.w_bm25 * bm_n + self.w_literal * lit

    def rerank(self, corpus: Corpus, ranked: list[tuple[int, float]], k: int) -> list[tuple[int, float]]:
        return diversify(corpus, ranked, k, self.diversity) if self.diversity else ranked


# Score floor of ``hybrid-static`` when K is left to the retriever (a best-window cosine of ~0.85 plus
# some lexical evidence). Why: a 1.5B SQL model applies every statement it is shown, so a near-miss
# ("element is hydrogen" for a question about no element) becomes a wrong WHERE clause. Chosen with
# K <= DEFAULT_K by evidence F1 with K left to the rule, on the 8 BIRD databases the execution
# benchmark does not use: 0.846, vs 0.552 for a fixed K = 4. docs/knowledge.md has the figures.
HYBRID_STATIC_FLOOR = 1.15


class StaticHybridMethod(HybridMethod):
    """``hybrid`` with a static token-embedding model (distilled from MiniLM, :mod:`.static`) instead
    of running MiniLM per window: every window's embedding is a mean of static token vectors from
    prefix sums over the question, statements are embedded by the same model once per corpus. The
    first stage (BM25 + static whole-question cosine), the BM25 and literal fusion and the
    SQL-diversity re-ranking are ``hybrid``'s. No transformer runs per question.

    Lexical extras over ``hybrid``: ``w_text`` when the statement's whole text part occurs in the
    question; ``stem`` stems both sides of BM25 ("How many carbons" reaches 'carbon',
    "What elements" the 'atom.element' statements' texts); ``w_case`` (small, a tie-break) when the
    text part occurs with the same letter case, so of two statements whose texts differ only in case
    ('Chlorine' / 'chlorine', both kept by their authors) the one the question's spelling matches
    ranks first. ``instances`` leaves out statements whose text part names an identifier the question
    does not name ('bond TR001_10_11' for a question about bond TR000_2_3): a statement about another
    instance only offers the SQL generator a wrong constant to copy, and a small model copies it
    (measured: bench/knowledge/exec_accuracy.py). The next statements take their places. Measured
    effect and how the weights were chosen: docs/knowledge.md."""

    def __init__(self, n: int = 2, w_bm25: float = 0.3, w_literal: float = 0.1, candidates: int = 256,
                 max_window: int = 12, diversity: float = 0.3, w_text: float = 0.1,
                 w_case: float = 0.01, stem: int = 1, instances: int = 1,
                 floor: float | None = HYBRID_STATIC_FLOOR, model=None) -> None:
        super().__init__(n=n, w_bm25=w_bm25, w_literal=w_literal, candidates=candidates,
                         max_window=max_window, diversity=diversity)
        self.name, self.needs_embedder = "hybrid-static", False
        self.floor = floor
        self.w_text, self.w_case, self.stem, self.instances = w_text, w_case, stem, instances
        self._model = model

    def bind(self, embedder: Embedder, *, cache_dir=None, progress: Progress | None = None) -> None:
        if self._model is None:
            if not isinstance(embedder, TokenEmbedder):
                raise EmbeddingUnavailable(f"{self.name} distils its vectors from a transformer embedder,"
                                           f" not {embedder.name}")
            from tagql.knowledge.static import load_static

            self._model = load_static(embedder, cache_dir, progress=progress)

    @property
    def model(self):
        if self._model is None:
            raise EmbeddingUnavailable(f"retrieval method {self.name} has no static model",
                                       "pass an embedder (or model=) to the retriever")
        return self._model

    def prepare(self, corpus: Corpus, memo: dict) -> int:
        """Static embeddings of the corpus texts, computing only texts not in ``memo`` (text -> vector);
        ``memo`` is pruned to the corpus's texts."""
        model = self.model
        todo = [t for t in dict.fromkeys(corpus.texts) if t not in memo]
        if todo:
            memo.update(zip(todo, model.embed_words([words(t) for t in todo])))
        live = set(corpus.texts)
        for t in [t for t in memo if t not in live]:
            del memo[t]
        emb = (np.stack([memo[t] for t in corpus.texts]) if len(corpus)
               else np.zeros((0, model.dim), dtype=np.float32))
        corpus._static = (model, emb)
        corpus._static_low = None
        return len(todo)

    def score(self, corpus, question, embedder):
        if not len(corpus):
            return np.arange(0), np.zeros(0, dtype=np.float32)
        model = self.model
        stmt = corpus.static_embeddings(model)
        bm = corpus.stemmed_bm25(question) if self.stem else corpus.bm25(question)
        lo = int(corpus.lengths.min()) - self.n
        hi = min(int(corpus.lengths.max()) + self.n, self.max_window)
        ws = words(question)[:MAX_QUESTION_WORDS]
        win_emb, lens = model.window_embeddings(ws, lo, hi)
        if len(corpus) > self.candidates:
            q = model.embed_words([ws])[0]
            basis, low = corpus.static_low(model)
            first = low @ (q @ basis) + bm / (bm.max() + 1e-6)
            cand = np.argpartition(-first, self.candidates - 1)[: self.candidates]
        else:
            cand = np.arange(len(corpus))
        stmt_len = np.minimum(corpus.lengths[cand], hi)
        sbr = best_window_scores(win_emb, lens, stmt[cand], stmt_len, self.n)
        bmc = bm[cand]
        bm_n = bmc / (bmc.max() + 1e-6)
        lit = corpus.literal_hits(question, cand)
        out = sbr + self.w_bm25 * bm_n + self.w_literal * lit
        if self.w_text:
            out += self.w_text * corpus.text_hits(question, cand)
        if self.w_case:
            out += self.w_case * corpus.case_hits(question, cand)
        if self.instances:
            foreign = corpus.foreign_instances(question)
            if len(foreign):
                keep = ~np.isin(cand, foreign)
                cand, out = cand[keep], out[keep]
        return cand, out


RERANK_POOL = 50  # how many of the best statements the re-ranking looks at


def diversify(corpus: Corpus, ranked: list[tuple[int, float]], k: int, weight: float,
              pool: int = RERANK_POOL) -> list[tuple[int, float]]:
    """Greedy re-ranking that demotes a statement whose SQL snippet repeats one already chosen
    (score - weight x Jaccard of snippet tokens). Why: two statements mapping to the same SQL
    ('Sodium', 'sodium atoms' -> atom.element = 'na') add nothing for the SQL generator, while the
    slot could carry a different hint the question also needs."""
    head, tail = ranked[:pool], ranked[pool:]
    toks = {i: corpus.sql_tokens(i) for i, _ in head}
    chosen: list[tuple[int, float]] = []
    left = list(head)
    while left and len(chosen) < max(k, 1):
        best_j, best_v = 0, -1e9
        for j, (i, s) in enumerate(left):
            red = max((len(toks[i] & toks[c]) / max(1, len(toks[i] | toks[c])) for c, _ in chosen), default=0.0)
            v = s - weight * red
            if v > best_v:
                best_j, best_v = j, v
        chosen.append(left.pop(best_j))
    return chosen + left + tail


def make_method(name: str, **params: float) -> Method:
    factories = {"none": NoneMethod, "all": AllMethod, "bm25": BM25Method, "dense": DenseMethod,
                 "sbr": SbRMethod, "hybrid": HybridMethod, "hybrid-static": StaticHybridMethod,
                 "sbr-mpnet": SbRModelMethod}
    if name == "hybrid-fast":  # one transformer pass: windows pooled from contextual token vectors
        return HybridMethod(**({"pooled": 1} | params))  # type: ignore[arg-type]
    if name not in factories:
        raise UnknownMethod(f"unknown retrieval method {name!r}")
    return factories[name](**params)  # type: ignore[arg-type]


def gap_k(scores: Sequence[float], k_max: int, min_k: int = 1, ratio: float = 0.85) -> int:
    """A K chosen by the score gap: keep statements scoring at least ``ratio`` x the best one."""
    if not len(scores):
        return 0
    top = float(scores[0])
    k = sum(1 for s in scores[:k_max] if s >= ratio * top)
    return max(min(min_k, len(scores)), k)


class IndexRetriever:
    """A :class:`tagql.knowledge.Retriever` over a prepared corpus with one method."""

    def __init__(self, corpus: Corpus, method: Method | str = DEFAULT_METHOD, embedder: Embedder | None = None,
                 default_k: int = DEFAULT_K, auto_k: bool = False, *, cache_dir=None,
                 progress: Progress | None = None) -> None:
        self.corpus = corpus
        self.method = make_method(method) if isinstance(method, str) else method
        if self.method.needs_embedder and embedder is None:
            raise EmbeddingUnavailable(f"retrieval method {self.method.name} needs an embedder",
                                       "pass embedder= (tagql.embeddings.make_embedder)")
        if embedder is not None:
            self.method.bind(embedder, cache_dir=cache_dir, progress=progress)
        self.embedder = embedder
        self.default_k = default_k
        self.auto_k = auto_k

    def ranked(self, question: str, top: int | None = None) -> list[tuple[int, float]]:
        """(corpus index, score), best first; ties keep repository order. With ``top``, only the
        best ``top`` (plus any tied with the last of them) are sorted and returned: on a 20,000
        statement corpus that avoids sorting and boxing every score per question."""
        with single_thread_blas():
            cand, scores = self.method.score(self.corpus, question or "", self.embedder)
        if top is not None and len(scores) > top:
            cut = np.partition(scores, len(scores) - top)[len(scores) - top]
            keep = np.flatnonzero(scores >= cut)
            cand, scores = cand[keep], scores[keep]
        order = np.lexsort((cand, -scores))
        return [(int(cand[i]), float(scores[i])) for i in order]

    def retrieve(self, question: str, k: int | None = None) -> list[ScoredStatement]:
        """The top ``k`` statements; with ``k`` None the retriever chooses: at most ``default_k``
        (or fewer by the score gap with ``auto_k``), none below the method's floor -- possibly none."""
        floor = None
        if self.method.name == "all":
            ranked = self.ranked(question)
            k = len(ranked)
        else:
            kk = self.default_k if k is None else k
            ranked = self.ranked(question, top=max(kk, RERANK_POOL))
            if k is None:
                ranked = self._for_prompt(ranked)
                k = gap_k([s for _, s in ranked], kk) if self.auto_k else kk
                floor = self.method.floor
        ranked = self.method.rerank(self.corpus, ranked, k)[:k]
        if floor is not None:
            ranked = [(i, s) for i, s in ranked if s >= floor]
        c = self.corpus
        return [ScoredStatement(c.texts[i], c.sqls[i], round(s, 4)) for i, s in ranked]

    def _for_prompt(self, ranked: list[tuple[int, float]]) -> list[tuple[int, float]]:
        """What may go into a prompt when the retriever picks K: no statement held back (its snippet
        names a missing table or column, or a value the data lacks: the model would copy it), and
        the best of each group of statements that say the same thing (text up to case and spacing,
        the same SQL): a repeated statement would only take the place of another one (repositories
        gathered per question repeat many: 'published by Dark Horse Comics' twice in a top 3). An
        explicit K keeps them all: the evidence-F1 protocol counts each."""
        seen: set[tuple[str, str]] = set()
        out = []
        for i, s in ranked:
            if i in self.corpus.held_back:
                continue
            key = (" ".join(self.corpus.texts[i].casefold().split()), " ".join(self.corpus.sqls[i].split()))
            if key not in seen:
                seen.add(key)
                out.append((i, s))
        return out


_BLAS_LOCK = threading.Lock()
_BLAS_STATE: dict[str, object] = {"users": 0, "controller": None, "saved": None}


@contextmanager
def single_thread_blas() -> Iterator[None]:
    """numpy's BLAS limited to one thread while a question is scored.

    Why: the per-question products are small (a few hundred windows x a few hundred statements,
    or one vector x 20,000 statements); OpenBLAS spreading them over all cores costs more in
    thread wake-ups than it saves, and on a machine whose cores are busy it is 5-10x slower
    (measured: hybrid-static p50 4.3 -> 1.0 ms at 188 statements, 24 -> 4.7 ms at 20,000).
    Reference-counted, so concurrent retrievals restore the setting once, when the last leaves.
    A no-op without ``threadpoolctl``."""
    with _BLAS_LOCK:
        st = _BLAS_STATE
        if st["controller"] is None:
            try:
                from threadpoolctl import ThreadpoolController

                ctl = ThreadpoolController().select(user_api="blas")
                mine = [c for c in ctl.lib_controllers if "numpy" in str(c.filepath)]
                st["controller"] = mine or ctl.lib_controllers or False
            except Exception:  # noqa: BLE001 - optional speed-up only
                st["controller"] = False
        libs = st["controller"] or []
        if libs and st["users"] == 0:
            st["saved"] = [c.num_threads for c in libs]
            for c in libs:
                c.set_num_threads(1)
        st["users"] = int(st["users"]) + 1  # type: ignore[call-overload]
    try:
        yield
    finally:
        with _BLAS_LOCK:
            st["users"] = int(st["users"]) - 1  # type: ignore[call-overload]
            if libs and st["users"] == 0:
                for c, n in zip(libs, st["saved"]):  # type: ignore[arg-type]
                    c.set_num_threads(n)
