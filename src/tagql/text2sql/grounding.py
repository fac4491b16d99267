"""Repairs that hold a query to what the question asks: the entity it counts, the filters it states.

Two mistakes of small text-to-SQL models that return a confident wrong answer rather than an error:

1. **Counting the other side of a foreign key** (:func:`repair_counted_table`): "How many superheroes
   are published by DC Comics?" written as ``SELECT COUNT(DISTINCT T1.publisher_id) FROM superhero AS T1
   JOIN publisher AS T2 ... WHERE T2.publisher_name = 'DC Comics'`` answers 1 (one publisher), not 224.
   When the question opens with "how many <noun>", the noun names a table of the outer SELECT, and the
   SELECT's one ``COUNT(DISTINCT ...)`` counts a key that identifies *another* table's rows (a foreign key
   or another table's primary key), the count becomes ``COUNT(DISTINCT <that table>.<its primary key>)``.
2. **Filters the question never states** (:func:`repair_invented_filters`): "Events in March 2020?"
   written with ``AND type = 'Meeting'`` (the schema prompt shows 'Meeting' as an example value of
   ``event.type``). A top-level ``AND`` condition of the WHERE clause that compares a column with a
   string constant is dropped when the constant is one of the example values the prompt showed for that
   column and no word of it occurs in the question or its domain statements (up to a plural/verb
   ending). Constants the model took from anywhere else (a spelling it knows, a mapping such as
   "villains" -> 'Bad' that is not an example value) are left alone.

3. **A key output in place of what it names** (:func:`repair_projected_keys`): "What is Abomination's eye
   colour?" written as ``SELECT eye_colour_id ...`` answers 9; the output becomes ``colour.colour`` of the
   joined lookup row, unless the question asks for an id, number or code.
4. **A join nothing reads** (:func:`repair_unused_joins`): ``superhero JOIN hero_attribute ON ...`` in a
   percentage of female villains multiplies every hero by their attribute rows; a join of a table read
   nowhere but in its own ON condition, on a column that is not that table's primary key, and not named
   by the question, is removed.

5. **A column chosen by its name over its meaning** (:func:`repair_aggregated_column`): "Total amount spent
   on food?" written as ``SUM(budget.amount)`` (what was budgeted) becomes ``SUM(budget.spent)`` ("The
   total amount spent in the budgeted category"): a sibling numeric column named by a word of the
   question whose name and description share at least two more words with the question.

6. **A yes/no column the question names and the query ignores** (:func:`repair_ignored_flags`, needs the
   data): "countries whose official language is Spanish" written without ``countrylanguage.IsOfficial``
   (cross dev x01, x16) counts every country where Spanish is spoken. A column of a table the SELECT
   reads, named ``Is<Word>`` / ``Has<Word>`` / ``<word>_flag`` or ``<Word>`` alone, whose stored values are
   one true/false pair ('T'/'F', 'Y'/'N', 1/0, ...), whose word is a word of the question, not negated
   ("not official", "non-official", "unofficial"), and that the query reads nowhere, gets ``= <true value>``.

All rewrite the tree in place and return one note per change (the pipeline reports them). Measured by
replaying recorded SQL on the train/dev questions of bench/ask/data/bird_ask_split.json (docs/benchmarks.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from sqlglot import exp

from tagql.db.schema import Schema, Table, holds_number
from tagql.errors import TagqlError

if TYPE_CHECKING:
    from tagql.db.connection import Database

_HOW_MANY = re.compile(r"\s*how many ([a-z][\w-]*)", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9]+")


def _singular(word: str) -> set[str]:
    """The word and its plausible singular forms (no dictionary: heroes, cities, classes, molecules)."""
    w = word.lower()
    out = {w}
    if w.endswith("ies") and len(w) > 4:
        out.add(w[:-3] + "y")
    if w.endswith("es") and len(w) > 3:
        out.add(w[:-2])
    if w.endswith("s") and not w.endswith("ss") and len(w) > 2:
        out.add(w[:-1])
    return out


def _tables(select: exp.Select, schema: Schema) -> dict[str, Table] | None:
    """alias (as written) -> table of the SELECT's own FROM/JOIN tables; None if it reads anything else."""
    from_ = select.args.get("from_") or select.args.get("from")
    if from_ is None:
        return None
    out: dict[str, Table] = {}
    for node in [from_.this, *[j.this for j in select.args.get("joins") or []]]:
        if not isinstance(node, exp.Table):
            return None
        table = schema.table(node.name)
        if table is None:
            return None
        out[node.alias_or_name] = table
    return out


