"""Automatic hybrid plans: the LM writes SQL plus ordered operators; tagql validates, then runs them.

A plan (JSON, shown to the user as-is)::

    {"sql": "SELECT School, Phone, County FROM schools ORDER BY AvgScrRead ASC",
     "operators": [{"op": "filter", "instruction": "{County} is a county in Southern California"},
                   {"op": "limit", "n": 1},
                   {"op": "columns", "columns": ["Phone"]}]}

Operators run in order on the SQL result: LM operators ``filter``, ``map``, ``extract``, ``topk``,
``agg`` (must be last: it produces the answer text) and relational ``limit``, ``columns``, ``count``,
``distinct``, ``sort`` (by a column, numbers as numbers: ranks by what a ``map`` computed). A plan with no operators is a purely relational question: plain SQL.

Validation happens before any LM operator runs: the SQL passes the usual safety and schema checks, its
result columns are read with ``LIMIT 0``, and every operator's name, arguments and ``{column}``
references are checked against the columns available at that step.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from tagql.db.connection import Database, Result
from tagql.db.repair import Comparison, compared_strings, string_comparisons
from tagql.db.safety import fix_sqlite_double_quoted_strings
from tagql.db.schema import Table, holds_text, key_neighbours
from tagql.errors import InvalidQuery, LLMOutputError, QueryFailed, TagqlError, UnsafeQuery
from tagql.knowledge import ScoredStatement
from tagql.llm.base import LLM, Message, system, user
from tagql.llm.repeats import RepeatWatch
from tagql.tag import tag_prompts as prompts
from tagql.tag.exemplars import Exemplar, exemplar_index
from tagql.tag.operators import (
    OperatorError,
    SemEngine,
    SemTable,
    repair_braces,
    resolve_columns,
    resolve_or_none,
    template_fields,
)
from tagql.text2sql.query import prepare_sql
from tagql.tag.udf import (JudgedFilter, and_parts, execute_with_lm, judge_filters, register_lm_functions,
                           uses_lm_functions)
from tagql.text import LETTERS, word_tokens

LM_OPS = {"filter", "map", "extract", "topk", "agg"}
REL_OPS = {"limit", "columns", "count", "distinct", "sort"}
OPS = LM_OPS | REL_OPS

PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "sql": {"type": "string"},
        "operators": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "op": {"type": "string", "enum": sorted(OPS)},
                    "instruction": {"type": "string"},
                    "k": {"type": "integer"},
                    "n": {"type": "integer"},
                    "column": {"type": "string"},
                    "columns": {"type": "array", "items": {"type": "string"}},
                    "desc": {"type": "boolean"},
                },
                "required": ["op"],
            },
        },
    },
    "required": ["sql", "operators"],
}


class PlanError(TagqlError):
    """The plan is not valid for this database (bad SQL, unknown operator or column). ``missing_column``:
    the column its SQL names that no table of the query has (when that is why); ``out_of_scope``: the
    column is another table's, read where that table is not in FROM (a lookup over a lost key may be why)."""

    missing_column: str | None = None
    out_of_scope: bool = False


@dataclass
class Plan:
    sql: str
    operators: list[dict[str, Any]] = field(default_factory=list)

    @property
    def relational(self) -> bool:
        return not self.operators

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_obj(cls, obj: Any) -> Plan:
        if not isinstance(obj, dict) or not isinstance(obj.get("sql"), str) or not obj["sql"].strip():
            raise PlanError("the plan has no SQL query", 'a plan is {"sql": "...", "operators": [...]}')
        ops = obj.get("operators") or []
        if not isinstance(ops, list) or not all(isinstance(o, dict) for o in ops):
            raise PlanError("the plan's operators must be a list of objects")
        return cls(obj["sql"].strip().rstrip(";"), [dict(o) for o in ops])


def parse_plan(text: str) -> Plan:
    """A plan from an LM reply (JSON, possibly fenced or with prose around it)."""
    m = re.search(r"\{.*\}", text, re.DOTALL)
    if not m:
        raise LLMOutputError(f"the LM reply contains no JSON plan: {text.strip()[:120]!r}")
    try:
        obj = json.loads(m.group(0))
    except ValueError as exc:
        raise LLMOutputError(f"the LM plan is not valid JSON: {exc}") from exc
    return Plan.from_obj(obj)


def _parse(sql: str, db: Database | None, dialect: str) -> Any:
    """The SQL's syntax tree as the database reads it (SQLite's ``"Food"`` is the string 'Food'), or None."""
    import sqlglot

    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except Exception:  # noqa: BLE001 - validation reports parse errors
        return None
    return fix_sqlite_double_quoted_strings(tree, db.schema) if db is not None else tree


def relax_guessed_values(plan: Plan, dialect: str = "sqlite", db: Database | None = None) -> list[str]:
    """Drop ``col IN ('a', 'b', ...)``, ``col = 'a'`` and ``col LIKE 'a%'`` conditions on a column an LM filter/topk
    judges: the model guessed the values the operator is there to find (small models do this, often in
    the wrong case, e.g. ``state = 'CA'`` where the column holds 'California').
    Returns the removed conditions (recorded in the plan)."""
    from sqlglot import exp

    judged = set()
    for op in plan.operators:
        if str(op.get("op", "")).lower() in ("filter", "topk") and isinstance(op.get("instruction"), str):
            judged |= {f.split(":")[0].lower() for f in template_fields(op["instruction"])}
    if not judged:
        return []
    tree = _parse(plan.sql, db, dialect)
    if tree is None:
        return []
    removed = []
    for node in list(tree.find_all(exp.In, exp.EQ, exp.Like, exp.ILike)):
        col, _ = compared_strings(node)  # element IN ('Na', 'K'), state = 'CA', element LIKE 'alkali%'
        if col is not None and col.name.lower() in judged:
            removed.append(node.sql(dialect=dialect))
            node.replace(exp.true())
    if removed:
        plan.sql = tree.sql(dialect=dialect)
    return removed


def _enumerated_values(sql: str) -> int:
    """How many quoted constants the longest ``IN (...)`` list of ``sql`` holds, counted on the text (the
    SQL may not parse: a small model listing a category's members loops until its reply is cut off)."""
    lists = re.findall(r"\bIN\s*\(((?:\s*'[^']*'\s*,?)+)", sql, re.IGNORECASE)
    return max((len(re.findall(r"'[^']*'", x)) for x in lists), default=0)


_LISTED_COLUMN = re.compile(r"([\w.\"`]+)\s+IN\s*\(\s*'[^']*'\s*,", re.IGNORECASE)  # "State IN ('New Jersey', ..."
ENUMERATION_HINT = ("it lists values until the reply is cut off: do not enumerate the members of a category; select "
                    "the column and let the language model judge each stored value with "
                    "LM_FILTER('{column} is a ...', column)")


_DATE_PART = {"year": "%Y", "month": "%m", "day": "%d", "weekday": "%w", "hour": "%H"}


def invented_order_columns(plan: Plan, db: Database) -> list[str]:
    """``ORDER BY founding_year`` where no table has such a column: the model named the fact it wanted
    the database to know. It becomes ``ORDER BY LM_NUMBER('the founding year of {publisher_name}',
    publisher_name)``: the LM gives the fact for the first stored column the query selects. The 1.5B
    model repeats the invented column even when the error says to use ``LM_NUMBER`` (session 12). A part
    of a date (``month``, ``year``) is read from a stored date of the query's tables with ``STRFTIME``.
    Returns ``old -> new`` notes; the SQL is left alone when nothing fits."""
    from sqlglot import exp

    tree = _parse(plan.sql, db, db.dialect)
    select = tree if isinstance(tree, exp.Select) else None
    order = select.args.get("order") if select is not None else None
    if select is None or order is None:
        return []
    known = {c.name.lower() for t in db.schema.tables for c in t.columns}
    aliases = {e.alias.lower() for e in select.expressions if e.alias}
    ids = identifier_columns(db)  # the LM cannot tell a fact about an opaque id
    subject = next((e for e in select.expressions if isinstance(e, exp.Column) and e.name.lower() in known
                    and e.name.lower() not in ids), None)
    if subject is None:
        return []
    notes = []
    for col in list(order.find_all(exp.Column)):
        name = col.name.lower()
        if name in known or name in aliases or _names_a_key(col.name):
            continue
        fact = name.replace("_", " ")
        date = _stored_date(select, db) if name in _DATE_PART and db.backend.strftime_dates else None
        call = exp.Anonymous(this="STRFTIME", expressions=[exp.Literal.string(_DATE_PART[name]), date]) if date else \
            exp.Anonymous(this="LM_NUMBER", expressions=[exp.Literal.string(f"the {fact} of {{{subject.name}}}"),
                                                         subject.copy()])
        notes.append(f"{col.sql(dialect=db.dialect)} -> {call.sql(dialect=db.dialect)}")
        col.replace(call)
    if notes:
        plan.sql = tree.sql(dialect=db.dialect)
    return notes


def _names_a_key(name: str) -> bool:
    """``model_id``, ``RegionID``, ``ModelId``, ``id``: a made-up column named like a key. The LM cannot
    know an opaque id ("the model id of {maker}" on a train question, "the region id of {COUNTRY_NAME}"),
    so such a column is never asked of it."""
    return bool(re.search(r"(?:^|_)id$", name, re.IGNORECASE) or re.search(r"[a-z0-9](?:Id|ID)$", name))


