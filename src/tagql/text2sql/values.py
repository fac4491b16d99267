"""The literals a question names, matched against the database's stored values (a
:class:`tagql.db.values.ValueIndex`), so the SQL prompt can show each one's column and exact spelling:

    -- Values found in the database: publisher.publisher_name = 'Marvel Comics'; member.position = 'Vice President'

:func:`question_phrases` lists what may be a literal: quoted strings, spans of capitalised words (with
"of", "the", "de" ... inside), and every other run of up to ``MAX_WORDS`` words that neither starts nor
ends with a stop word. :func:`match_values` looks each phrase up, longest first: exact matches (up to
case, spacing and punctuation) first; a phrase with none is looked up by trigram similarity at
``threshold``. A phrase inside a longer one that matched exactly is not looked up again, a phrase's
fuzzy hits are kept only when few values score alike (an unspecific word such as "comics" matching
many is no hint), and a hit gains ``COLUMN_BONUS`` when a word of its table or column name is in the
question ("published by Marvel": ``publisher.publisher_name``). The best ``limit`` hits are returned,
one per stored value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from tagql.db.values import ValueHit, ValueIndex, normalise
from tagql.text import split_identifier, stem

MAX_WORDS = 5
THRESHOLD = 0.9  # fuzzy hits below this similarity are not hints (train: literal recall 0.83, precision 0.96)
LIMIT = 5  # hints per question
PER_PHRASE = 2  # fuzzy hits kept per phrase
COLUMN_BONUS = 0.1  # a hit whose table or column is named next to the phrase
WINDOW = 3  # words either side of the phrase where that name counts

_STOP_TEXT = """
a about above after all also among an and any are as at be been before being below between both but by can
could did do does during each either else ever every few for from had has have having he her hers him his how
i if in into is it its itself just least less many me more most much my neither no nor not of off on once only
or other our out over own per please same she should so some such than that the their theirs them then there
these they this those through to too under until up very was we were what whatever when where whether which
while who whom whose why will with within without would yes yet you your
list name names give show tell find state provide indicate identify calculate count number total amount
average percentage ratio what's whats
"""
STOP_WORDS = frozenset(_STOP_TEXT.split())
_JOINERS = frozenset({"of", "the", "de", "la", "le", "du", "van", "von", "and", "&", "for", "on", "in"})
_QUOTED = re.compile(r"""'([^']{2,80})'|"([^"]{2,80})"|‘([^’]{2,80})’|“([^”]{2,80})”""")
_TOKEN = re.compile(r"[^\W_](?:[\w'’.&/-]*[^\W_])?")


@dataclass(frozen=True)
class ValueMatch:
    """A stored value a question names: ``table.column = 'value'`` with its score and the question's words."""

    table: str
    column: str
    value: str
    score: float
    phrase: str

    def render(self) -> str:
        return f"{self.table}.{self.column} = '{self.value.replace(chr(39), chr(39) * 2)}'"


@dataclass(frozen=True)
class Phrase:
    text: str
    start: int  # token span [start, end); quoted strings span their tokens too
    end: int
    kind: str  # "quoted" | "capitalised" | "ngram"