def _owner(column: exp.Column, tables: dict[str, Table]) -> Table | None:
    if column.table:
        return next((t for a, t in tables.items() if a.lower() == column.table.lower()), None)
    owners = [t for t in tables.values() if t.column(column.name)]
    return owners[0] if len(owners) == 1 else None


def _identifies(table: Table, column: str, schema: Schema) -> Table | None:
    """The table whose rows ``table.column`` identifies: ``table`` itself for its one-column primary
    key, the referenced table for a one-column foreign key; None otherwise."""
    low = column.lower()
    pk = [c for c in table.columns if c.primary_key]
    if len(pk) == 1 and pk[0].name.lower() == low:
        return table
    for fk in table.foreign_keys:
        if len(fk.columns) == 1 and fk.columns[0].lower() == low:
            return schema.table(fk.ref_table)
    return None


def repair_counted_table(tree: exp.Expression, schema: Schema, question: str) -> list[str]:
    """See the module docstring, point 1."""
    m = _HOW_MANY.match(question or "")
    if m is None or not isinstance(tree, exp.Select) or tree.args.get("group"):
        return []
    tables = _tables(tree, schema)
    counts = [c for c in tree.find_all(exp.Count) if c.find_ancestor(exp.Select) is tree]
    if not tables or len(counts) != 1 or not isinstance(counts[0].this, exp.Distinct):
        return []
    count = counts[0]
    args = count.this.expressions
    if len(args) != 1 or not isinstance(args[0], exp.Column):
        return []
    forms = _singular(m.group(1))
    named = [(alias, t) for alias, t in tables.items() if t.name.lower() in forms]
    if len(named) != 1:
        return []
    alias, table = named[0]
    pk = [c for c in table.columns if c.primary_key]
    if len(pk) != 1:
        return []
    owner = _owner(args[0], tables)
    counted = _identifies(owner, args[0].name, schema) if owner else None
    if counted is None or counted.name.lower() == table.name.lower():
        return []  # not a key, or a key of the named table: left as written
    new = exp.Count(this=exp.Distinct(expressions=[exp.column(pk[0].name, table=alias)]))
    note = f"{count.sql()} -> {new.sql()} (the question counts {m.group(1)}, not {counted.name} rows)"
    count.replace(new)
    return [note]


def _stems(text: str) -> set[str]:
    out: set[str] = set()
    for w in _WORD.findall(text.lower()):
        out |= _singular(w)
        for end in ("ing", "ed"):
            if w.endswith(end) and len(w) > len(end) + 2:
                out.add(w[: -len(end)])
    return out


def _grounded(value: str, text_stems: set[str], text: str) -> bool:
    if value.lower() in text.lower():
        return True
    words = _WORD.findall(value.lower())
    if not words or not any(c.isalpha() for c in value):
        return True  # codes and symbols ('+', '#', 'TR001'): nothing to judge by words
    if any(_singular(w) & text_stems for w in words):
        return True
    # a symbol or abbreviation of a word of the question: 'cl' for chlorine, 'pb' for plumbum (lead) is
    # beyond this, 'Mgmt' for management
    return any(len(w) <= 4 and any(_abbreviates(w, t) for t in text_stems) for w in words)


def _abbreviates(short: str, word: str) -> bool:
    """``short`` is ``word``'s first letter followed by some of its later letters, in order."""
    if not short or not word or short[0] != word[0] or len(short) >= len(word):
        return False
    rest = iter(word[1:])
    return all(ch in rest for ch in short[1:])