def invented_fact_columns(plan: Plan, db: Database, *, unplaced: bool = False,
                          criterion: Callable[[str, str], str] | None = None) -> list[str]:
    """A column no table has, named outside ORDER BY (``WHERE country = 'Japan'``, ``GROUP BY continent``,
    ``SELECT name, country``): the model named a fact about the rows that the database does not store
    (the pool's questions hide exactly such columns). It becomes ``LM_MAP('the country of {name}', name)``
    over the naming column of the table it was written against (the qualifier's table, else the FROM
    table: a column called ``name`` or ``*_name``, else its first text column that is not an id), kept under
    its name in the select list. Run after :func:`invented_order_columns` (ORDER BY wants a number).
    A column another table has is left to the join repair of validation (for a qualified column: another
    table of the query); ``unplaced=True`` is for after that repair found no join for it (``nationality``
    on ``circuits``: drivers and constructors have one, three joins away), so a column no table of the
    query has is a fact too. ``criterion(column, table)`` states the question's condition about a row's
    naming column (:meth:`Planner.criterion`): when the query compares exactly one made-up column with
    constants, the filter judges that statement ("{name} is a circuit in the United Kingdom") rather than
    "the nationality of {name} is British", which a judge refuses for a circuit. Returns ``old -> new``
    notes."""
    from sqlglot import exp

    tree = _parse(plan.sql, db, db.dialect)
    select = tree if isinstance(tree, exp.Select) else None
    if select is None:
        return []
    known = {c.name.lower() for t in db.schema.tables for c in t.columns}
    aliases: dict[str, Any] = {}
    for source, table in _query_tables(select, db):
        if table is not None:
            aliases.setdefault(source.alias_or_name.lower(), (source.alias_or_name, table))
    if not aliases:
        return []
    first = next(iter(aliases.values()))
    ids = identifier_columns(db)
    named = {e.alias.lower() for e in select.expressions if e.alias}
    selected = {c.name.lower() for e in select.expressions for c in e.find_all(exp.Column)}
    order = select.args.get("order")
    notes = []
    # the select list first: a column mapped there keeps its name, so GROUP BY / HAVING can read the alias
    columns = sorted(select.find_all(exp.Column), key=lambda c: not isinstance(c.parent, exp.Select))
    in_query = {c.name.lower() for _q, t in aliases.values() for c in t.columns}
    todo = []  # (column, its table's name in the query, the table, the row's naming column)
    for col in columns:
        name = col.name.lower()
        if (name in named and not col.table) or (order is not None and col.find_ancestor(exp.Order) is order):
            continue
        if col.find_ancestor(exp.Select) is not select:  # a subquery's column: its own scope
            continue
        if col.table and col.table.lower() not in aliases:
            continue  # its table is one the schema lacks (``constructor_results``): the table repair's, not a fact
        qualifier, table = aliases[col.table.lower()] if col.table else first
        # unqualified: a fact when no table of the database has it (else validation adds the join);
        # qualified: when neither its table nor any other table of the query has it (``T1.nationality`` on
        # constructors, which has none, while drivers elsewhere in the database does)
        if name in (in_query if unplaced or (col.table and col.table.lower() in aliases) else known):
            continue
        if name in _DATE_PART and db.backend.strftime_dates and _stored_date(select, db) is not None:
            continue  # a part of a stored date: the error's hint says how to read it (STRFTIME)
        if _names_a_key(col.name):
            continue  # an id is no fact the LM knows: a join the model forgot, left to validation's hint
        steps, subject = _link_subject(table, ids, selected, db)
        if subject is not None:
            todo.append((col, qualifier, table, subject, steps))
            if isinstance(col.parent, exp.Select):  # mapped under its own name: a later bare use reads it
                named.add(name)
    # the question's own condition, when it is the one thing the query compares a made-up column with
    compared = [t for t in todo if _compared_constants(t[0])[0]]
    for col, qualifier, table, subject, steps in todo:
        if steps:  # asked about the row's town, not its street address: the town joined
            qualifier, table = _join_subject(select, steps, qualifier, db), steps[-1][2]
        fact = f"the {_column_words(col.name)} of {{{subject.name}}}"
        arg = exp.column(subject.name, table=qualifier)
        claim = criterion(subject.name, table.name) if criterion is not None and len(compared) == 1 \
            and compared[0][0] is col and not _compared_constants(col)[1] else None
        node, call = _fact_call(col, fact, arg, claim)
        if isinstance(node.parent, exp.Select) and node is col:  # a selected column keeps its name
            call = exp.alias_(call, col.name)
        notes.append(f"{node.sql(dialect=db.dialect)} -> {call.sql(dialect=db.dialect)}")
        node.replace(call)
    if notes:
        plan.sql = tree.sql(dialect=db.dialect)
    return notes


def _naming_column(table: Any, ids: set[str], selected: set[str]) -> Any:
    """What names a row of ``table`` for the LM: a text column the query selects (one called *name*
    first), else one called *name*, else the first text column that is not an identifier; None without."""
    text = [c for c in table.columns if c.name.lower() not in ids
            and not re.search(r"int|real|num|dec|float|double|date|time|bool", c.type or "", re.IGNORECASE)]
    return next((c for c in text if c.name.lower() in selected and "name" in c.name.lower()), None) or \
        next((c for c in text if c.name.lower() in selected), None) or \
        next((c for c in text if "name" in c.name.lower()), None) or next(iter(text), None)


def _column_words(name: str) -> str:
    """``YearOfIndependence`` / ``home_planet`` -> ``year of independence`` / ``home planet``: a column the
    model made up, said as the fact it names (the 1.5B model writes both forms)."""
    return " ".join(re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name).replace("_", " ").lower().split())


def _noun(table_name: str) -> str:
    """``countries`` -> ``country``, ``car_makers`` -> ``car maker``: what one row of a table is."""
    words = _column_words(table_name).split()
    last = words[-1] if words else table_name.lower()
    last = last[:-3] + "y" if last.endswith("ies") else last[:-1] if re.search(r"[^s]s$", last) else last
    return " ".join([*words[:-1], last])


def orphaned_joins(plan: Plan, db: Database) -> list[str]:
    """A join over a key that the database does not have (``city JOIN country ON city.country_id =
    country.country_id`` where ``city`` has no ``country_id``): the link from the asked rows to the joined
    table is knowledge the database does not hold, so no repair can make the join. First choice: the LM
    re-derives the link among the names the far table stores (:func:`_chosen_link`, ``LM_CHOOSE``), and
    the rest of the query runs as written. When the far table has no naming column or too many names, the
    joined table -- and whatever hangs only off it (``countries`` -> ``continents``) -- is dropped, and
    what the query asked of it becomes a fact the LM gives about the row on the near side of the lost key,
    named by its naming column: ``country.country = 'Japan'`` -> ``LM_FILTER('the country of {city} is
    Japan', city)``, a selected or grouped ``country.country`` (or its key) -> ``LM_MAP('the country of
    {city}', city)``. The fact is the link the schema names, so the statement is stated from it, not asked
    of the model (asked, the 1.5B model turned "car makers from Germany" into "{Maker} is a German-speaking
    country"). The same key looked up in a subquery (``publisher_id = (SELECT id FROM publisher WHERE ...)``) is read as
    that join first. The pool's hidden keys are such links (car_1's ``car_makers.Country``, superhero's
    ``publisher_id``); given the error, the 1.5B model wrote the same join again. A join between tables
    that declared keys link another way is a wrong join, not a lost key: left to validation's hint. Only a
    top-level SELECT whose sources are all tables; returns ``old -> new`` notes."""
    from sqlglot import exp

    tree = _parse(plan.sql, db, db.dialect)
    select = tree if isinstance(tree, exp.Select) else None
    if select is None:
        return []
    looked_up = _lookups_as_joins(select, db)
    read = _query_tables(select, db)
    if not read or any(table is None for _source, table in read):
        return []
    source = select.args.get("from_") or select.args.get("from")
    joins = list(select.args.get("joins") or [])
    aliases: dict[str, Any] = {s.alias_or_name.lower(): t for s, t in read}  # alias (lower) -> the schema table
    written = {s.alias_or_name.lower(): s.alias_or_name for s, _t in read}  # alias (lower) -> as the query writes it
    order = [s.alias_or_name.lower() for s, _t in read]

    def owner(col: Any) -> str | None:
        if col.table:
            return col.table.lower() if col.table.lower() in aliases else None
        having = [a for a in order if aliases[a].column(col.name) is not None]
        return having[0] if len(having) == 1 else None

    def link(cond: Any) -> tuple[str, str, bool, bool] | None:
        """(alias, alias, has left column, has right column) of a column = column between two tables."""
        if not (isinstance(cond, exp.EQ) and isinstance(cond.this, exp.Column)
                and isinstance(cond.expression, exp.Column)):
            return None
        left, right = cond.this, cond.expression
        a = left.table.lower() if left.table else None
        b = right.table.lower() if right.table else None
        if a not in aliases or b not in aliases or a == b:
            return None
        return a, b, aliases[a].column(left.name) is not None, aliases[b].column(right.name) is not None

    orphan: Any = None
    near: str | None = None
    far: str | None = None
    edges: list[tuple[str, str]] = []
    where = select.args.get("where")
    # ON conditions, then the WHERE's (``FROM city AS T1, country AS T2 WHERE T1.country_id = ...``)
    conditions = [c for node in joins for c in and_parts(node.args.get("on"))]
    in_where = and_parts(where.this) if where is not None else []
    for cond in conditions + in_where:
        found = link(cond)
        if found is None:
            continue
        a, b, has_a, has_b = found
        if has_a and has_b:
            edges.append((a, b))
        elif orphan is None and has_a != has_b:
            orphan, near, far = cond, (b if has_a else a), (a if has_a else b)
    if orphan is None or near is None or far is None:
        return []
    links = key_neighbours(db.schema)
    if links and aliases[far].name.lower() in _reachable({aliases[near].name.lower()}, links):
        return []  # keys link the two tables another way: a wrong join, which validation's hint names
    chosen = _chosen_link(select, orphan, (written[near], aliases[near]), (written[far], aliases[far]), db)
    if chosen:
        plan.sql = tree.sql(dialect=db.dialect)
        return [*looked_up, chosen]
    if any(orphan is c for c in in_where):
        return []  # dropping a comma-listed table is not done: the error goes back to the model
    kept, todo = {near}, [near]
    while todo:  # the tables still joined to the near side without the lost key
        here = todo.pop()
        for a, b in edges:
            for x, y in ((a, b), (b, a)):
                if x == here and y not in kept:
                    kept.add(y)
                    todo.append(y)
    dropped = [a for a in order if a not in kept]
    if not dropped:
        return []
    notes = [*looked_up, f"dropped {', '.join(aliases[a].name for a in dropped)}: joined over "
             f"{orphan.sql(dialect=db.dialect)}, a key the database does not have"]
    moved = []  # conditions of the removed or emptied ON clauses that are not links: they go to WHERE
    kept_nodes = []
    for alias, node in zip(order, [source, *joins]):
        if alias not in kept:
            if node is not source:
                moved += [c for c in and_parts(node.args.get("on")) if link(c) is None]
            continue
        kept_nodes.append(node)
        if node is source:
            continue
        conds = and_parts(node.args.get("on"))
        stay = [c for c in conds if c is not orphan
                and not any(owner(col) in dropped for col in c.find_all(exp.Column))]
        moved += [c for c in conds if c not in stay and c is not orphan and link(c) is None]
        node.set("on", exp.and_(*stay) if stay else None)
    first = kept_nodes.pop(0)
    if first is not source:  # the FROM table was dropped: the first kept join is the new FROM
        moved += [c for c in and_parts(first.args.get("on")) if link(c) is None]
        select.set("from_" if "from_" in select.args else "from", exp.From(this=first.this.copy()))
    if any(n.args.get("on") is None and (n.args.get("kind") or "").upper() != "CROSS" for n in kept_nodes):
        return []  # a kept table was joined only through a dropped one: no query to save
    select.set("joins", kept_nodes or None)
    for cond in moved:
        select.where(cond.copy(), copy=False)
    ids = identifier_columns(db)
    near_table = aliases[near]
    selected = {c.name.lower() for e in select.expressions for c in e.find_all(exp.Column)
                if owner(c) == near}
    steps, subject = _link_subject(near_table, ids, selected, db)
    if subject is None:
        return []
    asked_at = _join_subject(select, steps, written[near], db) if steps else written[near]
    refs = [c for c in select.find_all(exp.Column) if owner(c) in dropped]
    for col in refs:
        table = aliases[owner(col)]
        noun = _noun(table.name)
        name = col.name.lower()
        about = name in ids or "name" in name or name == noun.replace(" ", "_") or name == noun.split()[-1]
        fact = f"the {noun} of {{{subject.name}}}" if about else \
            f"the {_column_words(col.name)} of the {noun} of {{{subject.name}}}"
        arg = exp.column(subject.name, table=asked_at)
        if col.find_ancestor(exp.Order) is not None and not _compared_constants(col)[0]:
            # an order wants a number, as in invented_order_columns
            node, call = col, exp.Anonymous(this="LM_NUMBER", expressions=[exp.Literal.string(fact), arg])
        else:
            node, call = _fact_call(col, fact, arg)
        if isinstance(node.parent, exp.Select) and node is col:
            call = exp.alias_(call, col.name)
        notes.append(f"{node.sql(dialect=db.dialect)} -> {call.sql(dialect=db.dialect)}")
        node.replace(call)
    plan.sql = tree.sql(dialect=db.dialect)
    return notes


