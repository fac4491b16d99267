"""Importer for the domain-knowledge paper's data (BIRD dev, 11 databases).

Why the ``set1`` files: ``Templatized_Domain_Statement/<db>_set1.json`` carries per question the NL
statements (``actual_evidence``) and the DBA-screened structured ones (``generic_evidence``),
correctly aligned for all 11 databases (``data/<db>_IN.json`` is misaligned for 5 of them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tagql.errors import TagqlError
from tagql.knowledge.statements import StatementError, Structured, parse_structured


class ImportError_(TagqlError):
    """The paper's data files are missing or malformed."""


@dataclass(frozen=True)
class Set1Item:
    qid: str
    question: str
    gold: list[str]  # DBA-screened structured statements, deduplicated, stripped
    nl: list[str]  # the expert's NL statements
    sql: str


def set1_path(data: Path, db: str) -> Path:
    return Path(data) / "domain_knowledge" / "Templatized_Domain_Statement" / f"{db}_set1.json"


def load_set1(data: Path, db: str) -> list[Set1Item]:
    path = set1_path(data, db)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise ImportError_(f"no statements file for {db!r} at {path}") from None
    except json.JSONDecodeError as exc:
        raise ImportError_(f"{path} is not valid JSON: {exc}") from None
    out = []
    for qid, v in raw.items():
        gold = list(dict.fromkeys(s.strip() for s in v.get("generic_evidence") or [] if s and s.strip()))
        nl = [s.strip() for s in v.get("actual_evidence") or [] if s and s.strip()]
        out.append(Set1Item(qid, v.get("question", ""), gold, nl, v.get("GT_SQL", "")))
    return out


def structured_or_raw(statement: str) -> Structured:
    """Parse "'x' refers to y"; a statement without a mapping keeps its whole text, no SQL."""
    try:
        return parse_structured(statement)
    except StatementError:
        return Structured(" ".join(statement.split()).strip("'\" "), "")


PAPER_DBS = ("california_schools", "card_games", "codebase_community", "debit_card_specializing",
             "european_football_2", "financial", "formula_1", "student_club", "superhero",
             "thrombosis_prediction", "toxicology")


def bird_schema(data: Path, db: str):
    """The BIRD dev schema of ``db`` from ``bird/dev_tables.json`` (works for all 11 databases)."""
    from tagql.db.schema import Schema

    path = Path(data) / "bird" / "dev_tables.json"
    try:
        entry = next(e for e in json.loads(path.read_text()) if e["db_id"] == db)
    except (OSError, StopIteration, json.JSONDecodeError):
        raise ImportError_(f"no schema for {db!r} in {path}") from None
    return Schema.from_spider(entry)


def bird_sqlite(data: Path, db: str) -> Path:
    """Where BIRD dev keeps ``db``'s data (present here for 3 of the 11 databases)."""
    return Path(data) / "bird" / "dev_databases" / db / f"{db}.sqlite"


def import_database(data: Path, db: str, store: Path, *, llm=None, embedder=None, database=None):
    """One store for ``db`` from the IN set: the DBA-screened structured statements (approved, as
    the paper's were screened, with the reason when a snippet fails validation), or with ``llm`` the
    NL ones run through structuring (proposed). With ``database`` (the connected data) every
    statement is then checked against its values too (:meth:`KnowledgeBase.check`).
    Re-running adds nothing already present."""
    from tagql.knowledge.store import KnowledgeBase
    from tagql.knowledge.structuring import Structurer
    from tagql.knowledge.validate import snippet_problem

    items = load_set1(data, db)
    kb = KnowledgeBase.open(store, create=True, db_id=db, schema=bird_schema(data, db), embedder=embedder)
    have = {s.nl for s in kb.list()}
    if llm is None:
        new = [s for s in dict.fromkeys(g for it in items for g in it.gold) if s not in have]
        rows = []
        for s in new:
            p = structured_or_raw(s)
            # approved as screened, but what fails validation is recorded for the DBA to see (and fix)
            rows.append((p.text, p.sql, s, "approved", snippet_problem(p.sql, kb.schema) or ""))
        kb.add_many(rows, author="paper:generic_evidence")
    else:
        new = [s for s in dict.fromkeys(n for it in items for n in it.nl) if s not in have]
        kb.add_nl(new, Structurer(llm, kb.schema, kb.exemplars()), author="paper:actual_evidence")
    if database is not None:
        kb.check(database)
    return kb, len(new)
