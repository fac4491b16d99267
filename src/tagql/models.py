"""The typed results of the public API. The CLI's ``--json``, the REST service and the MCP server all
serialise these same models (``model_dump(mode="json")``), so a field means one thing everywhere."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Statement(BaseModel):
    """A domain statement used for a question: "'text' refers to sql", with its retrieval score."""

    text: str
    sql: str = ""
    score: float = 0.0

    def render(self) -> str:
        """The paper's prompt format."""
        return f"'{self.text}' refers to {self.sql}" if self.sql else self.text

    @classmethod
    def of(cls, scored: Any) -> Statement:
        """From a retrieved :class:`tagql.knowledge.ScoredStatement`."""
        return cls(text=scored.text, sql=scored.sql, score=round(float(scored.score), 4))


class Attempt(BaseModel):
    """One SQL query the model wrote, and the error that made tagql try again (None: it ran)."""

    sql: str
    error: str | None = None


class RouteCandidate(BaseModel):
    """One routed schema of a collection: a database and the tables the question needs."""

    database: str
    tables: list[str] = Field(default_factory=list)
    score: float = 0.0
    confidence: float | None = None
    # the router's score of each listed table (``ours`` only): what the wide-schema cap ranks by
    # (routing/linking.py ``capped_tables``); kept out of JSON, where the table order already says it
    table_scores: dict[str, float] = Field(default_factory=dict, exclude=True)

    @classmethod
    def of(cls, candidate: Any) -> RouteCandidate:
        """From a :class:`tagql.routing.router.Candidate`."""
        return cls(**candidate.to_dict(), table_scores=dict(candidate.table_scores))


class Plan(BaseModel):
    """A TAG plan: the SQL that runs and the LM operators applied to its rows (plus what the planner
    recorded: attempts, trace, a fallback). Extra keys are kept as the planner wrote them."""

    model_config = ConfigDict(extra="allow")

    sql: str = ""
    operators: list[dict[str, Any]] = Field(default_factory=list)


class SqlResult(BaseModel):
    """Rows of one read-only query (``Session.sql``)."""

    database: str
    sql: str
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool = False
    notes: list[str] = Field(default_factory=list)


class Example(BaseModel):
    """A verified question -> SQL pair of a database, shown to the SQL prompt as a few-shot example."""

    question: str
    sql: str


class Answer(BaseModel):
    """Everything one question produced."""

    question: str
    database: str
    sql: str = ""
    columns: list[str] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list)
    answer: str = ""
    values: list[Any] = Field(default_factory=list)
    timings: dict[str, float] = Field(default_factory=dict)
    tokens: dict[str, float] = Field(default_factory=dict)
    statements: list[Statement] = Field(default_factory=list)
    attempts: list[Attempt] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    truncated: bool = False
    routing: list[RouteCandidate] = Field(default_factory=list)  # collections: candidate schemas, best first
    method: str = "sql"
    model: str = ""  # the language model that answered
    plan: Plan | None = None  # --method tag
    operator_stats: dict[str, Any] = Field(default_factory=dict)
    examples: list[Example] = Field(default_factory=list)  # verified examples the SQL prompt showed
    context_turns: int = 0  # earlier turns of the conversation the SQL prompt showed (a follow-up: > 0)
    # honest abstention (answer.abstain): the database cannot answer the question, so no SQL ran; ``answer``
    # says so and ``abstain_reason`` names what is missing when it can
    abstained: bool = False
    abstain_reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form every interface prints."""
        return self.model_dump(mode="json")


METHODS = ("sql", "tag", "text2sql", "rag", "retrieval_rank", "text2sql_lm", "cross")
"""How a question is answered: ``sql`` (default: SQL, then the LM answers from the rows), one of the
TAG paper's methods (``docs/tag.md``), or ``cross`` (a collection: across its databases, ``docs/routing.md``)."""
