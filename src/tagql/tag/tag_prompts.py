"""Prompt texts for hybrid plans and the TAG-Bench-style answer formats (paper appendix B.2)."""

from __future__ import annotations

from collections.abc import Sequence

from tagql.knowledge import ScoredStatement
from tagql.tag.exemplars import Exemplar

PLAN_GUIDE = """\
Answer questions by writing a plan: one SQLite query plus an ordered list of operators that run on its result.
SQL does all exact work: joins, comparisons, counts, and ordering by numbers, dates or text length (ORDER BY
LENGTH(col)). SQLite counts no words: a one-word name has no space (col NOT LIKE '% %'), a name of two or more
words has one (col LIKE '% %'). Operators use a language model for what SQL cannot know: world knowledge or reasoning about text.
Operators:
- {"op": "filter", "instruction": "{Col} is ..."}: keep rows for which the statement is true.
- {"op": "map", "instruction": "... {Col} ...", "column": "new_col"}: a new column the language model computes
  per row (a category, a number it knows such as a population or a year, the month a name refers to).
- {"op": "sort", "column": "Col", "desc": true}: order the rows by a column (numbers as numbers), e.g. a mapped one.
- {"op": "topk", "instruction": "{Col} is ...", "k": N}: the N rows that best fit a judgement of their text.
- {"op": "agg", "instruction": "Summarize ..."}: summarise all rows into the answer text (last operator).
- {"op": "limit", "n": N}, {"op": "columns", "columns": ["Col"]}, {"op": "count"}, {"op": "distinct"}.
Instructions reference the SQL result's columns in braces, exactly as the SQL names them.
Operators keep the SQL row order, so ORDER BY in SQL, then filter, then limit, picks the top row that passes.
Inside SQL, LM_FILTER('{Col} is ...', Col) is 1 when the statement holds for the row's value and 0 otherwise:
use it to count or compare groups the database does not label. LM_NUMBER('the ... of {Col}', Col) is a number
the language model knows or reads from the value (a year, a population, a month's number): ORDER BY it to rank
by a fact the database does not store.
If the question depends on facts the database does not store (a region, a category, a property of a named
thing, the meaning of a text), never guess a list of values in the SQL WHERE clause: let the language model
judge the column. When SQL alone answers the question, use "operators": [].
Reply with JSON only: {"sql": "...", "operators": [...]}.

Examples (on other databases):
Question: How many schools with an average math score over 560 are in counties in the Bay Area?
{"sql": "SELECT s.School, s.County FROM schools s JOIN satscores t ON s.CDSCode = t.cds WHERE t.AvgScrMath > 560", "operators": [{"op": "filter", "instruction": "{County} is a county in the San Francisco Bay Area"}, {"op": "count"}]}
Question: What is the phone number of the school with the lowest reading score in a county in Southern California?
{"sql": "SELECT s.Phone, s.County FROM schools s JOIN satscores t ON s.CDSCode = t.cds WHERE t.AvgScrRead IS NOT NULL ORDER BY t.AvgScrRead ASC", "operators": [{"op": "filter", "instruction": "{County} is a county in Southern California"}, {"op": "limit", "n": 1}, {"op": "columns", "columns": ["Phone"]}]}
Question: Do more users live in European cities or in Asian cities? Answer 'Europe' or 'Asia'.
{"sql": "SELECT SUM(LM_FILTER('{Location} is in Europe', Location)) AS europe, SUM(LM_FILTER('{Location} is in Asia', Location)) AS asia FROM users", "operators": []}
Question: Among the cities of schools in Alameda county, list the two most populous, largest first.
{"sql": "SELECT DISTINCT City FROM schools WHERE County = 'Alameda' ORDER BY LM_NUMBER('the population of the city {City}', City) DESC LIMIT 2", "operators": []}
Question: List the posts titled '<Weekday> digest' in weekday order, Monday first.
{"sql": "SELECT Title FROM posts WHERE Title LIKE '% digest' ORDER BY LM_NUMBER('the weekday number (1-7, Monday = 1) of the weekday named in {Title}', Title)", "operators": []}
Question: Of the 5 posts with the most views, list their titles from most to least technical.
{"sql": "SELECT Title FROM posts ORDER BY ViewCount DESC LIMIT 5", "operators": [{"op": "topk", "instruction": "{Title} is technical", "k": 5}]}
Question: Of the 10 newest posts, list their titles from shortest to longest.
{"sql": "SELECT Title FROM (SELECT Title FROM posts ORDER BY CreationDate DESC LIMIT 10) ORDER BY LENGTH(Title) ASC", "operators": []}
Question: Summarize the comments on the post titled 'How does gentle boosting differ from AdaBoost?'.
{"sql": "SELECT c.Text FROM comments c JOIN posts p ON c.PostId = p.Id WHERE p.Title = 'How does gentle boosting differ from AdaBoost?'", "operators": [{"op": "agg", "instruction": "Summarize the comments"}]}
Question: How many schools are in Fresno county?
{"sql": "SELECT COUNT(*) FROM schools WHERE County = 'Fresno'", "operators": []}
"""


