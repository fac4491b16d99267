"""Prompt texts. The schema goes first and is identical for SQL and answer generation, so
llama.cpp reuses its processed prefix across both calls and across questions on one database."""

from __future__ import annotations

from typing import Literal

from tagql.knowledge import ScoredStatement

DIALECT_NAMES = {
    "sqlite": "SQLite", "postgres": "PostgreSQL", "mysql": "MySQL", "tsql": "SQL Server", "oracle": "Oracle",
    "duckdb": "DuckDB", "snowflake": "Snowflake", "bigquery": "BigQuery",
}


def dialect_name(dialect: str) -> str:
    return DIALECT_NAMES.get(dialect, dialect)


def system_prompt(db_name: str, schema_text: str, dialect: str = "sqlite") -> str:
    """The domain-knowledge paper's SQL-generation prompt (DBA persona + schema + instruction).

    The paper puts the instruction after the question; here it ends the system message, which
    llama.cpp keeps evaluated per database, so its ~35 tokens are not re-read for every question."""
    return (
        "You are a database administrator. You have designed the following database for "
        f"{db_name} whose schema is represented as:\n{schema_text}\n\n"
        f"For each query, generate a single SQL in {dialect_name(dialect)} format. Do not include any "
        "extra text, tag or information other than the SQL query itself."
    )


StatementStyle = Literal["external", "paper"]


def sql_user_prompt(
    question: str, statements: list[ScoredStatement], *, style: StatementStyle = "external", dialect: str = "sqlite",
) -> str:
    """The question, preceded by its domain statements (each rendered "'text' refers to sql").

    ``external`` (default) frames the statements as BIRD's "External Knowledge" comment lines, the
    layout Qwen2.5-Coder answers best with: on 90 BIRD IN questions it lifted execution accuracy with
    retrieved statements from 48.9 to 56.7 % and with the gold statements from 55.6 to 60.0 %
    (docs/benchmarks.md). ``paper`` is the domain-knowledge paper's wording. Without statements both
    are the same prompt."""
    parts = []
    if statements and style == "external":
        parts.append("-- External Knowledge: " + "; ".join(s.render() for s in statements))
        parts.append(
            f"-- Using valid {dialect_name(dialect)} and understanding External Knowledge, answer the following "
            "question for the tables provided above."
        )
    parts.append(f"Query: {question}")
    if statements and style == "paper":
        listed = "\n".join(f"- {s.render()}" for s in statements)
        parts.append(
            "Domain Knowledge statements, some of which might or might not be useful to generate the query:\n"
            + listed
        )
    parts.append("SQL:")
    return "\n".join(parts)


def repair_prompt(error: str, dialect: str) -> str:
    return (
        f"That SQL failed: {error}\n"
        f"Write a corrected single {dialect_name(dialect)} SQL query for the same question, using only tables "
        "and columns from the schema. Output only the SQL.\nSQL:"
    )


# The fixed instructions live in the system message: it is the cached prefix, so each answer call
# only processes its own SQL, rows and question.
ANSWER_SYSTEM = (
    "You answer questions about a database using only the query result you are given. "
    "You will be given a list of data points and a question. Use the data points to answer the question. "
    "Answer in one short sentence of plain English that states the values. If the data points do "
    "not answer the question, say so. Use the values exactly as given: if a value is an id or a code, "
    "report it as it is, never guess what it stands for. Never add facts that are not in the data points."
)


def answer_user_prompt(question: str, data: str) -> str:
    """The TAG paper's answer-generation prompt (appendix B.2): data points, then the question.

    Like the paper, no SQL: the data points name their columns, and the ~40 SQL tokens cost about
    0.3 s of prompt processing per question on 2 cores."""
    return f"{data}\n\nQuestion: {question}\nAnswer:"