def repair_invented_filters(tree: exp.Expression, schema: Schema, question: str, statements: str = "",
                            examples: dict[tuple[str, str], list[str]] | None = None) -> list[str]:
    """See the module docstring, point 2. ``examples`` maps (table, column), lower case, to the example
    values the prompt showed for it (default: the schema's own sample values)."""
    text = f"{question}\n{statements}"
    stems = _stems(text)
    notes: list[str] = []
    for _, where, tables, conjuncts in _filtered_selects(tree, schema):
        keep, dropped = [], []
        for cond in conjuncts:
            col, lit = _column_equals_string(cond)
            table = _owner(col, tables) if col is not None else None
            if table is not None and lit is not None:
                shown = _examples(table, col.name, examples)
                if lit in shown and not _grounded(lit, stems, text):
                    dropped.append(f"dropped {cond.sql()} (the question does not ask for {lit!r})")
                    continue
            keep.append(cond)
        if not dropped or not keep:
            continue  # nothing invented, or everything: then something in it was meant
        where.set("this", exp.and_(*[c.copy() for c in keep]))
        notes += dropped
    return notes


def _filtered_selects(
    tree: exp.Expression, schema: Schema,
) -> Iterator[tuple[exp.Select, exp.Where, dict[str, Table], list[exp.Expression]]]:
    """Each SELECT with a WHERE over known tables: (select, where, its tables, the WHERE's AND-ed conditions)."""
    for select in list(tree.find_all(exp.Select)):
        where = select.args.get("where")
        tables = _tables(select, schema)
        if where is None or not tables:
            continue
        yield select, where, tables, list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]


def _column_equals_string(cond: exp.Expression) -> tuple[exp.Column | None, str | None]:
    if isinstance(cond, exp.EQ):
        a, b = cond.this, cond.expression
        if isinstance(b, exp.Column):
            a, b = b, a
        if isinstance(a, exp.Column) and isinstance(b, exp.Literal) and b.is_string:
            return a, b.this
    return None, None


def _examples(table: Table, column: str, examples: dict[tuple[str, str], list[str]] | None) -> list[str]:
    if examples is not None:
        return examples.get((table.name.lower(), column.lower()), [])
    c = table.column(column)
    return [str(v) for v in (c.samples if c is not None else [])]


_ASKS_ID = re.compile(r"\b(ids?|identifiers?|keys?|codes?|numbers?)\b", re.IGNORECASE)


def _naming_column(table: Table) -> str | None:
    """The column that names a row of a lookup table (``colour.colour``, ``publisher.publisher_name``):
    the table has a one-column primary key and exactly one other column, a text column called after
    the table or ``*name``. None for any other table (``molecule.label`` describes, it does not name)."""
    pk = [c for c in table.columns if c.primary_key]
    rest = [c for c in table.columns if not c.primary_key]
    if len(pk) != 1 or len(rest) != 1:
        return None
    name = rest[0].name.lower()
    if "int" in (rest[0].type or "").lower() or "real" in (rest[0].type or "").lower():
        return None
    return rest[0].name if name == table.name.lower() or name.endswith("name") else None


def repair_projected_keys(tree: exp.Expression, schema: Schema, question: str) -> list[str]:
    """"What is Abomination's eye colour?" written as ``SELECT eye_colour_id FROM superhero ...`` answers
    with a key (9), not a colour. When the outer SELECT (no GROUP BY) outputs a foreign-key column
    whose referenced table is a lookup table (its key and one naming column, see
    :func:`_naming_column`) and the question asks for no id, number or code, the output becomes the
    naming column of a joined row of that table."""
    if not isinstance(tree, exp.Select) or tree.args.get("group") or _ASKS_ID.search(question or ""):
        return []
    tables = _tables(tree, schema)
    if not tables:
        return []
    notes: list[str] = []
    for i, item in enumerate(list(tree.expressions)):
        col = item.this if isinstance(item, exp.Alias) else item
        if not isinstance(col, exp.Column) or isinstance(col.this, exp.Star):
            continue
        owner = _owner(col, tables)
        ref = None
        if owner is not None:
            ref = next((fk for fk in owner.foreign_keys if len(fk.columns) == 1
                        and fk.columns[0].lower() == col.name.lower()), None)
        target = schema.table(ref.ref_table) if ref else None
        label = _naming_column(target) if target else None
        if ref is None or target is None or label is None:
            continue
        owner_alias = col.table or next(a for a, t in tables.items() if t is owner)
        alias = _fresh_alias(tables, target.name)
        tables[alias] = target
        tree.join(exp.Table(this=exp.to_identifier(target.name), alias=exp.TableAlias(this=exp.to_identifier(alias))),
                  on=exp.EQ(this=exp.column(ref.columns[0], table=owner_alias),
                            expression=exp.column(ref.ref_columns[0], table=alias)), copy=False)
        new = exp.column(label, table=alias)
        notes.append(f"output {col.sql()} -> {new.sql()} (the {target.name} it stands for, not its key)")
        col.replace(new)
    return notes


