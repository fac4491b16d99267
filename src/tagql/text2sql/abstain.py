"""Honest abstention: is the question one this database can answer at all?

A question about something the database does not hold ("What is the weather in Paris?", "the average salary
of the members" with no salary column) gets "this database does not hold that" instead of SQL that answers a
different question with confidence. Two signals, read before any SQL is written:

* **schema coverage** (:func:`uncovered_terms`): the question's content words that match nothing the database
  names -- tables, columns, their descriptions, the stored text values (read from the database's value index,
  :mod:`tagql.db.values`, when given), the question's domain statements; ids and codes the question quotes
  ("TR001_10_11", "rec4BLdZHS2Blfp4v") are literals, not words.
  Free, and it names what is missing ("salary"), but on its own it cannot tell an unknown word that means a
  column ("tallest" is ``height_cm``) from one that means something absent.
* **the model's yes/no** (:func:`answerable_probability`): P(yes) to "can this question be answered from the
  tables above?", asked with the SQL prompt's own system message (the schema prefix is already evaluated, so
  it costs ~the question's tokens). Needs token probabilities (``supports_choice_probs``: the local backend);
  without them the decision rests on coverage alone.

:func:`decide` combines them (thresholds fitted on the train part of ``bench/ask/data/unanswerable.json`` and
the answerable BIRD train questions with ``bench/ask/abstention.py``; docs/text2sql.md has the figures).
"""

from __future__ import annotations

import difflib
import re
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tagql.db.connection import Database
from tagql.db.schema import Schema
from tagql.db.values import ValueIndex
from tagql.errors import TagqlError
from tagql.llm.base import LLM, Message, user
from tagql.text import STOP_WORDS, split_identifier
from tagql.text.stem import stem
from tagql.text2sql import prompts

# words any question over any data may use (aggregates, comparisons, question words): never "missing"
QUESTION_WORDS = frozenset("""
    average avg mean median total sum count number numbers amount many much percentage percent ratio rate
    proportion share fraction most least highest lowest largest smallest biggest top bottom maximum minimum max
    min greater fewer less more than higher lower larger smaller over under above below between among
    each every per overall all any list name names show give tell find provide identify state calculate compute
    what which who whom whose when where why how does did do is are was were has have had be been being
    many times time first last second third one two three four five six seven eight nine ten hundred thousand
    value values record records entry entries row rows data database table tables column columns field fields
    type types kind kinds category categories group grouped distinct different unique same both either neither
    difference differ compare compared comparison versus vs respectively order ordered descending ascending
    rank ranked sort sorted including include includes contain contains containing with without whether
    yes true false null empty other others another also only just exactly approximately about
    full detail details information info id ids code codes status item items thing things people person
    write indicate answer decimal decimals place places consist consists consisted comprise comprises form
    formed numerous account accounted alphabetical alphabetically mention mentioned involve involved majority
    combination composition associate associated enumerate determine name named having contain contained
    present presenting said called use used related relate belong belongs able went allowed happening
    common popular popularity frequent frequently often usual usually
    universe
    """.split())

# words that name a measure under another name: covered when the schema has one of its names
MEASURES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys("tall taller tallest short shorter shortest".split(), ("height",)),
    **dict.fromkeys("heavy heavier heaviest weigh weighs weighed weighing".split(), ("weight",)),
    **dict.fromkeys("fast faster fastest slow slower slowest quick quickest".split(), ("speed",)),
    **dict.fromkeys("strong stronger strongest weak weaker weakest".split(), ("strength",)),
    **dict.fromkeys("smart smarter smartest dumb dumber dumbest intelligent clever".split(), ("intelligence",)),
    **dict.fromkeys("old older oldest young younger youngest".split(), ("age", "birth", "born", "birthday")),
    **dict.fromkeys("expensive cheap cheaper cheapest pay pays paid buy buys bought spend usd dollar dollars "
                    "price priced".split(), ("cost", "amount", "spent", "price")),
}

ABSTAIN_SENTENCE = "This database ({database}) does not hold that"


def _stems(text: str) -> list[str]:
    """Lower-case word stems of ``text`` (identifiers split: ``height_cm`` -> height, cm)."""
    words = re.findall(r"[a-z]+", split_identifier(text).lower())
    return [stem(w) for w in words]