def plan_system_prompt(db_name: str, schema_text: str) -> str:
    return (
        f"You are a database administrator for {db_name}. Its schema:\n{schema_text}\n\n{PLAN_GUIDE}"
    )


def knowledge_lines(statements: Sequence[ScoredStatement]) -> str:
    """The question's retrieved domain statements, one line before it ("'text' refers to sql"; empty
    without statements, so the prompt is unchanged when a database has no knowledge store)."""
    if not statements:
        return ""
    return "Domain knowledge from the database's experts: " + "; ".join(s.render() for s in statements) + "\n"


def similar_plans(exemplars: Sequence[Exemplar]) -> str:
    """Solved plans of questions shaped like the asked one (on other databases), right before it."""
    if not exemplars:
        return ""
    shown = "\n".join(e.render() for e in exemplars)
    return f"Solved questions of a similar shape, on other databases:\n{shown}\n\nNow this database.\n"


def plan_user_prompt(question: str, statements: Sequence[ScoredStatement] = ()) -> str:
    return f"{knowledge_lines(statements)}Question: {question}\n"


def needs_lm_prompt(question: str, statements: Sequence[ScoredStatement] = ()) -> str:
    return (
        f"{knowledge_lines(statements)}Question: {question}\n"
        "Does answering this question need world knowledge or judgement about values that the database does "
        "not store as columns (for example a region, a category, a property of a named thing, the meaning or "
        "order of a text, a summary)? Answer yes or no."
    )


HYBRID_HINT = (
    "This question needs the language model: select the rows and columns in SQL without guessing values, then "
    "judge or compute with an operator (filter, map, sort, topk or agg) or with LM_FILTER or LM_NUMBER inside "
    "the SQL.\n"
)


# Worked examples for criterion_prompt (none from the benchmarks): the statement is about the value
# itself, names the question's whole condition ("fruit or vegetables", not "a category in the table"),
# and leaves out what the table's rows are ("a German-speaking country", not "... performer").
CRITERION_EXAMPLES = (
    ("Which schools are in a Silicon Valley city?", "school.City", "'Palo Alto', 'Fresno'",
     "{City} is a city in Silicon Valley"),
    ("How many purchases were for fruit or vegetables?", "purchase.category", "'Apples', 'Soap'",
     "{category} is fruit or vegetables"),
    ("How many songs have at least one performer from a German-speaking country?", "performer.country",
     "'Austria', 'Peru'", "{country} is a German-speaking country"),
)


def criterion_prompt(question: str, column: str, table: str, examples: str) -> str:
    shots = "".join(f"Question: {q}\nColumn: {c} (values look like: {v})\nStatement: {st}\n\n"
                    for q, c, v, st in CRITERION_EXAMPLES)
    return (
        "The rows must be chosen by one column's value, using a condition of the question that the database "
        "does not store, such as a region, a category or a property. Write that condition as a short "
        "statement about one value, starting with the column in braces.\n\n"
        f"{shots}Question: {question}\nColumn: {table}.{column} (values look like: {examples})\nStatement:"
    )


def plan_repair_prompt(error: str) -> str:
    return f"That plan is invalid: {error}\nWrite a corrected plan for the same question. JSON only."


LIST_ANSWER = (
    "You will be given a list of data points and a question. Use the data points to answer the question. "
    "Your answer must be a list of values that is evaluatable in Python. Respond in the format "
    "[value1, value2, ..., valueN]. If you are unable to answer the question, respond with []. Respond with "
    "only the list of values and nothing else. If a value is a string, it must be enclosed in double quotes."
)

CHOICE_ANSWER = (
    "You will be given a list of data points and a question that offers its possible answers. Use the data "
    "points to decide, comparing the numbers they give, and reply with exactly one of the offered answers."
)

AGG_ANSWER = (
    "You will be given a list of data points and a question. Use the data points to answer the question. "
    "If a value is a string, it must be enclosed in double quotes."
)


def answer_prompt(data: str, question: str) -> str:
    return f"{data}\n\nQuestion: {question}"
