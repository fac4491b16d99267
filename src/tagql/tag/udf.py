"""LM operators as SQL user-defined functions, on SQLite and DuckDB.

After :func:`register_lm_functions`, SQL can call:

* ``LM_FILTER('{City} is a city in the Silicon Valley region', City)`` -> 1 / 0
* ``LM_MAP('the state {City} is in', City)`` -> text
* ``LM_SCORE('{Title} is technical', Title)`` -> 0..10 (for ``ORDER BY ... DESC``)
* ``LM_NUMBER('the founding year of {publisher_name}', publisher_name)`` -> a number (``ORDER BY`` what the
  LM knows or reads: a year, a population, the month a name refers to; NULL when it gives none)
* ``LM_CHOOSE('the publisher of {superhero_name}', superhero_name, 'publisher.publisher_name')`` -> one of the
  values stored in that column (the last argument), or NULL: a join over a key the database does not have
  (``ON publisher.publisher_name = LM_CHOOSE(...)``, see ``tagql.tag.plan.orphaned_joins``). The options are
  read from the database before the statement runs (:func:`load_choices`).

Arguments after the instruction fill its ``{fields}`` in order of first appearance. Both databases run
the same code (:class:`LMFunctions`), which takes a *batch* of rows: it fills the instruction per row,
deduplicates, and hands the distinct inputs to one :class:`~tagql.tag.operators.SemEngine` call
(``judge_many``/``map_many``/``score_many``: cache, one-token grammar, ``batch_size`` packing, LM-call cap).
SQLite calls a function once per row (a batch of one; repeats hit the cache); DuckDB calls it once per
vector of up to 2,048 rows (see ``tagql.db.duck``), so duplicates within a vector cost nothing and
``batch_size > 1`` packs the vector's distinct inputs into few LM calls.

Before a statement runs, :func:`prefetch_filters` judges each ``LM_FILTER`` that is a conjunct of a
``WHERE`` in one ``judge_many`` over the distinct inputs the other conjuncts leave (with how many rows
each stands for), so SQLite's row-at-a-time calls find their verdicts and large filters get the
cheap-first cascade (:mod:`tagql.tag.cascade`); :func:`prefetch_choices` does the same for each
``LM_CHOOSE`` of a join, and stops before the first call when its rows cannot fit under the call cap.

Databases swallow or rewrap Python exceptions raised in functions, so :func:`execute_with_lm`
re-raises the real one (call cap, bad argument count).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tagql.db.connection import Database, Result
from tagql.errors import QueryFailed, TagqlError
from tagql.tag.operators import LMCallLimitExceeded, OperatorError, SemEngine, fill, repair_braces, template_fields

FUNCTIONS = ("LM_FILTER", "LM_MAP", "LM_SCORE", "LM_NUMBER", "LM_CHOOSE")
CHOICES_MAX = 500  # stored values an LM_CHOOSE may choose among
PREFETCH_MAX_INPUTS = 100_000  # distinct filter inputs judged up front at most (each one is an LM call anyway)
_RETURNS = {"LM_FILTER": "BIGINT", "LM_MAP": "VARCHAR", "LM_SCORE": "BIGINT", "LM_NUMBER": "DOUBLE",
            "LM_CHOOSE": "VARCHAR"}


def _bind(instruction: Any, args: tuple[Any, ...], name: str, engine: SemEngine) -> str:
    if not isinstance(instruction, str):
        raise OperatorError(f"{name} needs the instruction text as its first argument")
    instruction = repair_braces(instruction)  # as plan operators are; a still malformed one is an error
    fields = template_fields(instruction)
    if not fields and len(args) == 1:  # LM_NUMBER('the size of the shirt', t_shirt_size): the one value it is about
        return f"{instruction}: {fill('{v}', {'v': args[0]})}"
    if len(fields) != len(args):
        raise OperatorError(
            f"{name}({instruction!r}, ...) has {len(fields)} {{field}}(s) but {len(args)} value argument(s)",
            "pass one column per {field}, in order",
        )
    return engine.fill(instruction, dict(zip(fields, args)))


class LMFunctions:
    """The LM functions over a batch of rows, for any database. ``columns[0]`` holds each row's
    instruction, the others its values. Thread-safe (DuckDB may call from several threads; the LM is
    one resource). An error is stored in ``engine.pending_error`` and the batch returns NULLs, so the
    statement ends quickly and :func:`execute_with_lm` raises the real error."""

    def __init__(self, engine: SemEngine) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._records: dict[tuple[str, str], dict[str, Any]] = {}
        self._seen: dict[tuple[str, str], set[str]] = {}
        # SQLite's row-at-a-time calls: (function, arguments) -> (value, its per_operator entry), so a repeated
        # input costs a dict lookup, not a fill and a batch (1M rows over 50 inputs: 11 s -> see operator_scale)
        self._memo: dict[tuple[Any, ...], tuple[Any, dict[str, Any]]] = {}

    def run(self, name: str, columns: tuple[list[Any], ...]) -> list[Any]:
        n = len(columns[0]) if columns else 0
        with self._lock:
            if self.engine.pending_error is not None:
                return [None] * n  # already failed: finish the statement quickly, then re-raise
            try:
                with self.engine.cache.batch():  # one cache write transaction per batch of rows
                    return self._run(name, columns, n)
            except Exception as exc:  # noqa: BLE001 - re-raised by execute_with_lm
                self.engine.pending_error = exc
                return [None] * n

    def _run(self, name: str, columns: tuple[list[Any], ...], n: int) -> list[Any]:
        rows = list(zip(*columns))
        source = None
        if name == "LM_CHOOSE":  # the last argument names where the options are stored
            sources = {r[-1] for r in rows}
            if rows and (len(sources) != 1 or len(rows[0]) < 3):
                raise OperatorError("LM_CHOOSE needs the instruction, its values and one 'table.column' of options")
            source = str(next(iter(sources))) if rows else ""
            if rows and source not in self.engine.choices:
                raise OperatorError(f"LM_CHOOSE: the options of {source!r} were not loaded",
                                    "run the statement through execute_with_lm")
            rows = [r[:-1] for r in rows]
        keys = [(r[0], _bind(r[0], r[1:], name, self.engine)) for r in rows]  # (instruction, filled input)
        out: dict[tuple[str, str], Any] = {}
        for instruction in dict.fromkeys(k[0] for k in keys):
            distinct = list(dict.fromkeys(item for ins, item in keys if ins == instruction))
            t0, c0 = time.perf_counter(), self.engine.stats.lm_calls
            if name == "LM_FILTER":
                values: list[Any] = [int(v) for v in _known_first(
                    self.engine.prejudged.get(repair_braces(instruction), {}), distinct,
                    lambda todo: self.engine.judge_many(instruction, todo, op="sql_filter"))]
            elif name == "LM_SCORE":
                values = self.engine.score_many(instruction, distinct)
            elif name == "LM_NUMBER":
                values = self.engine.number_many(instruction, distinct)
            elif name == "LM_CHOOSE":
                values = _known_first(
                    self.engine.prechosen.get((repair_braces(instruction), str(source)), {}), distinct,
                    lambda todo: self.engine.choose_many(instruction, todo, self.engine.choices[str(source)]))
            else:
                values = self.engine.map_many(instruction, distinct)
            out.update(((instruction, d), v) for d, v in zip(distinct, values))
            rows_in = sum(1 for ins, _ in keys if ins == instruction)
            self._note(name, instruction, rows_in, distinct, time.perf_counter() - t0,
                       self.engine.stats.lm_calls - c0)
        self.engine.stats.deduped += n - len(out)
        return [out[k] for k in keys]

    def _note(self, name: str, instruction: str, rows: int, inputs: list[str], seconds: float, calls: int) -> None:
        """One ``per_operator`` entry per (function, instruction), summed over the database's batches."""
        rec = self._records.get((name, instruction))
        if rec is None:
            rec = {"op": name.lower(), "instruction": instruction, "rows": 0, "distinct_inputs": 0,
                   "lm_calls": 0, "seconds": 0.0, "batches": 0}
            self._records[(name, instruction)] = rec
            self._seen[(name, instruction)] = set()
            self.engine.stats.per_operator.append(rec)
        rec["rows"] += rows
        self._seen[(name, instruction)].update(inputs)
        rec["distinct_inputs"] = len(self._seen[(name, instruction)])
        rec["lm_calls"] += calls
        rec["seconds"] = round(rec["seconds"] + seconds, 3)
        rec["batches"] += 1

    MEMO_MAX = 100_000  # distinct (function, arguments) remembered for the row-at-a-time form

    def scalar(self, name: str) -> Callable[..., Any]:
        """The SQLite form: one row per call (a repeated input answered from the memo)."""
        def fn(*args: Any) -> Any:
            key = (name, *args)
            with self._lock:
                hit = self._memo.get(key) if self.engine.pending_error is None else None
                if hit is not None:
                    hit[1]["rows"] += 1
                    self.engine.stats.deduped += 1
                    return hit[0]
            value = self.run(name, tuple([a] for a in args))[0]
            with self._lock:
                rec = self._records.get((name, args[0])) if args else None
                if self.engine.pending_error is None and rec is not None and len(self._memo) < self.MEMO_MAX:
                    self._memo[key] = (value, rec)
            return value
        return fn

    def vector(self, name: str) -> Callable[..., list[Any]]:
        """The DuckDB form: one list per argument."""
        def fn(*columns: list[Any]) -> list[Any]:
            return self.run(name, columns)
        return fn