@dataclass
class Vocabulary:
    """The stems a database names: its name, tables, columns, descriptions, sample and stored text values."""

    stems: set[str] = field(default_factory=set)
    words: set[str] = field(default_factory=set)  # as written, lower case (for misspellings)
    names: set[str] = field(default_factory=set)  # stems of many-valued columns' values (people, cities)

    def add(self, text: str) -> None:
        words = re.findall(r"[a-z]+", split_identifier(text).lower())
        self.words.update(w for w in words if len(w) >= 6)
        self.stems.update(stem(w) for w in words)

    def add_name(self, text: str) -> None:
        self.names.update(stem(w) for w in re.findall(r"[a-z]+", text.lower()))

    def covers(self, word: str, *, capitalised: bool = False) -> bool:
        """``word`` (lower case) is named by the database: its stem, a measure it names under another name
        (:data:`MEASURES`: "tallest" -> height), a misspelling of a long word (one letter in ~9 off; "weather"
        is not "whether"), or,
        written ``capitalised`` in the question, a word of a stored name ("Lincolnton"; a city called "Ages"
        does not make "age" a column)."""
        if stem(word) in self.stems or any(stem(t) in self.stems for t in MEASURES.get(word, ())):
            return True
        if capitalised and stem(word) in self.names:
            return True
        near = [w for w in self.words if abs(len(w) - len(word)) <= 1] if len(word) >= 7 else []
        return bool(difflib.get_close_matches(word, near, n=1, cutoff=0.88))


_VOCABULARIES: weakref.WeakKeyDictionary[Any, tuple[int, Vocabulary]] = weakref.WeakKeyDictionary()


def schema_vocabulary(schema: Schema, values: Iterable[str] = (), names: Iterable[str] = ()) -> Vocabulary:
    """The :class:`Vocabulary` of ``schema`` (names, descriptions, sample values) plus stored ``values`` (of
    columns with few distinct values: categories) and ``names`` (of many-valued columns)."""
    vocab = Vocabulary()
    vocab.add(schema.name)
    for t in schema.tables:
        vocab.add(t.name)
        vocab.add(t.description)
        for c in t.columns:
            vocab.add(c.name)
            vocab.add(c.description)
            vocab.add(c.value_description)
            for v in c.samples:
                if isinstance(v, str):
                    vocab.add(v)
    for v in values:
        vocab.add(v)
    for v in names:
        vocab.add_name(v)
    return vocab


CATEGORY_MAX = 200  # a text column with at most this many distinct values holds categories, not names


def stored_values(db: Database, *, per_column: int = 20000, max_chars: int = 60,
                  timeout_s: float = 2.0, only: set[tuple[str, str]] | None = None) -> tuple[list[str], list[str]]:
    """Distinct short text values of the database's text columns (``only``: these (table, column) pairs), as
    (categories, names): the values of columns with at most :data:`CATEGORY_MAX` distinct values, and the
    rest (at most ``per_column`` per column, each query under ``timeout_s``; a column that cannot be read in
    time is skipped)."""
    categories: list[str] = []
    names: list[str] = []
    for t in db.schema.tables:
        for c in t.columns:
            if only is not None and (t.name, c.name) not in only:
                continue
            if not any(k in (c.type or "").upper() for k in ("CHAR", "TEXT", "STRING", "CLOB")) and c.type:
                continue
            sql = f"SELECT DISTINCT {db.schema.quote(c.name)} FROM {db.schema.quote(t.name)} LIMIT {per_column}"
            try:
                rows = db.execute(sql, timeout_s=timeout_s, row_cap=per_column).rows
            except TagqlError:
                continue
            found = [r[0] for r in rows if isinstance(r[0], str) and len(r[0]) <= max_chars]
            (categories if len(rows) <= CATEGORY_MAX else names).extend(found)
    return categories, names


def index_values(db: Database, index: ValueIndex) -> tuple[list[str], list[str]]:
    """The stored values of ``db`` from its :class:`~tagql.db.values.ValueIndex` (the one the SQL prompt's
    value hints read), as (categories, names) like :func:`stored_values`: a column with at most
    :data:`CATEGORY_MAX` distinct values holds categories, any other names. A column the index capped
    (more than its 5,000 distinct values: the 1,000s of US city names) is read here in full, up to
    :func:`stored_values`' limit, so a name past the index's cap still counts."""
    by_column: dict[int, list[str]] = {}
    for col, v in index.values:
        by_column.setdefault(col, []).append(v)
    categories: list[str] = []
    names: list[str] = []
    capped = set()
    for col, info in enumerate(index.columns):
        if info.capped:
            capped.add((info.table, info.column))
            continue
        vs = by_column.get(col, [])
        (names if len(vs) > CATEGORY_MAX else categories).extend(v for v in vs if len(v) <= 60)
    if capped:
        more_categories, more_names = stored_values(db, only=capped)
        categories += more_categories
        names += more_names
    return categories, names


def database_vocabulary(db: Database, index: ValueIndex | None = None) -> Vocabulary:
    """:func:`schema_vocabulary` of ``db`` with its stored text values, built once per opened database: the
    values of ``index`` (the database's value index, :func:`tagql.db.values.value_index`) when given, else
    read by :func:`stored_values`."""
    try:
        cached = _VOCABULARIES.get(db)
    except TypeError:
        cached = None
    if cached is None or cached[0] != id(index):
        categories, names = index_values(db, index) if index is not None else stored_values(db)
        cached = (id(index), schema_vocabulary(db.schema, categories, names))
        try:
            _VOCABULARIES[db] = cached
        except TypeError:
            pass
    return cached[1]


