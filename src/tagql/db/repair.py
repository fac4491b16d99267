"""Deterministic repair of the mistakes small models make most in SQL: misplaced columns and constants.

On BIRD dev, about half of the Qwen2.5-Coder-1.5B queries that fail validation name a real column
under the wrong table:

1. **Wrong alias**: ``T1.power_name`` where T1 is ``hero_power`` and ``superpower AS T3`` (which has
   ``power_name``) is in the same SELECT. When exactly one table of that SELECT has the column, the
   qualifier is rewritten.
2. **Missing join**: ``superhero.publisher_name`` with no ``publisher`` table in the SELECT. When
   exactly one table of the schema has the column and exactly one shortest foreign-key path (at most
   two hops, so a bridge table such as ``hero_power`` counts) leads to it from the SELECT's tables,
   those joins are added; the question's words break a tie between paths. When several tables have
   the column, the one strictly nearest by foreign keys is joined (``expense.link_to_event``: budget).

Anything ambiguous (two candidate tables, eye/hair colour keys the question does not tell apart) is
left alone: the validation error then goes back to the LLM. The column repairs only touch a query
that would otherwise be rejected; every repair is reported as a note, so a user sees what changed.

3. **Value spelling** (:func:`repair_values`, needs the data): ``element = 'Cl'`` where the column only
   holds ``'cl'``. A string constant compared with a column that does not contain it, but contains
   exactly one value equal to it up to case and surrounding spaces, becomes that value. Models write
   constants as the world spells them; the data often spells them otherwise.

4. **Lookups that can match several rows** (:func:`repair_scalar_subqueries`): ``x = (SELECT ...)``
   becomes ``x IN (SELECT ...)`` unless the subquery yields one row by construction.
5. **A column compared with itself** (:func:`self_comparisons`): in a JOIN's ON clause (or the WHERE of
   tables listed with commas) it becomes the join it was meant to be, when the column names one
   foreign key (or one namesake column) to the other side, or the joined table and the tables before it
   share exactly one foreign-key link (:func:`repair_self_joins`); anywhere else it is reported, not
   repaired (nothing says which column was meant), and the error goes back to the LLM.
6. **Conditional counts that count every row** (:func:`repair_conditional_counts`):
   ``COUNT(CASE WHEN c THEN 1 ELSE 0 END)`` counts the zeros too; it becomes ``SUM(...)``.
7. **A constant under the wrong column** (:func:`misplaced_values`): ``zip_code.state = 'CA'`` where
   a column of the same table stores 'CA' (``short_state``) is rewritten to it; ``connected.atom_id =
   'TR006'`` where another table stores it is reported with where the data has it, and the error goes
   back to the LLM.
8. **A table or column spelt another way** (:func:`repair_table_spelling`,
   :func:`repair_column_spelling`): ``constructor_results`` is
   ``constructorResults`` (``first_name`` is ``FirstName``) when exactly one table (one column of the
   query's tables) has that name up to case and underscores; a table named after the key that points to
   it (``eye_colour`` for ``colour``) or after the two tables it links (``superhero_power`` for
   ``hero_power``) becomes that table (:func:`repair_unknown_tables`); a joined table named after a column
   of another table of the query is dropped and its columns read there
   (:func:`repair_tables_named_after_columns`); a column named after a key
   (``eye_colour`` on superhero, which has ``eye_colour_id``) reads the label of the row the key points to
   (``colour.colour``, joined on that key: :func:`repair_key_named_columns`).
9. **A ranking by an aggregate without groups** (:func:`repair_missing_group_by`): ``SELECT name ...
   ORDER BY COUNT(*) DESC`` groups by what it selects.
10. **A sibling table taken for another** (:func:`_swap_sibling`, part of :func:`repair_columns`):
   ``drivers JOIN constructorStandings AS T2 ON T1.driverId = T2.driverId ... T2.wins`` reads a
   ``driverId`` that table lacks; the one table named alike that has every column the query reads of it
   (``driverStandings``) takes its place.
11. **A subquery's aggregate over a column its tables lack** (part of :func:`repair_columns`):
   ``(SELECT AVG(product_price) FROM products)`` once the outer query joined the table that has
   ``product_price``: SQLite reads the outer column and rejects the aggregate ("misuse of aggregate"), so the
   subquery gets its own join.
12. **A join to a table named alike to the one its key reaches** (:func:`repair_unlinked_sibling_joins`):
   ``Policies JOIN other__Customers ON Customer_ID`` where no key links them and the ``Customers`` table
   that ``Policies.Customer_ID`` keys to has the columns the query reads: that table is joined instead.
The repairs that read the question's words (the counted entity, length and calendar-month orderings,
listed values, word-count bounds) live with query synthesis in :mod:`tagql.text2sql.repair`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlglot import exp

from tagql.db.safety import equated_namesake
from tagql.db.schema import Column, KeyLink, Schema, Table, holds_text, key_links
from tagql.errors import TagqlError
from tagql.text import LETTERS, stems
from tagql.text.stem import stem

if TYPE_CHECKING:
    from tagql.db.connection import Database


@dataclass
class _Source:
    """A real table read directly by one SELECT (``alias`` is how the query names it)."""

    alias: str
    table: Table


def _squashed(name: str) -> str:
    return re.sub(r"[\W_]+", "", name).lower()


def _key_stem(column: str) -> str:
    """What a key column is named after: ``eye_colour_id`` -> ``eyecolour`` (squashed, without ``_id``)."""
    return _squashed(re.sub(r"_?id$", "", column, flags=re.I))


def _name_words(name: str) -> list[str]:
    """The words of a name written with underscores or in camel case: ``superhero_power``, ``eyeColour``."""
    return [w for w in re.split(r"_+|(?<=[a-z])(?=[A-Z])", name) if w]


def table_node(name: str, alias: str) -> exp.Table:
    """A table reference to join: ``name``, aliased when ``alias`` differs from it."""
    node = exp.Table(this=exp.to_identifier(name))
    if alias != name:
        node.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    return node


def _join_equalities(select: exp.Select) -> Iterator[exp.EQ]:
    """The column = column equalities in the ON clauses of ``select``'s joins."""
    for join in select.args.get("joins") or []:
        on = join.args.get("on")
        for eq in on.find_all(exp.EQ) if on is not None else []:
            if isinstance(eq.this, exp.Column) and isinstance(eq.expression, exp.Column):
                yield eq


def repair_table_spelling(tree: exp.Expression, schema: Schema) -> list[str]:
    """``constructor_results`` where the table is ``constructorResults``: a table name that is no table,
    but is exactly one table's name once case, underscores and spaces are ignored, is respelt. Told
    "did you mean constructorResults?", the 1.5B model wrote the same plan again (pool dev question 440).
    Failing that (no table at all, not two), the name's last word in another number: ``tracks`` for
    ``Track``, ``chinook_1__tracks`` for ``chinook_1__Track`` (the 1.5B model on a merged Spider database,
    three times in a row: Spider train)."""
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    by_squashed: dict[str, list[str]] = {}
    by_stem: dict[str, list[str]] = {}
    for name in schema.table_names:
        by_squashed.setdefault(_squashed(name), []).append(name)
        by_stem.setdefault(stem(_squashed(name)), []).append(name)
    notes: list[str] = []
    for table in tree.find_all(exp.Table):
        name = table.name
        if not name or name.lower() in ctes or schema.table(name) is not None:
            continue
        found = by_squashed.get(_squashed(name)) or by_stem.get(stem(_squashed(name)), [])
        if len(found) == 1:
            table.set("this", exp.to_identifier(found[0]))
            notes.append(f"table {name} -> {found[0]}")
    return notes


def repair_unknown_tables(tree: exp.Expression, schema: Schema) -> list[str]:
    """A table that is no table, named after what it stands for, becomes that table when exactly one fits:

    - **after the key that points to it**: ``superhero JOIN eye_colour ON T1.eye_colour_id = T2.id``, where
      ``superhero.eye_colour_id`` is a foreign key to ``colour``: the table is ``colour`` (a table of the
      same SELECT has a single-column foreign key named like the table, with or without ``_id``);
    - **after the two tables it links**: ``superhero_power`` (or ``superhero_attribute``) where the schema
      links ``superhero`` and ``superpower`` through ``hero_power``: the name splits into two parts that
      each name a table (exactly, else as the end or start of a table's name), and exactly one other table
      has a foreign key to each.

    Told "did you mean superpower?", the 1.5B model wrote ``superhero_power`` again (BIRD train 718, 780).
    Run after :func:`repair_table_spelling`; anything with no single fit is left to validation."""
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    notes: list[str] = []
    for table in list(tree.find_all(exp.Table)):
        name = table.name
        if not name or name.lower() in ctes or schema.table(name) is not None:
            continue
        meant = _pointed_to(table, schema) or _junction_named(name, schema)
        if meant is not None:
            table.set("this", exp.to_identifier(meant))
            notes.append(f"table {name} -> {meant}")
    return notes