def _fresh_alias(tables: dict[str, Table], name: str) -> str:
    taken = {a.lower() for a in tables}
    if name.lower() not in taken:
        return name
    i = 1
    while f"{name}_{i}".lower() in taken:
        i += 1
    return f"{name}_{i}"


def repair_unused_joins(tree: exp.Expression, schema: Schema, question: str = "") -> list[str]:
    """An INNER JOIN of a table that nothing outside its own ON condition reads (``superhero JOIN
    hero_attribute ON ...`` for a question about heroes' genders) multiplies the rows of the tables the
    query does read (and drops those without a match); it is removed when its ON condition is one
    equality with another table on a column that is not the joined table's whole primary key. A join
    to one row per row (a lookup by primary key) is kept: it changes nothing but rows with a NULL key.
    So is a join of a table the question names ("which atoms are *connected* ..." joining ``connected``):
    there the join is the question's own existence condition."""
    named = _stems(question)
    notes: list[str] = []
    for select in list(tree.find_all(exp.Select)):
        tables = _tables(select, schema)
        joins = select.args.get("joins") or []
        if not tables or not joins:
            continue
        for join in list(joins):
            if (join.args.get("kind") or "").upper() not in ("", "INNER") or join.args.get("side"):
                continue
            alias = join.this.alias_or_name
            on = join.args.get("on")
            if not isinstance(on, exp.EQ) or not all(isinstance(x, exp.Column) for x in (on.this, on.expression)):
                continue
            sides = [x.table.lower() for x in (on.this, on.expression)]
            if sides.count(alias.lower()) != 1:
                continue
            own = on.this if sides[0] == alias.lower() else on.expression
            pk = [c.name.lower() for c in tables[alias].columns if c.primary_key]
            if pk == [own.name.lower()]:
                continue  # a lookup of one row per row (it only drops rows whose key is NULL): kept
            if all(_singular(w) & named for w in _WORD.findall(tables[alias].name.lower())):
                continue  # every word of its name is in the question
            used = [c for c in select.find_all(exp.Column)
                    if (c.table.lower() == alias.lower() or (not c.table and tables[alias].column(c.name)
                                                             and not any(t.column(c.name) for a, t in tables.items()
                                                                         if a != alias)))
                    and c.find_ancestor(exp.Join) is not join]
            if used or any(isinstance(x, exp.Star) for x in select.expressions):
                continue
            notes.append(f"removed JOIN {join.this.sql()} ON {on.sql()} (nothing reads it)")
            joins.remove(join)
            del tables[alias]
        select.set("joins", joins)
    return notes


_STOP = frozenset((
    "a", "an", "the", "of", "in", "on", "for", "to", "and", "or", "by", "with", "from", "at", "as", "is",
    "are", "was", "were", "be", "been", "what", "which", "who", "whom", "how", "many", "much", "per", "each",
    "all", "any", "their", "its", "his", "her", "this", "that", "these", "those", "there", "than", "then",
    "it", "do", "does", "did",
))


def _content_stems(text: str) -> set[str]:
    return {w for w in _stems(text) if w not in _STOP and len(w) > 2}


