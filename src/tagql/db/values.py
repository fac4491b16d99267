"""An index of a database's stored text values, for finding the literals a question names (as CHESS and
CodeS do): "Marvel" -> ``publisher.publisher_name = 'Marvel Comics'``, "vice-president" -> ``member.position
= 'Vice President'``.

**Build** (:meth:`ValueIndex.build`, once per database, through :meth:`Database.execute`, so any dialect
works): for every text column of every table, ``SELECT DISTINCT col FROM (SELECT col FROM t WHERE col IS NOT
NULL LIMIT MAX_ROWS)``, bounded by these caps:

- ``MAX_ROWS`` = 100,000: rows read per column (a huge table is *sampled*: its first rows);
- ``MAX_DISTINCT`` = 5,000: distinct values kept per column (the rest of a larger column is left out and
  the column is marked ``capped``);
- ``MAX_CHARS`` = 60: a longer value is left out; a column whose sampled values are mostly longer is
  free text (descriptions, comments) and left out whole;
- ``MAX_VALUES`` = 200,000: values over all columns;
- a value with no letter (numbers, dates, symbols) is left out: a question's numbers are compared, not
  looked up; so is a value that reads like an instruction (:func:`tagql.db.introspect.looks_like_instructions`):
  matched values reach the SQL prompt, like sample values.

**Cache**: the values are written as JSON under ``<cache_dir>/values/<name>-<fingerprint>.json``; the
fingerprint covers the file (path, size, modification time) or the server URL (without its password), the
schema and the caps, so a changed file or schema builds anew. A server database whose rows change under
the same schema keeps its old index until the file is deleted. Loaded indexes are kept per process
(:func:`value_index`), so a session per question does not read the file again.

**Lookup**: values are normalised (case-folded, every run of non-alphanumerics a single space);
:meth:`ValueIndex.exact` finds a normalised string by dictionary, :meth:`ValueIndex.similar` finds
candidates by shared character trigrams (Dice coefficient over ``" value "``'s trigrams, counted with
numpy over postings lists) and re-scores them precisely (:func:`similarity`: 1 for equal strings, a
token-containment score for a phrase whose words are all words of the value, else difflib's ratio).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp

from tagql.db.introspect import looks_like_instructions
from tagql.errors import TagqlError

if TYPE_CHECKING:
    from tagql.db.connection import Database

MAX_ROWS = 100_000
MAX_DISTINCT = 5_000
MAX_CHARS = 60
MAX_VALUES = 200_000
SILENT_S = 0.5  # a build shorter than this reports no progress
FORMAT = 1  # bump when the cached file's layout or the build rules change

Progress = Callable[[str, int, int], None]
_NON_ALNUM = re.compile(r"[\W_]+")
_LETTER = re.compile(r"[^\W\d_]")


def normalise(text: str) -> str:
    """Case-folded, every run of characters other than letters and digits one space, stripped."""
    return _NON_ALNUM.sub(" ", text.casefold()).strip()


def trigrams(norm: str) -> set[str]:
    """The character trigrams of ``" norm "`` (padded, so a word's start and end count)."""
    padded = f" {norm} "
    return {padded[i:i + 3] for i in range(len(padded) - 2)}


def similarity(phrase: str, value: str) -> float:
    """How well the normalised ``phrase`` names the normalised ``value``, in [0, 1]: 1 when equal; when
    every word of the phrase is a word of the value ("marvel" in "marvel comics"), 0.75 plus up to 0.2
    for the share of the value the phrase covers; else difflib's ratio of the two strings (typos,
    plurals: "comic" ~ "comics" 0.91)."""
    if phrase == value:
        return 1.0
    ratio = difflib.SequenceMatcher(None, phrase, value, autojunk=False).ratio()
    words, value_words = phrase.split(), value.split()
    if words and _contains(value_words, words):
        return max(ratio, 0.75 + 0.2 * len(phrase) / max(len(value), 1))
    return ratio


def _contains(haystack: list[str], needle: list[str]) -> bool:
    """``needle`` occurs in ``haystack`` as consecutive words."""
    n = len(needle)
    return any(haystack[i:i + n] == needle for i in range(len(haystack) - n + 1))


@dataclass(frozen=True)
class ValueHit:
    """A stored value that a phrase names: its table and column, the value as stored, and the score."""

    table: str
    column: str
    value: str
    score: float


@dataclass
class ColumnInfo:
    table: str
    column: str
    values: int  # distinct values kept
    capped: bool = False  # more distinct values than MAX_DISTINCT (or rows than MAX_ROWS) were there
    skipped: str = ""  # why the column is not indexed ("free text", "error: ...")


class ValueIndex:
    """Distinct short text values of a database's text columns, searchable exactly and by trigrams."""

    def __init__(self, columns: list[ColumnInfo], values: list[tuple[int, str]], *, build_s: float = 0.0) -> None:
        self.columns = columns
        self.values = values  # (column number, value as stored)
        self.build_s = build_s
        self.loaded_from: Path | None = None
        by_norm: dict[str, list[int]] = {}
        for i, (_, v) in enumerate(values):
            by_norm.setdefault(normalise(v), []).append(i)
        self._norms = list(by_norm)  # distinct normalised strings
        self._entries = list(by_norm.values())  # their value numbers
        self._by_norm = {n: k for k, n in enumerate(self._norms)}
        postings: dict[str, list[int]] = {}
        sizes = np.zeros(len(self._norms), dtype=np.int32)
        for k, n in enumerate(self._norms):
            grams = trigrams(n)
            sizes[k] = len(grams)
            for g in grams:
                postings.setdefault(g, []).append(k)
        self._postings = {g: np.asarray(ids, dtype=np.int32) for g, ids in postings.items()}
        self._sizes = sizes

    def __len__(self) -> int:
        return len(self.values)

    def _hits(self, k: int, score: float) -> list[ValueHit]:
        out = []
        for i in self._entries[k]:
            col, value = self.values[i]
            info = self.columns[col]
            out.append(ValueHit(info.table, info.column, value, score))
        return out

    def exact(self, phrase: str) -> list[ValueHit]:
        """Stored values equal to ``phrase`` up to case, spacing and punctuation (score 1)."""
        k = self._by_norm.get(normalise(phrase))
        return [] if k is None else self._hits(k, 1.0)

    def similar(self, phrase: str, *, threshold: float = 0.8, limit: int = 5, candidates: int = 30,
                min_dice: float = 0.3) -> list[ValueHit]:
        """Stored values whose :func:`similarity` to ``phrase`` is at least ``threshold``, best first (at
        most ``limit``). Candidates are the ``candidates`` normalised values sharing the most trigrams with
        the phrase (Dice coefficient at least ``min_dice``, or every trigram of the phrase)."""
        norm = normalise(phrase)
        grams = [g for g in trigrams(norm) if g in self._postings] if norm else []
        if not grams:
            return []
        lists = [self._postings[g] for g in grams]
        counts = np.bincount(np.concatenate(lists), minlength=len(self._norms))
        n_phrase = len(trigrams(norm))
        dice = 2.0 * counts / (n_phrase + self._sizes)
        ok = (dice >= min_dice) | (counts >= n_phrase)
        ids = np.flatnonzero(ok)
        if ids.size > candidates:
            ids = ids[np.argsort(-dice[ids], kind="stable")[:candidates]]
        scored = sorted(((similarity(norm, self._norms[k]), int(k)) for k in ids), key=lambda x: (-x[0], x[1]))
        out: list[ValueHit] = []
        for score, k in scored:
            if score < threshold or len(out) >= limit:
                break
            out += self._hits(k, round(score, 4))
        return out[:limit]

    # -- build and cache -------------------------------------------------------------------------------

    @classmethod
    def build(cls, db: Database, *, progress: Progress | None = None, max_rows: int = MAX_ROWS,
              max_distinct: int = MAX_DISTINCT, max_chars: int = MAX_CHARS, max_values: int = MAX_VALUES,
              timeout_s: float = 30.0) -> ValueIndex:
        """Read the values of ``db`` (see the module docstring for the caps). ``progress(stage, done, total)``
        hears each column once the build has taken half a second (a small database builds silently)."""
        from tagql.db.schema import holds_text

        t0 = time.perf_counter()
        targets = [(t, c) for t in db.schema.tables for c in t.columns if holds_text(c)]
        columns: list[ColumnInfo] = []
        values: list[tuple[int, str]] = []
        stage = f"indexing the stored text values of {db.name} (once per database, for value hints)"
        shown = False
        for done, (table, column) in enumerate(targets):
            if progress is not None and (shown or time.perf_counter() - t0 > SILENT_S):
                shown = True
                progress(stage, done, len(targets))
            info = ColumnInfo(table.name, column.name, 0)
            columns.append(info)
            if len(values) >= max_values:
                info.skipped = "index full"
                continue
            col = exp.column(column.name, quoted=True)
            inner = (exp.select(col.copy()).from_(exp.to_table(table.name, quoted=True))
                     .where(exp.Not(this=exp.Is(this=col.copy(), expression=exp.Null()))).limit(max_rows))
            query = exp.select(exp.column(column.name, quoted=True)).distinct().from_(inner.subquery("s"))
            try:
                result = db.execute(query.sql(dialect=db.dialect), timeout_s=timeout_s, row_cap=max_distinct)
            except TagqlError as exc:
                info.skipped = f"error: {exc.one_line()[:80]}"
                continue
            texts = [r[0] for r in result.rows if isinstance(r[0], str)]
            long = sum(len(v) > max_chars for v in texts)
            if texts and long > len(texts) / 2:
                info.skipped = "free text"
                continue
            info.capped = result.truncated
            kept = [v for v in texts if len(v) <= max_chars and v.strip() and _LETTER.search(v)
                    and not looks_like_instructions(v)]
            kept = kept[: max_values - len(values)]
            info.values = len(kept)
            values += [(len(columns) - 1, v) for v in kept]
        if shown and progress is not None:
            progress(stage, len(targets), len(targets))
        return cls(columns, values, build_s=round(time.perf_counter() - t0, 3))

    def to_json(self) -> dict:
        by_column: list[list[str]] = [[] for _ in self.columns]
        for col, v in self.values:
            by_column[col].append(v)
        return {"format": FORMAT, "build_s": self.build_s,
                "columns": [{"table": c.table, "column": c.column, "capped": c.capped, "skipped": c.skipped,
                             "values": by_column[i]} for i, c in enumerate(self.columns)]}

    @classmethod
    def from_json(cls, data: dict) -> ValueIndex:
        if data.get("format") != FORMAT:
            raise ValueError("another format")
        columns, values = [], []
        for i, c in enumerate(data["columns"]):
            vals = [str(v) for v in c.get("values", [])]
            columns.append(ColumnInfo(c["table"], c["column"], len(vals), bool(c.get("capped")),
                                      str(c.get("skipped", ""))))
            values += [(i, v) for v in vals]
        return cls(columns, values, build_s=float(data.get("build_s", 0.0)))

    def stats(self) -> dict:
        """What the index holds: columns indexed / skipped / capped, values, distinct normalised values."""
        return {"columns": sum(not c.skipped for c in self.columns),
                "skipped": sum(bool(c.skipped) for c in self.columns),
                "capped": sum(c.capped for c in self.columns),
                "values": len(self.values), "distinct": len(self._norms), "trigrams": len(self._postings),
                "build_s": self.build_s}


def fingerprint(db: Database) -> str:
    """What the index of ``db`` depends on: the file (path, size, mtime) or the URL without its password,
    the schema's tables and columns, and the caps."""
    h = hashlib.sha256()
    if db.path is not None:
        st = Path(db.path).stat()
        h.update(f"{Path(db.path).resolve()}|{st.st_size}|{st.st_mtime_ns}".encode())
    else:
        h.update(db.engine.url.render_as_string(hide_password=True).encode())
    h.update(json.dumps(db.schema.mapping(), sort_keys=True).encode())
    h.update(f"{FORMAT}|{MAX_ROWS}|{MAX_DISTINCT}|{MAX_CHARS}|{MAX_VALUES}".encode())
    return h.hexdigest()[:16]


def cache_path(db: Database, cache_dir: Path) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", db.name)[:60] or "database"
    return Path(cache_dir) / "values" / f"{safe}-{fingerprint(db)}.json"


_LOADED: dict[str, ValueIndex] = {}
_LOCK = threading.Lock()
_KEEP = 16  # indexes kept in memory per process


def value_index(db: Database, cache_dir: Path | str | None, *, progress: Progress | None = None) -> ValueIndex:
    """The value index of ``db``: from this process's memory, else from ``<cache_dir>/values/`` (when
    ``cache_dir`` is given), else built (and written there)."""
    path = cache_path(db, Path(cache_dir)) if cache_dir is not None else None
    key = str(path) if path is not None else f"{id(db)}:{fingerprint(db)}"
    with _LOCK:
        if key in _LOADED:
            db.values = _LOADED[key]
            return db.values
        index = None
        if path is not None and path.exists():
            try:
                index = ValueIndex.from_json(json.loads(path.read_text(encoding="utf-8")))
                index.loaded_from = path
            except (OSError, ValueError, KeyError, TypeError):
                index = None  # unreadable or another format: build anew
        if index is None:
            index = ValueIndex.build(db, progress=progress)
            if path is not None:
                _write(path, index.to_json())
        if len(_LOADED) >= _KEEP:
            _LOADED.pop(next(iter(_LOADED)))
        _LOADED[key] = index
    db.values = index
    return index


def forget_loaded() -> None:
    """Drop the indexes kept in memory (tests)."""
    with _LOCK:
        _LOADED.clear()


def _write(path: Path, data: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache: the index still serves this process