def repair_tables_named_after_columns(tree: exp.Expression, schema: Schema) -> list[str]:
    """``member AS T1 JOIN t_shirt_size AS T2 ON T1.t_shirt_size = T2.t_shirt_size WHERE T2.t_shirt_size =
    'X-Large'``: a joined table that is no table, named after a column of exactly one other table of its
    SELECT, is a lookup table the model invented for that column. Its join (with its ON) is dropped and its
    columns are read from that table, when that table has every one of them (``T2.department`` ->
    ``T1.department``). Told "unknown table 'department' (major.department is a column)", the 1.5B model
    joined it again (BIRD train 1425, 1445). Run after :func:`repair_unknown_tables`."""
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    notes: list[str] = []
    for table in list(tree.find_all(exp.Table)):
        join, name = table.parent, table.name
        if (not name or name.lower() in ctes or schema.table(name) is not None or not isinstance(join, exp.Join)
                or not isinstance(join.parent, exp.Select)):
            continue
        select = join.parent
        from_ = select.args.get("from_") or select.args.get("from")
        nodes = [from_.this if from_ is not None else None, *[j.this for j in select.args.get("joins") or []]]
        others = [(n.alias_or_name, schema.table(n.name)) for n in nodes if n is not table]
        if any(not isinstance(n, exp.Table) for n in nodes) or any(t is None for _, t in others):
            continue
        owners = [(alias, t) for alias, t in others if any(_squashed(c.name) == _squashed(name) for c in t.columns)]
        if len(owners) != 1:
            continue
        alias, owner = owners[0]
        mine = table.alias_or_name.lower()
        refs = [c for c in select.find_all(exp.Column) if c.table.lower() == mine and c.find_ancestor(exp.Join) is not join]
        if any(owner.column(c.name) is None for c in refs):
            continue
        for c in refs:
            c.set("table", exp.to_identifier(alias))
        join.pop()
        notes.append(f"dropped the join of {name}, a column of {owner.name}; {table.alias_or_name}.* -> {alias}.*")
    return notes


def _pointed_to(table: exp.Table, schema: Schema) -> str | None:
    """The table a key column of the same SELECT references, when the key is named like ``table``."""
    select = table.find_ancestor(exp.Select)
    if select is None:
        return None
    wanted = _squashed(table.name)
    targets = set()
    for other in select.find_all(exp.Table):
        known = schema.table(other.name) if other is not table and other.find_ancestor(exp.Select) is select else None
        for fk in known.foreign_keys if known else []:
            if len(fk.columns) == 1 and _key_stem(fk.columns[0]) == wanted:
                ref = schema.table(fk.ref_table)
                if ref is not None:
                    targets.add(ref.name)
    return targets.pop() if len(targets) == 1 else None


def _junction_named(name: str, schema: Schema) -> str | None:
    """The one table with foreign keys to both tables that the two parts of ``name`` name."""
    words = _name_words(name)

    def named(part: str) -> set[str]:
        exact = {t.name.lower() for t in schema.tables if _squashed(t.name) == part}
        if exact or len(part) < 4:  # "t" of t_shirt is the end of too many names to mean one
            return exact
        return {t.name.lower() for t in schema.tables if _squashed(t.name).endswith(part) or _squashed(t.name).startswith(part)}

    found = set()
    for cut in range(1, len(words)):
        left, right = named(_squashed("".join(words[:cut]))), named(_squashed("".join(words[cut:])))
        if not left or not right:
            continue
        for t in schema.tables:
            me = t.name.lower()
            refs = {fk.ref_table.lower() for fk in t.foreign_keys} - {me}
            ends_l, ends_r = refs & (left - {me}), refs & (right - {me})
            if ends_l and ends_r and len(ends_l | ends_r) >= 2:
                found.add(t.name)
    return found.pop() if len(found) == 1 else None


# what a model appends to a column's name when it guesses the column holds a code or key of it
_KEY_SUFFIX = re.compile(r"_?(code|id|name|no|number)$", re.I)


def repair_column_spelling(tree: exp.Expression, schema: Schema) -> list[str]:
    """``first_name`` where the query's table has ``FirstName`` (pool dev question 245): a column no table
    of its SELECT has, but exactly one of them has once case and underscores are ignored (of the
    qualifier's table, when it is qualified), is respelt; a made-up fact (``country`` on a table without
    one) is not a misspelling. A qualified column its table lacks, named like one of that table's columns
    with a key suffix (``T1.CountryCode`` on chinook's ``Customer``, which has ``Country``: cross dev x21),
    is that column when no other table of the SELECT has the name either. A generic name (``name``,
    ``title``, ``country_name``) the table lacks is its naming column (:func:`_naming_column`:
    ``country.country`` on sakila, where the 1.5B model wrote ``country.name`` in three of five test-split
    plans). Run after :func:`repair_table_spelling`, which makes the tables known."""
    notes: list[str] = []
    for _select, sources, col in _unknown_columns(tree, schema):
        owners = [src for src in sources if not col.table or src.alias.lower() == col.table.lower()]
        found = [(src, c) for src in owners for c in src.table.columns if _squashed(c.name) == _squashed(col.name)]
        stem = _squashed(_KEY_SUFFIX.sub("", col.name))
        if not found and col.table and stem and stem != _squashed(col.name):
            found = [(src, c) for src in owners for c in src.table.columns if _squashed(c.name) == stem]
        if not found and len(owners) == 1:
            named = _naming_column(owners[0].table, col.name)
            found = [(owners[0], named)] if named is not None else []
        if len(found) == 1:
            before = col.sql()
            col.set("this", exp.to_identifier(found[0][1].name))
            notes.append(f"{before} -> {col.sql()}")
    return notes


_GENERIC_NAMES = {"name", "title"}


def _naming_column(table: Table, written: str) -> Column | None:
    """The one column of ``table`` meant by a generic name it lacks: ``name`` / ``title`` (or the table's name
    with either, ``country_name``) is the text column named like the table, singular or plural, with or
    without the generic word (``country.country``, ``countries.COUNTRY_NAME``), or the other generic word
    (``film.title`` for ``film.name``). None for any other name (a column the table does not store may be a
    fact, not a spelling) or when no single column fits."""
    noun = [stem(w.lower()) for w in _name_words(table.name)]

    def reads(name: str) -> list[str]:  # the name's word stems without the generic word
        return [stem(w.lower()) for w in _name_words(name) if w.lower() not in _GENERIC_NAMES]

    words = reads(written)
    if (words and words != noun) or _squashed(written) == _squashed(table.name):
        return None
    fits = [c for c in table.columns if holds_text(c) and reads(c.name) in (noun, [])]  # film.name: film.title
    return fits[0] if len(fits) == 1 else None


def _unknown_columns(tree: exp.Expression, schema: Schema) -> Iterator[tuple[exp.Select, list[_Source], exp.Column]]:
    """Each column that no table of its SELECT has (nor an output of it), with the SELECT and its tables; a
    qualified one only when its qualifier is one of those tables."""
    for select in list(tree.find_all(exp.Select)):
        sources = select_sources(select, schema)
        if not sources:
            continue
        outputs = {e.alias.lower() for e in select.expressions if e.alias}
        aliases = {s.alias.lower() for s in sources}
        for col in _own_columns(select):
            name = col.name
            if (not name or isinstance(col.this, exp.Star) or name.lower() in outputs
                    or (col.table and col.table.lower() not in aliases)
                    or any(s.table.column(name) is not None for s in sources)):
                continue
            yield select, sources, col


