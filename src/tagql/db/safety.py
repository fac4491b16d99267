"""Static checks on SQL before it reaches the database (sqlglot, not keyword matching).

1. ``parse_read_only``: exactly one statement, a SELECT (or set operation / WITH ... SELECT), with no
   write or DDL node anywhere in its tree. The connection itself is read-only too (see
   ``connection.py``): this check gives a clear message, the engine gives the guarantee.
2. ``validate_against_schema``: every table and column exists, so a hallucinated name is caught
   before execution with a message the LLM can use to repair its query.
"""

from __future__ import annotations

import difflib
import re

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError, TokenError
from sqlglot.optimizer.qualify import qualify

from tagql.db.dialects import for_name
from tagql.db.limits import check_bounds
from tagql.db.schema import Schema, Table, key_links
from tagql.errors import InvalidQuery, UnsafeQuery

_QUERY_ROOTS: tuple[type[exp.Expression], ...] = (exp.Select, exp.Union, exp.Intersect, exp.Except)
_FORBIDDEN_NAMES = (
    "Insert", "Update", "Delete", "Merge", "Create", "Drop", "Alter", "AlterTable", "Command", "Pragma",
    "Attach", "Detach", "Set", "Transaction", "Commit", "Rollback", "Into", "Lock", "Copy", "Grant",
    "TruncateTable", "LoadData", "Use", "Analyze",
)
_FORBIDDEN: tuple[type[exp.Expression], ...] = tuple(
    getattr(exp, n) for n in _FORBIDDEN_NAMES if isinstance(getattr(exp, n, None), type)
)


_STATEMENT_KEYS = {"describe", "show", "execute", "kill", "cache", "uncache", "refresh", "declare", "summarize"}


def parse_read_only(sql: str, dialect: str) -> exp.Expression:
    """Parse ``sql`` and insist it is one read-only query. Returns the parsed expression.

    The bounds come first (``limits.py``: one statement, size, nesting), so parsing stays linear."""
    tokens = check_bounds(sql, dialect)
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except (ParseError, TokenError) as exc:
        raise InvalidQuery(f"SQL does not parse ({dialect}): {_first_line(exc)}") from exc
    except RecursionError:
        raise InvalidQuery(f"SQL nests too deeply to check ({dialect})", "write it with fewer levels") from None
    except Exception as exc:  # sqlglot's own bugs (IndexError on DuckDB's SHOW ALL): never a traceback
        first = tokens[0].text.upper() if tokens else ""
        if first not in ("SELECT", "WITH", "VALUES", "(", "FROM", "TABLE"):
            raise UnsafeQuery(f"only SELECT queries may run, got {first}") from exc
        raise InvalidQuery(f"SQL does not parse ({dialect}): {exc.__class__.__name__} in the parser") from exc
    if not statements:
        raise InvalidQuery("no SQL statement found")
    if len(statements) > 1:
        raise UnsafeQuery(f"only a single statement may run, got {len(statements)}")
    tree = statements[0]
    if not isinstance(tree, _QUERY_ROOTS):
        if isinstance(tree, _FORBIDDEN) or tree.key in _STATEMENT_KEYS:
            raise UnsafeQuery(f"only SELECT queries may run, got {tree.key.upper()}")
        raise InvalidQuery(f"not a SQL query: {sql.strip()[:80]!r}")
    for node in tree.walk():
        if isinstance(node, _FORBIDDEN):
            raise UnsafeQuery(f"only read-only queries may run, found {node.key.upper()}")
    return tree


def referenced_tables(tree: exp.Expression) -> set[str]:
    """Names of real tables the query reads (CTE names excluded)."""
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    return {t.name for t in tree.find_all(exp.Table) if t.name and t.name.lower() not in ctes}


def validate_against_schema(tree: exp.Expression, schema: Schema) -> None:
    """Raise ``InvalidQuery`` naming the first unknown table or column."""
    for name in sorted(referenced_tables(tree)):
        if schema.table(name) is None:
            known = ", ".join(schema.table_names[:30])
            raise InvalidQuery(f"unknown table '{name}'{_unknown_table_hint(name, schema)}; the tables are: {known}")
    try:
        qualify(
            tree.copy(), schema=schema.mapping(), dialect=schema.dialect,
            validate_qualify_columns=True, quote_identifiers=False, identify=False,
        )
    except OptimizeError as exc:
        text = _first_line(exc)
        if "could not be resolved" in text or "Unknown" in text or "not found" in text.lower():
            raise InvalidQuery(_explain_unknown_column(text, tree, schema)) from exc
        # other optimizer limitations are not proof the query is wrong: the database decides
    except (ParseError, KeyError, ValueError, TypeError, AttributeError, RecursionError):
        pass  # sqlglot cannot qualify some valid constructs; execution will tell
    _reject_outer_selected_lookups(tree, schema)