def _chosen_link(select: Any, orphan: Any, near: tuple[str, Any], far: tuple[str, Any], db: Database) -> str:
    """The lost key re-derived: ``near.key = far.id`` becomes ``far.name = LM_CHOOSE('the <far> of {subject}',
    near.subject, 'far.name')``, the LM choosing among the names the far table stores, so the rest of the
    query (its conditions, groups and further joins on the far table) runs as written. Returns the note,
    or "" when the far table has no naming column or too many names to choose among (the caller then
    drops the far side and asks facts instead)."""
    from sqlglot import exp

    ids = identifier_columns(db)
    (near_q, near_t), (far_q, far_t) = near, far
    naming = _naming_column(far_t, ids, set())
    selected = {c.name.lower() for e in select.expressions for c in e.find_all(exp.Column)
                if (c.table or "").lower() == near_q.lower()}
    steps, subject = _link_subject(near_t, ids, selected, db)
    chosen = _choose_call(far_t, naming, subject, near_q, db) if naming is not None and subject is not None else None
    if chosen is None:
        return ""
    call, n = chosen
    if steps:
        at = _join_subject(select, steps, near_q, db, before=orphan.find_ancestor(exp.Join))
        call.expressions[1].set("table", exp.to_identifier(at))
    link = exp.EQ(this=exp.column(naming.name, table=far_q), expression=call)
    note = (f"{orphan.sql(dialect=db.dialect)} -> {link.sql(dialect=db.dialect)} (a key the database does not "
            f"have: the LM chooses among the {n} stored {far_t.name}.{naming.name})")
    orphan.replace(link)
    return note


def _choose_call(far: Any, column: Any, subject: Any, near_qualifier: str, db: Database) -> tuple[Any, int] | None:
    """``LM_CHOOSE('the <far> of {subject}', near.subject, 'far.column')`` and how many names it chooses
    among; None when the column stores none or more than ``udf.CHOICES_MAX`` (shared by the lost-key join
    and the guessed links)."""
    from sqlglot import exp

    from tagql.tag.udf import CHOICES_MAX

    q = db.schema.quote
    try:
        n = db.execute(f"SELECT COUNT(DISTINCT {q(column.name)}) FROM {q(far.name)}").rows[0][0]
    except TagqlError:
        return None
    if not n or n > CHOICES_MAX:
        return None
    call = exp.Anonymous(this="LM_CHOOSE", expressions=[
        exp.Literal.string(f"the {_noun(far.name)} of {{{subject.name}}}"),
        exp.column(subject.name, table=near_qualifier), exp.Literal.string(f"{far.name}.{column.name}")])
    return call, int(n)


def _reads_as_a_name(table: Any, column: Any, db: Database) -> bool:
    """Whether the LM can be asked about a row by this column's values: names ("Toronto", "Marvel
    Comics"), not street addresses or codes ("47 MySakila Drive"), told apart by how many of up to 50
    stored values hold a digit (at most a third)."""
    q = db.schema.quote
    try:
        rows = db.execute(f"SELECT DISTINCT {q(column.name)} FROM {q(table.name)} WHERE {q(column.name)} IS NOT NULL "
                          f"LIMIT 50", timeout_s=2.0, row_cap=50).rows
    except TagqlError:
        return True
    values = [str(r[0]) for r in rows]
    return not values or sum(bool(re.search(r"\d", v)) for v in values) * 3 <= len(values)


def _names_rows(table: Any, column: Any, db: Database) -> bool:
    """Whether ``column`` tells ``table``'s rows apart (distinct values for at least 90 % of its non-empty
    rows): a country's name does, its region (25 values over 239 countries) does not."""
    q = db.schema.quote
    try:
        distinct, filled = db.execute(f"SELECT COUNT(DISTINCT {q(column.name)}), COUNT({q(column.name)}) FROM "
                                      f"{q(table.name)}", timeout_s=2.0, row_cap=1).rows[0]
    except TagqlError:
        return True
    return not filled or distinct * 10 >= filled * 9


def _link_subject(near: Any, ids: set[str], selected: set[str], db: Database) -> tuple[list[tuple[Any, str, Any, str]], Any]:
    """Whom a re-derived link asks about: the near table's naming column (a selected one only if it
    tells rows apart, :func:`_names_rows`), unless its values are not
    names (:func:`_reads_as_a_name`: "the country of {47 MySakila Drive}" is not askable while the
    address's city is). Then the key up from it is followed -- only where the table has one key up to a
    table with a naming column, at most two steps -- to the first table named by names (address ->
    city); where no key leads up, another column of the row that reads as names does (a location's
    ``CITY`` for its ``STREET_ADDRESS``). Returns the steps ``(table, its key column, parent, parent's
    column)`` and the subject column; no steps when the walk finds no such table."""
    subject = _naming_column(near, ids, selected)
    plain = _naming_column(near, ids, set())
    if subject is not None and plain is not None and subject is not plain and not _names_rows(near, subject, db):
        subject = plain  # a selected category (``Region``) names groups of rows, not a row
    first = subject
    table, steps, seen = near, [], {near.name.lower()}
    while subject is None or not _reads_as_a_name(table, subject, db):
        ups = []
        for fk in table.foreign_keys:
            parent = db.schema.table(fk.ref_table)
            if parent is None or parent.name.lower() in seen or len(fk.columns) != 1:
                continue
            ref = fk.ref_columns[0] if fk.ref_columns else next((c.name for c in parent.columns if c.primary_key), None)
            if ref is not None and _naming_column(parent, ids, set()) is not None:
                ups.append((table, fk.columns[0], parent, ref))
        if len(ups) != 1 or len(steps) == 2:
            return [], _named_sibling(near, first, ids, db) if not steps else first
        steps.append(ups[0])
        table = ups[0][2]
        seen.add(table.name.lower())
        subject = _naming_column(table, ids, set())
    return steps, subject


def _named_sibling(table: Any, column: Any, ids: set[str], db: Database) -> Any:
    """The first other text column of ``table`` whose values read as names (:func:`_reads_as_a_name`), else
    ``column``: what to ask the LM about when the naming column holds street addresses or codes."""
    if column is None or _reads_as_a_name(table, column, db):
        return column
    for other in table.columns:
        if other is not column and other.name.lower() not in ids and holds_text(other) \
                and _reads_as_a_name(table, other, db):
            return other
    return column


def _join_subject(select: Any, steps: list[tuple[Any, str, Any, str]], near_q: str, db: Database,
                  before: Any = None) -> str:
    """Joins the tables of :func:`_link_subject`'s steps into ``select`` (before the join ``before``,
    else last), reusing one the query already reads; returns the qualifier of the subject's table."""
    from sqlglot import exp

    sources = _query_tables(select, db)
    read = {t.name.lower(): s.alias_or_name for s, t in sources if t is not None}
    taken = {s.alias_or_name.lower() for s, _t in sources}
    at = near_q
    for _table, key, parent, ref in steps:
        if parent.name.lower() in read:
            at = read[parent.name.lower()]
            continue
        alias = parent.name
        while alias.lower() in taken:
            alias += "_1"
        taken.add(alias.lower())
        join = exp.Join(this=exp.Table(this=exp.to_identifier(parent.name), alias=exp.TableAlias(this=exp.to_identifier(alias))),
                        on=exp.EQ(this=exp.column(ref, table=alias), expression=exp.column(key, table=at)))
        joins = select.args.get("joins") or []
        index = next((i for i, j in enumerate(joins) if j is before), len(joins))
        select.set("joins", [*joins[:index], join, *joins[index:]])
        read[parent.name.lower()] = at = alias
    return at


def guessed_links(plan: Plan, db: Database, question: str, *, unplaced: bool = False) -> list[str]:
    """A guessed comparison whose constant the database stores in a table no declared key links to the
    compared column's table (``Maker = 'Japan'`` on car makers, with 'japan' in ``countries.CountryName``
    and the maker's country key gone): the question is about that lost link, so it is re-derived as in
    :func:`orphaned_joins` -- ``JOIN countries ON countries.CountryName = LM_CHOOSE('the country of
    {FullName}', car_makers.FullName, 'countries.CountryName')`` -- and the comparison is made on the
    stored name (``countries.CountryName = 'japan'``). Without it the guess became a yes/no filter on a
    statement the 1.5B model wrote ("{Maker} is a German-speaking country" for makers from Germany), and it
    said yes to 11 of 22 makers for "Japanese". ``unplaced=True`` is for after validation rejected a column
    that no table of the query has: ``Continent = 'asia'`` on car makers is the same link when an unlinked
    table has a ``Continent`` column storing 'asia'. Returns ``old -> new`` notes."""
    from sqlglot import exp

    tree = _parse(plan.sql, db, db.dialect)
    links = key_neighbours(db.schema)
    if not isinstance(tree, exp.Select) or not links:
        return []
    notes = []
    # a rejected column or a guess is repaired in whichever SELECT reads it (``WHERE city_id IN (SELECT
    # city_id FROM city WHERE country = 'Canada')``), innermost first
    selects = list(tree.find_all(exp.Select))[::-1]
    for select in selects:
        notes += _links_in(select, db, question, links, unplaced)
    if notes:
        plan.sql = tree.sql(dialect=db.dialect)
    return notes


def _links_in(select: Any, db: Database, question: str, links: dict[str, set[str]], unplaced: bool) -> list[str]:
    """:func:`guessed_links` for the columns whose own SELECT is ``select`` (for guesses, the outermost one)."""
    from sqlglot import exp

    read = [(source, table) for source, table in _query_tables(select, db) if table is not None]
    written = {t.name.lower(): s.alias_or_name for s, t in read}  # table (lower) -> its name in the query
    by_alias = {s.alias_or_name.lower(): t for s, t in read}
    notes = []
    if unplaced:  # (node, its column's table in the query, the column's name, the constants)
        todo = []
        for col in select.find_all(exp.Column):
            values, _negated = _compared_constants(col)
            owner = by_alias.get(col.table.lower()) if col.table else _top_table(list(by_alias.values()), col.name)
            if values and owner is not None and owner.column(col.name) is None \
                    and col.find_ancestor(exp.Select) is select:
                todo.append((col.parent, owner, col.name, values))
    else:
        todo = [(c.node, db.schema.table(c.table), None, c.values) for c in _guesses(select, db, question)
                if c.node.find_ancestor(exp.Select) is select]
    for node, near, named, values in todo:
        if near is None or near.name.lower() not in written:
            continue
        note = _choice_join(select, node, near, named, [re.sub(r"^%|%$", "", v).strip() for v in values],
                            written, links, db)
        if note:
            notes.append(note)
    return notes


def _top_table(tables: list[Any], column: str) -> Any:
    """Whose an unqualified column is that none of the query's ``tables`` has: the one table the others'
    keys point up to and that points up to none of them (shelf -> book: the book), the entity the rows
    belong to; None when it is not one table."""
    if any(t.column(column) is not None for t in tables):
        return None
    names = {t.name.lower() for t in tables}
    tops = [t for t in tables if not any(fk.ref_table.lower() in names - {t.name.lower()} for fk in t.foreign_keys)]
    return tops[0] if len(tops) == 1 else None


