"""The unresolved-expressions queue: what an expert should write next.

A question whose answer failed, came back empty or was marked wrong, and whose domain words matched no
statement, points at a gap in the knowledge base. For each such question the domain phrases
(:func:`tagql.text.phrases.content_phrases`: runs of words that are no stop word, no literal and name no
table, column or sample value) that no retrieved statement covers are kept in the state store; the queue
groups them by phrase (stemmed), most asked first, with the questions behind them.

"Matched no statement" is the knowledge retrieval's own rule: the statements retrieved for the question
with K left to the retriever (the method's score floor, the set the SQL prompt gets), and a phrase counts as
covered when one of them holds more than half of its word stems. When the queue is read, each phrase is searched again
on its own (top 3, no floor: a phrase alone scores below any question), so a phrase an expert has since
written an approved statement for drops out (``resolved``).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any

from tagql.service.core import KnowledgeSearch, Registry
from tagql.service.state import StateStore
from tagql.text import split_identifier, stem, word_tokens
from tagql.text.phrases import content_phrases, phrase_key

log = logging.getLogger("tagql.service")

OUTCOMES = ("failed", "empty", "wrong")

# words of the request itself, not of the domain: aggregates, ranking and list verbs
QUESTION_WORDS = frozenset(stem(w) for w in ["average", "avg", "mean", "total", "sum", "count", "number", "amount", "percentage", "percent", "proportion", "ratio", "rate", "share", "highest", "lowest", "maximum", "minimum", "max", "min", "top", "bottom", "greatest", "largest", "smallest", "biggest", "least", "most", "best", "worst", "first", "last", "latest", "earliest", "name", "names", "title", "id", "ids", "list", "show", "tell", "give", "find", "provide", "state", "indicate", "identify", "calculate", "compute", "compare", "difference", "different", "distinct", "unique", "times", "value", "values", "result", "results", "record", "records", "entry", "entries", "row", "rows", "kind", "kinds", "type", "types", "overall", "respectively", "corresponding"])


class UnresolvedQueue:
    """Records the unmatched phrases of bad outcomes and lists them grouped, for one service."""

    def __init__(self, registry: Registry, search: KnowledgeSearch, store: StateStore) -> None:
        self.registry, self.search, self.store = registry, search, store
        self._vocab: dict[tuple[str, str], frozenset[str]] = {}
        self._lock = threading.Lock()

    def vocabulary(self, target: str, database: str | None) -> frozenset[str]:
        """Stems that are not domain words here: schema names, sample values, the request's own words."""
        session = self.registry.get(target)
        schema = session.schema(database if session.is_collection else None)
        key = (target, schema.name)
        with self._lock:
            if key not in self._vocab:
                words: set[str] = set(QUESTION_WORDS)
                for table in schema.tables:
                    words.update(stem(w) for w in word_tokens(split_identifier(table.name)))
                    for column in table.columns:
                        words.update(stem(w) for w in word_tokens(split_identifier(column.name)))
                        words.update(stem(w) for v in column.samples if isinstance(v, str)
                                     for w in word_tokens(v))
                self._vocab[key] = frozenset(words)
            return self._vocab[key]

    def unmatched(self, target: str, database: str | None, question: str) -> list[str]:
        """The question's domain phrases that no statement retrieved for it covers."""
        drop = self.vocabulary(target, database)
        phrases = content_phrases(question, drop=drop)
        if not phrases:
            return []
        retrieved = self.search.search(target, question, None, database)
        return [p for p in phrases if _covering(p, retrieved, drop) is None]

    def record(self, *, target: str, database: str | None, question: str, outcome: str, error: str | None = None,
               answer_id: str | None = None, token_name: str | None = None) -> list[str]:
        """Keep the unmatched phrases of one bad outcome; returns them. Never raises (logged): the queue
        must not turn an answer into an error."""
        try:
            session = self.registry.get(target)
            db = session.database(database if session.is_collection else None).name
            phrases = self.unmatched(target, database, question)
            self.store.add_unresolved([{
                "target": target, "database": db, "phrase": p, "phrase_key": phrase_key(p), "question": question,
                "outcome": outcome, "error": error, "answer_id": answer_id, "token_name": token_name,
            } for p in phrases])
            return phrases
        except Exception:
            log.exception("could not record unresolved phrases")
            return []

    def listing(self, target: str, database: str | None = None, *, limit: int = 50, questions: int = 10,
                include_resolved: bool = False) -> list[dict[str, Any]]:
        """Phrases, most asked first: count, outcomes, the questions behind them, and whether an approved
        statement now covers them."""
        session = self.registry.get(target)
        db = session.database(database if session.is_collection else None).name
        groups: dict[str, list[dict[str, Any]]] = {}
        for row in self.store.unresolved_rows(db):  # newest first
            groups.setdefault(row["phrase_key"], []).append(row)
        ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][-1]["id"]))
        drop = self.vocabulary(target, database)
        out = []
        for key, rows in ranked:
            phrase = Counter(r["phrase"] for r in rows).most_common(1)[0][0]
            # the phrase alone is shorter than any question: no score floor, the word stems decide
            covering = _covering(phrase, self.search.search(target, phrase, 3, database), drop)
            if covering is not None and not include_resolved:
                continue
            out.append({
                "phrase": phrase, "key": key, "count": len(rows),
                "outcomes": {o: n for o in OUTCOMES if (n := sum(r["outcome"] == o for r in rows))},
                "first_seen": rows[-1]["created_at"], "last_seen": rows[0]["created_at"],
                "resolved": covering is not None, "statement": covering,
                "questions": [{k: r[k] for k in ("question", "outcome", "error", "answer_id", "created_at")}
                              for r in rows[:questions]],
            })
            if len(out) >= limit:
                break
        return out


def _covering(phrase: str, statements: list[dict[str, Any]], drop: frozenset[str]) -> dict[str, Any] | None:
    """The first retrieved statement whose text holds more than half of ``phrase``'s domain word stems
    ("tall heroes" covers "tall" and "tall heroes", not "heavy heroes"), or None."""
    want = {stem(w) for w in word_tokens(phrase)} - drop
    for st in statements:
        if want and 2 * len(want & {stem(w) for w in word_tokens(st["text"])}) > len(want):
            return {k: st[k] for k in ("text", "sql", "score")}
    return None