def repair_key_named_columns(tree: exp.Expression, schema: Schema) -> list[str]:
    """``SELECT eye_colour FROM superhero`` where ``superhero.eye_colour_id`` is a foreign key to ``colour``:
    a column that no table of its SELECT has, named like a single-column foreign key of exactly one of them
    (``eye_colour`` ~ ``eye_colour_id``), means the referenced row's label. It becomes the referenced
    table's label column (named like the column's last word or like the table, else its only text column
    that is no key): read from the SELECT's join of that table on that key when there is one
    (``T2.hair_colour`` with ``colour AS T2 ON T1.hair_colour_id = T2.id`` -> ``T2.colour``), else from a new
    join. Told "did you mean superhero.eye_colour_id or colour.colour?", the 1.5B model wrote
    ``eye_colour`` again (BIRD train 770, 783). Run after :func:`repair_column_spelling`."""
    notes: list[str] = []
    for select, sources, col in _unknown_columns(tree, schema):
        name = col.name
        if _outer_has(select, schema, name, None):
            continue
        keys = [(s, fk) for s in sources for fk in s.table.foreign_keys
                if len(fk.columns) == 1 and len(fk.ref_columns) == 1
                and _key_stem(fk.columns[0]) == _squashed(name)]
        if len(keys) != 1:
            continue
        holder, fk = keys[0]
        ref = schema.table(fk.ref_table)
        label = _label_column(ref, name) if ref is not None else None
        if ref is None or label is None:
            continue
        joined = _joined_on(select, sources, holder, fk.columns[0], ref, fk.ref_columns[0])
        wrong = col.sql()
        if joined is None:
            _qualify_bare_columns(select, sources)
            alias = _new_alias(sources, ref.name)
            node = table_node(ref.name, alias)
            select.join(node, on=exp.EQ(this=exp.column(fk.columns[0], table=holder.alias),
                                        expression=exp.column(fk.ref_columns[0], table=alias)), copy=False)
            joined = _Source(alias, ref)
            sources.append(joined)
            how = f" (joined {ref.name} on {holder.table.name}.{fk.columns[0]})"
        else:
            how = ""
        col.set("this", exp.to_identifier(label))
        col.set("table", exp.to_identifier(joined.alias))
        notes.append(f"{wrong} -> {col.sql()}{how}")
    return notes


def _label_column(table: Table, meant: str) -> str | None:
    """The column of ``table`` that names its rows, for a column called ``meant`` (``eye_colour``): the one
    named like ``meant``'s last word or like the table (``colour.colour``), else its only text column that
    is neither a key nor a primary key."""
    words = _name_words(meant)
    for wanted in (_squashed(words[-1]) if words else "", _squashed(table.name)):
        named = [c.name for c in table.columns if wanted and _squashed(c.name) == wanted]
        if len(named) == 1:
            return named[0]
    keys = {c.lower() for fk in table.foreign_keys for c in fk.columns}
    text = [c.name for c in table.columns if holds_text(c) and not c.primary_key and c.name.lower() not in keys]
    return text[0] if len(text) == 1 else None


def _joined_on(select: exp.Select, sources: list[_Source], holder: _Source, key: str, ref: Table,
               ref_key: str) -> _Source | None:
    """The source of ``select`` that is ``ref`` joined on ``holder.key = ref.ref_key`` (either way round)."""
    for eq in _join_equalities(select):
        sides = [eq.this, eq.expression]
        for mine, theirs in (sides, sides[::-1]):
            if (mine.table.lower() == holder.alias.lower() and mine.name.lower() == key.lower()
                    and theirs.name.lower() == ref_key.lower()):
                found = [s for s in sources if s.alias.lower() == theirs.table.lower()
                         and s.table.name.lower() == ref.name.lower()]
                if found:
                    return found[0]
    return None


def repair_columns(tree: exp.Expression, schema: Schema, question: str = "") -> list[str]:
    """Fix misplaced column references in ``tree`` in place; return one note per repair.

    ``question`` (optional) breaks ties between join paths by the words it mentions."""
    notes: list[str] = []
    for select in list(tree.find_all(exp.Select)):
        notes += _repair_select(select, schema, question)
    return notes


def select_sources(select: exp.Select, schema: Schema) -> list[_Source] | None:
    """The SELECT's own tables, or None when it reads something we cannot reason about (a subquery,
    a CTE, a table function)."""
    nodes = _source_nodes(select)
    if not nodes:
        return None
    ctes = {c.alias_or_name.lower() for c in select.root().find_all(exp.CTE)}
    out = []
    for node in nodes:
        if not isinstance(node, exp.Table) or node.name.lower() in ctes:
            return None
        table = schema.table(node.name)
        if table is None:
            return None
        out.append(_Source(node.alias_or_name, table))
    return out


def _selects_with_sources(tree: exp.Expression, schema: Schema) -> Iterator[tuple[exp.Select, list[_Source], list]]:
    """Each SELECT of ``tree`` that reads known tables only: (it, its sources, its JOIN nodes)."""
    for select in list(tree.find_all(exp.Select)):
        sources = select_sources(select, schema)
        if sources is not None:
            yield select, sources, select.args.get("joins") or []


def _own_columns(select: exp.Select) -> list[exp.Column]:
    """Columns whose nearest enclosing SELECT is ``select`` (not those of nested subqueries)."""
    return [c for c in select.find_all(exp.Column) if c.find_ancestor(exp.Select) is select]


def _repair_select(select: exp.Select, schema: Schema, question: str) -> list[str]:
    sources = select_sources(select, schema)
    if not sources:
        return []
    by_alias = {s.alias.lower(): s for s in sources}
    output_names = {a.alias.lower() for a in select.expressions if isinstance(a, exp.Alias)}
    notes: list[str] = []
    for col in _own_columns(select):
        name = col.name
        if not name or isinstance(col.this, exp.Star):
            continue
        qualifier = col.table
        if qualifier:
            source = by_alias.get(qualifier.lower())
            if source is not None and source.table.column(name) is not None:
                continue
            if source is None and _outer_has(select, schema, name, qualifier):
                continue  # a correlated reference to an enclosing query
        elif name.lower() in output_names or any(s.table.column(name) for s in sources):
            continue  # resolvable (or ambiguous, which the database reports precisely)
        elif _outer_has(select, schema, name, None) and not _aggregated_by(col, select):
            continue  # a correlated reference (but an aggregate of this SELECT over an outer column is
            # "misuse of aggregate": ``(SELECT AVG(height_cm) FROM hero_power)`` once the outer query joined
            # superhero for its own height_cm, so the subquery gets the join too)
        having = [s for s in sources if s.table.column(name) is not None]
        wrong = f"{qualifier}.{name}" if qualifier else name
        if len(having) == 1:
            if qualifier and equated_namesake(col) == having[0].alias.lower():
                # T1.k = T2.k where T1 lacks k: re-qualified, it would read T2.k = T2.k (always true) and the
                # model would be told of a condition it never wrote. When T2.k is a key to T1's table, T1's
                # referenced column is meant; else the one table that has k and a foreign key to T1 is joined
                # between them, else validation names the missing key
                referenced = _referenced_by(having[0].table, name, by_alias[qualifier.lower()].table)
                if referenced is not None:
                    col.set("this", exp.to_identifier(referenced))
                    notes.append(f"{wrong} -> {qualifier}.{referenced} (what {having[0].alias}.{name} references)")
                    continue
                rejoined = _rejoin(select, sources, col, wrong, by_alias[qualifier.lower()], having[0], schema)
                if rejoined is not None:
                    by_alias = {s.alias.lower(): s for s in sources}
                    notes.append(rejoined)
                    continue
                path = _join_by_key_path(select, sources, col, by_alias[qualifier.lower()], having[0], schema)
                if path is not None:
                    by_alias.update((s.alias.lower(), s) for s in sources)
                    notes.append(path)
                continue
            if qualifier:  # an unqualified column that one table has is not an error
                col.set("table", exp.to_identifier(having[0].alias))
                notes.append(f"{wrong} -> {having[0].alias}.{name}")
            continue
        if having:
            if qualifier and _all_equated(select, having, name):
                # T1.molecule_id where T2 (bond) and T3 (molecule) both have it and are joined on it: the same
                # value, so the first of them is meant as much as any
                col.set("table", exp.to_identifier(having[0].alias))
                notes.append(f"{wrong} -> {having[0].alias}.{name}")
            continue
        if qualifier and qualifier.lower() in by_alias:
            # T1.link_to_event = T2.event_id where T1 (expense) lacks the key: the one table with that key to
            # T2's column and a foreign key to T1 is joined between them (budget)
            partner = _compared_source(col, sources)
            rejoined = _rejoin(select, sources, col, wrong, by_alias[qualifier.lower()], partner, schema)
            if rejoined is not None:
                by_alias = {s.alias.lower(): s for s in sources}
                notes.append(rejoined)
                continue
        if not qualifier:
            _qualify_bare_columns(select, sources)  # before a join makes a bare `id` ambiguous
        before = len(sources)
        joined = _join_owner(select, sources, name, schema, question,
                             near=by_alias.get(qualifier.lower()) if qualifier else None)
        if joined is not None:
            col.set("table", exp.to_identifier(joined.alias))
            for s in sources[before:]:
                by_alias[s.alias.lower()] = s
            tables = ", ".join(s.table.name for s in sources[before:])
            notes.append(f"{wrong} -> {joined.alias}.{name} (joined {tables})")
    return notes