def question_phrases(question: str, *, max_words: int = MAX_WORDS) -> list[Phrase]:
    """Candidate literals of ``question``, longest first (see the module docstring)."""
    tokens = [(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(question)]
    out: dict[str, Phrase] = {}

    def span_of(a: int, b: int) -> tuple[int, int]:
        idx = [i for i, (_, s, e) in enumerate(tokens) if s >= a and e <= b]
        return (idx[0], idx[-1] + 1) if idx else (0, 0)

    for m in _QUOTED.finditer(question):
        text = next(g for g in m.groups() if g)
        s, e = span_of(m.start(), m.end())
        out.setdefault(text.strip().lower(), Phrase(text.strip(), s, e, "quoted"))
    words = [t for t, _, _ in tokens]
    low = [w.lower() for w in words]
    # capitalised spans: "Ascent of Man", "2008 Australian Grand Prix" (not the question's first word alone)
    i = 0
    while i < len(words):
        if _capitalised(words[i]) and not (i == 0 and low[i] in STOP_WORDS):
            j = i + 1
            while j < len(words) and (_capitalised(words[j]) or (low[j] in _JOINERS and j + 1 < len(words)
                                                                 and _capitalised(words[j + 1]))):
                j += 1
            a = i - 1 if i > 0 and words[i - 1].isdigit() else i  # a leading year or number belongs to it
            if j - a > 1 or i > 0:
                text = question[tokens[a][1]:tokens[j - 1][2]]
                out.setdefault(text.lower(), Phrase(text, a, j, "capitalised"))
            i = j
        else:
            i += 1
    for n in range(min(max_words, len(words)), 0, -1):
        for a in range(len(words) - n + 1):
            b = a + n
            if low[a] in STOP_WORDS or low[b - 1] in STOP_WORDS:
                continue
            if n == 1 and (len(words[a]) < 2 or words[a].isdigit()):
                continue
            text = question[tokens[a][1]:tokens[b - 1][2]]
            out.setdefault(text.lower(), Phrase(text, a, b, "ngram"))
    return sorted(out.values(), key=lambda p: (-(p.end - p.start), p.start))


def _capitalised(word: str) -> bool:
    return word[:1].isupper() or (any(c.isdigit() for c in word) and any(c.isalpha() for c in word))


def _name_stems(name: str) -> set[str]:
    return {stem(w) for w in split_identifier(name).lower().split() if len(w) > 2}


def match_values(question: str, index: ValueIndex, *, threshold: float = THRESHOLD, limit: int = LIMIT,
                 per_phrase: int = PER_PHRASE, tables: Iterable[str] | None = None) -> list[ValueMatch]:
    """The stored values ``question`` names, best first, at most ``limit`` (one per stored value).
    ``tables`` (names) keeps hits in those tables only (a prompt narrowed to some tables)."""
    allowed = {t.lower() for t in tables} if tables is not None else None
    token_stems = [stem(m.group().lower()) for m in _TOKEN.finditer(question)]
    # words of the schema's names: "members", "budget", "power" name a table or column, not a value
    schema_stems: set[str] = set()
    for c in index.columns:
        schema_stems |= _name_stems(c.table) | _name_stems(c.column)

    def names_schema(p: Phrase) -> bool:
        words = normalise(p.text).split()
        return p.kind != "quoted" and len(words) == 1 and stem(words[0]) in schema_stems

    def scored(hits: list[ValueHit], p: Phrase) -> list[ValueMatch]:
        """The hits in the allowed tables; a quoted or capitalised phrase's hit gains COLUMN_BONUS when a word
        of its table or column name is within WINDOW words of the phrase ("published by Marvel":
        publisher.publisher_name; a common word such as "eyes" or "super" gets no help towards a name
        that contains it, 'Snake-Eyes', 'Super Speed')."""
        near: set[str] = set()
        if p.kind != "ngram":
            near = set(token_stems[max(0, p.start - WINDOW):p.start] + token_stems[p.end:p.end + WINDOW])
        out = []
        for h in hits:
            if allowed is not None and h.table.lower() not in allowed:
                continue
            bonus = COLUMN_BONUS if (_name_stems(h.table) | _name_stems(h.column)) & near else 0.0
            out.append(ValueMatch(h.table, h.column, h.value, round(min(h.score, 1.0) + bonus, 4), p.text))
        return sorted(out, key=lambda m: -m.score)

    covered: set[int] = set()  # token positions inside a phrase that matched exactly
    best: dict[tuple[str, str, str], ValueMatch] = {}

    def keep(matches: list[ValueMatch]) -> None:
        for m in matches:
            key = (m.table.lower(), m.column.lower(), m.value)
            if key not in best or best[key].score < m.score:
                best[key] = m

    phrases = question_phrases(question)
    for p in phrases:  # exact first, longest first
        if (set(range(p.start, p.end)) <= covered and p.end > p.start) or names_schema(p):
            continue
        matches = scored(index.exact(p.text), p)
        if matches:
            keep(matches)
            covered |= set(range(p.start, p.end))
    for p in phrases:
        if ((p.end > p.start and set(range(p.start, p.end)) & covered) or len(normalise(p.text)) < 4
                or names_schema(p)):
            continue
        matches = [m for m in scored(index.similar(p.text, threshold=threshold - COLUMN_BONUS, limit=10), p)
                   if m.score >= threshold]
        if len(matches) > per_phrase:
            # as good a hit beyond the kept ones: the phrase names no value in particular
            if matches[per_phrase].score >= matches[per_phrase - 1].score:
                continue
            matches = matches[:per_phrase]
        keep(matches)
    ranked = sorted(best.values(), key=lambda m: (-m.score, m.table, m.column, m.value))
    return ranked[:limit]


def render_values(matches: Iterable[ValueMatch]) -> str:
    """``table.column = 'value'; ...`` as the prompt shows them."""
    return "; ".join(m.render() for m in matches)