def _known_first(known: dict[str, Any], distinct: list[str], ask: Callable[[list[str]], list[Any]]) -> list[Any]:
    """The answers for ``distinct`` inputs: those settled before the statement ran (``prejudged`` /
    ``prechosen``) as they are, the rest from one ``ask`` over them."""
    todo = [d for d in distinct if d not in known]
    asked = dict(zip(todo, ask(todo))) if todo else {}
    return [known[d] if d in known else asked[d] for d in distinct]


def register_lm_functions(db: Database, engine: SemEngine) -> LMFunctions:
    """Make ``LM_FILTER``/``LM_MAP``/``LM_SCORE``/``LM_NUMBER`` callable from SQL on ``db`` (SQLite or DuckDB).
    Registering again (e.g. with a new engine) replaces the functions."""
    funcs = LMFunctions(engine)
    for name in FUNCTIONS:
        db.register_function(name, -1, funcs.scalar(name), vector_fn=funcs.vector(name), returns=_RETURNS[name])
    return funcs


def uses_lm_functions(sql: str) -> bool:
    up = sql.upper()
    return any(f + "(" in up.replace(" (", "(") for f in FUNCTIONS)


def and_parts(cond: Any) -> list[Any]:
    """The AND-ed parts of a condition (none without one): a WHERE's or an ON's conjuncts."""
    from sqlglot import exp

    return list(cond.flatten()) if isinstance(cond, exp.And) else [cond] if cond is not None else []


