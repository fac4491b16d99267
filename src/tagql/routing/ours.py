"""``ours``: a relation-aware router trained on synthetic questions, with graph-constrained decoding.

Design (what trains in minutes on two CPU cores, instead of DBCopilot's GPU-trained seq2seq DSI):

1. **Memory of synthetic questions** -- questions generated from random-walk schemas
   (:mod:`tagql.routing.sampling`, :mod:`tagql.routing.synth`), embedded once. A new question's
   nearest synthetic questions vote for their (database, tables) -- the non-parametric analogue of
   DSI's "index the collection into the model".
2. **A learned table scorer** -- logistic regression over per-(question, table) evidence: BM25 and
   dense similarity to the table document, the synthetic-neighbour votes for the table and for its
   database, and matches of question n-grams against the table's stored values. It is trained on
   held-out synthetic questions only, and its features are database-agnostic, so adding a database
   needs no retraining (see :meth:`GraphRouter.update`). A database scorer combines each database's
   evidence (its best table logit, votes, coverage...); it is a ranking fit (gold vs hard and random other
   databases, :func:`tagql.routing.fit.fit_calibrated_ranking`), since a right-vs-hardest logistic fit
   learned, at 10,000 databases, that the features which picked the hard negatives count against.
3. **Graph-constrained beam search** -- per database, trails start at any table and grow only to
   neighbours of chosen tables (the paper's decoding constraint), so every candidate is a valid trail;
   one candidate per database (the paper's grouping), several databases are returned (diversity).
4. **Table lists** -- a candidate lists its best trail, then its database's other tables grown along
   graph edges; how many, per candidate, maximises the expected table recall at 5 and 15 of the
   flattened candidates under calibrated database / table probabilities (:meth:`GraphRouter.allocate`).
5. **Database re-ranker** -- shipped gradient-boosted trees re-order the 16 best databases from the same
   evidence, fitted on real Spider train questions (:mod:`tagql.routing.rerank`): the scorers above
   learn from synthetic questions, which never use synonyms.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tagql.embeddings import DEFAULT_MODEL as DEFAULT_ENCODER
from tagql.embeddings import Embedder, EmbeddingUnavailable
from tagql.routing.candidate import Candidate
from tagql.routing.errors import IndexMissing
from tagql.routing.finetune import contrastive_encoder, finetune_encoder, load_pairs
from tagql.routing.fit import fit_calibrated_ranking, fit_logistic
from tagql.routing.lexicon import SoftLexicon, content_words, related_schema_words, schema_words
from tagql.routing.rerank import candidate_features, load_reranker, schema_word_rows, soft_coverage
from tagql.routing.retrieval import table_doc
from tagql.routing.sampling import sample_schemas
from tagql.routing.synonyms import SynonymAugmenter, mined_reverse
from tagql.routing.synth import (
    PatternQuestioner,
    SyntheticQuestion,
    TemplateQuestioner,
    col_name,
    keep_question,
    load_patterns,
    schema_terms,
)
from tagql.routing.wordnet import load_wordnet
from tagql.text import BM25, split_identifier, terms, word_tokens

if TYPE_CHECKING:
    from tagql.routing.collection import Collection

FEATURES = ("bm25", "dense", "knn_table", "knn_db", "value", "bm25_db", "dense_db", "cover_table", "cover_db",
            "value_db", "bias")
DB_FEATURES = ("max_logit", "lse_logit", "knn_db", "bm25_db", "dense_db", "cover_db", "value_db", "bias")
# with a table encoder (BuildConfig.tuned_steps): its question-database and best question-table similarity
TUNED_DB_FEATURES = ("tuned_db", "tuned_max")
Progress = Callable[[str, int, int], None]
# the table features of a database's best table that the re-ranker reads (tagql.routing.rerank.EVIDENCE t_*)
_TABLE_EVIDENCE = [FEATURES.index(n) for n in ("bm25", "dense", "knn_table", "value", "cover_table")]


@dataclass
class BuildConfig:
    questions_per_table: int = 24  # synthetic questions per table (recall still rises at 24: bench/routing/synth.py)
    train_share: float = 0.25  # held-out share used to fit the scorer
    knn: int = 40
    knn_temp: float = 0.05
    max_tables: int = 4  # longest trail
    beam: int = 6
    tau: float = 1.0  # a table after the first must beat this logit to lengthen a trail for free
    # Table lists (see GraphRouter.allocate): each candidate's best trail, then its database's other
    # tables grown along graph edges; how many tables each candidate lists maximises the expected table
    # recall at ``recall_at`` under calibrated probabilities -- database: softmax(db logit / db_temp),
    # table given its database: sigmoid(table_scale * logit + table_bias). The three were fitted by
    # likelihood (not recall) on 1,500 Spider *train* questions, never on dev.
    db_temp: float = 0.866
    # the table scorer's fit: "logistic" (gold vs the TABLE_HARD best other tables) or "softmax" (each gold
    # table ranked against them and TABLE_RANDOM random others, then calibrated on the logistic's rows).
    # On train the softmax fit moved the first stage +0.27 R@1 (mean of the 8 cross-fit cells at 166 and
    # 1,000 databases; +0.25 at 10,000) and the re-ranked figure not at all (73.04 vs 73.05): opt-in
    table_fit: str = "logistic"
    table_scale: float = 1.017
    table_bias: float = 1.18
    recall_at: tuple[int, ...] = (5, 15)
    alloc_dbs: int = 15  # databases the allocation looks at (whatever k): route(k=5) == route(k=20)[:5]
    mined_patterns: bool = True  # fill question patterns mined from Spider's train split
    mined_share: float = 0.7
    soft_match: bool = True  # map unknown question words to schema words by embedding similarity
    soft_threshold: float = 0.55
    soft_top: int = 3
    # mined substitutions (synonym -> schema word, seen >= mined_min_count times in Spider-Syn's *train*
    # questions) add the schema word at mined_weight even when the synonym is another table's word;
    # both chosen on train questions with synonyms mined from the other half of the train databases
    mined_min_count: int = 5
    mined_weight: float = 0.85
    # WordNet relations (routing/wordnet.py): a question word that is a synonym / hypernym of a schema word
    # (first wordnet_senses senses) adds that word at these weights; 0 senses = off. Chosen on 600 Spider
    # *train* questions with mined substitutions from the other half of the train databases
    # (bench/routing/wordnet.py): DB R@1 plain 78.67 -> 79.00, Spider-Syn 69.83 -> 71.33; higher weights
    # and hyponyms/sisters add noise (0.85/0.7: 77.50 / 68.33)
    wordnet_senses: int = 3
    wordnet_synonym: float = 0.4
    wordnet_hypernym: float = 0.3
    # confidence is scaled down when the database's nearest synthetic question has cosine < near_hi
    # (to 0 at near_lo): off-topic questions resemble none of them (chosen on Spider train questions)
    near_lo: float = 0.35
    near_hi: float = 0.55
    augment_share: float = 0.5  # add a synonym-rewritten copy of this share of synthetic questions
    # fine-tune the sentence encoder in the build (routing/finetune.py): Spider-Syn *train* pairs (synonym
    # question, plain question) distilled towards the original encoder's vector of the plain question, with
    # the table documents and finetune_anchors synthetic questions held in place; saved in router/encoder/
    # and used by load() and update(). Spider dev / Spider-Syn dev DB R@1 91.01 / 66.15 -> 90.62 / 67.31 in
    # one build, no gain on held-out train databases, +218 s and 87 MB per build: opt-in.
    finetune: bool = False
    finetune_loss: str = "distill"
    finetune_epochs: int = 1
    finetune_lr: float = 2e-5
    finetune_pairs: int = 0  # use this many of the pairs (seeded sample; 0 = all)
    finetune_anchors: int = 3000  # synthetic questions (+ the table documents) held at their original vectors
    # a second encoder fine-tuned in the build on (synthetic question -> its table document) pairs, in-batch
    # negatives, the scorer's held-out questions excluded (routing/finetune.py contrastive_encoder); its
    # similarities are TUNED_DB_FEATURES of the database scorer (0 steps = off). 300 steps: Spider dev / Spider-Syn
    # dev DB R@1 91.78 / 68.18 -> 91.68 / 68.38, DB R@5 98.55 / 89.17 -> 99.23 / 90.33, +11 min per build: opt-in
    tuned_steps: int = 0
    tuned_lr: float = 3e-5
    # re-order the best databases with the shipped gradient-boosted re-ranker (routing/rerank.py), fitted on
    # Spider *train* questions and their Spider-Syn versions (bench/routing/rerank.py); query-time only
    rerank: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.table_fit not in TABLE_FITS:
            raise ValueError(f"table_fit must be one of {', '.join(TABLE_FITS)}, not {self.table_fit!r}")


# a batch of 128 long documents padded to the encoder's length took ~2.6 GB of ONNX Runtime memory
# (600 database documents of a 1,000-database collection: peak RSS 3.0 GB; in batches of 16: 0.8 GB,
# identical vectors, same time)
LONG_TEXT = 300  # characters
LONG_BATCH = 16
TABLE_FITS = ("logistic", "softmax")  # BuildConfig.table_fit
TABLE_HARD = 20  # the table scorer's negatives: the best-scored tables that are not copies of a gold one
TABLE_RANDOM = 20  # and, with BuildConfig.table_fit = "softmax", this many random ones
DB_HARD = 100  # the database ranking fit compares the gold database with this many best-scored others
DB_RANDOM = 100  # and this many random others (the hard ones alone over-weigh the feature that picked them)
DB_CALIBRATE = 15  # the ranking score is calibrated into log-odds on the gold vs this many best others
HELD_BYTES = 1 << 30  # held-out feature arrays kept between the two scorer fits up to this size
CHUNK_BYTES = 128 << 20  # one batch's (questions, tables, features) array at most (large collections)
ROWS_AT_ONCE = 16  # questions whose (questions x memory) temporaries exist at once (the neighbour votes)
ONE_DATABASE = "prior: one database"  # meta["db_scorer"] of a router built on a one-database collection
ENCODER_DIR = "encoder"  # router/encoder/: the fine-tuned sentence encoder (BuildConfig.finetune)
TUNED_DIR = "table_encoder"  # router/table_encoder/: the contrastive table encoder (BuildConfig.tuned_steps)
_ENCODERS: dict[str, Any] = {}


def load_encoder(path: Path) -> Any:
    """The sentence encoder saved at ``path`` (one instance per folder and process)."""
    from tagql.embeddings import SentenceTransformerEmbedder

    key = str(Path(path).resolve())
    weights = Path(path) / "model.safetensors"
    stamp = weights.stat().st_mtime_ns if weights.exists() else 0
    hit = _ENCODERS.get(key)
    if hit is None or hit[0] != stamp:
        hit = (stamp, SentenceTransformerEmbedder(key, name=f"{DEFAULT_ENCODER}+finetuned"))
        _ENCODERS[key] = hit
    return hit[1]


def _drop_vector_cache(router_dir: Path) -> None:
    """Forget the embedding cache of table documents and schema words (kept across incremental updates)."""
    for name in ("doc_cache.json", "doc_cache.npy"):
        (router_dir / name).unlink(missing_ok=True)


def _norm_max(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=1, keepdims=True)
    return x / np.where(m > 0, m, 1.0)


def _random_others(rng: np.random.Generator, n: int, draw: int, taken: set[int], keep: Callable[[int], bool],
                   most: int) -> list[int]:
    """The random negatives beside the hard ones: of ``draw`` distinct indices below ``n`` drawn from
    ``rng``, in draw order, the first ``most`` not ``taken`` that ``keep`` accepts."""
    pool = rng.choice(n, min(n, draw), replace=False)
    return [int(i) for i in pool if int(i) not in taken and keep(int(i))][:most]


class ValueIndex:
    """Exact n-gram matches of a question against stored column values (names, cities, titles...)."""

    def __init__(self, collection: Collection, keys: Sequence[tuple[str, str]]) -> None:
        pos = {k: i for i, k in enumerate(keys)}
        where: dict[str, set[int]] = defaultdict(set)
        for db in collection.databases:
            for (t, _c), vals in collection.values(db).items():
                i = pos.get((db, t))
                if i is None:
                    continue
                for v in vals[:200]:
                    if isinstance(v, str):
                        s = " ".join(word_tokens(v))
                        if 3 <= len(s) <= 40 and not s.isdigit() and len(s.split()) <= 5:
                            where[s].add(i)
        n = max(len(keys), 1)
        self.where = {k: (np.fromiter(v, dtype=np.int64), math.log(n / len(v)) / math.log(n)) for k, v in where.items()}
        self.n = len(keys)

    def scores(self, question: str) -> np.ndarray:
        out = np.zeros(self.n, dtype=np.float32)
        toks = word_tokens(question)
        for size in range(1, 6):
            for i in range(len(toks) - size + 1):
                hit = self.where.get(" ".join(toks[i:i + size]))
                if hit is not None:
                    idx, w = hit
                    w = w * min(1.0, 0.4 + 0.2 * size)  # longer matches are stronger evidence
                    out[idx] = np.maximum(out[idx], w)
        return out


def groups_by_database(group: np.ndarray, key_db: np.ndarray, n_dbs: int) -> list[set[int]]:
    """Per database, the :func:`same_rows` groups of its tables: a database holds copies of every table of
    another one's question when that question's groups are a subset of its own."""
    out: list[set[int]] = [set() for _ in range(n_dbs)]
    for j, g in enumerate(group):
        out[int(key_db[j])].add(int(g))
    return out


def same_rows(collection: Collection, keys: Sequence[tuple[str, str]]) -> np.ndarray:
    """A group id per table of ``keys``, shared by copies of one table in several databases, whatever
    they are named: tables that store the same values column by column or, for tables without stored
    values, tables with the same column layout (types, primary key) and more than half of their column
    names the same. A copy of the table a synthetic question was written from answers it as well, so the
    scorers' training never takes one as a negative: at 10,000 databases with copied tables the table
    scorer learned negative weights for BM25, neighbour votes and value matches otherwise."""
    pos = {k: i for i, k in enumerate(keys)}
    out = np.arange(len(keys), dtype=np.int64)
    seen: dict[tuple, int] = {}
    by_layout: dict[tuple, list[tuple[int, list[str]]]] = defaultdict(list)  # value-less: (id, column names)
    for db, entry in collection.entries.items():
        vals = collection.values(db)
        for t in entry.schema.tables:
            i = pos.get((db, t.name))
            if i is None:
                continue
            cols = tuple(tuple(vals.get((t.name, c.name), ())) for c in t.columns)
            if not any(cols):
                names = [c.name.lower() for c in t.columns]
                layout = tuple(((c.type or "").upper(), bool(c.primary_key)) for c in t.columns)
                for gid, first in by_layout[layout]:
                    if 2 * sum(a == b for a, b in zip(names, first)) > len(names):
                        out[i] = gid
                        break
                else:
                    by_layout[layout].append((i, names))
                continue
            try:
                out[i] = seen.setdefault(cols, i)
            except TypeError:  # an unhashable stored value: keep the table alone
                continue
    return out


class GraphRouter:
    method = "ours"

    def __init__(self, collection: Collection, cfg: BuildConfig, embedder: Embedder) -> None:
        if embedder is None:
            raise EmbeddingUnavailable("the router needs an embedder", "pass embedder= (tagql.embeddings.make_embedder)")
        self.collection = collection
        self.cfg = cfg
        self.emb = embedder
        self.graph = collection.graph
        self.keys: list[tuple[str, str]] = []
        docs, db_docs = [], {}
        for e in collection.entries.values():
            for t in e.schema.tables:
                self.keys.append((e.name, t.name))
                docs.append(table_doc(e.schema, t, with_db=True))
            db_docs[e.name] = split_identifier(e.name) + ": " + "; ".join(table_doc(e.schema, t) for t in e.schema.tables)
        self.dbs = list(collection.entries)
        self.db_index = {d: i for i, d in enumerate(self.dbs)}
        self.key_db = np.array([self.db_index[d] for d, _ in self.keys])
        self.key_pos = {k: i for i, k in enumerate(self.keys)}
        self.docs = docs
        self.bm25 = BM25([terms(d) for d in docs])
        self.bm25_db = BM25([terms(db_docs[d]) for d in self.dbs])
        self.values = ValueIndex(collection, self.keys)
        self._vocab_build(collection)
        self.lexicon = self._lexicon_build(collection) if cfg.soft_match else None
        self._word_vecs: dict[str, np.ndarray] = {}  # question content word -> vector (re-ranker evidence)
        # the re-ranker's evidence needs the soft lexicon's schema words; the model is None without its file
        self._rerank_evidence = cfg.rerank and self.lexicon is not None
        self.reranker = self._reranker_build(collection) if self._rerank_evidence else None
        self.doc_vecs = self._cached_embed(docs)
        self.db_vecs = self._cached_embed([db_docs[d] for d in self.dbs])
        self.syn: list[SyntheticQuestion] = []
        self.syn_vecs = np.zeros((0, self.doc_vecs.shape[1]), dtype=np.float32)
        self.weights = np.zeros(len(FEATURES), dtype=np.float32)
        self.db_docs = [db_docs[d] for d in self.dbs]
        self.tuned: Any = None  # the table encoder, when the build made one (set_tuned)
        self.db_weights = np.zeros(len(DB_FEATURES), dtype=np.float32)
        self.meta: dict[str, Any] = {}

    @property
    def db_feature_names(self) -> tuple[str, ...]:
        """The database scorer's features: :data:`DB_FEATURES`, plus the table encoder's before the bias."""
        return DB_FEATURES[:-1] + TUNED_DB_FEATURES + DB_FEATURES[-1:] if self.tuned is not None else DB_FEATURES

    def set_tuned(self, encoder: Any) -> None:
        """Use ``encoder`` (the contrastive table encoder) for :data:`TUNED_DB_FEATURES`: embeds the table
        and database documents with it."""
        self.tuned = encoder
        vecs = encoder.embed(self.docs + self.db_docs)
        self.tuned_doc_vecs, self.tuned_db_vecs = vecs[: len(self.docs)], vecs[len(self.docs):]

    def _tuned_db(self, questions: Sequence[str]) -> np.ndarray | None:
        """(Q, databases, 2): the table encoder's question-database similarity and best question-table
        similarity; None without a table encoder."""
        if self.tuned is None:
            return None
        qv = self.tuned.embed(list(questions))
        best = np.full((len(questions), len(self.dbs)), -1.0, dtype=np.float32)
        tab = qv @ self.tuned_doc_vecs.T
        for qi in range(len(questions)):
            np.maximum.at(best[qi], self.key_db, tab[qi])
        return np.stack([qv @ self.tuned_db_vecs.T, best], axis=-1)

    def _vocab_build(self, collection: Collection) -> None:
        """Per table: stemmed words of its names, its columns and short stored values (coverage)."""
        self.table_vocab: list[set[str]] = []
        for e in collection.entries.values():
            self.table_vocab += schema_terms(e.schema, e.schema.table_names, collection.values(e.name))
        self.word_tables: dict[str, np.ndarray] = {}
        inv: dict[str, list[int]] = defaultdict(list)
        for i, words in enumerate(self.table_vocab):
            for w in words:
                inv[w].append(i)
        self.word_tables = {w: np.array(v) for w, v in inv.items()}

    def _lexicon_build(self, collection: Collection) -> SoftLexicon:
        words = schema_words([n for e in collection.entries.values() for n in self._schema_names(e.schema)])
        cfg = self.cfg
        mined = mined_reverse(cfg.mined_min_count) if cfg.mined_min_count > 0 else {}
        related = {}
        if cfg.wordnet_senses > 0:
            related = related_schema_words(words, load_wordnet(), {
                "synonym": cfg.wordnet_synonym, "hypernym": cfg.wordnet_hypernym}, senses=cfg.wordnet_senses)
        return SoftLexicon(words, self._cached_embed(words) if words else np.zeros((0, 384), np.float32),
                           self.emb.embed, threshold=cfg.soft_threshold, top=cfg.soft_top,
                           mined=mined, mined_weight=cfg.mined_weight, related=related)

    def _reranker_build(self, collection: Collection) -> Any:
        """The shipped database re-ranker (None without its file), with each database's schema-word rows."""
        self._db_word_rows = schema_word_rows(self.lexicon.words, [
            schema_words(self._schema_names(collection.entries[d].schema)) for d in self.dbs])
        return load_reranker()

    @staticmethod
    def _schema_names(schema: Any) -> list[str]:
        """Table and column names (raw and humanised) of a schema: where the soft lexicon's words come from."""
        names = []
        for t in schema.tables:
            names += [t.name] + [c.name for c in t.columns] + [col_name(c) for c in t.columns]
        return names

    def _coverage(self, words: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
        """Weighted share of the question's words found in each table's / each database's vocabulary."""
        nt = len(self.keys)
        t_hits = np.zeros(nt, dtype=np.float32)
        d_hits = np.zeros(len(self.dbs), dtype=np.float32)
        n = 0.0
        for w, x in words.items():
            n += 1.0 if x >= 1.0 else 0.0
            idx = self.word_tables.get(w)
            if idx is None:
                continue
            t_hits[idx] += x
            d_hits[np.unique(self.key_db[idx])] += x
        n = max(n, 1.0)
        return np.minimum(t_hits / n, 1.0), np.minimum(d_hits[self.key_db] / n, 1.0)

    def _embed_questions(self, questions: list[str]) -> tuple[np.ndarray, list[dict[str, float]]]:
        """Question vectors, plus each question's weighted stems (soft matches of unknown words)
        from the same embedding call."""
        lex = self.lexicon
        if lex is None:
            return self.emb.embed(questions), [{t: 1.0 for t in terms(q)} for q in questions]
        words = list(dict.fromkeys(w for q in questions for w in lex.to_match(q)))
        extra = []
        if self._rerank_evidence:  # every content word's vector, for the re-ranker's soft coverage
            if len(self._word_vecs) > 50_000:
                self._word_vecs.clear()
            extra = [w for w in dict.fromkeys(w for q in questions for w in content_words(q))
                     if w not in self._word_vecs and w not in words]
        vecs = self.emb.embed(questions + words + extra)
        lex.learn(words, vecs[len(questions): len(questions) + len(words)])
        if self._rerank_evidence:
            self._word_vecs.update(zip(words + extra, vecs[len(questions):]))
        return vecs[: len(questions)], [lex.weights(q) for q in questions]

    def _cached_embed(self, texts: list[str]) -> np.ndarray:
        """Embed documents, reusing vectors saved by earlier builds (load time, updates)."""
        d = self.collection.path / "router"
        cache: dict[str, np.ndarray] = getattr(self, "_doc_cache", None) or {}
        if not cache and (d / "doc_cache.npy").exists():
            keys = json.loads((d / "doc_cache.json").read_text())
            cache = dict(zip(keys, np.load(d / "doc_cache.npy")))
        self._doc_cache = cache
        todo = [t for t in dict.fromkeys(texts) if t not in cache]
        long = [t for t in todo if len(t) > LONG_TEXT]
        short = [t for t in todo if len(t) <= LONG_TEXT]
        if short:
            cache.update(zip(short, self.emb.embed(short)))
        if long:  # database documents: small batches (same vectors, a fraction of the runtime's memory)
            cache.update(zip(long, self.emb.embed(long, batch_size=LONG_BATCH)))
        return np.stack([cache[t] for t in texts]).astype(np.float32) if texts else np.zeros((0, 384), np.float32)

    # ---- synthetic memory ----------------------------------------------------------------------
    def synthesize(self, dbs: Sequence[str], progress: Progress | None = None) -> list[SyntheticQuestion]:
        schemas = {d: self.collection.schema(d) for d in dbs}
        values = {d: self.collection.values(d) for d in dbs}
        out: list[SyntheticQuestion] = []
        for i, d in enumerate(dbs):
            n = self.cfg.questions_per_table * len(schemas[d].tables)
            seed = self.cfg.seed + sum(map(ord, d))  # per-database seed: updates reproduce the same questions
            qs = self._questioner(schemas, values, seed).generate(
                sample_schemas(self.graph, n, seed=seed, databases=[d]))
            kept = [q for q in qs if keep_question(q.question, schemas[d], q.schema, values[d])]
            out += kept + self._augment(kept, seed)
            if progress:
                progress("synthesizing questions", i + 1, len(dbs))
        return out

    def _augment(self, qs: list[SyntheticQuestion], seed: int) -> list[SyntheticQuestion]:
        """Synonym rewrites (source ``syn``) of a share of the questions: schema words -> synonyms."""
        if self.cfg.augment_share <= 0 or not qs:
            return []
        if getattr(self, "_augmenter", None) is None:
            words = self.lexicon.words if self.lexicon is not None else []
            self._augmenter = SynonymAugmenter(words, self.emb.embed, vectors=self._cached_embed, seed=seed)
        aug = self._augmenter
        aug.rng = random.Random(seed)
        out = []
        for q in qs:
            if aug.rng.random() < self.cfg.augment_share:
                text = aug.rewrite(q.question)
                if text and text != q.question:
                    out.append(SyntheticQuestion(text, q.schema, "syn"))
        return out

    def _questioner(self, schemas: Any, values: Any, seed: int) -> TemplateQuestioner:
        if not self.cfg.mined_patterns:
            return TemplateQuestioner(schemas, values, seed=seed)
        return PatternQuestioner(schemas, values, load_patterns(), seed=seed, share=self.cfg.mined_share)

    def _set_memory(self, syn: list[SyntheticQuestion], vecs: np.ndarray) -> None:
        self.syn = syn
        self.syn_vecs = np.asarray(vecs, dtype=np.float32)  # no copy: 465 MB at 10,000 databases
        self._hidden: np.ndarray | None = None  # memory rows the neighbour votes skip (training only)
        self._syn_db = np.array([self.db_index.get(q.schema.database, -1) for q in syn])
        self._syn_tables = [[self.key_pos[(q.schema.database, t)] for t in q.schema.tables
                             if (q.schema.database, t) in self.key_pos] for q in syn]
        # synthetic questions grouped by database (the nearest one per database, for confidence)
        order = np.array([i for i in np.argsort(self._syn_db, kind="stable") if self._syn_db[i] >= 0], dtype=np.int64)
        dbs = self._syn_db[order] if len(order) else np.zeros(0, dtype=np.int64)
        starts = np.flatnonzero(np.r_[True, dbs[1:] != dbs[:-1]]) if len(order) else np.zeros(0, dtype=np.int64)
        self._near_order, self._near_starts, self._near_dbs = order, starts, dbs[starts] if len(order) else dbs

    # ---- features ------------------------------------------------------------------------------
    def features(self, questions: Sequence[str], hide: Sequence[np.ndarray] | None = None) -> np.ndarray:
        """(Q, tables, FEATURES) evidence for every table of the collection; ``hide`` (per question, memory
        rows) keeps synthetic questions out of its neighbour votes."""
        return self._features(questions, hide)[0]

    def _features(self, questions: Sequence[str], hide: Sequence[np.ndarray] | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
        """The features, plus per database the cosine similarity of its nearest synthetic question."""
        qv, qw = self._embed_questions(list(questions))
        near = np.zeros((len(questions), len(self.dbs)), dtype=np.float32)
        nq, nt = len(questions), len(self.keys)
        f = np.zeros((nq, nt, len(FEATURES)), dtype=np.float32)
        f[:, :, 0] = _norm_max(np.stack([self.bm25.scores_weighted(w) for w in qw]))
        f[:, :, 1] = qv @ self.doc_vecs.T
        bdb = _norm_max(np.stack([self.bm25_db.scores_weighted(w) for w in qw]))
        f[:, :, 5] = bdb[:, self.key_db]
        f[:, :, 6] = (qv @ self.db_vecs.T)[:, self.key_db]
        if len(self.syn):
            sims = qv @ self.syn_vecs.T
            if self._hidden is not None:
                sims[:, self._hidden] = -1
            for qi, rows in enumerate(hide or ()):
                sims[qi, rows] = -1
            k = min(self.cfg.knn, sims.shape[1])
            top = np.empty((nq, k), dtype=np.int64)
            # a few rows at a time: argpartition's index array and the grouped copy of the similarities are
            # (rows x memory), twice and once the similarities' size (400 MB per batch at 10,000 databases)
            for r0 in range(0, nq, ROWS_AT_ONCE):
                rows = sims[r0:r0 + ROWS_AT_ONCE]
                top[r0:r0 + ROWS_AT_ONCE] = np.argpartition(rows, -k, axis=1)[:, -k:]
                if len(self._near_order):
                    near[r0:r0 + ROWS_AT_ONCE, self._near_dbs] = np.maximum.reduceat(
                        rows[:, self._near_order], self._near_starts, axis=1)
            for qi in range(nq):
                w = np.exp((sims[qi, top[qi]] - sims[qi, top[qi]].max()) / self.cfg.knn_temp)
                w /= w.sum()
                dbv = np.zeros(len(self.dbs), dtype=np.float32)
                for j, wj in zip(top[qi], w):
                    f[qi, self._syn_tables[j], 2] += wj
                    if self._syn_db[j] >= 0:
                        dbv[self._syn_db[j]] += wj
                f[qi, :, 3] = dbv[self.key_db]
        f[:, :, 4] = np.stack([self.values.scores(q) for q in questions])
        for qi, q in enumerate(questions):
            f[qi, :, 7], f[qi, :, 8] = self._coverage(qw[qi])
            vdb = np.zeros(len(self.dbs), dtype=np.float32)
            np.maximum.at(vdb, self.key_db, f[qi, :, 4])
            f[qi, :, 9] = vdb[self.key_db]
        f[:, :, -1] = 1.0
        return f, near

    def logits(self, questions: Sequence[str]) -> np.ndarray:
        return self.features(questions) @ self.weights

    def db_features(self, f: np.ndarray, lg: np.ndarray, tuned: np.ndarray | None = None) -> np.ndarray:
        """(Q, databases, DB_FEATURES): the best table, all tables (log-sum-exp) and database-wide evidence;
        with ``tuned`` (:meth:`_tuned_db`) its two columns go before the bias."""
        nq, nd = lg.shape[0], len(self.dbs)
        out = np.zeros((nq, nd, len(DB_FEATURES)), dtype=np.float32)
        mx = np.full((nq, nd), -np.inf, dtype=np.float32)
        for qi in range(nq):
            np.maximum.at(mx[qi], self.key_db, lg[qi])
        ex = np.zeros((nq, nd), dtype=np.float64)
        for qi in range(nq):
            np.add.at(ex[qi], self.key_db, np.exp(np.clip(lg[qi] - mx[qi][self.key_db], -50, 0)))
        out[:, :, 0] = mx
        out[:, :, 1] = mx + np.log(ex)
        first = np.zeros(nd, dtype=np.int64)  # one table per database carries the database-wide features
        first[self.key_db[::-1]] = np.arange(len(self.keys))[::-1]
        for j, name in enumerate(("knn_db", "bm25_db", "dense_db", "cover_db", "value_db"), 2):
            out[:, :, j] = f[:, first, FEATURES.index(name)]
        out[:, :, -1] = 1.0
        if tuned is not None:
            out = np.concatenate([out[:, :, :-1], tuned.astype(np.float32), out[:, :, -1:]], axis=-1)
        return out

    def held_split(self, n: int) -> tuple[list[int], list[int]]:
        """(held-out indices that fit the scorers, memory indices) of ``n`` synthetic questions; seeded, so
        the build can keep the held-out questions out of the table encoder's training."""
        idx = list(range(n))
        random.Random(self.cfg.seed).shuffle(idx)
        n_train = min(int(n * self.cfg.train_share), 3000)
        return idx[:n_train], idx[n_train:]

    # ---- training ------------------------------------------------------------------------------
    def train(self, syn: list[SyntheticQuestion], progress: Progress | None = None,
              vecs: np.ndarray | None = None) -> dict[str, Any]:
        """Fit the memory (most questions) and the scorer (held-out questions, hard negatives)."""
        t0 = time.perf_counter()
        vecs = self._embed_syn(syn, progress) if vecs is None else vecs
        embed_s = time.perf_counter() - t0
        held = self.held_split(len(syn))[0]
        group = same_rows(self.collection, self.keys)
        # the memory votes with the other questions only: the held-out ones are hidden, not copied out
        self._set_memory(syn, vecs)
        self._hidden = np.zeros(len(syn), dtype=bool)
        self._hidden[held] = True
        hide = self._copies_hider(group)  # reads the memory just set
        db_groups = groups_by_database(group, self.key_db, len(self.dbs))
        xs, ys = [], []
        held_feats = []
        ranking = self.cfg.table_fit == "softmax"
        table_groups: list[np.ndarray] = []
        rng = np.random.default_rng(self.cfg.seed)
        step = self._chunk(256)
        # the second stage reads every held-out question's features again: kept while they fit in
        # HELD_BYTES, recomputed chunk by chunk beyond (10,000 databases: ~7.6 GB otherwise)
        keep = len(held) * len(self.keys) * len(FEATURES) * 4 <= HELD_BYTES
        for s in range(0, len(held), step):
            chunk = [syn[i] for i in held[s:s + step]]
            hidden = [hide(i) for i in held[s:s + step]]
            f = self.features([q.question for q in chunk], hidden)
            held_feats.append((f if keep else hidden, chunk, self._tuned_db([q.question for q in chunk])))
            for qi, q in enumerate(chunk):
                gold = {self.key_pos[(q.schema.database, t)] for t in q.schema.tables}
                copies = {int(group[j]) for j in gold}  # the gold tables and their copies elsewhere
                prior = f[qi, :, 0] + f[qi, :, 1] + f[qi, :, 2] + f[qi, :, 4]
                # the 20 best-scored other tables; copies of the gold ones are skipped, not counted (at
                # 10,000 databases the 30 best were often all copies, and the scorer saw no negative)
                neg = [int(j) for j in np.argsort(-prior) if int(group[j]) not in copies][:TABLE_HARD]
                for j in list(gold) + neg:  # a copy: a view would keep the chunk's whole array alive
                    xs.append(f[qi, j].copy())
                    ys.append(int(j in gold))
                if ranking:
                    rand = _random_others(rng, len(self.keys), 2 * TABLE_RANDOM + len(gold), set(neg),
                                          lambda j: int(group[j]) not in copies, TABLE_RANDOM)
                    others = f[qi, neg + rand]
                    table_groups += [np.vstack([f[qi, j:j + 1], others]) for j in gold]
            if progress:
                progress("training the scorer", min(s + step, len(held)), len(held))
        self.weights = fit_calibrated_ranking(table_groups, xs, ys) if ranking else fit_logistic(np.array(xs), np.array(ys))
        self.weights = self.weights.astype(np.float32)
        # second stage: which database. A ranking fit over the gold database, the DB_HARD best-scored other
        # databases and DB_RANDOM random ones, then a calibration of its score into log-odds on the gold
        # database vs the DB_CALIBRATE best others (what the confidence and table allocation read)
        groups, cx, cy = [], [], []
        for f, chunk, tuned in held_feats:
            if not keep:
                f = self.features([q.question for q in chunk], f)
            lg = f @ self.weights
            df = self.db_features(f, lg, tuned)
            for qi, q in enumerate(chunk):
                gold = self.db_index[q.schema.database]
                needed = {int(group[self.key_pos[(q.schema.database, t)]]) for t in q.schema.tables}

                def other(d: int) -> bool:  # a database holding copies of every gold table answers it too
                    return d != gold and not needed <= db_groups[d]

                order = np.argsort(-df[qi, :, 0])
                hard = [int(d) for d in order[: 2 * DB_HARD] if other(int(d))][:DB_HARD]
                rand = _random_others(rng, len(self.dbs), DB_RANDOM + len(hard) + 1, set(hard), other, DB_RANDOM)
                groups.append(df[qi, [gold] + hard + rand])  # fancy indexing: a copy, not a view
                cx += list(df[qi, [gold] + hard[:DB_CALIBRATE]])
                cy += [1] + [0] * len(hard[:DB_CALIBRATE])
        if len(self.dbs) > 1:
            self.db_weights = fit_calibrated_ranking(groups, cx, cy, self.db_feature_names.index("bias"))
            self.db_weights = self.db_weights.astype(np.float32)
            db_scorer = "fitted"
        else:  # one database: nothing to tell apart (every example is the gold one); its best table decides
            self.db_weights = self.db_prior()
            db_scorer = ONE_DATABASE
        # the memory at inference holds every synthetic question
        self._set_memory(syn, vecs)
        self.meta = {"synthetic_questions": len(syn), "scorer_examples": len(xs), "embed_s": round(embed_s, 1),
                     "db_scorer": db_scorer, "weights": dict(zip(FEATURES, map(float, self.weights))),
                     "db_weights": dict(zip(self.db_feature_names, map(float, self.db_weights)))}
        return self.meta

    def _copies_hider(self, group: np.ndarray) -> Callable[[int], np.ndarray]:
        """For the memory's synthetic question ``i`` (held out), the memory rows its neighbour votes must not
        see: the questions of its own database written from the same tables, and every question of another
        database written from a copy (``same_rows`` group) of one of them. A real question meets neither
        (its database has no such near duplicates elsewhere); with them the votes went to the copies, and
        at 10,000 databases the scorer learned negative weights for neighbour votes and BM25."""
        tables = [frozenset(int(group[j]) for j in keys) for keys in self._syn_tables]
        rows: dict[int, list[int]] = defaultdict(list)
        for i, gs in enumerate(tables):
            for g in gs:
                rows[g].append(i)
        by_group = {g: np.array(v, dtype=np.int64) for g, v in rows.items()}
        syn_db = self._syn_db

        def hide(i: int) -> np.ndarray:
            if not tables[i]:
                return np.zeros(0, dtype=np.int64)
            idx = np.unique(np.concatenate([by_group[g] for g in tables[i]]))
            same = np.fromiter((tables[j] == tables[i] for j in idx), dtype=bool, count=len(idx))
            return idx[(syn_db[idx] != syn_db[i]) | same]

        return hide

    def _chunk(self, most: int) -> int:
        """Questions per feature batch: ``most``, fewer when their (questions, tables, features) array would
        pass CHUNK_BYTES (large collections; the results do not depend on the batch size)."""
        return max(8, min(most, CHUNK_BYTES // max(1, len(self.keys) * len(FEATURES) * 4)))

    def db_prior(self) -> np.ndarray:
        """Database-scorer weights for a collection of one database: its score is its best table's logit."""
        w = np.zeros(len(self.db_feature_names), dtype=np.float32)
        w[self.db_feature_names.index("max_logit")] = 1.0
        return w

    def _embed_syn(self, syn: Sequence[SyntheticQuestion], progress: Progress | None) -> np.ndarray:
        out = np.zeros((len(syn), self.doc_vecs.shape[1]), dtype=np.float32)  # filled in place: no second copy
        for s in range(0, len(syn), 512):
            out[s:s + 512] = self.emb.embed([q.question for q in syn[s:s + 512]])
            if progress:
                progress("embedding questions", min(s + 512, len(syn)), len(syn))
        return out

    # ---- decoding ------------------------------------------------------------------------------
    def trails(self, db: str, logit: dict[str, float]) -> list[tuple[float, list[str]]]:
        """Graph-constrained beam search over one database's trails; each step adds a neighbour."""
        cfg = self.cfg
        beams = [(s, [t]) for t, s in logit.items()]
        beams.sort(key=lambda b: -b[0])
        beams = beams[: cfg.beam]
        done = list(beams)
        seen = {frozenset(b[1]) for b in beams}
        for _ in range(cfg.max_tables - 1):
            grown = []
            for score, trail in beams:
                nbrs = {n for t in trail for n in self.graph.neighbours(db, t)} - set(trail)
                for n in nbrs:
                    key = frozenset(trail + [n])
                    if key in seen:
                        continue
                    seen.add(key)
                    grown.append((score + logit[n] - cfg.tau, trail + [n]))
            if not grown:
                break
            grown.sort(key=lambda b: -b[0])
            beams = grown[: cfg.beam]
            done += beams
        done.sort(key=lambda b: -b[0])
        return done

    def table_order(self, db: str, first: list[str], logit: dict[str, float]) -> list[str]:
        """The best trail, then the database's other tables grown along graph edges: the best-scored
        neighbour of the tables so far (bridge tables of a join come before unconnected ones); a table
        unreachable from them only when no neighbour is left."""
        order, left = list(first), set(logit) - set(first)
        nbrs = {n for t in order for n in self.graph.neighbours(db, t)}
        while left:
            pool = (nbrs & left) or left
            t = max(sorted(pool), key=lambda x: logit[x])
            order.append(t)
            left.discard(t)
            nbrs |= set(self.graph.neighbours(db, t))
        return order

    def allocate(self, probs: Sequence[float], gains: Sequence[np.ndarray], mins: Sequence[int]) -> list[int]:
        """How many tables each candidate lists, flattened best first, to maximise the expected table
        recall summed over ``cfg.recall_at``: candidate d (probability ``probs[d]`` that its database is
        the question's) contributes ``gains[d][i]`` (expected share of the gold tables) with its i-th
        table if that lands within the first k positions. Exact dynamic programme over (candidate,
        position); at least ``mins[d]`` tables (the best trail), no choice past the last position."""
        ks = sorted(self.cfg.recall_at)
        horizon = ks[-1]
        nd = len(probs)
        hits = [sum(1 for k in ks if pos < k) for pos in range(horizon)]  # recall@k counted at a position
        # value[d][o]: best expected gain of candidates d.. when candidate d starts at position o
        value = np.zeros((nd + 1, horizon + 1))
        choice = np.zeros((nd, horizon + 1), dtype=np.int64)
        for d in range(nd - 1, -1, -1):
            g = gains[d]
            for o in range(horizon + 1):
                lo = min(mins[d], len(g))
                if o >= horizon:
                    value[d, o], choice[d, o] = 0.0, lo
                    continue
                best, arg, acc = -1.0, lo, 0.0
                for n in range(len(g) + 1):
                    if 0 < n and o + n <= horizon:
                        acc += probs[d] * float(g[n - 1]) * hits[o + n - 1]
                    if n < lo:
                        continue
                    v = acc + value[d + 1, min(o + n, horizon)]
                    if v > best + 1e-12:
                        best, arg = v, n
                    if o + n >= horizon:
                        break
                value[d, o], choice[d, o] = best, arg
        out, o = [], 0
        for d in range(nd):
            n = int(choice[d, min(o, horizon)])
            out.append(n)
            o += n
        return out

    def _candidates(self, row: np.ndarray, k: int, db_row: np.ndarray | None = None,
                    near: np.ndarray | None = None) -> list[Candidate]:
        cfg = self.cfg
        if db_row is None:
            db_row = np.full(len(self.dbs), -np.inf)
            np.maximum.at(db_row, self.key_db, row)
        z = np.exp((db_row - db_row.max()) / cfg.db_temp)
        prob = z / z.sum()
        top = np.argsort(-db_row, kind="stable")[: max(k, cfg.alloc_dbs)]
        rows = []
        for di in top:
            db = self.dbs[di]
            logit = {t: float(row[self.key_pos[(db, t)]]) for t in self.graph.tables(db)}
            trails = self.trails(db, logit)
            if not trails:
                continue
            order = self.table_order(db, trails[0][1], logit)
            q = np.array([1 / (1 + math.exp(-min(max(cfg.table_scale * logit[t] + cfg.table_bias, -50.0), 50.0)))
                          for t in order])
            rows.append((di, db, trails, order, q / max(float(q.sum()), 1e-6), logit))
        sizes = self.allocate([float(prob[r[0]]) for r in rows], [r[4] for r in rows], [len(r[2][0][1]) for r in rows])
        cands = []
        for (di, db, trails, order, _, logit), n in zip(rows[:k], sizes):
            tables = order[:n]
            have = set(tables)
            used = [tr for _, tr in trails if have.issuperset(tr)]  # the graph trails these tables cover
            dl = float(db_row[di])
            # one database: no choice to be unsure of; only nearness (is the question about it at all) counts
            conf = 1.0 if len(self.dbs) == 1 else 1 / (1 + math.exp(-min(max(dl, -50.0), 50.0)))
            if near is not None:  # no synthetic question of this database is near: off-topic, say so
                lo, hi = cfg.near_lo, cfg.near_hi
                conf *= min(1.0, max(0.0, (float(near[di]) - lo) / (hi - lo)))
            cands.append(Candidate(db, tables, dl, used, conf, {t: logit[t] for t in tables}))
        return cands

    def _first_stage(self, questions: list[str]) -> tuple[np.ndarray, ...]:
        """(table features, nearest synthetic question per database, table logits, database features,
        database logits) of a batch of questions."""
        f, near = self._features(questions)
        lg = f @ self.weights
        df = self.db_features(f, lg, self._tuned_db(questions))
        return f, near, lg, df, df @ self.db_weights

    def rerank_inputs(self, questions: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per question: (the re-ranker's candidate databases, their feature matrix, the first-stage
        database logits) -- what :meth:`route_many` re-ranks, and what ``bench/routing/rerank.py`` fits on."""
        out = []
        step = self._chunk(128)
        for s in range(0, len(questions), step):
            chunk = list(questions[s:s + step])
            f, near, lg, df, dlg = self._first_stage(chunk)
            out += [self._rerank_matrix(q, f[i], lg[i], df[i], dlg[i], near[i]) for i, q in enumerate(chunk)]
        return out

    def _rerank_matrix(self, question: str, f: np.ndarray, lg: np.ndarray, df: np.ndarray, dlg: np.ndarray,
                       near: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        mx = df[:, DB_FEATURES.index("max_logit")]  # each database's best table logit
        at_max = np.flatnonzero(lg >= mx[self.key_db])
        best = np.empty(len(self.dbs), dtype=np.int64)
        best[self.key_db[at_max[::-1]]] = at_max[::-1]  # each database's first best-scored table
        db_feats = df[:, : len(DB_FEATURES) - 1]  # the first-stage database features, without the bias
        words = [w for w in content_words(question) if w in self._word_vecs]
        wv = np.stack([self._word_vecs[w] for w in words]) if words else np.zeros((0, self.doc_vecs.shape[1]))
        soft = soft_coverage(wv, self.lexicon.vecs, *self._db_word_rows)
        cand, x = candidate_features(dlg, db_feats, f[best][:, _TABLE_EVIDENCE], soft, near)
        return cand, x, dlg

    def route_many(self, questions: Sequence[str], k: int = 5) -> list[list[Candidate]]:
        if not questions:
            return []
        out = []
        step = self._chunk(128)
        for s in range(0, len(questions), step):
            chunk = list(questions[s:s + step])
            f, near, lg, df, dlg = self._first_stage(chunk)
            # its soft coverage needs the lexicon; one database has nothing to re-order
            if self.reranker is not None and self.lexicon is not None and len(self.dbs) > 1:
                dlg = np.stack([self._reranked(*self._rerank_matrix(q, f[i], lg[i], df[i], dlg[i], near[i]))
                                for i, q in enumerate(chunk)])
            out += [self._candidates(row, k, drow, nrow) for row, drow, nrow in zip(lg, dlg, near)]
        return out

    def _reranked(self, cand: np.ndarray, x: np.ndarray, dlg: np.ndarray) -> np.ndarray:
        """Database logits with the re-ranker's log-odds for its candidates; the other databases keep
        their order below the lowest of them."""
        new = self.reranker.decision(x)
        out = dlg.astype(np.float64) - float(dlg[cand].min()) + float(new.min()) - 1.0
        out[cand] = new
        return out

    def route(self, question: str, k: int = 5) -> list[Candidate]:
        return self.route_many([question], k)[0]

    # ---- persistence and updates -----------------------------------------------------------------
    def save(self) -> None:
        d = self.collection.path / "router"
        d.mkdir(parents=True, exist_ok=True)
        np.save(d / "syn_vecs.npy", self.syn_vecs)
        cache = getattr(self, "_doc_cache", {})
        (d / "doc_cache.json").write_text(json.dumps(list(cache)))
        np.save(d / "doc_cache.npy", np.stack(list(cache.values())) if cache else np.zeros((0, 384), np.float32))
        (d / "synthetic.jsonl").write_text("".join(json.dumps(q.to_dict()) + "\n" for q in self.syn))
        fps = {n: e.fingerprint for n, e in self.collection.entries.items()}
        (d / "meta.json").write_text(json.dumps(self.meta | {"weights_vec": self.weights.tolist(),
                                                             "db_weights_vec": self.db_weights.tolist(), "fingerprints": fps,
                                                             "config": self.cfg.__dict__}, indent=1))

    @classmethod
    def build(cls, collection: Collection, cfg: BuildConfig | None = None, progress: Progress | None = None,
              embedder: Embedder | None = None) -> GraphRouter:
        collection.require_nonempty()
        cfg = cfg or BuildConfig()
        t0 = time.perf_counter()
        d = collection.path / "router"
        # a full build starts from scratch: vectors cached by an earlier build may come from another encoder
        _drop_vector_cache(d)
        shutil.rmtree(d / ENCODER_DIR, ignore_errors=True)
        shutil.rmtree(d / TUNED_DIR, ignore_errors=True)
        ft: dict[str, Any] = {}
        r = cls(collection, cfg, embedder)
        syn = r.synthesize(r.dbs, progress)
        synth_s = time.perf_counter() - t0
        if cfg.finetune:
            pairs = [(s, p) for _db, p, s in load_pairs()]
            rng = random.Random(cfg.seed)
            if 0 < cfg.finetune_pairs < len(pairs):
                pairs = rng.sample(pairs, cfg.finetune_pairs)
            anchors = [q.question for q in rng.sample(syn, min(cfg.finetune_anchors, len(syn)))] + r.docs
            ft = finetune_encoder(pairs, d / ENCODER_DIR, loss=cfg.finetune_loss, anchors=anchors,
                                  epochs=cfg.finetune_epochs, lr=cfg.finetune_lr, seed=cfg.seed, progress=progress,
                                  model_dir=getattr(r.emb, "model_dir", None))
            # every stored vector (table documents, schema words, synthetic questions) from the new encoder
            _drop_vector_cache(d)
            r = cls(collection, cfg, load_encoder(d / ENCODER_DIR))
        tuned = r._train_tuned(syn, d / TUNED_DIR, progress) if cfg.tuned_steps > 0 else {}
        r.train(syn, progress)
        if tuned:
            r.meta["table_encoder"] = tuned
        r.meta |= {"synthesis_s": round(synth_s, 1), "build_s": round(time.perf_counter() - t0, 1),
                   "encoder": getattr(r.emb, "name", None)}
        if ft:
            r.meta["finetune"] = ft
        r.save()
        return r

    def _train_tuned(self, syn: list[SyntheticQuestion], out: Path, progress: Progress | None) -> dict[str, Any]:
        """Fine-tune the table encoder on the memory's synthetic questions (each with the document of one
        of its tables, seeded) and use it; the held-out questions stay unseen, so the scorer learns how
        far to trust it from questions it was not trained on."""
        rng = random.Random(self.cfg.seed)
        pairs = []
        for i in sorted(self.held_split(len(syn))[1]):
            q = syn[i]
            tables = [t for t in q.schema.tables if (q.schema.database, t) in self.key_pos]
            if tables:
                pairs.append((q.question, self.docs[self.key_pos[(q.schema.database, rng.choice(tables))]]))
        info = contrastive_encoder(pairs, out, steps=self.cfg.tuned_steps, lr=self.cfg.tuned_lr, seed=self.cfg.seed,
                                   progress=progress, model_dir=getattr(self.emb, "model_dir", None))
        self.set_tuned(load_encoder(out))
        return info

    @classmethod
    def load(cls, collection: Collection, embedder: Embedder | None = None, overrides: dict[str, Any] | None = None,
             **_: Any) -> GraphRouter:
        """The built router of ``collection``; ``overrides`` replace query-time settings of its
        :class:`BuildConfig` (e.g. ``{"wordnet_senses": 0}`` to compare without WordNet, no rebuild)."""
        d = collection.path / "router"
        if not (d / "meta.json").exists():
            raise IndexMissing(f"collection '{collection.name}' has no trained router")
        meta = json.loads((d / "meta.json").read_text())
        known = BuildConfig.__dataclass_fields__
        if (d / ENCODER_DIR / "modules.json").exists():
            embedder = load_encoder(d / ENCODER_DIR)  # the encoder fine-tuned by the build
        built_with = meta.get("encoder")
        if embedder is not None and built_with and built_with != embedder.name:
            raise IndexMissing(f"the router of collection '{collection.name}' was built with the {built_with}"
                               f" embedder, not {embedder.name}",
                               f"rebuild it: delete {d} and run tagql route index {collection.name}")
        unknown = set(overrides or {}) - set(known)
        if unknown:
            raise ValueError(f"unknown router settings: {', '.join(sorted(unknown))}")
        settings = {k: v for k, v in meta["config"].items() if k in known} | dict(overrides or {})
        r = cls(collection, BuildConfig(**settings), embedder)
        syn = [SyntheticQuestion.from_dict(json.loads(line)) for line in (d / "synthetic.jsonl").read_text().splitlines()]
        vecs = np.load(d / "syn_vecs.npy")
        keep = [i for i, q in enumerate(syn) if q.schema.database in collection.entries]
        r._set_memory([syn[i] for i in keep], vecs[keep] if len(keep) < len(syn) else vecs)
        if (d / TUNED_DIR / "modules.json").exists():
            r.set_tuned(load_encoder(d / TUNED_DIR))
        if len(meta["weights_vec"]) != len(FEATURES) or len(meta["db_weights_vec"]) != len(r.db_feature_names):
            raise IndexMissing(f"the router of collection '{collection.name}' was built by an older tagql",
                               f"rebuild it: delete {d} and run tagql route index {collection.name}")
        r.weights = np.array(meta["weights_vec"], dtype=np.float32)
        r.db_weights = np.array(meta["db_weights_vec"], dtype=np.float32)
        r.meta = {k: v for k, v in meta.items() if k not in ("weights_vec", "db_weights_vec", "fingerprints", "config")}
        r._fingerprints = meta.get("fingerprints", {})
        return r

    def update(self, progress: Progress | None = None) -> dict[str, Any]:
        """Bring the router in line with the collection: synthesize + embed only new or changed
        databases, drop removed ones; the scorer is database-agnostic and is kept."""
        t0 = time.perf_counter()
        old = getattr(self, "_fingerprints", {})
        changed = [n for n, e in self.collection.entries.items() if old.get(n) != e.fingerprint]
        keep = [i for i, q in enumerate(self.syn)
                if q.schema.database in self.collection.entries and q.schema.database not in changed]
        new = self.synthesize(changed, progress) if changed else []
        vecs = self._embed_syn(new, progress)
        self._set_memory([self.syn[i] for i in keep] + new, np.concatenate([self.syn_vecs[keep], vecs]))
        removed = sorted(set(old) - set(self.collection.entries))
        self._fingerprints = {n: e.fingerprint for n, e in self.collection.entries.items()}
        refit = self.meta.get("db_scorer") == ONE_DATABASE and len(self.dbs) > 1
        if refit:  # built on one database: the database scorer can only be fitted now that there are several
            kept = {k: v for k, v in self.meta.items() if k not in ("weights", "db_weights", "db_scorer")}
            self.train(self.syn, progress, vecs=self.syn_vecs)
            self.meta = kept | self.meta
        self.save()
        return {"added_or_changed": changed, "removed": removed, "new_questions": len(new), "refitted": refit,
                "seconds": round(time.perf_counter() - t0, 2)}