def repair_aggregated_column(tree: exp.Expression, schema: Schema, question: str) -> list[str]:
    """"Total amount spent on food?" written as ``SUM(amount) FROM budget`` (budget.amount is what was
    *budgeted*; budget.spent, described "The total amount spent in the budgeted category", is what the
    question asks): a column chosen by its name over its meaning. An aggregated numeric column
    (SUM/AVG/MIN/MAX) is replaced by another numeric column of the same table when that column's name
    is a word of the question and its name and description share at least two more words of the
    question than the chosen column's do."""
    words = _content_stems(question)
    notes: list[str] = []
    for select in list(tree.find_all(exp.Select)):
        tables = _tables(select, schema)
        if not tables:
            continue
        for agg in select.find_all(exp.Sum, exp.Avg, exp.Min, exp.Max):
            if agg.find_ancestor(exp.Select) is not select or not isinstance(agg.this, exp.Column):
                continue
            col = agg.this
            table = _owner(col, tables)
            chosen = table.column(col.name) if table else None
            if chosen is None or not holds_number(chosen):
                continue
            def score(c) -> int:
                return len(words & _content_stems(f"{c.name.replace('_', ' ')} {c.description}"))
            best = max((c for c in table.columns if c is not chosen and holds_number(c) and not c.primary_key
                        and _singular(c.name.lower()) & words),
                       key=score, default=None)
            if best is None or score(best) < score(chosen) + 2:
                continue
            new = exp.column(best.name, table=col.table or None)
            notes.append(f"{col.sql()} -> {new.sql()} ({table.name}.{best.name} is described as "
                         f"{best.description[:60]!r})")
            col.replace(new)
    return notes


def repair_value_by_join(tree: exp.Expression, db: Database, *, timeout_s: float = 1.0) -> list[str]:
    """"Total amount spent on food?" written as ``SUM(cost) FROM expense WHERE expense_description =
    'Food'``: 'Food' is no expense description, it is a ``budget.category``, one foreign key away. A
    top-level WHERE equality whose string constant its column does not store, but exactly one column of
    one other table stores verbatim, is moved to that column: the table is joined on the one foreign
    key between it and the query's tables (or its alias used, when the query already reads it). Without
    exactly one such column and one such link the query is left for the model (``misplaced_values``)."""
    from tagql.db.repair import columns_holding, table_node

    notes: list[str] = []
    schema = db.schema
    for select, _, tables, conjuncts in _filtered_selects(tree, schema):
        for cond in conjuncts:
            col, lit = _column_equals_string(cond)
            owner = _owner(col, tables) if col is not None else None
            if owner is None or lit is None or _stores(db, owner.name, col.name, lit, timeout_s):
                continue
            holders = [h.split(".", 1) for h in columns_holding(db, lit, timeout_s=timeout_s)]
            if any(t.lower() == owner.name.lower() for t, _ in holders):
                continue  # a sibling column of the same table holds it: misplaced_values' case
            if len(holders) > 1:  # bond.bond_id and connected.bond_id: the one the query's tables reach
                reached = [h for h in holders if (t := schema.table(h[0])) is not None
                           and (any(x is t for x in tables.values()) or _one_link(tables, t) is not None)]
                holders = reached if len(reached) == 1 else holders
            if len(holders) != 1:
                continue
            target = schema.table(holders[0][0])
            if target is None:
                continue
            present = [a for a, t in tables.items() if t is target]
            if len(present) > 1:
                continue
            if present:
                alias = present[0]
            else:
                link = _one_link(tables, target)
                bare = {c.name.lower() for c in select.find_all(exp.Column)  # but the column being replaced
                        if not c.table and c.find_ancestor(exp.Select) is select and c is not col}
                if link is None or any(target.column(name) for name in bare):
                    continue  # no single link, or a bare column the join would make ambiguous
                src_alias, src_col, tgt_col = link
                alias = _fresh_alias(tables, target.name)
                on = exp.EQ(this=exp.column(src_col, table=src_alias), expression=exp.column(tgt_col, table=alias))
                select.join(table_node(target.name, alias), on=on, copy=False)
                tables[alias] = target
            new = exp.column(holders[0][1], table=alias)
            notes.append(f"{col.sql()} = {lit!r} -> {new.sql()} = {lit!r} (the data stores {lit!r} in "
                         f"{target.name}.{holders[0][1]})")
            col.replace(new)
    return notes


def _stores(db: Database, table: str, column: str, value: str, timeout_s: float) -> bool:
    query = (exp.select("1").from_(exp.to_table(table, quoted=True))
             .where(exp.EQ(this=exp.column(column, quoted=True), expression=exp.Literal.string(value))).limit(1))
    try:
        return bool(db.execute(query.sql(dialect=db.dialect), timeout_s=timeout_s, row_cap=1).rows)
    except TagqlError:
        return True  # cannot tell: leave it