def _conjuncts(where: Any) -> list[Any]:
    """The AND-ed conditions of a WHERE (none without one)."""
    return and_parts(where.this) if where is not None else []


def _without_lm(conjuncts: list[Any]) -> list[Any]:
    """The conditions that call no LM function (the database can apply them in a probe)."""
    from sqlglot import exp

    return [c for c in conjuncts if not any(f.name.upper() in FUNCTIONS for f in c.find_all(exp.Anonymous))]


def _own_budget(engine: SemEngine, call: str, uncached: int, *, exact: bool, what: str, kind: str) -> int:
    """A lost link's or a stored row's fact's own budget (``engine.max_link_calls``): its ``uncached`` calls
    come on top of the question's cap when they fit it; else, when the count is ``exact`` and more than the
    calls left, stop before the first call. ``what`` names it in the message ("a lost link"), ``kind`` in
    the hint ("a join over a lost key"). Returns the calls added."""
    left = engine.max_calls - engine.stats.lm_calls
    if 0 < uncached <= engine.max_link_calls:
        engine.max_calls += uncached  # the question's calls stay for the rest
        return uncached
    if exact and uncached > left:
        raise LMCallLimitExceeded(
            f"{call} needs an LM call for each of {uncached} rows; {left} of the {engine.max_calls} calls for "
            f"this question are left" + (f" and {what} may take {engine.max_link_calls}" if engine.max_link_calls
                                         else ""),
            f"narrow the question, filter with SQL first, or raise TAGQL_TAG__MAX_LINK_CALLS ({kind}) or "
            "TAGQL_TAG__MAX_LM_CALLS")
    return 0