def _reject_outer_selected_lookups(tree: exp.Expression, schema: Schema) -> None:
    """``city.city IN (SELECT city FROM country WHERE country = 'Spain')`` where ``country`` has no ``city``:
    the database reads the outer query's ``city``, so the IN holds for every row while the subquery finds
    any (seen on the TAG pool's test split: every customer counted as living in Spain). Valid SQL, never
    meant: raised as an error that says which table lacks the column."""
    for node in tree.find_all(exp.In):
        query = node.args.get("query")
        inner = query.this if query is not None else None
        if not isinstance(inner, exp.Select) or len(inner.expressions) != 1:
            continue
        col = inner.expressions[0]
        sources = [n.this for n in [inner.args.get("from_") or inner.args.get("from"), *(inner.args.get("joins") or [])]
                   if n is not None]
        if (not isinstance(col, exp.Column) or col.table or not col.name or not sources
                or not all(isinstance(t, exp.Table) and schema.table(t.name) is not None for t in sources)
                or any(schema.table(t.name).column(col.name) is not None for t in sources)):  # type: ignore[union-attr]
            continue
        names = ", ".join(t.name for t in sources)
        raise InvalidQuery(f"the subquery of '{node.this.sql(dialect=schema.dialect)} IN (SELECT {col.name} FROM "
                           f"{names} ...)' selects {col.name}, which {names} does not store: it reads the outer "
                           f"query's {col.name}, so the IN holds for every row; select a column of {names}, or "
                           f"join the table that stores {col.name}")


def _unknown_table_hint(name: str, schema: Schema) -> str:
    """What a made-up table name probably meant: a table spelled alike (``superhero_power`` ->
    hero_power) or a column of that name (``department`` is a column of major)."""
    low = name.lower()
    columns = [f"{t.name}.{c.name}" for t in schema.tables for c in t.columns
               if c.name.lower() in (low, f"{low}_id")]
    if columns:
        return f" ({' and '.join(columns[:2])} {'is a column' if len(columns) == 1 else 'are columns'})"
    tables = difflib.get_close_matches(low, [t.lower() for t in schema.table_names], n=1, cutoff=0.7)
    if tables:
        return f" (did you mean {schema.table(tables[0]).name}?)"  # type: ignore[union-attr]
    return ""


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__


def fix_sqlite_double_quoted_strings(tree: exp.Expression, schema: Schema) -> exp.Expression:
    """SQLite reads ``"Batman"`` as the string 'Batman' when no column has that name; LLMs write it
    often. Make that explicit so validation does not reject a query SQLite would run."""
    if not for_name(schema.dialect).double_quoted_strings:
        return tree
    known = {c.name.lower() for t in schema.tables for c in t.columns}
    aliases = {a.alias.lower() for a in tree.find_all(exp.Alias)}
    for col in list(tree.find_all(exp.Column)):
        ident = col.this
        if (
            isinstance(ident, exp.Identifier) and ident.quoted and not col.table
            and ident.name.lower() not in known and ident.name.lower() not in aliases
        ):
            col.replace(exp.Literal.string(ident.name))
    return tree


def _misqualified(name: str, tree: exp.Expression, schema: Schema) -> str | None:
    """'T1.event_id' where T1 is a table without event_id but another table of the query has it:
    name the alias to use (small models fix this at once; "not in the tables used" confuses them)."""
    alias_of: dict[str, str] = {}  # alias or name (lower) -> table name
    spelled: dict[str, str] = {}  # alias or name (lower) -> as written
    for t in tree.find_all(exp.Table):
        alias_of[t.alias_or_name.lower()] = t.name
        spelled[t.alias_or_name.lower()] = t.alias_or_name
    for col in tree.find_all(exp.Column):
        if col.name.lower() != name.lower() or not col.table:
            continue
        table = alias_of.get(col.table.lower())
        found = schema.table(table) if table else None
        if found is None or found.column(name) is not None:
            continue
        right = [a for a, t in alias_of.items() if (st := schema.table(t)) is not None and st.column(name) is not None]
        shown = f"{col.table} ({table})" if col.table.lower() != table.lower() else table
        if right and equated_namesake(col) in right:
            return f"column {col.table}.{col.name}: table {shown} has no column '{col.name}'" + _join_key_hint(
                found, col.name, schema, used=set(alias_of.values()))
        if right:
            where = f"; use {spelled[right[0]]}.{name} (table {alias_of[right[0]]})"
        else:
            near = _near_columns(name, schema, list(alias_of.values()))
            where = f" (did you mean {' or '.join(near)}?)" if near else ""
        return f"column {col.table}.{name}: table {shown} has no column '{name}'{where}"
    return None


