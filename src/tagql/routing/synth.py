"""Training-data synthesis (DBCopilot 3.4): a question for each sampled query schema.

Two questioners, both reverse generators (schema -> question):

* :class:`TemplateQuestioner` -- fast (~10^5 questions/minute), deterministic given a seed. It
  verbalises the sampled tables, columns and real column *values* (when the collection has data)
  with question patterns modelled on Spider's training questions (counts, lookups by value,
  aggregates, superlatives, joins through related tables).
* :class:`LLMQuestioner` -- the local LLM with few-shot exemplars from Spider's *train* split
  (schema of the exemplar's gold SQL -> its question). ~2-5 s per question here, so it is used for
  a sample and to measure cost, not for the bulk.

:func:`keep_question` filters questions that mention nothing of some table of their schema.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tagql.db.schema import Column, Schema, Table
from tagql.llm.base import system, user
from tagql.routing.metrics import gold_tables
from tagql.routing.sampling import QuerySchema
from tagql.text import split_identifier, terms

_NUM = ("INT", "NUM", "REAL", "FLOA", "DOUB", "DEC")


@dataclass(frozen=True)
class SyntheticQuestion:
    question: str
    schema: QuerySchema
    source: str  # template | llm

    def to_dict(self) -> dict[str, Any]:
        return {"question": self.question, "database": self.schema.database, "tables": list(self.schema.tables),
                "source": self.source}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SyntheticQuestion:
        return cls(d["question"], QuerySchema(d["database"], tuple(d["tables"])), d.get("source", "template"))


def col_name(c: Column) -> str:
    return split_identifier(c.description) if c.description and len(c.description) < 40 else split_identifier(c.name)


def _is_key(c: Column) -> bool:
    n = c.name.lower()
    return n == "id" or n.endswith("_id") or n.endswith("id") and len(n) > 2 and n[-3] in "_ " or c.primary_key and "id" in n


def _plural(word: str) -> str:
    if word.endswith(("s", "x", "ch", "sh")):
        return word + ("" if word.endswith("s") else "es")
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


class TemplateQuestioner:
    """Schema(+values) -> question by question patterns. Cheap enough for thousands per database."""

    def __init__(self, schemas: Mapping[str, Schema], values: Mapping[str, Mapping[tuple[str, str], list[Any]]],
                 seed: int = 0) -> None:
        self.schemas = schemas
        self.values = values
        self.rng = random.Random(seed)

    def _cols(self, t: Table) -> list[Column]:
        cols = [c for c in t.columns if not _is_key(c)]
        return cols or t.columns

    def _value(self, db: str, t: Table) -> tuple[Column, str] | None:
        vals = self.values.get(db, {})
        opts = [(c, v) for c in t.columns for v in vals.get((t.name, c.name), [])[:50]
                if isinstance(v, str) and 2 < len(v) < 40 and not _is_key(c)]
        return self.rng.choice(opts) if opts else None

    def question(self, qs: QuerySchema) -> str:
        schema = self.schemas[qs.database]
        tabs = [schema.table(t) for t in qs.tables]
        r = self.rng
        names = [split_identifier(t.name) for t in tabs]
        t0, n0 = tabs[0], names[0]
        c = r.choice(self._cols(t0))
        c2 = r.choice(self._cols(t0))
        nums = [x for x in t0.columns if any(k in (x.type or "").upper() for k in _NUM) and not _is_key(x)]
        val = self._value(qs.database, t0)
        if len(tabs) == 1:
            pats = [
                f"How many {_plural(n0)} are there?",
                f"List the {col_name(c)} of all {_plural(n0)}.",
                f"What are the {col_name(c)} and {col_name(c2)} of each {n0}?",
                f"Show the distinct {col_name(c)} of {_plural(n0)}.",
                f"Find the {col_name(c)} of {_plural(n0)} sorted by {col_name(c2)}.",
                f"How many {_plural(n0)} are there for each {col_name(c)}?",
            ]
            if nums:
                n = col_name(r.choice(nums))
                pats += [f"What is the average {n} of all {_plural(n0)}?",
                         f"Which {n0} has the highest {n}? Show its {col_name(c)}.",
                         f"What is the maximum and minimum {n} of {_plural(n0)}?",
                         f"List the {col_name(c)} of {_plural(n0)} with {n} greater than the average."]
            if val:
                vc, v = val
                pats += [f"What is the {col_name(c)} of the {n0} whose {col_name(vc)} is {v}?",
                         f"How many {_plural(n0)} have {col_name(vc)} {v}?",
                         f"Show all {_plural(n0)} with {col_name(vc)} '{v}'.",
                         f"Find the {col_name(c)} of {_plural(n0)} from {v}."]
            return r.choice(pats)
        t1, n1 = tabs[1], names[1]
        d = r.choice(self._cols(t1))
        val1 = self._value(qs.database, t1)
        pats = [
            f"Show the {col_name(c)} of each {n0} and the {col_name(d)} of its {n1}.",
            f"What is the {col_name(c)} of the {n0} with the most {_plural(n1)}?",
            f"How many {_plural(n1)} does each {n0} have? List the {col_name(c)}.",
            f"List the {col_name(c)} of {_plural(n0)} that do not have any {n1}.",
            f"For each {n1}, show its {col_name(d)} and the number of {_plural(n0)}.",
            f"Find the {col_name(d)} of {_plural(n1)} related to {_plural(n0)} ordered by {col_name(c)}.",
        ]
        if val1:
            vc, v = val1
            pats += [f"What are the {col_name(c)} of {_plural(n0)} with a {n1} whose {col_name(vc)} is {v}?",
                     f"How many {_plural(n0)} are associated with {n1} {v}?"]
        if val:
            vc, v = val
            pats += [f"Show the {col_name(d)} of {_plural(n1)} of the {n0} with {col_name(vc)} {v}."]
        q = r.choice(pats)
        for t, n in zip(tabs[2:], names[2:]):
            e = r.choice(self._cols(t))
            q = q.rstrip(".?") + r.choice([f", together with the {col_name(e)} of the {n}?",
                                           f" and their {n} {col_name(e)}.", f" in each {n}."])
        return q

    def generate(self, schemas: Sequence[QuerySchema]) -> list[SyntheticQuestion]:
        return [SyntheticQuestion(self.question(s), s, "template") for s in schemas]


def schema_terms(schema: Schema, tables: Sequence[str], values: Mapping[tuple[str, str], list[Any]] | None = None
                 ) -> list[set[str]]:
    """Per table: the stemmed words of its name, column names and (short text) values."""
    out = []
    for name in tables:
        t = schema.table(name)
        words = set(terms(t.name))
        for c in t.columns:
            words |= set(terms(c.name)) | set(terms(col_name(c)))
            for v in (values or {}).get((t.name, c.name), [])[:50]:
                if isinstance(v, str) and len(v) < 40:
                    words |= set(terms(v))
        out.append(words)
    return out


def keep_question(question: str, schema: Schema, qs: QuerySchema,
                  values: Mapping[tuple[str, str], list[Any]] | None = None) -> bool:
    """The filter: a question must be a real sentence and mention something of *every* table."""
    q = set(terms(question))
    if len(question) < 12 or len(question) > 400 or not q:
        return False
    return all(q & terms for terms in schema_terms(schema, qs.tables, values))


# ---- the LLM questioner ----------------------------------------------------------------------------

def _compact(schema: Schema, tables: Sequence[str]) -> str:
    lines = []
    for name in tables:
        t = schema.table(name)
        lines.append(f"{t.name}({', '.join(c.name for c in t.columns)})")
    return "\n".join(lines)


class LLMQuestioner:
    """Few-shot schema -> question with the local LLM; exemplars from Spider's train split."""

    def __init__(self, llm: Any, schemas: Mapping[str, Schema], train_json: str | Path, *, shots: int = 3,
                 seed: int = 0) -> None:
        self.llm = llm
        self.schemas = schemas
        self.rng = random.Random(seed)
        self.shots = shots
        train_schemas: dict[str, Schema] = {}
        tables_json = Path(train_json).parent.parent / "spider" / "tables.json"
        if tables_json.exists():
            train_schemas = {e["db_id"]: Schema.from_spider(e) for e in json.loads(tables_json.read_text())}
        self.exemplars: dict[int, list[tuple[str, str]]] = {}
        for e in json.loads(Path(train_json).read_text()):
            s = train_schemas.get(e["db_id"]) or schemas.get(e["db_id"])
            if s is None:
                continue
            ts = sorted(gold_tables(e["query"], s.table_names))
            if ts:
                names = [s.table(t).name for t in ts]
                self.exemplars.setdefault(min(len(ts), 3), []).append((_compact(s, names), e["SpiderQuestion"]))

    def messages(self, qs: QuerySchema) -> list:
        pool = self.exemplars.get(min(len(qs.tables), 3)) or [x for v in self.exemplars.values() for x in v]
        shots = self.rng.sample(pool, min(self.shots, len(pool)))
        body = "".join(f"Tables:\n{s}\nQuestion: {q}\n\n" for s, q in shots)
        body += f"Tables:\n{_compact(self.schemas[qs.database], qs.tables)}\nQuestion:"
        return [system("Write one natural question a user could ask that is answered with SQL over exactly "
                       "these tables (use all of them). Reply with the question only."), user(body)]

    def question(self, qs: QuerySchema) -> str:
        out = self.llm.complete(self.messages(qs), max_tokens=48, stop=["\n"]).text
        return re.sub(r"^\s*(Question:)?\s*", "", out).strip().strip('"')

    def generate(self, schemas: Sequence[QuerySchema]) -> list[SyntheticQuestion]:
        return [SyntheticQuestion(self.question(s), s, "llm") for s in schemas]


