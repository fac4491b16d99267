"""Repairs of LLM-written SQL that read the question's words: the SQL says something other than what the
question asks (each reported as a note, like the schema repairs in :mod:`tagql.db.repair`).

1. **A count of the wrong thing** (:func:`repair_counted_entity`): "how many molecules ..." counted as
   ``COUNT(DISTINCT atom_id)`` becomes ``COUNT(DISTINCT atom.molecule_id)``.
2. **A length ordering the question states and the SQL lacks** (:func:`repair_length_order`): "of the 5
   heaviest, list their names from shortest to longest" written as ``ORDER BY weight_kg DESC LIMIT 5``
   is ordered by ``LENGTH(name)`` around that ranking; "in calendar-month order" written as ``ORDER BY
   event_date`` sorts by the date's month (:func:`repair_month_order`).
3. **Listed values the query ignores** (:func:`repair_listed_values`, needs the data): "rank the
   elements c, n, o and f by ..." written over every element keeps ``element IN ('c', 'n', 'o', 'f')``.
4. **A word-count bound off by one** (:func:`repair_word_count`): "a name of two or more words" written
   ``LENGTH(n) - LENGTH(REPLACE(n, ' ', '')) + 1 > 2`` becomes ``... >= 2``.
5. **A number written with the wrong count of zeros** (:func:`repair_scaled_numbers`): "a population of
   more than 50 million" written ``Population > 5000000`` becomes ``> 50000000``.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

from sqlglot import exp

from tagql.db.repair import is_string_literal, select_sources
from tagql.db.schema import Schema, holds_text
from tagql.errors import TagqlError

if TYPE_CHECKING:
    from tagql.db.connection import Database


_HOW_MANY = re.compile(r"\s*how many (\w+)(?:\s+(\w+))?", re.IGNORECASE)


def repair_counted_entity(tree: exp.Expression, schema: Schema, question: str) -> list[str]:
    """"How many molecules ..." counted as ``COUNT(DISTINCT atom_id) FROM atom``: the count counts what
    the question names. When the question opens with "how many <noun>", the outer SELECT (no GROUP BY)
    has one COUNT, and exactly one of its tables has a ``<noun>_id`` column other than the counted one,
    the COUNT becomes ``COUNT(DISTINCT <table>.<noun>_id)``. Counting the table named by the noun by its
    own key is unchanged in value."""
    m = _HOW_MANY.match(question or "")
    if not isinstance(tree, exp.Select) or m is None or tree.args.get("group"):
        return []
    counts = [c for c in tree.find_all(exp.Count) if c.find_ancestor(exp.Select) is tree]
    sources = select_sources(tree, schema)
    if len(counts) != 1 or not sources:
        return []
    count = counts[0]
    arg = count.this.expressions[0] if isinstance(count.this, exp.Distinct) and count.this.expressions else count.this
    if not isinstance(arg, (exp.Column, exp.Star)) or isinstance(arg, exp.Column) and isinstance(arg.this, exp.Star):
        arg = exp.Star()
    for word in filter(None, m.groups()):
        noun = word.lower()
        names = {noun[:-1] + "_id", noun[:-2] + "_id"} if noun.endswith("s") else {noun + "_id"}
        owners = [(src, c) for src in sources for c in src.table.columns if c.name.lower() in names]
        if not owners:
            continue
        named = [(src, c) for src, c in owners if src.table.name.lower() + "_id" in names]
        owners = named if len(owners) > 1 and len(named) == 1 else owners
        if len(owners) != 1 or (isinstance(arg, exp.Column) and arg.name.lower() == owners[0][1].name.lower()):
            return []
        src, column = owners[0]
        if len(sources) == 1 and column.primary_key:
            return []  # the table's rows are the named things: its own key counts the same
        new = exp.Count(this=exp.Distinct(expressions=[exp.column(column.name, table=src.alias)]))
        note = f"{count.sql()} -> {new.sql()} (the question counts {word})"
        count.replace(new)
        return [note]
    return []




_LENGTH_ORDER = re.compile(r"\b(?:names?|titles?)\b[^.?!;]*?\bfrom (?P<a>shortest|longest) to (?:longest|shortest)(?: (?:names?|titles?))?(?! [a-z])"
                           r"|\b(?P<b>shortest|longest) (?:names?|titles?) first\b", re.IGNORECASE)
_NAME_LIKE = re.compile(r"name|title", re.IGNORECASE)


def repair_length_order(tree: exp.Expression, question: str) -> tuple[exp.Expression, list[str]]:
    """A question that orders the names or titles it asks for by length ("names from shortest to
    longest", "longest title first"; not "longest rivers first", a stored length) and SQL that returns one name without ``ORDER BY LENGTH(...)``: small models keep the first
    ordering of a two-step question ("of the 5 heaviest ...") and drop the second, even with a solved
    example of that shape beside the question. A ranking with ``LIMIT`` is kept as a subquery and its
    rows are ordered by length; without a limit the length ordering replaces the SQL's. The answer
    column is the only one returned, or the only one named like a name or title. Returns the tree to
    run (``tree`` itself, changed in place, or a new outer SELECT) and a note of what changed."""
    m = _LENGTH_ORDER.search(question or "")
    if m is None or not isinstance(tree, exp.Select):
        return tree, []
    order = tree.args.get("order")
    if order is not None and any(True for _ in order.find_all(exp.Length)):
        return tree, []
    outputs = [e for e in tree.expressions if not isinstance(e, exp.Star) and e.alias_or_name]
    if len(outputs) != len(tree.expressions) or not outputs:
        return tree, []
    if len(outputs) > 1:
        outputs = [e for e in outputs if _NAME_LIKE.search(e.alias_or_name)]
        if len(outputs) != 1:
            return tree, []
    name = outputs[0].alias_or_name
    desc = (m.group("a") or m.group("b")).lower() == "longest"
    if tree.args.get("limit") is not None:
        outer = exp.select("*").from_(exp.Subquery(this=tree.copy(), alias=exp.TableAlias(this=exp.to_identifier("ranked"))))
        outer = outer.order_by(exp.Ordered(this=exp.Length(this=exp.column(name, table="ranked")), desc=desc))
        return outer, [f"ordered the ranked rows by LENGTH({name}) {'DESC' if desc else 'ASC'} (the question: {m.group(0)!r})"]
    key = outputs[0].this.copy() if isinstance(outputs[0], exp.Alias) else outputs[0].copy()
    tree.set("order", exp.Order(expressions=[exp.Ordered(this=exp.Length(this=key), desc=desc)]))
    return tree, [f"ORDER BY LENGTH({key.sql()}) {'DESC' if desc else 'ASC'} (the question: {m.group(0)!r})"]


_MONTH_ORDER = re.compile(r"\bcalendar[- ]month order\b|\bin (?:the )?order of (?:the |their )?months?\b|\bmonth order\b",
                          re.IGNORECASE)


def repair_month_order(tree: exp.Expression, question: str) -> list[str]:
    """"In calendar-month order" written as ``ORDER BY event_date`` or ``ORDER BY STRFTIME('%Y-%m',
    event_date)``: a full date sorts by year first (September 2019 before January 2020), the question
    by month alone. A bare date or time column in the outer ORDER BY becomes ``STRFTIME('%m', col)``
    (SQLite's month of a date); a STRFTIME format that starts with the year loses it (``'%Y-%m'`` ->
    ``'%m'``)."""
    if not _MONTH_ORDER.search(question or "") or not isinstance(tree, exp.Select):
        return []
    order = tree.args.get("order")
    notes: list[str] = []
    for ordered in order.expressions if order is not None else []:
        col = ordered.this
        if isinstance(col, exp.Column) and re.search(r"date|time", col.name, re.IGNORECASE):
            month = exp.Anonymous(this="STRFTIME", expressions=[exp.Literal.string("%m"), col.copy()])
            notes.append(f"ORDER BY {col.sql()} -> ORDER BY {month.sql()} (the question orders by calendar month)")
            col.replace(month)
            continue
        fmt = _strftime_format(col)
        if fmt is not None and re.match(r"%Y\W?%m", fmt.this):
            before = col.sql(dialect="sqlite")
            fmt.replace(exp.Literal.string(re.sub(r"^%Y\W?", "", fmt.this)))
            notes.append(f"ORDER BY {before} -> ORDER BY {col.sql(dialect='sqlite')} (the question orders by "
                         "calendar month)")
    return notes


def _strftime_format(node: exp.Expression) -> exp.Literal | None:
    """The format literal of ``STRFTIME('<format>', ...)`` (sqlglot may parse it as TimeToStr), else None."""
    if isinstance(node, exp.Anonymous) and str(node.name).upper() == "STRFTIME" and node.expressions:
        first = node.expressions[0]
        return first if isinstance(first, exp.Literal) and first.is_string else None
    if isinstance(node, exp.TimeToStr):
        fmt = node.args.get("format")
        return fmt if isinstance(fmt, exp.Literal) and fmt.is_string else None
    return None


_DATE_PARTS = {exp.Year: "%Y", exp.Month: "%m", exp.Day: "%d"}


def repair_date_parts(tree: exp.Expression) -> list[str]:
    """``YEAR(event_date) = 2019`` on a database that stores dates as text (SQLite): MySQL's date-part
    functions do not exist there ("no such function: YEAR", BIRD train 1340), and the model writes them
    again when told. Each becomes ``CAST(STRFTIME('%Y', event_date) AS INTEGER)`` (an integer, as the
    function returns, so ``= 2019`` still compares numbers)."""
    notes: list[str] = []
    for node in list(tree.find_all(*_DATE_PARTS)):
        arg = node.this
        if isinstance(arg, exp.Date) and arg.this is not None:  # sqlglot's DATE(x) wrapper around a text date
            arg = arg.this
        part = exp.Cast(this=exp.Anonymous(this="STRFTIME", expressions=[exp.Literal.string(_DATE_PARTS[type(node)]),
                                                                            arg.copy()]),
                        to=exp.DataType.build("INTEGER"))
        notes.append(f"{node.sql(dialect='mysql')} -> {part.sql(dialect='sqlite')}")
        node.replace(part)
    return notes


_QUOTED_WORD = re.compile(r"\b\w+'\w+\b")


def quote_apostrophes(sql: str, question: str) -> str | None:
    """``last_name = 'O'Gallagher'`` for the question's "Adela O'Gallagher" (BIRD train 1347; "Women's
    Soccer", 1399): a word of the question with an apostrophe, copied into a string constant without
    doubling it, ends the constant early and the query does not parse. Each such word found in ``sql`` gets
    its apostrophe doubled, and a constant the query ends in without closing it (``= 'O'Gallagher``, as
    1347 was written) is closed; None when the question has no such word in the SQL (nothing to try)."""
    out = stripped = sql.rstrip().rstrip(";").rstrip()
    for word in sorted(set(_QUOTED_WORD.findall(question or "")), key=len, reverse=True):
        doubled = word.replace("'", "''")
        out = re.sub(rf"\b{re.escape(word)}\b", lambda _m, d=doubled: d, out)
        if out.endswith(doubled) and out.count("'") % 2:
            out += "'"
    return out if out != stripped else None


# "c, n, o and f", "'French', 'Hindi' and 'Swahili'": items of one to three words, comma separated, the
# last joined by and/or (a first item may start with "Rank the elements", a last may run on "f by ...")
_ITEM = r"\w[\w'.-]*(?: \w[\w'.-]*){0,2}"
_LIST = re.compile(rf"\b({_ITEM}(?:, {_ITEM})+,? (?:and|or) {_ITEM})\b")


def _listed_items(question: str) -> list[list[str]]:
    """The enumerations in ``question`` (quotes removed), each as its items."""
    text = re.sub(r"(?<!\w)['\"]([^'\"]+)['\"](?!\w)", r"\1", question)
    out = []
    for m in _LIST.finditer(text):
        items = [p.strip() for p in re.split(r",\s*(?:and\s+|or\s+)?|\s+(?:and|or)\s+", m.group(1)) if p.strip()]
        if len(items) >= 2:
            out.append(items)
    return out


def repair_listed_values(tree: exp.Expression, db: Database, question: str, *, timeout_s: float = 2.0) -> list[str]:
    """"Rank the elements c, n, o and f by electronegativity" written without restricting ``element``:
    when the question lists values that one text column of the outermost SELECT's tables stores (every
    item, exactly up to case), and the query mentions none of them, that SELECT keeps only those rows
    (``AND element IN ('c', 'n', 'o', 'f')``). Lists the data does not store entirely ("transition
    metals, metalloids or metals") change nothing."""
    select = tree if isinstance(tree, exp.Select) else next(iter(tree.find_all(exp.Select)), None)
    lists = _listed_items(question)
    if select is None or not lists:
        return []
    sources = select_sources(select, db.schema)
    if not sources:
        return []
    used = {lit.this.lower() for lit in tree.find_all(exp.Literal) if lit.is_string}
    for items in lists:
        head, tail = items[0].split(), items[-1].split()
        firsts = [" ".join(head[i:]) for i in range(len(head))]  # "the elements c": then "elements c", "c"
        lasts = [" ".join(tail[:i]) for i in range(len(tail), 0, -1)]  # "f by electronegativity": ..., "f"
        middle = items[1:-1]
        if {v.lower() for v in firsts + middle + lasts} & used:
            continue  # the query already uses the list
        for src in sources:
            for col in src.table.columns:
                if not holds_text(col):
                    continue
                stored = _stored(db, src.table.name, col.name, firsts + middle + lasts, timeout_s)
                first = next((stored[v.lower()] for v in firsts if v.lower() in stored), None)
                last = next((stored[v.lower()] for v in lasts if v.lower() in stored), None)
                if first is None or last is None or any(m.lower() not in stored for m in middle):
                    continue
                values = list(dict.fromkeys([first, *(stored[m.lower()] for m in middle), last]))
                cond = exp.column(col.name, table=src.alias).isin(*[exp.Literal.string(v) for v in values])
                select.where(cond, append=True, copy=False)
                return [f"kept the values the question lists: {cond.sql(dialect=db.dialect)}"]
    return []


def _stored(db: Database, table: str, column: str, candidates: list[str], timeout_s: float) -> dict[str, str]:
    """Lower-cased candidate -> stored spelling, for the candidates ``table.column`` stores (up to case)."""
    schema = db.schema
    q, t = schema.quote(column), schema.quote(table)
    marks = ", ".join(exp.Literal.string(c.lower()).sql() for c in dict.fromkeys(candidates))
    try:
        rows = db.execute(f"SELECT DISTINCT {q} FROM {t} WHERE LOWER({q}) IN ({marks})", timeout_s=timeout_s,
                          row_cap=len(candidates) * 4).rows
    except TagqlError:
        return {}
    out: dict[str, str] = {}
    for (v,) in rows:
        if isinstance(v, str):
            out.setdefault(v.lower(), v)
    return out


_NUMBER_WORDS = {w: i for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"])}
_N = r"(\d+|zero|one|two|three|four|five|six|seven|eight|nine|ten)"
_WORD_COUNT = [  # question phrase -> comparison of the number of words with n
    (re.compile(rf"\b{_N} or more words\b|\bat least {_N} words\b", re.IGNORECASE), exp.GTE),
    (re.compile(rf"\bmore than {_N} words?\b", re.IGNORECASE), exp.GT),
    (re.compile(rf"\b{_N} or fewer words\b|\bat most {_N} words?\b", re.IGNORECASE), exp.LTE),
    (re.compile(rf"\b(?:fewer|less) than {_N} words\b", re.IGNORECASE), exp.LT),
    (re.compile(rf"\bexactly {_N} words?\b", re.IGNORECASE), exp.EQ),
]
_FLIP = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE, exp.EQ: exp.EQ}


def _spaces(node: exp.Expression) -> exp.Expression | None:
    """The column of ``LENGTH(c) - LENGTH(REPLACE(c, ' ', ''))`` (the number of spaces in c)."""
    if not isinstance(node, exp.Sub) or not isinstance(node.this, exp.Length) or not isinstance(node.expression, exp.Length):
        return None
    inner = node.expression.this
    if not isinstance(inner, exp.Anonymous) and type(inner).__name__ != "Replace":
        return None
    args = [inner.this, *inner.expressions] if isinstance(inner, exp.Anonymous) else \
        [inner.this, inner.args.get("expression"), inner.args.get("replacement")]
    if isinstance(inner, exp.Anonymous) and inner.name.upper() != "REPLACE":
        return None
    if len(args) != 3 or not (is_string_literal(args[1]) and args[1].this == " " and is_string_literal(args[2]) and args[2].this == ""):
        return None
    return node.this.this if node.this.this == args[0] else None


def _canonical(op: type, bound: int) -> tuple[str, int]:
    """An integer comparison with > and < written as >= and <= (``> 2`` is ``>= 3``)."""
    if op is exp.GT:
        return "GTE", bound + 1
    if op is exp.LT:
        return "LTE", bound - 1
    return op.__name__, bound


def repair_word_count(tree: exp.Expression, question: str) -> list[str]:
    """"A name of two or more words" written ``LENGTH(n) - LENGTH(REPLACE(n, ' ', '')) + 1 > 2``: small
    models get the bound off by one. When the question states one word-count bound ("two or more words",
    "more than three words", "at most two words") and the SQL has one such word-count comparison with a
    number, the comparison is rewritten to say what the question says (spaces + 1 = words)."""
    stated = [(op, m) for pattern, op in _WORD_COUNT for m in pattern.finditer(question or "")]
    if len(stated) != 1:
        return []
    op, m = stated[0]
    word = next(g for g in m.groups() if g)
    n = int(word) if word.isdigit() else _NUMBER_WORDS[word.lower()]
    found = []
    for cmp in tree.find_all(exp.GT, exp.GTE, exp.LT, exp.LTE, exp.EQ):
        left, right = cmp.this, cmp.expression
        if isinstance(left, exp.Literal) and not left.is_string:
            left, right = right, left
        if not (isinstance(right, exp.Literal) and not right.is_string):
            continue
        plus_one = isinstance(left, exp.Add) and isinstance(left.expression, exp.Literal) and left.expression.this == "1"
        column = _spaces(left.this if plus_one else left)
        if column is not None:
            found.append((cmp, left, plus_one))
    if len(found) != 1:
        return []
    cmp, count, plus_one = found[0]
    bound = n if plus_one else n - 1  # the expression counts words (spaces + 1) or spaces
    written = type(cmp) if cmp.this is count else _FLIP[type(cmp)]
    literal = cmp.expression if cmp.this is count else cmp.this
    if _canonical(written, int(float(literal.this))) == _canonical(op, bound):
        return []  # already says it (">= 3" spaces is "> 2")
    new = op(this=count.copy(), expression=exp.Literal.number(bound))
    before = cmp.sql()
    cmp.replace(new)
    return [f"{before} -> {new.sql()} (the question: {m.group(0)!r})"]


_DECIMALS = re.compile(rf"\b{_N} decimal (?:places?|points?|digits?)\b|\brounded? to {_N} decimals?\b", re.IGNORECASE)


def repair_decimal_places(tree: exp.Expression, question: str) -> list[str]:
    """"Please provide your answer as a percentage with three decimal places" written without ``ROUND``
    (BIRD train 227, 255): the rows then hold 44.31486880466473 where 44.315 was asked for. When the
    question states one number of decimal places, each computed number the top-level SELECT outputs (a
    division, an average, a cast to REAL, arithmetic; not a plain column or a count) that is not already
    rounded is wrapped in ``ROUND(x, n)``, keeping its output name."""
    stated = {next(g for g in m.groups() if g).lower() for m in _DECIMALS.finditer(question or "")}
    select = tree if isinstance(tree, exp.Select) else None
    if len(stated) != 1 or select is None:
        return []
    word = stated.pop()
    n = int(word) if word.isdigit() else _NUMBER_WORDS[word]
    notes = []
    for i, item in enumerate(list(select.expressions)):
        value = item.this if isinstance(item, exp.Alias) else item
        computed = isinstance(value, (exp.Div, exp.Mul, exp.Add, exp.Sub, exp.Avg, exp.Cast, exp.Paren))
        if not computed or value.find(exp.Round) is not None:
            continue
        rounded = exp.Round(this=value.copy(), decimals=exp.Literal.number(n))
        if isinstance(item, exp.Alias):
            item.set("this", rounded)
        else:
            item.replace(rounded)
        notes.append(f"output {i + 1} rounded to {n} decimal places, as the question asks")
    return notes


_SCALED = re.compile(r"\b(\d+(?:,\d{3})*(?:\.\d+)?)\s*(thousand|million|billion|trillion)\b", re.IGNORECASE)
_SCALE_ZEROS = {"thousand": 3, "million": 6, "billion": 9, "trillion": 12}


def _decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None


def _power_of_ten(ratio: Decimal) -> int | None:
    """k when ``ratio`` is 10**k for a whole k >= 1, else None."""
    if ratio <= 1 or ratio != ratio.to_integral_value():
        return None
    digits = str(int(ratio))
    return len(digits) - 1 if digits.strip("0") == "1" else None


def repair_scaled_numbers(tree: exp.Expression, question: str) -> list[str]:
    """"Countries with a population of more than 50 million" written ``Population > 5000000`` (cross dev
    x30): the 1.5B model miscounts the zeros of a number the question writes with a scale word. A numeric
    literal of the SQL that is a stated number times a power of ten, other than the one its scale word
    says, becomes the number in full (``50 million`` -> 50000000). A literal equal to the stated number
    itself (a column kept in millions: ``Net_Worth_Millions > 30``), or to another number of the question,
    is left alone, as are LIMIT and OFFSET counts."""
    stated: list[tuple[Decimal, Decimal, str]] = []
    for m in _SCALED.finditer(question or ""):
        value = _decimal(m.group(1))
        if value is not None and value > 0:
            stated.append((value, value.scaleb(_SCALE_ZEROS[m.group(2).lower()]), m.group(0)))
    if not stated:
        return []
    meant = {full for _, full, _ in stated} | {v for v, _, _ in stated}
    meant |= {d for d in (_decimal(n) for n in re.findall(r"\d+(?:\.\d+)?", question)) if d is not None}
    notes = []
    for literal in list(tree.find_all(exp.Literal)):
        if literal.is_string or literal.find_ancestor(exp.Limit, exp.Offset) is not None:
            continue
        written = _decimal(literal.this)
        if written is None or written <= 0 or written in meant:
            continue
        fits = [(full, phrase) for value, full, phrase in stated if _power_of_ten(written / value) is not None]
        if len({full for full, _ in fits}) != 1:
            continue
        full, phrase = fits[0]
        text = str(int(full)) if full == full.to_integral_value() else format(full.normalize(), "f")
        notes.append(f"{literal.this} -> {text} (the question: {phrase!r})")
        literal.replace(exp.Literal.number(text))
    return notes