def _all_equated(select: exp.Select, having: list[_Source], name: str) -> bool:
    """Whether the JOIN conditions of ``select`` equate ``name`` across all of ``having`` (``T2.k = T3.k``),
    so that every one of them holds the same value in each joined row."""
    group = {having[0].alias.lower()}
    pairs = [(eq.this.table.lower(), eq.expression.table.lower()) for eq in _join_equalities(select)
             if eq.this.name.lower() == name.lower() == eq.expression.name.lower() and eq.find_ancestor(exp.Or) is None]
    grew = True
    while grew:
        grew = False
        for a, b in pairs:
            if (a in group) != (b in group):
                group |= {a, b}
                grew = True
    return {s.alias.lower() for s in having} <= group


def _aggregated_by(col: exp.Column, select: exp.Select) -> bool:
    """Whether ``col`` is the argument of an aggregate that ``select`` computes."""
    agg = col.find_ancestor(exp.AggFunc)
    return agg is not None and agg.find_ancestor(exp.Select) is select


def _outer_has(select: exp.Select, schema: Schema, column: str, qualifier: str | None) -> bool:
    """Whether an enclosing SELECT reads a table (named ``qualifier``, if given) that has ``column``."""
    outer = select.parent.find_ancestor(exp.Select) if select.parent else None
    while outer is not None:
        for s in select_sources(outer, schema) or []:
            if (qualifier is None or s.alias.lower() == qualifier.lower()) and s.table.column(column) is not None:
                return True
        outer = outer.parent.find_ancestor(exp.Select) if outer.parent else None
    return False


def _words(text: str) -> set[str]:
    return stems(text, LETTERS)


def _paths(schema: Schema, start: set[str], goal: str, max_hops: int = 2) -> list[list[KeyLink]]:
    """All shortest foreign-key paths from a table in ``start`` to ``goal`` (at most ``max_hops``)."""
    links = key_links(schema)
    frontier: list[list[KeyLink]] = [[]]
    for _ in range(max_hops):
        grown = []
        for path in frontier:
            here = {path[-1].b.lower()} if path else start
            seen = start | {link.b.lower() for link in path}
            for table in here:
                for link in links.get(table, []):
                    if link.b.lower() not in seen:
                        grown.append([*path, link])
        done = [p for p in grown if p[-1].b.lower() == goal.lower()]
        if done:
            return done
        frontier = grown
    return []


def _join_owner(
    select: exp.Select, sources: list[_Source], column: str, schema: Schema, hint: str,
    near: _Source | None = None,
) -> _Source | None:
    """Join the table that has ``column`` along the one shortest foreign-key path from the SELECT's
    tables (a bridge table such as hero_power included). When several tables have the column, the one
    nearest by foreign keys is taken if no other is as near (``expense`` + ``link_to_event``: budget is
    one hop, attendance two). Of several paths, those from ``near`` (the table the query qualified the
    column with: ``T3.Continent`` on hr's countries reaches world_1's country from countries, not from
    locations) are kept when there are any; then (eye, hair or skin colour) the question's words tell
    them apart when exactly one path's key columns are mentioned."""
    owners = [t for t in schema.tables if t.column(column) is not None]
    if not owners or any(s.table in owners for s in sources):
        return None
    start = {s.table.name.lower() for s in sources}
    reach = [(t, _paths(schema, start, t.name)) for t in owners]
    reach = [(t, p) for t, p in reach if p]
    if not reach:
        return None
    nearest = min(len(p[0]) for _, p in reach)
    reach = [(t, p) for t, p in reach if len(p[0]) == nearest]
    if len(reach) != 1:
        return None
    paths = reach[0][1]
    if len(paths) > 1:  # up to a shared parent and down to another of its children pairs rows that merely
        # share the parent (atom -> molecule -> bond: every atom with every bond of its molecule, the "chasm
        # trap"); a table that references both (connected) relates them row to row
        paths = [p for p in paths if not _through_a_parent(p)] or paths
    if len(paths) > 1 and near is not None:
        paths = [p for p in paths if p[0].a.lower() == near.table.name.lower()] or paths
    if len(paths) > 1 and hint:
        asked = _words(hint)
        scored = [(len(asked & _words(" ".join(c for link in p for c in link.a_cols + link.b_cols))), p)
                  for p in paths]
        best = max(n for n, _ in scored)
        paths = [p for n, p in scored if n == best] if best else paths
    if len(paths) > 1:  # the key named like the column it references (atom_id, not the second atom's atom_id2)
        plain = [p for p in paths if all(_lower(link.a_cols) == _lower(link.b_cols) for link in p)]
        paths = plain if len(plain) == 1 else paths
    if len(paths) != 1:
        return None
    alias_of = {s.table.name.lower(): s.alias for s in sources}
    added: _Source | None = None
    for link in paths[0]:
        left = alias_of[link.a.lower()]
        alias = _new_alias(sources, link.b)
        node = table_node(link.b, alias)
        select.join(node, on=_key_on(left, alias, link), copy=False)
        added = _Source(alias, schema.table(link.b))  # type: ignore[arg-type]
        sources.append(added)
        alias_of[link.b.lower()] = alias
    return added


def _rejoin(select: exp.Select, sources: list[_Source], col: exp.Column, wrong: str, lacking: _Source,
            other: _Source | None, schema: Schema) -> str | None:
    """The join repairs for ``col``, read of ``lacking`` that has no such column, where ``other`` has it (or
    is compared with it): a table joined between the two (:func:`_bridge`), else a sibling table in
    ``lacking``'s place (:func:`_swap_sibling`). Updates ``sources``; returns the note, or None."""
    bridged = _bridge(select, sources, col, lacking, other, schema) if other is not None else None
    if bridged is not None:
        return (f"{wrong} -> {bridged.alias}.{col.name} (joined {bridged.table.name} between "
                f"{other.table.name} and {lacking.table.name})")
    return _swap_sibling(select, sources, lacking, schema)


def _bridge(select: exp.Select, sources: list[_Source], col: exp.Column, lacking: _Source, other: _Source,
            schema: Schema) -> _Source | None:
    """``other.k = lacking.k`` in the ON of the later of the two tables' joins, where ``lacking`` has no ``k``:
    the one table that has ``k`` and a foreign key to or from ``lacking`` is joined between them
    (``atom JOIN bond ON atom.atom_id = bond.atom_id`` -> ``atom JOIN connected ON atom.atom_id =
    connected.atom_id JOIN bond ON connected.bond_id = bond.bond_id``; ``connected JOIN molecule ON
    connected.molecule_id = molecule.molecule_id`` -> ``connected JOIN bond ON connected.bond_id =
    bond.bond_id JOIN molecule ON bond.molecule_id = molecule.molecule_id``). Of several such tables, the one
    that also has the other columns the query reads from ``lacking`` and it lacks (``T1.bond_type`` on
    connected: bond) when exactly one does. None when there is no such join, or no single such table."""
    joins = select.args.get("joins") or []
    later = lacking if sources.index(lacking) > sources.index(other) else other
    mine = [j for j in joins if j.this.alias_or_name.lower() == later.alias.lower()]
    eq = col.parent
    if len(mine) != 1 or not isinstance(eq, exp.EQ) or eq.find_ancestor(exp.Join) is not mine[0]:
        return None
    name = col.name
    used = {s.table.name.lower() for s in sources}
    partner = eq.expression if eq.this is col else eq.this
    candidates = [(schema.table(link.b), link) for link in key_links(schema).get(lacking.table.name.lower(), [])]
    candidates = [(t, link) for t, link in candidates
                  if t is not None and t.name.lower() not in used and t.column(name) is not None
                  and (not isinstance(partner, exp.Column) or partner.name.lower() == name.lower()
                       or _referenced_by(t, name, other.table) == partner.name)]
    if len(candidates) > 1:
        wanted = {c.name for c in select.find_all(exp.Column) if c.table.lower() == lacking.alias.lower()
                  and c.name.lower() != name.lower() and lacking.table.column(c.name) is None}
        fits = [(t, link) for t, link in candidates if wanted and all(t.column(w) is not None for w in wanted)]
        candidates = fits or candidates
    if len(candidates) != 1:
        return None
    bridge, link = candidates[0]
    alias = _new_alias(sources, bridge.name)
    col.set("table", exp.to_identifier(alias))
    on = exp.and_(*[exp.EQ(this=exp.column(b, table=alias), expression=exp.column(a, table=lacking.alias))
                    for a, b in zip(link.a_cols, link.b_cols, strict=True)])  # the bridge's side first
    node = table_node(bridge.name, alias)
    added = _Source(alias, bridge)
    if later is lacking:  # the bridge takes the old ON (now reaching it); lacking joins the bridge by its link
        old_on = mine[0].args.get("on")
        mine[0].set("on", on)
        joins.insert(joins.index(mine[0]), exp.Join(this=node, on=old_on))
    else:  # the bridge joins lacking by its link, just before other, whose ON now reaches the bridge
        joins.insert(joins.index(mine[0]), exp.Join(this=node, on=on))
    select.set("joins", joins)  # parents the new JOIN (a list insert alone leaves it parentless)
    sources.insert(sources.index(later), added)
    return added