# ---- question patterns mined from a training split ------------------------------------------------

@dataclass(frozen=True)
class MinedPattern:
    """A real training question with its schema mentions replaced by slots.

    ``text`` holds ``{t0}`` (table 0), ``{c1_0}`` (a column of table 1), ``{v0_0}`` (a value of a text
    column of table 0); ``numeric`` lists the column slots that held a number column."""

    text: str
    n_tables: int
    numeric: tuple[str, ...] = ()
    plural: tuple[str, ...] = ()


def mine_patterns(train_json: str | Path, tables_json: str | Path, min_dbs: int = 4) -> list[MinedPattern]:
    """Slot the schema mentions of Spider train questions (``SpiderQuestion`` or ``question``).

    A pattern is kept only if every content word left outside the slots is generic, i.e. occurs in
    questions of at least ``min_dbs`` different training databases (so no domain leaks across)."""
    import sqlglot
    from sqlglot import exp

    schemas = {e["db_id"]: Schema.from_spider(e) for e in json.loads(Path(tables_json).read_text())}
    train = json.loads(Path(train_json).read_text())
    word_dbs: dict[str, set[str]] = {}
    for e in train:
        for w in terms(e.get("SpiderQuestion") or e["question"], stem=False):
            word_dbs.setdefault(w, set()).add(e["db_id"])
    out: list[MinedPattern] = []
    seen: set[str] = set()
    for e in train:
        q = e.get("SpiderQuestion") or e["question"]
        s = schemas.get(e["db_id"])
        if s is None:
            continue
        try:
            tree = sqlglot.parse_one(e["query"], read="sqlite")
        except Exception:  # noqa: BLE001
            continue
        used = list(dict.fromkeys(t.name.lower() for t in tree.find_all(exp.Table)))
        tabs = [s.table(t) for t in used if s.table(t) is not None]
        if not tabs or len(tabs) > 3:
            continue
        mentions: list[tuple[str, str, bool, bool]] = []  # (surface, slot, numeric, plural)
        col_names = {c.name.lower() for c in tree.find_all(exp.Column)}
        lits = [lit.this for lit in tree.find_all(exp.Literal) if lit.is_string]
        for j, t in enumerate(tabs):
            for k, c in enumerate(x for x in t.columns if x.name.lower() in col_names and not _is_key(x)):
                num = any(x in (c.type or "").upper() for x in _NUM)
                mentions.append((col_name(c), f"c{j}_{k}", num, False))
            vals_cols = [c for c in t.columns if c.name.lower() in col_names and not _is_key(c)]
            for k, v in enumerate(lits):
                if vals_cols and len(v) > 1:
                    mentions.append((v.strip("%"), f"v{j}_{k}", False, False))
            h = split_identifier(t.name)
            mentions += [(_plural(h), f"t{j}", False, True), (h, f"t{j}", False, False)]
        text, slots, numeric, plural = q, set(), [], []
        for surface, slot, num, pl in sorted(mentions, key=lambda m: -len(m[0])):
            if len(surface) < 2 or slot in slots:
                continue
            pat = re.compile(r"(?<![\w{])" + re.escape(surface) + r"(?![\w}])", re.IGNORECASE)
            if pat.search(text):
                text = pat.sub("{" + slot + "}", text, count=1)
                slots.add(slot)
                if num:
                    numeric.append(slot)
                if pl:
                    plural.append(slot)
        if not slots or not any(x.startswith("t") or x.startswith("c") for x in slots):
            continue
        left = terms(re.sub(r"\{[^}]*\}", " ", text), stem=False)
        if any(len(word_dbs.get(w, ())) < min_dbs for w in left):
            continue
        # every table of the pattern must be mentioned (the synthetic question will name it)
        if any(not any(x[1:].split("_")[0] == str(j) for x in slots) for j in range(len(tabs))):
            continue
        if text not in seen:
            seen.add(text)
            out.append(MinedPattern(text, len(tabs), tuple(numeric), tuple(plural)))
    return out