def _filter_conjuncts(sql: str, dialect: str) -> list[tuple[Any, Any, list[Any], bool]]:
    """(``LM_FILTER`` call, its SELECT, the SELECT's other conjuncts without LM calls, whether it keeps the
    rows it holds for) for each call that is a conjunct of a WHERE (``LM_FILTER(..)`` and ``= 1`` keep,
    ``= 0`` and ``NOT`` drop): the rows that reach it are exactly those the other conjuncts keep."""
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(sql, read=dialect)
    out = []
    for where in tree.find_all(exp.Where):
        select = where.parent
        if not isinstance(select, exp.Select) or (select.args.get("limit") and not select.args.get("order")):
            continue  # LIMIT without ORDER BY stops early: judging every input up front could cost more
        conjuncts = _conjuncts(where)
        plain = _without_lm(conjuncts)
        for c in conjuncts:
            keeps = not isinstance(c, exp.Not)
            core = c.this if isinstance(c, exp.Not) else c
            if isinstance(core, (exp.EQ, exp.NEQ)) and isinstance(core.expression, exp.Literal):
                keeps = keeps == ((core.expression.name == "1") == isinstance(core, exp.EQ))
                core = core.this
            while isinstance(core, exp.Paren):
                core = core.this
            if isinstance(core, exp.Anonymous) and core.name.upper() == "LM_FILTER":
                out.append((core, select, plain, keeps))
    return out


@dataclass
class JudgedFilter:
    """One WHERE-conjunct ``LM_FILTER`` judged before its statement: its SQL, whether it keeps the rows it
    holds for, and its verdict per distinct input."""

    call: str
    arguments: tuple[str, ...]  # the SQL of its value arguments (``Employee.Country``)
    keeps: bool
    verdicts: dict[str, bool]
    values: dict[str, tuple[Any, ...]]  # each input's stored values (the arguments it was filled with)

    @property
    def passes_none(self) -> bool:
        """Does the filter leave no row? (Every input judged, none kept.)"""
        return bool(self.verdicts) and not any(v == self.keeps for v in self.verdicts.values())


def judge_filters(db: Database, sql: str, engine: SemEngine, *, timeout_s: float = 60.0,
                  max_inputs: int = PREFETCH_MAX_INPUTS) -> list[JudgedFilter]:
    """Judge the inputs of ``sql``'s WHERE-conjunct ``LM_FILTER`` calls up front (see the module doc) and
    return what each decided; verdicts land in ``engine.prejudged``, so the statement's own calls find them.
    A filter this cannot read (a correlated subquery, an instruction that is not a literal, more than
    ``max_inputs`` distinct inputs) is left to the row-at-a-time calls and not returned."""
    import sqlglot
    from sqlglot import exp

    try:
        found = _filter_conjuncts(sql, db.dialect)
    except sqlglot.errors.ParseError:
        return []
    judged = []
    for call, select, plain, keeps in found:
        instr, *args = call.expressions
        if not isinstance(instr, exp.Literal) or not instr.is_string or not args:
            continue
        rows = _input_counts(db, select, args, plain, timeout_s=timeout_s)
        if rows is None or len(rows) > max_inputs:
            continue
        instruction = repair_braces(instr.this)
        counts: Counter[str] = Counter()
        stored: dict[str, tuple[Any, ...]] = {}
        for *values, n in rows:
            bound = _bind(instruction, tuple(values), "LM_FILTER", engine)
            counts[bound] += int(n)
            stored.setdefault(bound, tuple(values))
        known = engine.prejudged.setdefault(instruction, {})
        todo = [c for c in counts if c not in known]
        if todo:
            t0, c0 = time.perf_counter(), engine.stats.lm_calls
            verdicts = engine.judge_many(instruction, todo, op="sql_filter", weights=[counts[c] for c in todo])
            known.update(zip(todo, verdicts))
            engine.stats.deduped += sum(counts[c] for c in todo) - len(todo)
            engine.stats.per_operator.append({
                "op": "lm_filter (judged before the statement)", "instruction": instruction,
                "rows": sum(counts[c] for c in todo), "distinct_inputs": len(todo),
                "lm_calls": engine.stats.lm_calls - c0, "seconds": round(time.perf_counter() - t0, 3)})
        judged.append(JudgedFilter(call.sql(dialect=db.dialect), tuple(a.sql(dialect=db.dialect) for a in args),
                                   keeps, {c: known[c] for c in counts}, stored))
    return judged


def prefetch_filters(db: Database, sql: str, engine: SemEngine, *, timeout_s: float = 60.0) -> int:
    """Judge the inputs of ``sql``'s WHERE-conjunct ``LM_FILTER`` calls before it runs (:func:`judge_filters`);
    returns how many inputs hold a verdict now."""
    return sum(len(f.verdicts) for f in judge_filters(db, sql, engine, timeout_s=timeout_s))