# a token mixing letters and digits ("TR001_10_11", "rec1N0upiVLy5esTO", "LD50") is an id or a code the
# question quotes: its letter runs are not words
_CODE = re.compile(r"\b[A-Za-z0-9_]*(?:[A-Za-z][0-9]|[0-9][A-Za-z])[A-Za-z0-9_]*\b")


def uncovered_terms(question: str, vocab: Vocabulary, statements: Sequence[str] = ()) -> list[str]:
    """The question's content words (not stop words nor :data:`QUESTION_WORDS`, not numbers) that match
    nothing in ``vocab`` nor in the domain ``statements``, in question order, each once."""
    extra: set[str] = set()
    for s in statements:
        extra.update(_stems(s))
    out: list[str] = []
    question = _CODE.sub(" ", question)  # ids and codes are literals, not words
    for word in re.findall(r"[A-Za-z]+(?:['\u2019-][A-Za-z]+)*", question):
        capitalised = word[0].isupper()
        w = word.lower().replace("\u2019", "'")
        if w.endswith("'s"):
            w = w[:-2]
        parts = [p for p in re.split(r"[-']", w) if p]
        if not parts or all(p in STOP_WORDS or p in QUESTION_WORDS or len(p) < 3 for p in parts):
            continue
        if any(vocab.covers(p, capitalised=capitalised) or stem(p) in extra for p in parts):
            continue
        if w not in out:
            out.append(w)
    return out


def answerable_messages(system_message: Message, question: str, variant: str = "answerable") -> list[Message]:
    """The yes/no prompt: the SQL prompt's system message (schema), then the question."""
    return [system_message, user(prompts.answerable_prompt(question, variant))]


def answerable_probability(llm: LLM, system_message: Message, question: str, *,
                           variant: str = "answerable") -> float | None:
    """P(yes) that the tables in ``system_message`` can answer ``question``; None when the model gives no
    token probabilities (``supports_choice_probs`` false). ``variant`` "answerable_missing" asks whether
    something is missing instead; its P(no) is returned, so the value means the same."""
    if not getattr(llm, "supports_choice_probs", False):
        return None
    p_yes, p_no = llm.choice_probs(answerable_messages(system_message, question, variant), ["yes", "no"])  # type: ignore[attr-defined]
    return float(p_no if variant == "answerable_missing" else p_yes)


@dataclass(frozen=True)
class Thresholds:
    """When to abstain: P(yes) below ``p_alone`` whatever the coverage, or below ``p_with_gap`` when at least
    ``min_uncovered`` content words match nothing in the database; and, with or without a probability (a
    backend without them), when ``coverage_alone`` or more content words match nothing (0: never)."""

    p_alone: float = 0.05
    p_with_gap: float = 0.5
    min_uncovered: int = 1
    coverage_alone: int = 0
    prompt: str = "answerable"  # the yes/no prompt of prompts.toml: "answerable" or "answerable_missing"


@dataclass
class Verdict:
    """The decision and what it rests on."""

    abstain: bool
    reason: str = ""
    p_answerable: float | None = None
    uncovered: list[str] = field(default_factory=list)


def decide(p_answerable: float | None, uncovered: Sequence[str], thresholds: Thresholds = Thresholds(), *,
           database: str = "") -> Verdict:
    """Combine the two signals into a :class:`Verdict` whose ``reason`` is the one-line answer to show."""
    n = len(uncovered)
    abstain = bool(thresholds.coverage_alone) and n >= thresholds.coverage_alone
    if p_answerable is not None:
        abstain = abstain or p_answerable < thresholds.p_alone or (p_answerable < thresholds.p_with_gap
                                                                   and n >= thresholds.min_uncovered)
    reason = ""
    if abstain:
        reason = ABSTAIN_SENTENCE.format(database=database or "this database")
        if n:
            reason += ": nothing in its tables, columns or values matches " + ", ".join(f"'{w}'" for w in uncovered[:4])
        reason += "."
    return Verdict(abstain, reason, p_answerable, list(uncovered))


def check_question(question: str, db: Database, llm: LLM, system_message: Message, *,
                   statements: Sequence[str] = (), thresholds: Thresholds = Thresholds(),
                   index: ValueIndex | None = None) -> Verdict:
    """Both signals for ``question`` on ``db`` and the decision (no model call when the thresholds do not
    read the probability, or when enough words match nothing to abstain anyway). ``index``: the database's
    value index, whose stored values count as covered (else they are read here)."""
    uncovered = uncovered_terms(question, database_vocabulary(db, index), statements)
    if thresholds.coverage_alone and len(uncovered) >= thresholds.coverage_alone:
        return decide(None, uncovered, thresholds, database=db.name)
    uses_p = thresholds.p_alone > 0 or (thresholds.p_with_gap > 0 and len(uncovered) >= thresholds.min_uncovered)
    p = answerable_probability(llm, system_message, question, variant=thresholds.prompt) if uses_p else None
    return decide(p, uncovered, thresholds, database=db.name)