def _swap_sibling(select: exp.Select, sources: list[_Source], lacking: _Source, schema: Schema) -> str | None:
    """``lacking`` read for columns it does not have, where exactly one other table of the schema has every
    column the SELECT reads of it: that table was meant, a sibling of the same shape
    (``drivers JOIN constructorStandings AS T2 ON T1.driverId = T2.driverId ... ORDER BY T2.wins`` ->
    ``driverStandings AS T2``: it has driverId and wins, constructorStandings only wins). Needs two or more
    columns read, at least one of which ``lacking`` has (the shape it was taken for), and a word of the name
    in common (``...Standings``: a sibling, not any table that happens to have an ``id`` and a ``name``).
    Returns the note, or None when nothing changed."""
    refs = _source_references(select, lacking.alias)
    read = list(dict.fromkeys(c.name for c in refs if c.name))
    missing = [c for c in read if lacking.table.column(c) is None]
    if len(read) < 2 or not missing or len(missing) == len(read):
        return None
    used = {s.table.name.lower() for s in sources}
    words = {w.lower() for w in _name_words(lacking.table.name)}
    fits = [t for t in schema.tables if t.name.lower() not in used and all(t.column(c) is not None for c in read)
            and words & {w.lower() for w in _name_words(t.name)}]
    if len(fits) != 1:
        return None
    meant = fits[0]
    sources[sources.index(lacking)] = _put_table(select, lacking, meant, refs)
    return (f"{lacking.table.name} -> {meant.name} ({lacking.table.name} has no {', '.join(missing)}; "
            f"{meant.name} has every column the query reads of it: {', '.join(read)})")


def _put_table(select: exp.Select, old: _Source, meant: Table, refs: list[exp.Column]) -> _Source:
    """``meant`` read in ``old``'s place in ``select``: its table node renamed and, when the node had no
    alias, the columns of ``refs`` that were qualified by the old table's name qualified by the new one.
    Returns the new source."""
    node = next(n for n in _source_nodes(select)
                if isinstance(n, exp.Table) and n.alias_or_name.lower() == old.alias.lower())
    node.set("this", exp.to_identifier(meant.name))
    if not node.alias:
        for c in refs:
            if c.table:
                c.set("table", exp.to_identifier(meant.name))
    return _Source(node.alias_or_name, meant)


def _name_stems(name: str) -> set[str]:
    """The stems of a name's words (``cre_Doc_Tracking_DB__Employees`` -> cre, doc, track, db, employe): two
    tables named alike share one."""
    return {stem(w.lower()) for w in _name_words(name)}


def _source_references(select: exp.Select, alias: str) -> list[exp.Column]:
    """The columns that read ``select``'s source ``alias``: its own, and those of its subqueries (correlated)
    that no source of theirs, or of a SELECT between, names so."""
    out = []
    for c in select.find_all(exp.Column):
        if c.table.lower() != alias.lower():
            continue
        scope = c.find_ancestor(exp.Select)
        while scope is not None and scope is not select and not any(
                isinstance(n, exp.Table) and n.alias_or_name.lower() == alias.lower() for n in _source_nodes(scope)):
            scope = scope.parent.find_ancestor(exp.Select) if scope.parent is not None else None
        if scope is select:
            out.append(c)
    return out


def _columns_reading(select: exp.Select, sources: list[_Source], source: _Source) -> list[exp.Column]:
    """The columns that read ``source`` of ``select``: qualified by its alias (in the SELECT or a correlated
    subquery, :func:`_source_references`), or unqualified in the SELECT itself where only it has the column."""
    bare = [c for c in _own_columns(select) if not c.table and c.name
            and (o := _owner(c, sources)) is not None and o.alias.lower() == source.alias.lower()]
    return _source_references(select, source.alias) + bare


def _source_nodes(select: exp.Select) -> list[exp.Expression]:
    """What ``select`` reads from: its FROM and each JOIN's table (or subquery)."""
    from_ = select.args.get("from_") or select.args.get("from")
    return [from_.this, *[j.this for j in select.args.get("joins") or []]] if from_ is not None else []


def _join_by_key_path(select: exp.Select, sources: list[_Source], col: exp.Column, lacking: _Source,
                      other: _Source, schema: Schema, max_hops: int = 3) -> str | None:
    """``lacking.k = other.k`` as a JOIN's whole condition, where ``lacking`` has no ``k`` and no one table
    bridges them on ``k`` (:func:`_bridge`): the condition becomes the one shortest key path between the two
    tables, declared or implied keys (hr_1's "departments located in European countries" written
    ``departments JOIN countries ON departments.REGION_ID = countries.REGION_ID`` -> ``departments JOIN
    locations ON departments.LOCATION_ID = locations.LOCATION_ID JOIN countries ON locations.COUNTRY_ID =
    countries.COUNTRY_ID``: a region would pair each department with every country of it). Paths through a
    table the query already reads, or up to a shared parent and down again, are not taken. Returns the
    note, or None when nothing changed."""
    joins = select.args.get("joins") or []
    later, earlier = (lacking, other) if sources.index(lacking) > sources.index(other) else (other, lacking)
    mine = [j for j in joins if j.this.alias_or_name.lower() == later.alias.lower()]
    eq = col.parent
    if len(mine) != 1 or not isinstance(eq, exp.EQ) or mine[0].args.get("on") is not eq:
        return None
    used = {s.table.name.lower() for s in sources}
    paths = [p for p in _paths(schema, {earlier.table.name.lower()}, later.table.name, max_hops)
             if not any(link.b.lower() in used for link in p[:-1]) and not _through_a_parent(p)]
    if len(paths) != 1:
        return None
    before = eq.sql()
    alias_prev, added = earlier.alias, []
    for link in paths[0]:
        last = link is paths[0][-1]
        alias = later.alias if last else _new_alias(sources, link.b)
        on = _key_on(alias_prev, alias, link)
        if last:
            mine[0].set("on", on)
        else:
            joins.insert(joins.index(mine[0]), exp.Join(this=table_node(link.b, alias), on=on))
            sources.insert(sources.index(later), _Source(alias, schema.table(link.b)))  # type: ignore[arg-type]
            added.append(link.b)
        alias_prev = alias
    select.set("joins", joins)  # parents the new JOINs
    via = f" through {', '.join(added)}" if added else ""
    return (f"{before} -> {mine[0].args['on'].sql()} ({lacking.table.name} has no {col.name}; "
            f"joined by keys{via})")


def _key_on(a_alias: str, b_alias: str, link: KeyLink) -> exp.Expression:
    """``a_alias.<a_cols> = b_alias.<b_cols>``: the ON that joins a key link's ``b`` table to its ``a`` table."""
    return exp.and_(*[exp.EQ(this=exp.column(a, table=a_alias), expression=exp.column(b, table=b_alias))
                      for a, b in zip(link.a_cols, link.b_cols, strict=True)])


def _referenced_by(table: Table, key: str, target: Table) -> str | None:
    """The column of ``target`` that ``table.key`` references, when ``key`` is a one-column foreign key to it."""
    for fk in table.foreign_keys:
        if ([c.lower() for c in fk.columns] == [key.lower()] and fk.ref_table.lower() == target.name.lower()
                and len(fk.ref_columns) == 1 and target.column(fk.ref_columns[0]) is not None):
            return target.column(fk.ref_columns[0]).name  # type: ignore[union-attr]
    return None


def _compared_source(col: exp.Column, sources: list[_Source]) -> _Source | None:
    """In a JOIN's ``col = X.j``: the source X, when it is another table of the SELECT that has ``j``."""
    eq = col.parent
    if not isinstance(eq, exp.EQ) or eq.find_ancestor(exp.Join) is None:
        return None
    other = eq.expression if eq.this is col else eq.this
    if not isinstance(other, exp.Column) or not other.table:
        return None
    found = [s for s in sources if s.alias.lower() == other.table.lower() and s.table.column(other.name) is not None]
    return found[0] if found and found[0].alias.lower() != (col.table or "").lower() else None


def _through_a_parent(path: list[KeyLink]) -> bool:
    """Whether ``path`` goes up a foreign key and straight down another one (siblings joined by their parent)."""
    return any(a.up and not b.up for a, b in zip(path, path[1:]))