def _input_counts(db: Database, select: Any, args: list[Any], plain: list[Any], *, timeout_s: float,
                  without: Any = None) -> list[tuple[Any, ...]] | None:
    """The distinct argument tuples of an LM call in ``select`` and how many rows each stands for (the
    last value), counted by the database (GROUP BY) over its FROM and joins (but ``without``) and the
    ``plain`` conjuncts: memory and transfer grow with the distinct inputs, not the rows
    (bench/tag/operator_scale.py). None when the probe does not run (outer references, dialect quirks, a
    column of the left-out join) or finds more than :data:`PREFETCH_MAX_INPUTS`: the statement's own calls
    decide then."""
    from sqlglot import exp

    source = select.args.get("from_") or select.args.get("from")
    if source is None:
        return None
    probe = exp.select(*[a.copy() for a in args], exp.Count(this=exp.Star())).from_(source.this.copy())
    for other in select.args.get("joins") or []:
        if other is not without:
            probe = probe.join(other.copy())
    if plain:
        probe = probe.where(exp.and_(*[c.copy() for c in plain]))
    probe = probe.group_by(*[a.copy() for a in args])
    try:
        probed = db.execute(probe.sql(dialect=db.dialect), timeout_s=timeout_s, row_cap=PREFETCH_MAX_INPUTS)
    except TagqlError:
        return None
    return None if probed.truncated else probed.rows


def prefetch_choices(db: Database, sql: str, engine: SemEngine, *, timeout_s: float = 60.0) -> int:
    """Choose for the inputs of each ``LM_CHOOSE`` in a JOIN's ``ON`` up front, in one ``choose_many`` over
    the distinct inputs the rest of the query leaves (its FROM and other joins, and the WHERE conjuncts that
    neither read the joined table nor call the LM). Row by row, a join over 750 heroes spent the whole call
    cap (200 calls, minutes) before it stopped; counted first, it stops before the first call. Choices up to
    ``engine.max_link_calls`` come on top of the question's cap instead: the lost link is derived once and
    cached for every later question over the database (``tag.max_link_calls``). Returns how
    many inputs were chosen for; a call this cannot read (in a WHERE, an instruction that is not a literal,
    a probe that does not run) is left to the row-at-a-time calls."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read=db.dialect)
    except sqlglot.errors.ParseError:
        return 0
    chosen_for = 0
    for call in list(tree.find_all(exp.Anonymous)):
        if call.name.upper() != "LM_CHOOSE" or len(call.expressions) < 3:
            continue
        instr, *args, src = call.expressions
        join = call.find_ancestor(exp.Join)
        select = join.parent if join is not None else None
        if not (isinstance(instr, exp.Literal) and instr.is_string and isinstance(src, exp.Literal)) \
                or src.this not in engine.choices or not isinstance(select, exp.Select) \
                or not isinstance(join.this, exp.Table) or (select.args.get("limit") and not select.args.get("order")):
            continue
        far = join.this.alias_or_name.lower()
        plain = [c for c in _without_lm(_conjuncts(select.args.get("where")))
                 if not any(col.table.lower() == far for col in c.find_all(exp.Column))]
        rows = _input_counts(db, select, args, plain, timeout_s=timeout_s, without=join)
        if rows is None:  # e.g. a later join or an unqualified column reads the chosen table: row by row
            continue
        instruction = repair_braces(instr.this)
        inputs = list(dict.fromkeys(_bind(instruction, tuple(values), "LM_CHOOSE", engine) for *values, _n in rows))
        known = engine.prechosen.setdefault((instruction, src.this), {})
        todo = [i for i in inputs if i not in known]
        _own_budget(engine, f"LM_CHOOSE({instruction!r})",
                    len(engine.uncached_choices(instruction, todo, engine.choices[src.this])),
                    exact=True, what="a lost link", kind="a join over a lost key")
        if todo:
            t0, c0 = time.perf_counter(), engine.stats.lm_calls
            known.update(zip(todo, engine.choose_many(instruction, todo, engine.choices[src.this])))
            chosen_for += len(todo)
            engine.stats.per_operator.append({
                "op": "lm_choose (chosen before the statement)", "instruction": instruction,
                "rows": sum(int(r[-1]) for r in rows), "distinct_inputs": len(todo),
                "lm_calls": engine.stats.lm_calls - c0, "seconds": round(time.perf_counter() - t0, 3)})
    return chosen_for


def budget_facts(db: Database, sql: str, engine: SemEngine, *, timeout_s: float = 60.0) -> int:
    """Count, before the statement runs, the distinct inputs of each ``LM_MAP`` / ``LM_NUMBER`` over stored
    columns (``LM_MAP('the year of independence of {Name}', Name)``: a column the database lacks, asked of
    each row). Such a fact is the same for every question over the database and cached, as a lost link
    is, so up to ``engine.max_link_calls`` uncached inputs come on top of the question's cap; row by row,
    world_1's 239 countries spent the 200-call cap and stopped. More than that, when the count is exact
    (no other LM call narrows the rows) and over the calls left, it stops before the first call. Returns
    the calls added to the budget; a call this cannot read is left to the cap."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read=db.dialect)
    except sqlglot.errors.ParseError:
        return 0
    added = 0
    for call in list(tree.find_all(exp.Anonymous)):
        name = call.name.upper()
        select = call.find_ancestor(exp.Select)
        if name not in ("LM_MAP", "LM_NUMBER") or len(call.expressions) < 2 or not isinstance(select, exp.Select):
            continue
        instr, *args = call.expressions
        if not (isinstance(instr, exp.Literal) and instr.is_string) or not all(isinstance(a, exp.Column) for a in args):
            continue
        conjuncts = _conjuncts(select.args.get("where"))
        plain = _without_lm(conjuncts)
        rows = _input_counts(db, select, args, plain, timeout_s=timeout_s)
        if rows is None:
            continue
        instruction = repair_braces(instr.this)
        try:
            inputs = [_bind(instruction, tuple(values), name, engine) for *values, _n in rows]
        except OperatorError:
            continue  # the statement's own call says what is wrong
        uncached = len(engine.uncached_facts("map" if name == "LM_MAP" else "number", instruction, inputs))
        added += _own_budget(engine, f"{name}({instruction!r})", uncached, exact=len(plain) == len(conjuncts),
                             what="a fact about each row", kind="a fact about each stored row")
    return added


