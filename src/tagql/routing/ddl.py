"""Schema-only sources: parse ``CREATE TABLE`` DDL (any dialect sqlglot reads) into a Schema."""

from __future__ import annotations

from pathlib import Path

import sqlglot
from sqlglot import exp

from tagql.db.schema import Column, ForeignKey, Schema, Table
from tagql.routing.errors import BadSource


def schema_from_ddl(text: str, name: str, dialect: str | None = None) -> Schema:
    try:
        statements = sqlglot.parse(text, read=dialect)
    except sqlglot.errors.ParseError as exc:
        raise BadSource(f"cannot parse DDL of '{name}': {str(exc).splitlines()[0]}") from exc
    tables: list[Table] = []
    for st in statements:
        if not isinstance(st, exp.Create) or (st.args.get("kind") or "").upper() != "TABLE":
            continue
        schema_node = st.this
        if not isinstance(schema_node, exp.Schema):
            continue
        table = Table(schema_node.this.name)
        for item in schema_node.expressions:
            if isinstance(item, exp.ColumnDef):
                kind = item.args.get("kind")
                col = Column(item.name, kind.sql(dialect=dialect).upper() if kind else "")
                for cons in item.constraints:
                    if isinstance(cons.kind, exp.PrimaryKeyColumnConstraint):
                        col.primary_key = True
                    ref = cons.find(exp.Reference)
                    if ref is not None:
                        target = ref.this
                        ref_table = target.this.name if isinstance(target, exp.Schema) else target.name
                        ref_cols = [e.name for e in target.expressions] if isinstance(target, exp.Schema) else []
                        table.foreign_keys.append(ForeignKey([col.name], ref_table, ref_cols or [col.name]))
                table.columns.append(col)
            elif isinstance(item, exp.PrimaryKey):
                for e in item.expressions:
                    c = table.column(e.name)
                    if c:
                        c.primary_key = True
            elif isinstance(item, exp.ForeignKey):
                ref = item.args.get("reference")
                target = ref.this if ref is not None else None
                if isinstance(target, exp.Schema):
                    table.foreign_keys.append(ForeignKey(
                        [e.name for e in item.expressions], target.this.name, [e.name for e in target.expressions]))
            elif isinstance(item, exp.Constraint):
                for sub in item.expressions:
                    if isinstance(sub, exp.PrimaryKey):
                        for e in sub.expressions:
                            c = table.column(e.name)
                            if c:
                                c.primary_key = True
        uniq = {(tuple(f.columns), f.ref_table, tuple(f.ref_columns)): f for f in table.foreign_keys}
        table.foreign_keys = list(uniq.values())
        tables.append(table)
    if not tables:
        raise BadSource(f"no CREATE TABLE statements in the DDL of '{name}'")
    return Schema(name, tables, dialect or "sqlite")


def schema_from_ddl_file(path: str | Path, dialect: str | None = None) -> Schema:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise BadSource(f"cannot read DDL file '{p}': {exc.strerror}") from exc
    return schema_from_ddl(text, p.stem, dialect)