def _choice_join(select: Any, node: Any, near: Any, named: str | None, values: list[str], written: dict[str, str],
                 links: dict[str, set[str]], db: Database) -> str:
    """:func:`guessed_links` for one comparison ``node`` on table ``near``: find a text column (called
    ``named`` when given) of a table keys do not link to ``near`` that stores every value (up to case, or as
    the whole words of one stored value: :func:`_stored_as`), join that table by ``LM_CHOOSE`` among its
    stored values, and compare the stored spellings instead. Returns the note, or "" (nothing changed)."""
    from sqlglot import exp

    ids = identifier_columns(db)
    reach = _reachable({near.name.lower()}, links)
    found = None
    for far in db.schema.tables:
        if far.name.lower() in reach or far.name.lower() in written:
            continue
        for col in far.columns:
            if col.name.lower() in ids or not holds_text(col) or (named and col.name.lower() != named.lower()):
                continue
            stored = []
            for v in values:
                hit = _stored_as(db, far.name, col.name, v)
                if hit is None:
                    break
                stored.append(hit)
            if len(stored) == len(values):
                found = (far, col, stored)
                break
        if found:
            break
    if found is None:
        return ""
    far, col, stored = found
    steps, subject = _link_subject(near, ids, set(), db)
    chosen = _choose_call(far, col, subject, written[near.name.lower()], db) if subject is not None else None
    if chosen is None:
        return ""
    call, n = chosen
    if steps:
        at = _join_subject(select, steps, written[near.name.lower()], db)
        call.expressions[1].set("table", exp.to_identifier(at))
        for source, table in _query_tables(select, db):
            if table is not None:
                written.setdefault(table.name.lower(), source.alias_or_name)
    alias = far.name
    while alias.lower() in {w.lower() for w in written.values()} or alias.lower() in written:
        alias += "_1"
    written[far.name.lower()] = alias
    near_q = written[near.name.lower()]
    for own in select.find_all(exp.Column):  # ``SELECT id``: which id, once countries is joined too
        if not own.table and own.find_ancestor(exp.Select) is select and near.column(own.name) is not None \
                and far.column(own.name) is not None:
            own.set("table", exp.to_identifier(near_q))
    target = exp.column(col.name, table=alias)
    select.join(exp.Table(this=exp.to_identifier(far.name), alias=exp.TableAlias(this=exp.to_identifier(alias))),
                on=exp.EQ(this=target.copy(), expression=call), copy=False)
    new: Any = exp.EQ(this=target.copy(), expression=exp.Literal.string(stored[0])) if len(stored) == 1 else \
        exp.In(this=target.copy(), expressions=[exp.Literal.string(v) for v in stored])
    if node.args.get("negate") or isinstance(node, exp.NEQ) or isinstance(node.parent, exp.Not):
        new = exp.Not(this=new)
    old = node.parent if isinstance(node.parent, exp.Not) else node
    note = (f"{old.sql(dialect=db.dialect)} -> {new.sql(dialect=db.dialect)}, joining {far.name} by LM_CHOOSE "
            f"among its {n} stored {col.name} (no key links {near.name} to it)")
    old.replace(new)
    return note


def _stored_as(db: Database, table: str, column: str, value: str) -> str | None:
    """How ``table.column`` stores ``value``: the value itself up to case, else the one stored value that
    holds it as whole words ('United States' -> 'United States of America'; 'Korea', held by two, is none)."""
    from sqlglot import exp

    q = db.schema.quote
    lit = exp.Literal.string(value.lower()).sql(dialect=db.dialect)
    like = exp.Literal.string(f"%{value.lower()}%").sql(dialect=db.dialect)
    try:
        exact = db.execute(f"SELECT {q(column)} FROM {q(table)} WHERE LOWER({q(column)}) = {lit} LIMIT 1",
                           timeout_s=2.0, row_cap=1).rows
        if exact:
            return str(exact[0][0])
        if len(value.strip()) < 4:
            return None
        near = db.execute(f"SELECT DISTINCT {q(column)} FROM {q(table)} WHERE LOWER({q(column)}) LIKE {like} LIMIT 8",
                          timeout_s=2.0, row_cap=8).rows
    except TagqlError:
        return None
    words = re.compile(rf"(?<!\w){re.escape(value.strip().lower())}(?!\w)")
    held = [str(r[0]) for r in near if r[0] is not None and words.search(str(r[0]).lower())]
    return held[0] if len(held) == 1 else None


def both_options(plan: Plan, options: Sequence[str], db: Database) -> list[str]:
    """A question that offers two answers to compare ("Are there more X in A or in B? Answer 'A' or 'B'.")
    whose plan counts for one of them only (``SELECT COUNT(*) ... WHERE country.country = 'A'``, after
    which the answer was the LM's guess from one number): the same query is run for the other answer too
    -- its string constants and operator statements naming A name B -- as ``SELECT (q_A) AS "A", (q_B)
    AS "B"``, so the two numbers decide (``methods.compared_choice``). Only a plan without operators
    whose SQL gives one number (one aggregate, no GROUP BY); an answer is named when its words (without a
    leading "the") are in a string constant
    other than those of an ``LM_CHOOSE`` link (its statement and its ``'table.column'`` source are left as
    they are, so a link survives answers spelled like a table). Returns notes."""
    from sqlglot import exp

    tree = _parse(plan.sql, db, db.dialect)
    if len(options) != 2 or plan.operators or not isinstance(tree, exp.Select) or len(tree.expressions) != 1 \
            or tree.args.get("group") or tree.args.get("limit") or not tree.expressions[0].find(exp.AggFunc):
        return []

    def bare(option: str) -> str:
        return re.sub(r"^the\s+", "", option.strip(), flags=re.IGNORECASE)

    def of_link(lit: Any) -> bool:  # LM_CHOOSE's 'the <far> of {x}' and 'table.column' name a link, not an answer
        return isinstance(lit.parent, exp.Anonymous) and str(lit.parent.this).upper() == "LM_CHOOSE"

    literals = [lit for lit in tree.find_all(exp.Literal) if lit.is_string and not of_link(lit)]

    def named(option: str) -> bool:
        return any(re.search(rf"\b{re.escape(bare(option))}\b", lit.this, re.IGNORECASE) for lit in literals)

    present = [o for o in options if named(o)]
    if len(present) != 1:
        return []
    asked = present[0]
    other = next(o for o in options if o != asked)
    twin = tree.copy()
    for lit in twin.find_all(exp.Literal):  # a stored value as stored ('United States'), a statement as asked
        if not lit.is_string or of_link(lit):
            continue
        if lit.this.strip().lower() == bare(asked).lower():
            lit.set("this", bare(other))
        else:
            lit.set("this", re.sub(rf"\b(?:the\s+)?{re.escape(bare(asked))}\b", lambda _m: other, lit.this,
                                   flags=re.IGNORECASE))
    both = exp.select(exp.alias_(exp.Subquery(this=tree), asked, quoted=True),
                      exp.alias_(exp.Subquery(this=twin), other, quoted=True))
    old, plan.sql = plan.sql, both.sql(dialect=db.dialect)
    return [f"{old} counts for '{asked}' only: run for '{other}' too -> {plan.sql}"]


def inline_self_subqueries(plan: Plan, db: Database) -> list[str]:
    """``WHERE Maker IN (SELECT Maker FROM car_makers WHERE cond)`` in a query on ``car_makers`` alone is
    ``WHERE cond``: the 1.5B model wraps conditions so, and a made-up column inside the subquery is out of
    reach of the rewrites that make it a fact (they work on the query's own scope). Returns notes."""
    from sqlglot import exp

    tree = _parse(plan.sql, db, db.dialect)
    select = tree if isinstance(tree, exp.Select) else None
    source = (select.args.get("from_") or select.args.get("from")) if select is not None else None
    if select is None or source is None or not isinstance(source.this, exp.Table) or select.args.get("joins"):
        return []
    outer = source.this
    notes = []
    for node in list(select.find_all(exp.In)):
        query = node.args.get("query")
        inner = query.this if query is not None else None
        inner_from = (inner.args.get("from_") or inner.args.get("from")) if isinstance(inner, exp.Select) else None
        if inner_from is None or not isinstance(inner_from.this, exp.Table) \
                or node.find_ancestor(exp.Select) is not select or inner_from.this.name.lower() != outer.name.lower() \
                or not isinstance(node.this, exp.Column) \
                or len(inner.expressions) != 1 or not isinstance(inner.expressions[0], exp.Column) \
                or inner.expressions[0].name.lower() != node.this.name.lower() or inner.args.get("where") is None \
                or any(inner.args.get(k) for k in ("joins", "group", "having", "limit", "order")):
            continue
        cond = inner.args["where"].this.copy()
        for col in cond.find_all(exp.Column):
            if not col.table or col.table.lower() == inner_from.this.alias_or_name.lower():
                col.set("table", exp.to_identifier(outer.alias_or_name) if outer.alias or col.table else None)
        notes.append(f"{node.sql(dialect=db.dialect)} -> {cond.sql(dialect=db.dialect)}")
        node.replace(exp.Paren(this=cond) if isinstance(cond, exp.Or) else cond)
    if notes:
        plan.sql = tree.sql(dialect=db.dialect)
    return notes


def _lookups_as_joins(select: Any, db: Database) -> list[str]:
    """``WHERE A.key = (SELECT B.id FROM B WHERE cond)`` (or ``IN``) where ``A`` has no ``key``: rewritten in
    place as ``JOIN B ON A.key = B.id ... WHERE cond``, so :func:`orphaned_joins` sees the lost link the
    lookup meant. A lookup over a key ``A`` has, of ``B``'s primary key (a join then matches the same rows),
    is unnested the same way when a lost lookup sits further in (``address_id IN (SELECT address_id FROM
    address WHERE city_id IN (SELECT city_id FROM city WHERE country_id = (SELECT ...)))``: the 1.5B model
    wrote such chains on the pool's test split, where ``city.country_id`` is lost). Returns notes (empty when
    there is no such lookup)."""
    from sqlglot import exp

    tables = {t.name.lower(): t for t in db.schema.tables}
    where = select.args.get("where")
    if where is None:
        return []
    outer = {s.alias_or_name.lower(): t for s, t in _query_tables(select, db) if isinstance(s, exp.Table)}
    notes = []
    work = and_parts(where.this)
    while work:
        cond = work.pop(0)
        found = _lookup(cond, tables)
        if found is None:
            continue
        col, inner, far = found
        owner = outer.get(col.table.lower()) if col.table else (
            next(iter(outer.values())) if len(outer) == 1 else None)
        if owner is None:
            continue
        if owner.column(col.name) is not None:  # a key A has: unnested only over B's primary key, towards a lost one
            key = far.column(inner.expressions[0].name)
            if key is None or not key.primary_key or not _holds_lost_lookup(inner, far, tables):
                continue
        source = inner.args.get("from_") or inner.args.get("from")
        alias = source.this.alias_or_name
        while alias.lower() in outer:
            alias += "_1"
        outer[alias.lower()] = far
        for c in inner.find_all(exp.Column):
            if c.find_ancestor(exp.Select) is inner:  # its own columns; a nested lookup keeps its own
                c.set("table", exp.to_identifier(alias))
        if not col.table:
            col.set("table", exp.to_identifier(next(iter(outer))))
        key_col = inner.expressions[0].copy()
        old = cond.sql(dialect=db.dialect)
        select.join(exp.Table(this=exp.to_identifier(source.this.name), alias=exp.TableAlias(
            this=exp.to_identifier(alias))), on=exp.EQ(this=col.copy(), expression=key_col), copy=False)
        inner_where = inner.args.get("where")
        kept = inner_where.this.copy() if inner_where is not None else exp.true()
        cond.replace(kept)
        work += and_parts(kept)
        notes.append(f"{old} -> JOIN {source.this.name} AS {alias} ON {col.sql(dialect=db.dialect)} = "
                     f"{key_col.sql(dialect=db.dialect)}")
    return notes