def load_choices(db: Database, sql: str, engine: SemEngine) -> list[str]:
    """Read the stored values each ``LM_CHOOSE`` of ``sql`` chooses among (its last argument, a
    ``'table.column'`` literal) into ``engine.choices``; returns the sources read. A source that is not a
    column of the database, or holds more than :data:`CHOICES_MAX` values, is an error before any LM call."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read=db.dialect)
    except sqlglot.errors.ParseError:
        return []
    read = []
    for call in tree.find_all(exp.Anonymous):
        if call.name.upper() != "LM_CHOOSE" or not call.expressions:
            continue
        last = call.expressions[-1]
        if not (isinstance(last, exp.Literal) and last.is_string and "." in last.this):
            raise OperatorError("LM_CHOOSE's last argument must name the options' column as 'table.column'")
        table_name, column_name = last.this.rsplit(".", 1)
        table = db.schema.table(table_name)
        column = table.column(column_name) if table is not None else None
        if column is None:
            raise OperatorError(f"LM_CHOOSE: {last.this!r} is not a column of {db.name}")
        if last.this in engine.choices:
            continue
        q = db.schema.quote
        got = db.execute(f"SELECT DISTINCT {q(column.name)} FROM {q(table.name)} WHERE {q(column.name)} IS NOT NULL "
                         f"ORDER BY 1", row_cap=CHOICES_MAX)
        if got.truncated:
            raise OperatorError(f"LM_CHOOSE: {last.this} holds more than {CHOICES_MAX} values to choose among")
        engine.choices[last.this] = [str(r[0]) for r in got.rows]
        read.append(last.this)
    return read


def execute_with_lm(db: Database, sql: str, engine: SemEngine, *, timeout_s: float = 600.0) -> Result:
    """Run ``sql`` (which may call LM functions) and surface any operator error it hit; WHERE-conjunct
    ``LM_FILTER`` calls are judged up front (:func:`prefetch_filters`)."""
    engine.pending_error = None
    if "LM_CHOOSE" in sql.upper():
        load_choices(db, sql, engine)
        prefetch_choices(db, sql, engine)
    if "LM_FILTER" in sql.upper():
        prefetch_filters(db, sql, engine)
    if "LM_MAP" in sql.upper() or "LM_NUMBER" in sql.upper():
        budget_facts(db, sql, engine)
    try:
        result = db.execute(sql, timeout_s=timeout_s)
    except QueryFailed:
        if engine.pending_error is not None:
            raise engine.pending_error from None
        raise
    if engine.pending_error is not None:
        err, engine.pending_error = engine.pending_error, None
        raise err
    return result