def _lower(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(n.lower() for n in names)


def _new_alias(sources: list[_Source], table: str) -> str:
    """``T<n>`` when the query uses T1, T2 ... style aliases, else the table's own name."""
    taken = {s.alias.lower() for s in sources}
    if all(s.alias.lower() == s.table.name.lower() for s in sources) and table.lower() not in taken:
        return table
    n = len(sources) + 1
    while f"t{n}" in taken:
        n += 1
    return f"T{n}"


def _qualify_bare_columns(select: exp.Select, sources: list[_Source]) -> None:
    """In a one-table SELECT about to get a join, bare columns get that table's name, so a column both
    tables have (``id``) does not become ambiguous."""
    if len(sources) != 1:
        return
    only = sources[0]
    for col in _own_columns(select):
        if not col.table and col.name and only.table.column(col.name) is not None:
            col.set("table", exp.to_identifier(only.alias))


def repair_values(tree: exp.Expression, db: Database, *, max_lookups: int = 16, timeout_s: float = 2.0) -> list[str]:
    """Respell string constants compared with a column (``=``, ``<>``, ``IN``) to the one stored value
    they match up to case and spaces; return one note per change. Each constant costs one indexed-or-
    scanned lookup under ``timeout_s``; lookups that fail or time out change nothing."""
    notes: list[str] = []
    budget = [max_lookups]
    for _node, column, owner, literals in _column_comparisons(tree, db.schema, (exp.EQ, exp.NEQ, exp.In)):
        for lit in literals:
            if budget[0] <= 0:
                return notes
            stored = _stored_spelling(db, owner.table.name, column.name, lit.this, budget, timeout_s)
            if stored is not None and stored != lit.this:
                lit.replace(exp.Literal.string(stored))
                notes.append(f"'{lit.this}' -> '{stored}' ({owner.table.name}.{column.name})")
    return notes


def _column_comparisons(
    tree: exp.Expression, schema: Schema, kinds: tuple[type[exp.Expression], ...],
) -> Iterator[tuple[exp.Expression, exp.Column, _Source, list[exp.Literal]]]:
    """Each SELECT's own string comparisons of the given ``kinds`` (:func:`compared_strings`) whose
    column belongs to exactly one of its tables: (node, column, that table, the string constants)."""
    for select in list(tree.find_all(exp.Select)):
        sources = select_sources(select, schema)
        if not sources:
            continue
        for node in list(select.find_all(*kinds)):
            if node.find_ancestor(exp.Select) is not select:
                continue
            column, literals = compared_strings(node)
            owner = _owner(column, sources) if column is not None else None
            if owner is not None:
                yield node, column, owner, literals


@dataclass
class Comparison:
    """A string comparison in a query: ``col = 'x'`` or ``col IN ('x', 'y')`` on a real table's column."""

    node: exp.Expression  # the EQ / IN node
    column: exp.Column
    table: str  # the table that owns the column
    values: list[str]
    stored: list[bool]  # whether the column holds each value (up to case and surrounding spaces)


def string_comparisons(tree: exp.Expression, db: Database, *, max_lookups: int = 16,
                       timeout_s: float = 2.0, like: bool = False) -> list[Comparison]:
    """Every ``=``/``IN`` string comparison with a column (and ``LIKE`` with ``like``), and whether the
    data holds its values (for ``LIKE``: whether any value matches the pattern)."""
    out: list[Comparison] = []
    budget = [max_lookups]
    kinds = (exp.EQ, exp.In, exp.Like) if like else (exp.EQ, exp.In)
    for node, column, owner, literals in _column_comparisons(tree, db.schema, kinds):
        if budget[0] <= 0:
            break
        values = [lit.this for lit in literals]
        if isinstance(node, exp.Like):
            stored = [_any_like(db, owner.table.name, column.name, values[0], budget, timeout_s)]
        else:
            stored = [_stored_spelling(db, owner.table.name, column.name, v, budget, timeout_s) is not None
                      for v in values]
        out.append(Comparison(node, column, owner.table.name, values, stored))
    return out


def compared_strings(node: exp.Expression) -> tuple[exp.Column | None, list[exp.Literal]]:
    """The column and the string constants of ``col = 'x'``, ``'x' = col``, ``col IN ('x', 'y')`` or
    ``col LIKE 'x%'``; ``(None, [])`` for anything else."""
    if isinstance(node, exp.In):
        values = node.expressions
        if isinstance(node.this, exp.Column) and values and all(is_string_literal(v) for v in values):
            return node.this, list(values)
        return None, []
    if isinstance(node, (exp.Like, exp.ILike)):
        if isinstance(node.this, exp.Column) and is_string_literal(node.expression):
            return node.this, [node.expression]
        return None, []
    left, right = node.this, node.expression
    if isinstance(left, exp.Column) and is_string_literal(right):
        return left, [right]
    if isinstance(right, exp.Column) and is_string_literal(left):
        return right, [left]
    return None, []


def is_string_literal(node: exp.Expression) -> bool:
    return isinstance(node, exp.Literal) and node.is_string


def _owner(column: exp.Column, sources: list[_Source]) -> _Source | None:
    if column.table:
        found = next((s for s in sources if s.alias.lower() == column.table.lower()), None)
        return found if found is not None and found.table.column(column.name) is not None else None
    having = [s for s in sources if s.table.column(column.name) is not None]
    return having[0] if len(having) == 1 else None


def _any_like(db: Database, table: str, column: str, pattern: str, budget: list[int], timeout_s: float) -> bool:
    """Does any value of the column match the LIKE ``pattern``? (True when the lookup fails: unknown.)"""
    col = exp.column(column, quoted=True)
    query = (exp.select("1").from_(exp.to_table(table, quoted=True))
             .where(exp.Like(this=col, expression=exp.Literal.string(pattern))).limit(1))
    budget[0] -= 1
    try:
        return bool(db.execute(query.sql(dialect=db.dialect), timeout_s=timeout_s, row_cap=1).rows)
    except TagqlError:
        return True


def _stored_spelling(db: Database, table: str, column: str, value: str, budget: list[int],
                     timeout_s: float) -> str | None:
    """``value`` if the column holds it, else the one stored value equal to it ignoring case and
    surrounding spaces, else None."""
    col = exp.column(column, quoted=True)
    src = exp.to_table(table, quoted=True)
    exact = exp.select("1").from_(src).where(exp.EQ(this=col, expression=exp.Literal.string(value))).limit(1)
    folded = exp.func("LOWER", exp.func("TRIM", col.copy()))
    loose = (exp.select(col.copy()).distinct().from_(src.copy())
             .where(exp.EQ(this=folded, expression=exp.Literal.string(value.strip().lower()))).limit(2))
    try:
        budget[0] -= 1
        if db.execute(exact.sql(dialect=db.dialect), timeout_s=timeout_s, row_cap=1).rows:
            return value
        budget[0] -= 1
        rows = db.execute(loose.sql(dialect=db.dialect), timeout_s=timeout_s, row_cap=2).rows
    except TagqlError:
        return None
    if len(rows) == 1 and isinstance(rows[0][0], str):
        return rows[0][0]
    return None


def misplaced_values(tree: exp.Expression, db: Database, *, max_columns: int = 48,
                     timeout_s: float = 1.0, repairs: list[str] | None = None) -> list[str]:
    """String constants compared with a column that does not hold them but that another column stores
    verbatim (``connected.atom_id = 'TR006'`` where 'TR006' is a ``molecule_id``): small models put an
    id under the column whose name looks closest. One line per constant, naming where the data has it,
    for the model to rewrite its query; [] when every constant is in its column or nowhere.

    With ``repairs`` (a list the notes go to), a comparison none of whose constants is in its column,
    and whose stored constants all sit in one other column of the *same* table, is rewritten in place
    (``zip_code.state = 'CA'`` -> ``zip_code.short_state = 'CA'``): no join changes, so nothing to ask.
    Failing that, a table named alike that stores them and has the query's other columns takes the
    table's place (:func:`_table_holding`)."""
    notes: list[str] = []
    budget = [16]
    for node, column, owner, literals in _column_comparisons(tree, db.schema, (exp.EQ, exp.In)):
        missing: list[str] = []
        for lit in literals:
            if budget[0] <= 0:
                return notes
            if _stored_spelling(db, owner.table.name, column.name, lit.this, budget, timeout_s) is None:
                missing.append(lit.this)
        if not missing:
            continue
        if repairs is not None and len(missing) == len(literals):
            sibling = _sibling_holding(db, owner.table, column.name, missing, timeout_s=timeout_s)
            if sibling is not None:
                before = column.sql()
                column.set("this", exp.to_identifier(sibling))
                repairs.append(f"{before} -> {column.sql()} (the data stores {missing[0]!r} there)")
                continue
            moved = _table_holding(node, column, owner, missing, db, timeout_s=timeout_s)
            if moved is not None:
                repairs.append(moved)
                continue
        for value in missing:
            where = columns_holding(db, value, max_columns=max_columns, timeout_s=timeout_s)
            if where:
                notes.append(f"'{value}' is not a value of {owner.table.name}.{column.name}; "
                             f"the data stores it in {', '.join(where)}")
    return notes


def _sibling_holding(db: Database, table: Table, column: str, values: list[str], *,
                     timeout_s: float) -> str | None:
    """The one other text column of ``table`` that stores some of ``values`` verbatim, and no other
    column of it stores any of them; None otherwise."""
    holding: set[str] = set()
    for other in table.columns:
        if other.name == column or not holds_text(other):
            continue
        col = exp.column(other.name, quoted=True)
        query = (exp.select("1").from_(exp.to_table(table.name, quoted=True))
                 .where(exp.In(this=col, expressions=[exp.Literal.string(v) for v in values])).limit(1))
        try:
            if db.execute(query.sql(dialect=db.dialect), timeout_s=timeout_s, row_cap=1).rows:
                holding.add(other.name)
        except TagqlError:
            return None
    return holding.pop() if len(holding) == 1 else None


def _table_holding(node: exp.Expression, column: exp.Column, owner: _Source, values: list[str], db: Database, *,
                   timeout_s: float) -> str | None:
    """``SELECT Employee_ID FROM employee_hire_evaluation__employee WHERE Name = 'Ebba'`` where no row has
    that name, and one other table named alike stores it (``cre_Doc_Tracking_DB__Employees.Employee_Name``)
    and has every other column the SELECT reads of the first: that table was meant (a database merging
    several holds an employee table of each). It takes the first one's place and the comparison reads its
    column. Needs all the constants in that one column of that one table, a shared word in the two names
    (up to number), a table the SELECT does not read yet and no reference to the first from a subquery.
    Returns the note, or None when nothing changed."""
    select = node.find_ancestor(exp.Select)
    sources = select_sources(select, db.schema) if select is not None else None
    if not sources or any(isinstance(e, exp.Star) or e.find(exp.Star) for e in select.expressions):
        return None
    holders = {tuple(columns_holding(db, v, timeout_s=timeout_s)) for v in values}
    if len(holders) != 1 or len(next(iter(holders))) != 1:
        return None  # each constant stored in the same one column, and nowhere else
    table_name, holding = next(iter(holders))[0].split(".", 1)
    meant = db.schema.table(table_name)
    if meant is None or any(s.table.name.lower() == meant.name.lower() for s in sources):
        return None
    if not _name_stems(owner.table.name) & _name_stems(meant.name):
        return None

    refs = _columns_reading(select, sources, owner)
    if any(c.find_ancestor(exp.Select) is not select for c in refs):
        return None  # a subquery reads it too
    compared = column.name.lower()
    if any(meant.column(c.name) is None for c in refs if c.name.lower() != compared):
        return None
    note = (f"{owner.table.name}.{column.name} -> {meant.name}.{holding} (the data stores {values[0]!r} there, "
            f"and {meant.name} has every column the query reads of {owner.table.name})")
    _put_table(select, owner, meant, refs)
    for c in refs:
        if c.name.lower() == compared:
            c.set("this", exp.to_identifier(holding))
    return note


def columns_holding(db: Database, value: str, *, max_columns: int = 48, timeout_s: float = 1.0) -> list[str]:
    """``table.column`` names (at most 3) of the text columns that store ``value`` exactly: from the
    database's value index when one is loaded (every indexed column: a merged database of 163 Spider
    databases has 4,022 columns, and 'Ebba' sat far past the first 48), else the first ``max_columns``
    text columns looked at, each lookup under ``timeout_s``."""
    if db.values is not None:
        hits = list(dict.fromkeys(f"{h.table}.{h.column}" for h in db.values.exact(value) if h.value == value))
        if hits:
            return hits[:3]
    found: list[str] = []
    looked = 0
    for table in db.schema.tables:
        for column in table.columns:
            if not holds_text(column):
                continue
            if looked >= max_columns or len(found) >= 3:
                return found
            looked += 1
            col = exp.column(column.name, quoted=True)
            query = (exp.select("1").from_(exp.to_table(table.name, quoted=True))
                     .where(exp.EQ(this=col, expression=exp.Literal.string(value))).limit(1))
            try:
                if db.execute(query.sql(dialect=db.dialect), timeout_s=timeout_s, row_cap=1).rows:
                    found.append(f"{table.name}.{column.name}")
            except TagqlError:
                continue
    return found


def similar_values(db: Database, table: str, column: str, value: str, *, limit: int = 3,
                   timeout_s: float = 2.0) -> list[str]:
    """Up to ``limit`` stored values of the column that contain ``value`` (``'Marvel'`` ->
    ``'Marvel Comics'``), shortest first (then in order): what a reviewer probably meant. [] when none or on error."""
    col = exp.column(column, quoted=True)
    pattern = "%" + value.strip().lower().replace("%", "").replace("_", "") + "%"
    query = (exp.select(col.copy()).distinct().from_(exp.to_table(table, quoted=True))
             .where(exp.Like(this=exp.func("LOWER", col.copy()), expression=exp.Literal.string(pattern)))
             .order_by(exp.func("LENGTH", col.copy()), col.copy()).limit(limit))
    try:
        rows = db.execute(query.sql(dialect=db.dialect), timeout_s=timeout_s, row_cap=limit).rows
    except TagqlError:
        return []
    return [r[0] for r in rows if isinstance(r[0], str)]


def repair_scalar_subqueries(tree: exp.Expression) -> list[str]:
    """``col = (SELECT x FROM ... WHERE ...)`` -> ``col IN (SELECT ...)``: small models write ``=`` for a
    lookup that can match several rows (``atom_id = (SELECT atom_id FROM atom WHERE element = 'p')``);
    SQLite then compares with an arbitrary first row, a server raises an error. Left alone when the
    subquery yields one row by construction (an aggregate without GROUP BY, or LIMIT 1), where the two
    forms agree; otherwise ``IN`` gives the same answer for one row and the intended one for more."""
    notes: list[str] = []
    for eq in list(tree.find_all(exp.EQ)):
        left, right = eq.this, eq.expression
        if isinstance(left, exp.Subquery) and not isinstance(right, exp.Subquery):
            left, right = right, left
        if not isinstance(right, exp.Subquery) or not isinstance(right.this, exp.Select):
            continue
        if not isinstance(left, exp.Column) or _single_row(right.this):
            continue
        eq.replace(exp.In(this=left.copy(), query=right.copy()))
        notes.append(f"{left.sql()} = (SELECT ...) -> {left.sql()} IN (SELECT ...)")
    return notes


def _single_row(select: exp.Select) -> bool:
    limit = select.args.get("limit")
    if limit is not None and isinstance(limit.expression, exp.Literal) and limit.expression.this == "1":
        return True
    if select.args.get("group"):
        return False
    return all(any(True for _ in e.find_all(exp.AggFunc)) for e in select.expressions)


def repair_conditional_counts(tree: exp.Expression) -> list[str]:
    """``COUNT(CASE WHEN c THEN 1 ELSE 0 END)`` -> ``SUM(CASE WHEN c THEN 1 ELSE 0 END)``: COUNT counts
    every non-NULL value, so the ``ELSE 0`` rows are counted as well and the two counts a comparison
    question sets side by side come out equal. Only when every branch is the literal 1 or 0 (a
    ``THEN col`` or a missing ``ELSE``, which yields NULL, is a real count)."""
    notes: list[str] = []
    for count in list(tree.find_all(exp.Count)):
        case = count.this
        if not isinstance(case, exp.Case) or case.args.get("default") is None:
            continue
        branches = [i.args.get("true") for i in case.args.get("ifs") or []] + [case.args["default"]]
        if not branches or not all(isinstance(b, exp.Literal) and b.this in ("0", "1") for b in branches):
            continue
        if not any(b.this == "0" for b in branches):
            continue  # all ones: every row counts, as written
        new = exp.Sum(this=case.copy())
        notes.append(f"{count.sql()} -> {new.sql()}")
        count.replace(new)
    return notes


def repair_missing_group_by(tree: exp.Expression) -> list[str]:
    """``SELECT name FROM circuits JOIN races ... ORDER BY COUNT(*) DESC LIMIT 1`` (SQLite: "misuse of
    aggregate"): the rows are ranked by an aggregate that has no groups. When a SELECT without GROUP BY
    orders by an aggregate of its own while its select list has none, the groups are its selected
    columns (``GROUP BY name``): the ranking the query describes. Pool dev question 281, written twice."""
    notes: list[str] = []
    for select in list(tree.find_all(exp.Select)):
        order = select.args.get("order")
        if order is None or select.args.get("group") is not None:
            continue
        own = [a for a in order.find_all(exp.AggFunc) if a.find_ancestor(exp.Select) is select]
        if not own or any(isinstance(e, exp.Star) or any(a.find_ancestor(exp.Select) is select
                                                         for a in e.find_all(exp.AggFunc))
                          for e in select.expressions):
            continue
        keys = [e.this.copy() if isinstance(e, exp.Alias) else e.copy() for e in select.expressions]
        if not keys or not all(k.find(exp.Column) for k in keys):
            continue
        select.set("group", exp.Group(expressions=keys))
        notes.append(f"GROUP BY {', '.join(k.sql() for k in keys)} (ranked by {own[0].sql()}, which needs groups)")
    return notes


def repair_self_joins(tree: exp.Expression, schema: Schema) -> list[str]:
    """``JOIN zip_code AS T2 ON T2.zip = T2.zip`` -> ``ON T1.zip = T2.zip_code``: a join condition that
    compares a column with itself (always true: a cross product) becomes the join it was meant to be.

    The column names the link: ``T1.eye_colour_id = T1.eye_colour_id`` joining ``colour`` is the foreign
    key from T1's ``eye_colour_id`` (not its hair or skin colour keys), and ``T1.driverId = T1.driverId``
    joining ``results`` after ``races`` is the ``driverId`` key, not the ``raceId`` one. Partners are the
    joined table for a column of an earlier table, the earlier tables for a column of the joined table.
    When exactly one partner is linked by a foreign key on that column, the condition becomes that key;
    when none is, one partner with a column of the same name (a key nobody declared) gives ``T1.c =
    T2.c``; failing both, the one foreign-key link between the joined table and the tables before it.
    The same holds in WHERE for tables listed with commas (``FROM a AS T1, b AS T2 WHERE T1.x =
    T1.x``). Anything else is left alone, and :func:`self_comparisons` sends it back to the LLM."""
    notes: list[str] = []
    links = key_links(schema)
    for select, sources, joins in _selects_with_sources(tree, schema):
        for i, join in enumerate(joins):
            on = join.args.get("on")
            joined, before = sources[i + 1], sources[: i + 1]
            for eq in _own_self_comparisons(on, select):
                cond = _meant_join(eq.this, joined, before, links)
                if cond is None:  # the one key between the joined table and those before it
                    found = [(b, link) for link in links.get(joined.table.name.lower(), [])
                             for b in before if b.table.name.lower() == link.b.lower()]
                    cond = _link_condition(found[0][0], joined, found[0][1]) if len(found) == 1 else None
                if cond is not None:
                    cond = _earlier_first(cond, sources)
                    notes.append(f"{eq.sql()} -> {cond.sql()}")
                    eq.replace(cond)
        crossed = [sources[0]] + [sources[i + 1] for i, j in enumerate(joins)
                                  if j.args.get("on") is None and not j.args.get("using")]
        if len(crossed) < 2:
            continue
        for eq in _own_self_comparisons(select.args.get("where"), select):
            owner = _owner(eq.this, crossed)
            if owner is None:
                continue
            cond = _meant_join(eq.this, owner, [s for s in crossed if s is not owner], links)
            if cond is not None:
                cond = _earlier_first(cond, sources)
                notes.append(f"{eq.sql()} -> {cond.sql()}")
                eq.replace(cond)
    return notes


def repair_unlinked_sibling_joins(tree: exp.Expression, schema: Schema) -> list[str]:
    """``insurance_and_eClaims__Policies AS T1 JOIN insurance_policies__Customers AS T2 ON T1.Customer_ID =
    T2.Customer_ID``: the two tables share a column name but no key, while one other table named alike to
    the joined one (``insurance_and_eClaims__Customers``) is keyed to the earlier table on those columns
    and has every column the query reads of the joined one. That table was meant (a database merging
    several holds a Customers table of each); it takes the joined one's place. Only a JOIN whose ON is one
    column equality, and only when exactly one such table exists and the query does not read it yet."""
    notes: list[str] = []
    links = key_links(schema)
    for select, sources, joins in _selects_with_sources(tree, schema):
        for i, join in enumerate(joins):
            eq = join.args.get("on")
            joined = sources[i + 1]
            if not isinstance(eq, exp.EQ) or not all(isinstance(c, exp.Column) and c.table for c in (eq.this, eq.expression)):
                continue
            mine = next((c for c in (eq.this, eq.expression) if c.table.lower() == joined.alias.lower()), None)
            theirs = eq.expression if mine is eq.this else eq.this
            earlier = next((s for s in sources[: i + 1] if s.alias.lower() == theirs.table.lower()), None)
            if mine is None or earlier is None:
                continue

            def keyed(table: Table, column: str) -> bool:
                return any(link.b.lower() == table.name.lower() and [c.lower() for c in link.a_cols] == [theirs.name.lower()]
                           and [c.lower() for c in link.b_cols] == [column.lower()]
                           for link in links.get(earlier.table.name.lower(), []))

            if keyed(joined.table, mine.name):
                continue
            refs = _columns_reading(select, sources, joined)
            read = {c.name.lower() for c in refs}
            used = {s.table.name.lower() for s in sources}
            words = _name_stems(joined.table.name)
            fits = [t for t in schema.tables if t.name.lower() not in used and keyed(t, mine.name)
                    and all(t.column(c) is not None for c in read) and words & _name_stems(t.name)]
            if len(fits) != 1:
                continue
            meant = fits[0]
            sources[i + 1] = _put_table(select, joined, meant, refs)
            notes.append(f"{joined.table.name} -> {meant.name} (joined on {theirs.name}, which keys "
                         f"{earlier.table.name} to {meant.name}, not to {joined.table.name})")
    return notes


def _own_self_comparisons(node: exp.Expression | None, select: exp.Select) -> list[exp.EQ]:
    """``T.c = T.c`` conditions of ``node`` that belong to ``select`` itself (not to a subquery in it)."""
    if node is None:
        return []
    return [eq for eq in node.find_all(exp.EQ) if isinstance(eq.this, exp.Column) and eq.this.table
            and eq.this == eq.expression and eq.find_ancestor(exp.Select) is select]


def _link_condition(b: _Source, a: _Source, link: KeyLink) -> exp.Expression:
    """``b.<b_cols> = a.<a_cols>`` for a link seen from ``a``'s table to ``b``'s."""
    return exp.and_(*[exp.EQ(this=exp.column(bc, table=b.alias), expression=exp.column(ac, table=a.alias))
                      for ac, bc in zip(link.a_cols, link.b_cols, strict=True)])


def _meant_join(column: exp.Column, joined: _Source, before: list[_Source],
                links: dict[str, list[KeyLink]]) -> exp.Expression | None:
    """The join ``column = column`` meant (see :func:`repair_self_joins`), or None when it is not clear."""
    name = column.name.lower()
    owner = _owner(column, [joined, *before])
    if owner is None:
        return None
    partners = before if owner is joined else [joined]
    keyed = [(p, link) for p in partners for link in links.get(owner.table.name.lower(), [])
             if link.b.lower() == p.table.name.lower() and name in (c.lower() for c in link.a_cols)]
    if len(keyed) == 1:
        p, link = keyed[0]
        return _link_condition(p, owner, link)
    if keyed:
        return None
    namesakes = [p for p in partners if p.table.name.lower() != owner.table.name.lower()
                 and p.table.column(column.name) is not None]
    if len(namesakes) != 1:
        return None
    p = namesakes[0]
    return exp.EQ(this=exp.column(p.table.column(column.name).name, table=p.alias),  # type: ignore[union-attr]
                  expression=exp.column(column.name, table=owner.alias))


def _earlier_first(cond: exp.Expression, sources: list[_Source]) -> exp.Expression:
    """Each ``a = b`` of a join condition written with the table listed first on the left, as people
    (and the model) write joins."""
    order = {s.alias.lower(): i for i, s in enumerate(sources)}
    for eq in cond.find_all(exp.EQ):
        left, right = eq.this, eq.expression
        if isinstance(left, exp.Column) and isinstance(right, exp.Column) and \
                order.get(left.table.lower(), 0) > order.get(right.table.lower(), 0):
            eq.set("this", right)
            eq.set("expression", left)
    return cond


def self_comparisons(tree: exp.Expression) -> list[str]:
    """Conditions that compare a column with itself (``WHERE T2.molecule_id = T2.molecule_id``): always
    true, so the join they should express becomes a cross product. Small models write them when they
    lose track of aliases; nothing says which column was meant, so they go back to the LLM."""
    return [eq.sql() for eq in tree.find_all(exp.EQ)
            if isinstance(eq.this, exp.Column) and eq.this.table and eq.this == eq.expression]