def _lookup(cond: Any, tables: dict[str, Any]) -> tuple[Any, Any, Any] | None:
    """(column, inner SELECT, its table) of ``column = (SELECT one column FROM one table ...)`` or ``column IN
    (...)``: a lookup of one table's column, without joins or groups."""
    from sqlglot import exp

    if isinstance(cond, exp.EQ) and isinstance(cond.this, exp.Column) and isinstance(cond.expression, exp.Subquery):
        col, inner = cond.this, cond.expression.this
    elif isinstance(cond, exp.In) and isinstance(cond.this, exp.Column) and cond.args.get("query") is not None:
        col, inner = cond.this, cond.args["query"].this
    else:
        return None
    source = inner.args.get("from_") or inner.args.get("from") if isinstance(inner, exp.Select) else None
    if source is None or not isinstance(source.this, exp.Table) or source.this.name.lower() not in tables \
            or inner.args.get("joins") or inner.args.get("group") or len(inner.expressions) != 1 \
            or not isinstance(inner.expressions[0], exp.Column):
        return None
    return col, inner, tables[source.this.name.lower()]


def _holds_lost_lookup(select: Any, table: Any, tables: dict[str, Any], depth: int = 0) -> bool:
    """Does ``select`` (over ``table``) look up a key ``table`` lacks, in its WHERE or a lookup nested there?"""
    where = select.args.get("where")
    for cond in and_parts(where.this if where is not None else None):
        found = _lookup(cond, tables)
        if found is None:
            continue
        col, inner, far = found
        if col.table and col.table.lower() != (select.args.get("from_") or select.args.get("from")).this \
                .alias_or_name.lower():
            continue
        if table.column(col.name) is None or (depth < 3 and _holds_lost_lookup(inner, far, tables, depth + 1)):
            return True
    return False


def unjoinable(column: str, sql: str, db: Database) -> bool:
    """Is ``column`` held only by tables that no chain of declared foreign keys links to the tables ``sql``
    reads? Then no join repair can place it, and what it holds is knowledge the database lost the link to
    (superhero without ``publisher_id``: ``publisher_name``), even for a question that looked relational.
    A database without declared keys says nothing about links: False."""
    from sqlglot import exp

    tables = {t.name.lower(): t for t in db.schema.tables}
    links = key_neighbours(db.schema)
    owners = {name for name, t in tables.items() if t.column(column) is not None}
    tree = _parse(sql, db, db.dialect)
    used = {t.name.lower() for t in tree.find_all(exp.Table)} & set(tables) if tree is not None else set()
    if not links or not owners or not used or owners & used:
        return False
    return not owners & _reachable(used, links)


def _reachable(start: set[str], links: dict[str, set[str]]) -> set[str]:
    """Every table a chain of keys leads to from ``start`` (``start`` included)."""
    seen, todo = set(start), list(start)
    while todo:
        for other in links.get(todo.pop(), ()):
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen


def _compared_constants(col: Any) -> tuple[list[str], bool]:
    """The constants ``col`` is compared with (``= 'Japan'``, ``<> 'Japan'``, ``[NOT] IN ('a', 'b')``) and
    whether the comparison is negated; ``([], False)`` for any other use."""
    from sqlglot import exp

    parent = col.parent
    values: list[str] = []
    if isinstance(parent, (exp.EQ, exp.NEQ)) and isinstance(parent.expression, exp.Literal) and parent.this is col:
        values = [parent.expression.name]
    elif isinstance(parent, exp.In) and parent.this is col and parent.expressions and all(
            isinstance(e, exp.Literal) for e in parent.expressions):
        values = [e.name for e in parent.expressions]
    negated = isinstance(parent, exp.NEQ) or (isinstance(parent, exp.In) and isinstance(parent.parent, exp.Not))
    return values, bool(values) and negated


def _wants_number(col: Any) -> bool:
    """Whether ``col`` is read as a number: ordered against a number (``> 1900``, ``BETWEEN 1801 AND 1900``),
    or summed, averaged or computed with. As ``LM_MAP`` text it would compare wrong without an error
    (SQLite puts any text above any number: every row passed ``> 1900``)."""
    from sqlglot import exp

    node, parent = col, col.parent
    while isinstance(parent, exp.Paren):
        node, parent = parent, parent.parent
    if isinstance(parent, (exp.GT, exp.GTE, exp.LT, exp.LTE)):
        other = parent.expression if parent.this is node else parent.this
        return isinstance(other, exp.Literal) and not other.is_string
    if isinstance(parent, exp.Between) and parent.this is node:
        return all(isinstance(parent.args.get(k), exp.Literal) and not parent.args[k].is_string for k in ("low", "high"))
    return isinstance(parent, (exp.Sum, exp.Avg, exp.Add, exp.Sub, exp.Mul, exp.Div))


def _fact_call(col: Any, fact: str, arg: Any, claim: str | None = None) -> tuple[Any, Any]:
    """What replaces an invented column: a comparison with constants (``country = 'Japan'``, ``IN``, ``<>``)
    becomes an ``LM_FILTER`` on the statement it makes (the LM judges "the country of {name} is Japan"
    instead of its map having to spell 'Japan' the same way; ``claim``, when given, is the statement);
    a use that reads a number (:func:`_wants_number`) is ``LM_NUMBER``, anything else ``LM_MAP`` of the
    fact. Returns (the node replaced, its replacement)."""
    from sqlglot import exp

    parent = col.parent
    values, negated = _compared_constants(col)
    if not values:
        return col, exp.Anonymous(this="LM_NUMBER" if _wants_number(col) else "LM_MAP",
                                  expressions=[exp.Literal.string(fact), arg])
    claim = claim or (f"{fact} is {values[0]}" if len(values) == 1 else f"{fact} is one of: {', '.join(values)}")
    call: Any = exp.Anonymous(this="LM_FILTER", expressions=[exp.Literal.string(claim), arg])
    node = parent.parent if isinstance(parent, exp.In) and isinstance(parent.parent, exp.Not) else parent
    return node, exp.Not(this=call) if negated else call


def _stored_date(select: Any, db: Database) -> Any:
    """The first date or time column of the tables ``select`` reads, qualified as the query names its
    table (``ORDER BY month`` on ``event AS T1`` -> ``T1.event_date``); None without one."""
    from sqlglot import exp

    for source, table in _query_tables(select, db):
        for c in table.columns if table is not None else []:
            if re.search(r"date|time", f"{c.name} {c.type}", re.IGNORECASE):
                return exp.column(c.name, table=source.alias_or_name)
    return None


def _query_tables(select: Any, db: Database) -> list[tuple[Any, Table | None]]:
    """The sources of ``select``'s FROM and JOINs in order, each with its schema table (None for a source
    the schema lacks, or a subquery): what the rewrites read to know which table an alias stands for."""
    from sqlglot import exp

    out = []
    for node in [select.args.get("from_") or select.args.get("from"), *(select.args.get("joins") or [])]:
        if node is not None:
            out.append((node.this, db.schema.table(node.this.name) if isinstance(node.this, exp.Table) else None))
    return out


def guessed_comparisons(sql: str, db: Database, question: str) -> list[Comparison]:
    """:func:`_guesses` in ``sql``."""
    tree = _parse(sql, db, db.dialect)
    return [] if tree is None else _guesses(tree, db, question)


def _guesses(tree: Any, db: Database, question: str) -> list[Comparison]:
    """String comparisons in a hybrid plan's SQL that guess what an LM should decide: a value the data
    does not hold (``state = 'New England'``, ``state IN ('CA', 'ON')`` where the column holds full
    names, ``element LIKE '%alkali metal%'`` that no value matches), or a list of two or more stored values none of which the question names (``element IN
    ('Cl', 'Br', 'I')`` for "halogen atoms": the model's own, often incomplete, list). A single stored
    value stays (``bond_type = '='`` for "double bonds"), as does any value the question names, and any
    comparison on an identifier column. A stored value the question uses as a category of another
    column (``city = 'New England'``, a real city, for "a New England state") is a guess about that
    column: the comparison comes back aimed at it (:func:`_category_of_other_column`)."""
    ids = identifier_columns(db)  # an LM cannot judge ids: a wrong id stays for validation and the answer
    out = []
    for c in string_comparisons(tree, db, max_lookups=64, like=True):
        if c.column.name.lower() in ids:
            continue
        if not all(c.stored) or (len(c.values) >= 2 and not any(_names(question, v) for v in c.values)):
            out.append(c)
            continue
        retargeted = _category_of_other_column(c, db, question)
        if retargeted is not None:
            out.append(retargeted)
    return out


def _category_of_other_column(c: Comparison, db: Database, question: str) -> Comparison | None:
    """``city = 'New England'`` for "members who live in a New England state": the question puts the
    value right before the name of another column of the same table (``state``), that column does not
    hold the value, and the compared column holds it only as a rarity (one city of 41,877 zip codes;
    fewer rows than its average value has), so the value names a kind of state, not a city. "A Texas
    city" with ``state = 'Texas'`` stays: Texas is a common state (though Texas City exists). Returns
    the comparison aimed at the other column (whose values the LM then judges), else None."""
    from sqlglot import exp

    if isinstance(c.node, exp.Like) or len(c.values) != 1:
        return None
    table = db.schema.table(c.table)
    value = c.values[0].lower()
    m = re.search(rf"(?<!\w){re.escape(value)}\s+(\w+)", question.lower())
    if table is None or m is None:
        return None
    named = [col.name for col in table.columns if col.name.lower() != c.column.name.lower()
             and col.name.lower() in (m.group(1), m.group(1).rstrip("s"))]
    if not named:
        return None
    t, this, other = exp.to_table(c.table, quoted=True), exp.column(c.column.name, quoted=True), exp.column(named[0], quoted=True)
    probe = exp.select(
        exp.func("SUM", exp.EQ(this=exp.func("LOWER", other), expression=exp.Literal.string(value))),
        exp.func("SUM", exp.EQ(this=exp.func("LOWER", this.copy()), expression=exp.Literal.string(value))),
        exp.Div(this=exp.func("COUNT", this.copy()),
                expression=exp.func("NULLIF", exp.Count(this=exp.Distinct(expressions=[this.copy()])), exp.Literal.number(0))),
    ).from_(t)
    try:
        in_other, in_this, per_value = db.execute(probe.sql(dialect=db.dialect), timeout_s=2.0, row_cap=1).rows[0]
    except (TagqlError, IndexError, ValueError):
        return None
    if in_other or per_value is None or (in_this or 0) >= float(per_value):
        return None
    return Comparison(c.node, exp.column(named[0], table=c.column.table or None), c.table, c.values, [False])


def _names(question: str, value: str) -> bool:
    """Does the question name ``value`` as a word or phrase (not inside a word: element 'c' is not named
    by "contain")?"""
    return re.search(rf"(?<!\w){re.escape(value.lower())}(?!\w)", question.lower()) is not None