class PatternQuestioner(TemplateQuestioner):
    """Fills mined real-question patterns with a sampled schema's tables, columns and values;
    falls back to the built-in patterns when no mined pattern fits."""

    def __init__(self, schemas: Mapping[str, Schema], values: Mapping[str, Mapping[tuple[str, str], list[Any]]],
                 patterns: Sequence[MinedPattern], seed: int = 0, share: float = 0.7) -> None:
        super().__init__(schemas, values, seed)
        self.by_size: dict[int, list[MinedPattern]] = {}
        for p in patterns:
            self.by_size.setdefault(p.n_tables, []).append(p)
        self.share = share

    def question(self, qs: QuerySchema) -> str:
        pool = self.by_size.get(len(qs.tables))
        if not pool or self.rng.random() > self.share:
            return super().question(qs)
        schema = self.schemas[qs.database]
        for _ in range(5):
            p = self.rng.choice(pool)
            filled = self._fill(p, schema, qs)
            if filled:
                return filled
        return super().question(qs)

    def _fill(self, p: MinedPattern, schema: Schema, qs: QuerySchema) -> str | None:
        tabs = [schema.table(t) for t in qs.tables]
        vals = self.values.get(qs.database, {})
        out: dict[str, str] = {}
        for slot in re.findall(r"\{([^}]*)\}", p.text):
            kind, j = slot[0], int(slot[1:].split("_")[0])
            if j >= len(tabs):
                return None
            t = tabs[j]
            if kind == "t":
                out[slot] = _plural(split_identifier(t.name)) if slot in p.plural else split_identifier(t.name)
            elif kind == "c":
                cols = self._cols(t)
                want_num = slot in p.numeric
                typed = [c for c in cols if any(x in (c.type or "").upper() for x in _NUM) == want_num]
                out[slot] = col_name(self.rng.choice(typed or cols))
            else:
                opts = [v for c in t.columns for v in vals.get((t.name, c.name), [])[:50]
                        if isinstance(v, str) and 1 < len(v) < 40 and not _is_key(c)]
                if not opts:
                    return None
                out[slot] = self.rng.choice(opts)
        try:
            return p.text.format(**out)
        except (KeyError, IndexError, ValueError):
            return None


_PATTERNS: list[MinedPattern] | None = None


def load_patterns() -> list[MinedPattern]:
    """The mined patterns shipped with tagql (``routing/data/patterns.json``, from Spider train)."""
    global _PATTERNS
    if _PATTERNS is None:
        f = Path(__file__).parent / "data" / "patterns.json"
        _PATTERNS = [MinedPattern(d["text"], d["n_tables"], tuple(d["numeric"]), tuple(d["plural"]))
                     for d in json.loads(f.read_text())]
    return _PATTERNS