def _one_link(tables: dict[str, Table], target: Table) -> tuple[str, str, str] | None:
    """(alias, its column, target's column) of the one one-column foreign key between a table of the
    query and ``target`` (either direction), or of the one of several named like the column it references;
    None when there is none or no single one."""
    links = []
    for alias, t in tables.items():
        for fk in t.foreign_keys:
            if len(fk.columns) == 1 and fk.ref_table.lower() == target.name.lower():
                links.append((alias, fk.columns[0], fk.ref_columns[0]))
        for fk in target.foreign_keys:
            if len(fk.columns) == 1 and fk.ref_table.lower() == t.name.lower():
                links.append((alias, fk.ref_columns[0], fk.columns[0]))
    if len(links) > 1:  # connected.atom_id and atom_id2 both to atom: the key named like what it references
        links = [link for link in links if link[1].lower() == link[2].lower()]
    return links[0] if len(links) == 1 else None


_TRUE_FALSE = [({"t", "f"}, "t"), ({"y", "n"}, "y"), ({"yes", "no"}, "yes"), ({"true", "false"}, "true"),
               ({"1", "0"}, "1")]
_FLAG_AFFIXES = re.compile(r"^(?:is|has)_?(?=[A-Za-z])|_?(?:flag|yn)$", re.IGNORECASE)
_NEGATED = r"\b(?:not|no|never|non|un)[\s-]*(?:\w+\s+){{0,1}}{word}"


def _flag_word(column: str) -> str | None:
    """The one word a yes/no column is named after: ``IsOfficial`` -> official, ``charter_flag`` ->
    charter; None for names of several words or none."""
    bare = _FLAG_AFFIXES.sub("", column)
    words = [w.lower() for w in re.split(r"_+|(?<=[a-z])(?=[A-Z])", bare) if w]
    return words[0] if len(words) == 1 and len(words[0]) > 3 else None


def _true_value(db: Database, table: str, column: str, timeout_s: float) -> exp.Expression | None:
    """The literal meaning *yes* when the column stores exactly one true/false pair, else None."""
    query = (exp.select(exp.column(column, quoted=True)).distinct().from_(exp.to_table(table, quoted=True))
             .where(exp.column(column, quoted=True).is_(exp.null()).not_()).limit(3))
    try:
        rows = db.execute(query.sql(dialect=db.dialect), timeout_s=timeout_s, row_cap=3).rows
    except TagqlError:
        return None
    values = {r[0] for r in rows}
    text = {str(v).strip().lower() for v in values}
    for pair, yes in _TRUE_FALSE:
        if text == pair:
            stored = next(v for v in values if str(v).strip().lower() == yes)
            if isinstance(stored, str):
                return exp.Literal.string(stored)
            return exp.Literal.number(int(stored))
    return None


def repair_ignored_flags(tree: exp.Expression, db: Database, question: str, *, timeout_s: float = 1.0) -> list[str]:
    """Restrict a SELECT to the rows a yes/no column the question names marks *yes* (see the module
    docstring, item 6). A word that names such columns in several tables of the query changes nothing."""
    asked = question.lower()
    words = _stems(asked)
    read = {c.name.lower() for c in tree.find_all(exp.Column)}
    found = []
    for select in list(tree.find_all(exp.Select)):
        tables = _tables(select, db.schema)
        for alias, table in (tables or {}).items():
            for column in table.columns:
                word = _flag_word(column.name)
                if (word is None or column.name.lower() in read or column.primary_key
                        or not (_singular(word) & words)
                        or re.search(_NEGATED.format(word=re.escape(word)), asked)):
                    continue
                found.append((select, alias, table, column, word))
    notes = []
    for word in {w for *_, w in found}:
        mine = [f for f in found if f[4] == word]
        if len(mine) != 1:
            continue
        select, alias, table, column, _ = mine[0]
        yes = _true_value(db, table.name, column.name, timeout_s)
        if yes is None:
            continue
        cond = exp.EQ(this=exp.column(column.name, table=alias), expression=yes)
        select.where(cond, copy=False)
        notes.append(f"added {cond.sql()} (the question: {word!r}; {table.name}.{column.name} stores yes/no)")
    return notes