def equated_namesake(col: exp.Column) -> str | None:
    """In ``X.k = col`` (``col`` named k too): the qualifier of the other side, lower-case ('' when bare);
    None when ``col`` is not one side of an equality with a column of its name (a join key, as written)."""
    parent = col.parent
    if not isinstance(parent, exp.EQ):
        return None
    other = parent.expression if parent.this is col else parent.this
    if not isinstance(other, exp.Column) or other.name.lower() != col.name.lower():
        return None
    return (other.table or "").lower()


def _join_key_hint(table: Table, name: str, schema: Schema, used: set[str]) -> str:
    """What to do about a join on a key one side lacks: go through a table that has the key (those that
    also share a key column with ``table`` first: they can bridge), or join on a key this table has.
    ("use T1.driverId" would make the model write T1.driverId = T1.driverId.)"""
    mine = {c.lower() for fk in table.foreign_keys for c in fk.columns} | {
        c.name.lower() for c in table.columns if c.name.lower().endswith("id")}
    used_low = {u.lower() for u in used}
    owners = [t for t in schema.tables if t.column(name) is not None and t.name.lower() not in used_low]
    owners.sort(key=lambda t: -len(mine & {c.name.lower() for c in t.columns}))
    owners = [t.name for t in owners]
    links = [link for link in key_links(schema).get(table.name.lower(), []) if link.b.lower() != table.name.lower()]
    keys = [f"{link.b} ({', '.join(link.a_cols if link.up else link.b_cols)})"  # declared, then implied
            for link in sorted(links, key=lambda link: (link.implied, not link.up))]
    hint = f", so it cannot be joined on {name}"
    if owners:
        hint += f"; join a table that has {name} ({', '.join(owners[:4])})"
    if keys:
        hint += f"; {table.name} joins " + ", ".join(dict.fromkeys(keys[:4]))
    return hint


def _explain_unknown_column(text: str, tree: exp.Expression, schema: Schema) -> str:
    """Turn sqlglot's message into one that helps a model repair the query: where the column really is."""
    m = re.search(r"Column '([^']+)'|Unknown column: (\S+)", text)
    if not m:
        return text
    name = (m.group(1) or m.group(2)).strip("'\"`")
    used = sorted(referenced_tables(tree))
    owners = [t.name for t in schema.tables if t.column(name) is not None]
    misplaced = _misqualified(name, tree, schema)
    if misplaced:
        return misplaced
    msg = f"column '{name}' does not exist in the table(s) used ({', '.join(used)})"
    if owners:
        msg += f"; it is a column of: {', '.join(owners)}"
        missing = [o for o in owners if o.lower() not in {u.lower() for u in used}]
        if missing:
            msg += f" (join {missing[0]})"
        else:  # the owner is in the query, but in another scope: "not in the tables used" read as a contradiction
            stray = _unknown_qualifier(name, tree)
            if stray:
                return stray
            return (f"column '{name}' of {owners[0]} is used where {owners[0]} is not in FROM (another SELECT, a "
                    f"UNION branch, or outside a subquery that does not select it); select {name} inside it, or "
                    f"use it only where {owners[0]} is in FROM")
    else:
        msg += "; no table has such a column"
        near = _near_columns(name, schema, used)
        if near:
            msg += f" (did you mean {' or '.join(near)}?)"
    return msg


def _unknown_qualifier(name: str, tree: exp.Expression) -> str | None:
    """``T1.event_name`` after the model renamed ``event AS T1`` to ``event AS event``: the qualifier
    names no table, alias, subquery or CTE of the query."""
    known = {t.alias_or_name.lower() for t in tree.find_all(exp.Table)}
    known |= {t.name.lower() for t in tree.find_all(exp.Table)}
    known |= {s.alias.lower() for s in tree.find_all(exp.Subquery) if s.alias}
    known |= {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    for col in tree.find_all(exp.Column):
        if col.name.lower() == name.lower() and col.table and col.table.lower() not in known:
            tables = ", ".join(sorted({t.sql() for t in tree.find_all(exp.Table)}))
            return (f"column {col.table}.{col.name}: the query has no table or alias {col.table!r} "
                    f"(its tables: {tables}); qualify {col.name} with one of them")
    return None


def _near_columns(name: str, schema: Schema, used: list[str]) -> list[str]:
    """Real columns spelled like ``name`` (``superpower_id`` -> ``hero_power.power_id``), closest
    first; for equally close names, those of the query's own tables first."""
    owners: dict[str, list[str]] = {}
    for t in schema.tables:
        for c in t.columns:
            owners.setdefault(c.name.lower(), []).append(f"{t.name}.{c.name}")
    close = difflib.get_close_matches(name.lower(), list(owners), n=2, cutoff=0.75)
    mine = {u.lower() for u in used}
    found = [q for c in close for q in sorted(owners[c], key=lambda q: q.split(".")[0].lower() not in mine)]
    return found[:2]