def normalize_instruction(instruction: str, columns: list[str]) -> str:
    """Fix the column references small models get wrong, when the intent is unambiguous: a qualified
    ``{T1.name}`` or ``{member.name}`` becomes ``{name}``; an instruction with no braces gets them around
    the first column name it mentions as a word (``element is a halogen`` -> ``{element} is a halogen``),
    or, over a one-column result, names that column (``{element}: is a halogen``). Unmatched braces are
    dropped (``{Department} is 'Foreign Languages'}``)."""
    instruction = repair_braces(instruction)
    try:
        fields = template_fields(instruction)
    except OperatorError:
        return instruction
    for name in fields:
        if resolve_or_none(name, columns) is None and "." in name:
            bare = name.rsplit(".", 1)[1]
            if resolve_or_none(bare, columns) is not None:
                instruction = instruction.replace("{" + name + "}", "{" + bare + "}")
    if fields:
        return instruction
    for col in sorted(columns, key=len, reverse=True):
        m = re.search(rf"(?<![\w{{]){re.escape(col)}(?![\w}}])", instruction, re.IGNORECASE)
        if m:
            return instruction[: m.start()] + "{" + col + "}" + instruction[m.end():]
    if len(columns) == 1:
        return f"{{{columns[0]}}}: {instruction}"
    return instruction




def uses_language_model(plan: Plan) -> bool:
    """Does the plan call the LM: an LM operator, or an LM function inside its SQL?"""
    return uses_lm_functions(plan.sql) or any(str(o.get("op", "")).lower() in LM_OPS for o in plan.operators)


_ID_NAME = re.compile(r"(^|_)id\d*$|[a-z]Id\d*$|ID\d*$")


def identifier_columns(db: Database) -> set[str]:
    """Names (lower case) of key columns that hold identifiers (``atom_id2``, ``member_id``): an LM cannot
    judge what an opaque id means, and a filter over one costs a call per row (it hit the call cap)."""
    names = set()
    for t in db.schema.tables:
        keys = {c.name for c in t.columns if c.primary_key} | {c for fk in t.foreign_keys for c in fk.columns}
        names |= {k.lower() for k in keys if _ID_NAME.search(k)}
    return names


_MISSING_COLUMN = re.compile(r"column '([^']+)' does not exist|has no column '([^']+)'|no such column: (?:\w+\.)?(\w+)")
_OUT_OF_SCOPE = re.compile(r"column '([^']+)' of \w+ is used where")


def _missing_column_hint(name: str, sql: str, db: Database) -> str:
    """What to write instead of a column that does not exist: a part of a stored date (``month``
    beside ``event.event_date``) is computed from it; anything else may be a fact the LM knows."""
    part = name.lower()
    if part in _DATE_PART and db.backend.strftime_dates:
        used = {t.lower() for t in re.findall(r"\w+", sql)}
        dates = [f"{t.name}.{c.name}" for t in db.schema.tables if t.name.lower() in used for c in t.columns
                 if re.search(r"date|time", f"{c.name} {c.type}", re.IGNORECASE)]
        if dates:
            return (f"'{name}' is not stored, but the date is: use STRFTIME('{_DATE_PART[part]}', {dates[0]}) "
                    f"for the {part} of {dates[0]}")
    return (f"if '{name}' is a fact the database does not store, let the language model give it: "
            f"ORDER BY LM_NUMBER('the {name} of {{column}}', column), or a map operator")


def validate_plan(plan: Plan, db: Database, engine: SemEngine, *, hybrid: bool = False,
                  question: str = "") -> tuple[str, list[list[str]]]:
    """Check everything before running: returns (prepared SQL, the columns before each operator).
    ``hybrid``: the question needs the LM, so an unknown column is probably a fact to compute (the
    error says how); ``question`` guides the SQL repairs (which join, what a count counts)."""
    try:
        register_lm_functions(db, engine)
    except QueryFailed:  # PostgreSQL, MySQL: no functions of ours in their SQL; the operators do the LM work
        if uses_lm_functions(plan.sql):
            raise InvalidQuery(f"LM_FILTER/LM_MAP/LM_SCORE/LM_NUMBER cannot run inside {db.dialect} SQL",
                               "select the rows with plain SQL and use filter/map/topk operators") from None
    try:
        repairs: list[str] = []
        sql = prepare_sql(plan.sql, db, repairs=repairs, question=question)
        if repairs:  # the plan shown is the plan that runs
            plan.sql = sql
        probe = db.execute(f"SELECT * FROM ({sql}) AS plan_probe LIMIT 0")
    except (InvalidQuery, UnsafeQuery, QueryFailed) as exc:
        repaired = getattr(exc, "repaired_sql", None)
        if repaired:  # the repairs made before the error stay: the error speaks of that SQL, the rewrites read it
            plan.sql = repaired
        missing = _MISSING_COLUMN.search(exc.one_line())
        if missing:  # "founding_year", "electronegativity": a fact the LM knows, not a column
            name = next(g for g in missing.groups() if g)
            error = PlanError(f"the plan's SQL is invalid: {exc.one_line()}",
                              _missing_column_hint(name, plan.sql, db) if hybrid else "")
            error.missing_column = name
            raise error from exc
        stray = _OUT_OF_SCOPE.search(exc.one_line())
        if stray:
            error = PlanError(f"the plan's SQL is invalid: {exc.one_line()}")
            error.missing_column, error.out_of_scope = stray.group(1), True
            raise error from exc
        if isinstance(exc, InvalidQuery) and _enumerated_values(plan.sql) >= 6:
            raise PlanError(f"the plan's SQL is invalid: {exc.one_line()}", ENUMERATION_HINT) from exc
        raise PlanError(f"the plan's SQL is invalid: {exc.one_line()}") from exc
    cols = list(probe.columns)
    ids = identifier_columns(db)
    seen: list[list[str]] = []
    for i, op in enumerate(plan.operators):
        seen.append(list(cols))
        name = str(op.get("op", "")).lower()
        where = f"operator {i + 1} ({name or '?'})"
        if name not in OPS:
            raise PlanError(f"{where}: unknown operator", f"use one of: {', '.join(sorted(OPS))}")
        if name == "agg" and i != len(plan.operators) - 1:
            raise PlanError(f"{where}: agg produces the answer text, so it must be the last operator")
        if name in LM_OPS:
            instr = op.get("instruction")
            if not isinstance(instr, str) or not instr.strip():
                raise PlanError(f"{where}: needs an instruction")
            if name != "agg":  # the plan shown is the plan that runs
                instr = op["instruction"] = normalize_instruction(instr, cols)
            try:
                refs = resolve_columns(instr, cols, op=name)
            except OperatorError as exc:
                raise PlanError(f"{where}: {exc.one_line()}") from exc
            if not refs and name != "agg":
                raise PlanError(f"{where}: the instruction must reference a column in braces",
                                f"e.g. {{{cols[0] if cols else 'Column'}}}")
            judged_ids = [f for f in refs if name != "agg" and f.split(":")[0].lower() in ids]
            if judged_ids:
                raise PlanError(f"{where}: {{{judged_ids[0]}}} is an identifier column, which a language model cannot judge",
                                "judge a descriptive column (a name, a type, a text), or compare ids in SQL")
        if name == "topk" and not (isinstance(op.get("k"), int) and op["k"] >= 1):
            raise PlanError(f"{where}: needs k >= 1")
        if name == "limit" and not (isinstance(op.get("n"), int) and op["n"] >= 0):
            raise PlanError(f"{where}: needs n >= 0")
        if name == "map":
            col = op.get("column") or "result"
            op["column"] = col
            cols = cols + [col]
        elif name == "extract":
            fields = op.get("columns")
            if not isinstance(fields, list) or not fields or not all(isinstance(f, str) for f in fields):
                raise PlanError(f"{where}: needs the output field names in 'columns'")
            cols = cols + list(fields)
        elif name == "columns":
            wanted = op.get("columns")
            if not isinstance(wanted, list) or not wanted:
                raise PlanError(f"{where}: needs a list of column names")
            missing = [c for c in wanted if resolve_or_none(str(c), cols) is None]
            if missing:
                raise PlanError(f"{where}: unknown column '{missing[0]}'", f"the columns are: {', '.join(cols)}")
            cols = [cols[resolve_or_none(str(c), cols)] for c in wanted]  # type: ignore[index]
        elif name == "sort":
            key = op.get("column")
            if not isinstance(key, str) or resolve_or_none(key, cols) is None:
                raise PlanError(f"{where}: needs the 'column' to sort by", f"the columns are: {', '.join(cols)}")
            op["column"] = cols[resolve_or_none(key, cols)]  # type: ignore[index]
            op["desc"] = bool(op.get("desc", False))
        elif name == "count":
            cols = ["count"]
    return sql, seen


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_SCALE = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}


