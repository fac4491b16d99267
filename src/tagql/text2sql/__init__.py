"""Text-to-SQL: a question (+ domain statements) becomes one validated SQL query, its result an answer.

* :mod:`tagql.text2sql.query` - synthesis: prompt the LLM, extract and repair the SQL, validate, run, retry;
* :mod:`tagql.text2sql.prompts` - the SQL and answer prompt texts;
* :mod:`tagql.text2sql.answer` - answer generation from the result table, within a token budget;
* :mod:`tagql.text2sql.repair` - the repairs that read the question's words (schema and data repairs that
  need no question stay in :mod:`tagql.db.repair`).
"""