def sort_key(value: Any) -> tuple[int, float, str]:
    """Order values as numbers when they read as one (``39.5``, ``"1,234"``, ``"about 39 million"``,
    ``"1937"``), else as text; missing values last. A ``map`` answers in words, so its numbers are text."""
    if value is None or value == "":
        return (2, 0.0, "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    text = str(value)
    m = _NUMBER.search(text)
    if m:
        number = float(m.group().replace(",", ""))
        after = text[m.end():].strip().lower()
        for word, scale in _SCALE.items():
            if after.startswith(word):
                number *= scale
                break
        return (0, number, "")
    return (1, 0.0, text.lower())


def sort_rows(columns: list[str], rows: list[tuple[Any, ...]], column: str, *, desc: bool) -> list[tuple[Any, ...]]:
    """``rows`` ordered by ``column`` (stable): numbers first, then text, then missing values, whichever
    the direction."""
    i = resolve_or_none(column, columns)
    if i is None:
        raise PlanError(f"sort: unknown column '{column}'", f"the columns are: {', '.join(columns)}")
    groups: list[list[tuple[Any, ...]]] = [[], [], []]
    for r in rows:
        groups[sort_key(r[i])[0]].append(r)
    return [r for g in groups[:2] for r in sorted(g, key=lambda r: sort_key(r[i]), reverse=desc)] + groups[2]


@dataclass
class PlanRun:
    plan: Plan
    sql: str
    result: Result  # the final table (or the SQL result when the plan ends with agg)
    summary: str | None = None  # agg output
    trace: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


def run_plan(plan: Plan, db: Database, engine: SemEngine, *, udf_timeout_s: float = 600.0) -> PlanRun:
    t0 = time.perf_counter()
    sql, _ = validate_plan(plan, db, engine)
    result = execute_with_lm(db, sql, engine, timeout_s=udf_timeout_s)
    trace = [{"step": "sql", "rows": len(result.rows)}]
    table = SemTable.from_result(result, engine)
    summary = None
    skip = 0
    if result.truncated and plan.operators and not uses_lm_functions(sql):
        table, skip = _streamed_first(plan, db, sql, result, engine, trace, udf_timeout_s)
    for i, op in enumerate(plan.operators):
        if i < skip:
            continue
        name = op["op"].lower()
        nxt = plan.operators[i + 1] if i + 1 < len(plan.operators) else {}
        if name == "filter":
            # filter then limit n: stop judging once n rows passed
            early = nxt.get("n") if str(nxt.get("op", "")).lower() == "limit" else None
            table = table.sem_filter(op["instruction"], limit=early)
        elif name == "map":
            table = table.sem_map(op["instruction"], op["column"])
        elif name == "extract":
            table = table.sem_extract(op["instruction"], op["columns"])
        elif name == "topk":
            table = table.sem_topk(op["instruction"], op["k"])
        elif name == "agg":
            summary = table.sem_agg(op["instruction"])
        elif name == "limit":
            table = SemTable(table.columns, table.rows[: op["n"]], engine)
        elif name == "distinct":
            table = SemTable(table.columns, list(dict.fromkeys(table.rows)), engine)
        elif name == "sort":
            table = SemTable(table.columns, sort_rows(table.columns, table.rows, op["column"], desc=op["desc"]),
                             engine)
        elif name == "columns":
            idx = [resolve_or_none(str(c), table.columns) for c in op["columns"]]
            table = SemTable([table.columns[i] for i in idx], [tuple(r[i] for i in idx) for r in table.rows],
                             engine)
        elif name == "count":
            table = SemTable(["count"], [(len(table.rows),)], engine)
        trace.append({"step": name, "rows": len(table.rows)})
    final = table.to_result(sql)
    final.notes = list(result.notes)
    final.truncated = result.truncated
    return PlanRun(plan, sql, final, summary, trace, time.perf_counter() - t0)


def _streamed_first(plan: Plan, db: Database, sql: str, result: Result, engine: SemEngine,
                    trace: list[dict[str, Any]], timeout_s: float) -> tuple[SemTable, int]:
    """When the plan's SQL returns more rows than the row cap, its first operator (a filter or a map) runs over
    every row of the query instead of the capped ones: distinct inputs counted in the database, rows streamed
    (:mod:`tagql.tag.stream`; a server-side cursor on PostgreSQL). A filter followed by ``count`` counts them all
    (exact); otherwise the first row-cap rows that come out go on to the next operators (the result stays marked
    truncated). Returns the table and how many operators were done."""
    from tagql.tag.stream import stream_filter, stream_map

    first = plan.operators[0]
    name = str(first.get("op", "")).lower()
    cap = len(result.rows)
    if name == "filter" and (len(plan.operators) == 1 or str(plan.operators[1].get("op", "")).lower() != "limit"):
        chunks = stream_filter(db, sql, first["instruction"], engine, timeout_s=timeout_s)
        columns = list(result.columns)
    elif name == "map":
        chunks = stream_map(db, sql, first["instruction"], engine, timeout_s=timeout_s)
        columns = list(result.columns) + [first["column"]]
    else:
        return SemTable.from_result(result, engine), 0
    counting = name == "filter" and len(plan.operators) > 1 and str(plan.operators[1].get("op", "")).lower() == "count"
    kept: list[tuple[Any, ...]] = []
    passed = 0
    for chunk in chunks:
        passed += len(chunk)
        if not counting and len(kept) < cap:
            kept.extend(chunk[: cap - len(kept)])
    seen = engine.stats.per_operator[-1]["rows"] if engine.stats.per_operator else 0
    trace.append({"step": f"{name} (streamed over all {seen} rows)", "rows": passed})
    if counting or passed <= cap:  # a count over every row, or every passing row kept: nothing was cut
        result.truncated = False
        result.notes = [n for n in result.notes if "row cap" not in n]
    if counting:
        trace.append({"step": "count", "rows": 1})
        return SemTable(["count"], [(passed,)], engine), 2
    return SemTable(columns, kept, engine), 1


def _columns_beside(tree: Any, arguments: Sequence[str], db: Database, *,
                    per_table: int = 6) -> list[tuple[str, Table, list[str]]]:
    """The text columns a filter over ``arguments`` could judge instead, as (qualifier, table, columns):
    those of the query's tables the arguments do not read from (the rows the question lists), else the
    other text columns of the arguments' own table; keys left out."""
    from sqlglot import exp

    select = tree if isinstance(tree, exp.Select) else None
    if select is None:
        return []
    sources = [(src.alias_or_name, table) for src, table in _query_tables(select, db) if table is not None]
    by_name = {q.lower(): t for q, t in sources}
    used: set[str] = set()
    read: set[tuple[str, str]] = set()
    for arg in arguments:
        node = _parse(arg, db, db.dialect)
        for col in node.find_all(exp.Column) if node is not None else []:
            owner = by_name.get(col.table.lower()) if col.table else next(
                (t for _q, t in sources if t.column(col.name) is not None), None)
            if owner is not None:
                used.add(owner.name.lower())
                read.add((owner.name.lower(), col.name.lower()))
    others = [(q, t) for q, t in sources if t.name.lower() not in used] or sources
    out = []
    for qualifier, table in others:
        keys = {c.lower() for fk in table.foreign_keys for c in fk.columns}
        cols = [c.name for c in table.columns if holds_text(c) and not c.primary_key and c.name.lower() not in keys
                and (table.name.lower(), c.name.lower()) not in read][:per_table]
        if cols:
            out.append((qualifier, table, cols))
    return out


def _drop_unread_joins(select: Any, db: Database) -> list[str]:
    """Remove the inner joins of ``select`` whose table nothing outside their own ``ON`` reads any more
    (the join a wrong filter column brought in); returns the dropped tables' names. A bare column the
    joined table has keeps the join (it may be the one read)."""
    from sqlglot import exp

    dropped = []
    for join in list(select.args.get("joins") or []):
        if not isinstance(join.this, exp.Table) or join.side:  # an outer join keeps rows: left alone
            continue
        alias, table = join.this.alias_or_name.lower(), db.schema.table(join.this.name)
        on = join.args.get("on")
        in_on = {id(c) for c in on.find_all(exp.Column)} if on is not None else set()
        reads = [c for c in select.find_all(exp.Column)
                 if (c.table.lower() == alias or (not c.table and (table is None or table.column(c.name))))
                 and id(c) not in in_on]
        if not reads:
            join.pop()
            dropped.append(join.this.name)
    return dropped


class Planner:
    """Asks the LM for a plan (JSON-constrained), validates it, retries once with the error."""

    def __init__(self, db: Database, llm: LLM, engine: SemEngine, *, retries: int = 1, max_tokens: int = 400,
                 exemplars: int = 2, map_invented_columns: bool = False, unplaced_columns_to_lm: bool = True,
                 fresh_retry_on_repeat: bool = False, filter_check_inputs: int = 0):
        self.db = db
        self.filter_check_inputs = filter_check_inputs  # a WHERE filter passing none of so many values: replan
        self.fresh_retry_on_repeat = fresh_retry_on_repeat  # one more try, from the first prompt, on a repeat
        self.map_invented_columns = map_invented_columns  # invented_fact_columns on hybrid plans
        self.unplaced_columns_to_lm = unplaced_columns_to_lm  # ... and, after validation, on columns it cannot join
        self.exemplars = exemplars  # solved plans of similar questions shown before the question (0: none)
        self.llm = llm
        self.engine = engine
        self.retries = retries
        self.max_tokens = max_tokens
        self.hybrid = False  # what needs_operators said for the last question planned

    def messages(self, question: str, statements: Sequence[ScoredStatement] = ()) -> list[Message]:
        return [system(prompts.plan_system_prompt(self.db.name, self.db.schema.to_prompt())),
                user(prompts.plan_user_prompt(question, statements))]

    def similar(self, question: str) -> list[Exemplar]:
        """The bank's solved plans most like ``question`` (:mod:`tagql.tag.exemplars`)."""
        return exemplar_index().nearest(question, self.exemplars, exclude_db=self.db.name) if self.exemplars else []

    def needs_operators(self, question: str, statements: Sequence[ScoredStatement] = ()) -> bool:
        """One grammar-constrained token: does the question need knowledge or reasoning beyond the data?
        (Same system prefix as the plan, so llama.cpp reuses it.) Small models rarely choose operators on
        their own; asking first and then saying so in the plan prompt makes hybrid plans happen."""
        msgs = [self.messages(question)[0], user(prompts.needs_lm_prompt(question, statements))]
        reply = self.llm.complete(msgs, max_tokens=2, grammar='root ::= "yes" | "no"')
        return reply.text.strip().lower().startswith("yes")

    def make(self, question: str, statements: Sequence[ScoredStatement] = ()) -> tuple[Plan, list[dict[str, Any]]]:
        """A validated plan for ``question``; ``statements`` (the retrieved domain knowledge) go into the
        prompts, and the values they name are the experts', not guesses."""
        hybrid = self.hybrid = self.needs_operators(question, statements)
        similar = self.similar(question)
        messages = self.messages(question, statements)
        messages[-1] = user(prompts.similar_plans(similar) + prompts.plan_user_prompt(question, statements)
                            + (prompts.HYBRID_HINT if hybrid else ""))
        attempts: list[dict[str, Any]] = [{"needs_lm_operators": hybrid,
                                           **({"similar_questions": [e.question for e in similar]} if similar else {})}]
        last: TagqlError | None = None
        empty: Plan | None = None  # a valid plan whose SQL finds nothing: kept in case the repair fails
        first = messages
        repeats = RepeatWatch(self.fresh_retry_on_repeat)
        tries = self.retries + 1
        n = 0
        while n < tries:
            n += 1
            cut_off = False
            reply = self.llm.complete(messages, max_tokens=self.max_tokens, json_schema=PLAN_SCHEMA)
            try:
                try:
                    plan = parse_plan(reply.text)
                except LLMOutputError as exc:  # a reply cut off inside an IN list of the category's members
                    if _enumerated_values(reply.text.replace("\\'", "'")) < 6:
                        raise
                    cut_off = True
                    raise PlanError(exc.message, self.enumeration_hint(reply.text, question)) from exc
                relaxed = relax_guessed_values(plan, self.db.dialect, self.db)
                if relaxed:
                    attempts.append({"relaxed": relaxed})
                invented = invented_order_columns(plan, self.db) if hybrid else []
                if invented:
                    attempts.append({"invented_to_lm_number": invented})
                facts = invented_fact_columns(plan, self.db) if hybrid and self.map_invented_columns else []
                if facts:
                    attempts.append({"invented_to_lm_map": facts})
                # validation first: it adds missing joins and respells constants, so the guesses are
                # read in the SQL that runs (``expense`` + ``budget.category`` only has an owner after it)
                sql = self._validated(plan, question, attempts)
                if hybrid:
                    linked = guessed_links(plan, self.db, question) if self.unplaced_columns_to_lm else []
                    if linked:
                        attempts.append({"guesses_to_lost_links": linked})
                        sql = self._validated(plan, question, attempts)
                    converted = self.guesses_to_filters(plan, question, statements)
                    if converted:
                        attempts.append({"guesses_to_lm_filter": converted})
                        sql = self._validated(plan, question, attempts)
                failed = self._filter_passing_none(sql) if hybrid else None
                if failed is not None:
                    before = Plan(plan.sql, [dict(o) for o in plan.operators])
                    moved = self.refilter(plan, sql, failed, question)
                    if moved:
                        attempts.append({"filter_moved": moved})
                        sql = self._validated(plan, question, attempts)
                        failed = self._filter_passing_none(sql)
                    if failed is not None:
                        empty = empty or before
                        raise self._passing_none_error(sql, failed)
                if plan.operators and self._finds_nothing(sql):
                    empty = empty or plan
                    raise PlanError("the plan's SQL returns no rows, so its operators have nothing to work on",
                                    "do not guess values in WHERE for what an operator decides: select that "
                                    "column and let a filter judge it")
            except (LLMOutputError, PlanError) as exc:
                attempts.append({"plan": reply.text.strip()[:2000], "error": exc.one_line()})
                last = exc
                if repeats.failed(reply.text):
                    # the same failed plan word for word, after being told what was wrong: the next try is
                    # asked from the first prompt with only the error as a note (:mod:`tagql.llm.repeats`); a
                    # repeat on the last try earns this one more try
                    attempts[-1]["repeated"] = True
                    tries += n == tries
                    messages = first[:-1] + [user(prompts.plan_retry_note_prompt(first[-1].content, exc.one_line()))]
                elif cut_off:  # shown its own looping reply, the 1.5B model wrote it again word for word
                    messages = first[:-1] + [user(prompts.plan_note_prompt(first[-1].content,
                                                                           exc.hint.replace("it lists", "lists", 1)))]
                else:
                    messages = messages + [Message("assistant", reply.text.strip() or "(empty)"),
                                           user(prompts.plan_repair_prompt(exc.one_line()))]
                continue
            # a hybrid question whose plan does it all in SQL is kept: forcing an operator on such a plan
            # made the 1.5B model add filters that judged nothing useful
            # (bench/results/archive/tag_accuracy_s12.json)
            attempts.append({"plan": plan.to_dict(), "error": None,
                             **({"no_lm": True} if hybrid and not uses_language_model(plan) else {})})
            return plan, attempts
        if empty is not None:  # nothing better came back: an empty answer may be the right one
            attempts.append({"plan": empty.to_dict(), "error": None, "empty_result": True})
            return empty, attempts
        assert last is not None
        last.attempts = attempts  # the fallback shows what was tried (``plan["attempts"]``)
        raise last

    def _validated(self, plan: Plan, question: str, attempts: list[dict[str, Any]]) -> str:
        """The plan's SQL as it will run (:func:`validate_plan`). A column validation rejects is tried, in
        order, as: a made-up column inside a self-subquery (:func:`inline_self_subqueries`), a key the
        database lost (:func:`orphaned_joins`), a column of a table no key reaches that stores the compared
        value (:func:`guessed_links`), and -- for a question that needs the LM, or one only unlinked tables
        hold -- a fact the LM gives (:func:`invented_fact_columns` with ``unplaced``), before the model is
        asked again: shown the error and the hint, the 1.5B model wrote the same plan again word for word
        (pool dev questions 311, 319)."""
        def criterion(column: str, table: str) -> str:
            return self.criterion(question, column, table)

        try:
            return validate_plan(plan, self.db, self.engine, hybrid=self.hybrid, question=question)[0]
        except PlanError as exc:
            if not (self.unplaced_columns_to_lm and exc.missing_column):
                raise
            inlined = inline_self_subqueries(plan, self.db)
            if inlined:  # a made-up column inside ``X IN (SELECT X FROM same table WHERE ...)``
                attempts.append({"inlined_subqueries": inlined})
                try:
                    return validate_plan(plan, self.db, self.engine, hybrid=self.hybrid, question=question)[0]
                except PlanError as again:
                    if not again.missing_column:
                        raise
                    exc = again
            assert exc.missing_column is not None
            lost = orphaned_joins(plan, self.db)
            if exc.out_of_scope and not lost:  # another table's column: a lost key, else the model's to fix
                raise
            unlinked = not lost and unjoinable(exc.missing_column, plan.sql, self.db)
            linked = guessed_links(plan, self.db, question, unplaced=True) if unlinked else []
            if lost:
                attempts.append({"lost_key_to_lm": lost})
            elif linked:
                attempts.append({"unplaced_to_lost_links": linked})
            elif self.hybrid or unlinked:
                facts = invented_fact_columns(plan, self.db, unplaced=True, criterion=criterion)
                if not facts:
                    raise
                attempts.append({"unplaced_to_lm": facts})
            else:
                raise
        return validate_plan(plan, self.db, self.engine, hybrid=self.hybrid, question=question)[0]

    def guesses_to_filters(self, plan: Plan, question: str, statements: Sequence[ScoredStatement] = ()) -> list[str]:
        """Replace the SQL's guessed comparisons (:func:`guessed_comparisons`) by ``LM_FILTER`` calls that
        judge each distinct stored value: small models write the values they believe a category has, in
        the world's spelling, instead of letting the LM judge the data. The statement each filter checks
        comes from one short LM call (same system prefix as the plan). A value a domain statement names
        (``element IN ('cl', 'br', 'i', 'f')`` for "halogens") is the experts', so it stays.
        Returns ``old -> new`` notes."""
        from sqlglot import exp

        tree = _parse(plan.sql, self.db, self.db.dialect)
        known = " ".join([question, *(f"{s.text} {s.sql}" for s in statements)])
        guesses = _guesses(tree, self.db, known) if tree is not None else []
        if not guesses:
            return []
        notes = []
        for g in guesses:
            node = g.node
            statement = self.criterion(question, g.column.name, g.table)
            call: exp.Expression = exp.Anonymous(this="LM_FILTER",
                                                 expressions=[exp.Literal.string(statement), g.column.copy()])
            if node.args.get("negate"):  # sqlglot keeps ``NOT LIKE`` as a negated LIKE: the NOT stays
                call = exp.Not(this=call)
            notes.append(f"{node.sql(dialect=self.db.dialect)} -> {call.sql(dialect=self.db.dialect)}")
            node.replace(call)
        plan.sql = tree.sql(dialect=self.db.dialect)
        return notes

    def enumeration_hint(self, text: str, question: str) -> str:
        """:data:`ENUMERATION_HINT`, made concrete when the listed column is a real one: the filter to
        write instead, with its statement from :meth:`criterion` (the 1.5B model ignored the general hint
        and looped over the same states again)."""
        m = _LISTED_COLUMN.search(text.replace("\\'", "'"))
        if m is None:
            return ENUMERATION_HINT
        name = m.group(1).rsplit(".", 1)[-1].strip('"`')
        owners = [t for t in self.db.schema.tables if t.column(name) is not None]
        if not owners:
            return ENUMERATION_HINT
        asked = set(word_tokens(question, LETTERS))
        table = next((t for t in owners if set(word_tokens(t.name, LETTERS)) & asked), owners[0])
        column = table.column(name).name
        statement = self.criterion(question, column, table.name).replace("'", "''")
        return f"{ENUMERATION_HINT}; here: LM_FILTER('{statement}', {column}) instead of {column} IN (...)"

    def _examples(self, table: str, column: str, limit: int) -> str | None:
        """Up to ``limit`` distinct stored values of ``table.column`` as the prompts show them (``'Lisbon',
        'Porto'``); None when the lookup fails."""
        try:
            r = self.db.execute(f'SELECT DISTINCT "{column}" FROM "{table}" WHERE "{column}" IS NOT NULL LIMIT {limit}')
        except TagqlError:
            return None
        return ", ".join(repr(v[0]) for v in r.rows)

    def criterion(self, question: str, column: str, table: str) -> str:
        """The question's condition on one value of ``table.column``, as a statement with ``{column}``."""
        examples = self._examples(table, column, 5) or ""
        msgs = [self.messages(question)[0], user(prompts.criterion_prompt(question, column, table, examples))]
        head = "{" + column + "} "
        grammar = f'root ::= "{head}" [^\n{{}}]+'
        reply = self.llm.complete(msgs, max_tokens=32, grammar=grammar)
        text = reply.text.strip()
        if not text.startswith(head.strip()) or len(text) <= len(head):
            text = head + "satisfies the condition of the question: " + question
        return text.rstrip(" .")

    def _filter_passing_none(self, sql: str) -> JudgedFilter | None:
        """A WHERE ``LM_FILTER`` of ``sql`` the LM judges false for every stored value it reads (at most
        ``filter_check_inputs`` of them), else None: its column does not hold what the question asks about
        (customers "in Portugal" filtered on their support rep's ``Employee.Country``, all 'Canada', where
        the customers' own country column is missing; pool dev 245, 267). The verdicts stay in the engine,
        so a plan kept costs no extra call."""
        if not self.filter_check_inputs:
            return None
        try:
            judged = judge_filters(self.db, sql, self.engine, max_inputs=self.filter_check_inputs)
        except TagqlError:  # the call cap: the statement will say so when it runs
            return None
        return next((f for f in judged if f.passes_none), None)

    def move_filters_passing_none(self, plan: Plan, question: str) -> list[str]:
        """:meth:`refilter` for a plan that did not come from :meth:`make` (the text-to-SQL fallback whose
        guesses became filters): ``old -> new`` notes, none when no filter passes none."""
        failed = self._filter_passing_none(plan.sql)
        return self.refilter(plan, plan.sql, failed, question) if failed is not None else []

    def _passing_none_error(self, sql: str, failed: JudgedFilter) -> PlanError:
        """What the model is told of a filter passing none (:meth:`_filter_passing_none`): the values it
        judged and the text columns of the query's other tables."""
        values = [v[0] if len(v) == 1 else v for v in failed.values.values()]
        shown = ", ".join(repr(v) for v in values[:3]) + (", ..." if len(values) > 3 else "")
        column = " and ".join(failed.arguments)
        tree = _parse(sql, self.db, self.db.dialect)
        elsewhere = "; ".join(f"{t.name}: {', '.join(cols)}"
                              for _q, t, cols in (_columns_beside(tree, failed.arguments, self.db)
                                                  if tree is not None else []))
        return PlanError(f"{failed.call} is false for all {len(values)} values of {column} ({shown}): "
                         f"{column} does not hold what the question asks about",
                         f"judge a column that does instead; {elsewhere}" if elsewhere else
                         "judge another column instead, one that holds what the question asks about")

    def refilter(self, plan: Plan, sql: str, failed: JudgedFilter, question: str) -> list[str]:
        """Move a filter that passes none (:meth:`_filter_passing_none`) onto the column that can tell:
        the LM picks it among the text columns of the query's other tables (one grammar-constrained call
        over their names and sample values), :meth:`criterion` states the question's condition on it, and
        a join only the old column read is dropped. Shown the error instead, the 1.5B model wrote the
        hidden column again and the join repair brought back the same wrong table (pool dev 245). Sets
        ``plan.sql``; returns ``old -> new`` notes (none when there is nothing to move to)."""
        from sqlglot import exp

        tree = _parse(sql, self.db, self.db.dialect)
        call = next((f for f in tree.find_all(exp.Anonymous) if f.name.upper() == "LM_FILTER"
                     and f.sql(dialect=self.db.dialect) == failed.call), None) if tree is not None else None
        select = call.find_ancestor(exp.Select) if call is not None else None
        if select is None:
            return []
        options: dict[str, tuple[str, Table, str]] = {}
        for qualifier, table, cols in _columns_beside(select, failed.arguments, self.db):
            for c in cols:
                options.setdefault(f"{table.name}.{c}", (qualifier, table, c))
        if not options:
            return []
        lines = []
        for label, (_q, table, c) in options.items():
            examples = self._examples(table.name, c, 3)
            lines.append(label if examples is None else f"{label} (values look like: {examples})")
        statement = call.expressions[0].name if call.expressions else ""
        msgs = [self.messages(question)[0],
                user(prompts.fact_column_prompt(question, statement, " and ".join(failed.arguments), lines))]
        grammar = "root ::= " + " | ".join(json.dumps(label) for label in options)
        reply = self.llm.complete(msgs, max_tokens=24, grammar=grammar)
        picked = options.get(reply.text.strip())
        if picked is None:
            return []
        qualifier, table, column = picked
        new = exp.Anonymous(this="LM_FILTER", expressions=[
            exp.Literal.string(self.criterion(question, column, table.name)),
            exp.column(column, table=qualifier)])
        notes = [f"{failed.call} -> {new.sql(dialect=self.db.dialect)}"]
        call.replace(new)
        notes += [f"dropped the join of {name}" for name in _drop_unread_joins(select, self.db)]
        plan.sql = tree.sql(dialect=self.db.dialect)
        return notes

    def _finds_nothing(self, sql: str) -> bool:
        """Does the plan's SQL return no rows? (Checked only when that costs no LM call.)"""
        if uses_lm_functions(sql):
            return False
        try:
            return not self.db.execute(f"SELECT 1 FROM ({sql}) AS plan_probe LIMIT 1").rows
        except (InvalidQuery, UnsafeQuery, QueryFailed):
            return False
