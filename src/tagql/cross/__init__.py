"""Questions across databases of a collection (``--method cross``): decompose the question into one
sub-question per database (:mod:`~tagql.cross.plan`), run each as SQL on its own database, join the
results on the entity they share in DuckDB, with an LM operator matching values written differently
(:mod:`~tagql.cross.join`), and answer with a final query over the joined table (:mod:`~tagql.cross.run`).

The stage takes its LLM, its databases and its LM-operator engine as parameters; :mod:`tagql.api` wires it.
"""

from tagql.cross.join import JOIN_KEY, JoinFailed, JoinOutcome, SubResult, join_results, match_values
from tagql.cross.plan import CrossPlan, CrossPlanError, Part, parse_plan, plan_question
from tagql.cross.run import CrossOutcome, Step, SubQueryFailed, UnknownDatabase, answer_across

__all__ = [
    "JOIN_KEY", "CrossOutcome", "CrossPlan", "CrossPlanError", "JoinFailed", "JoinOutcome", "Part", "Step",
    "SubQueryFailed", "SubResult", "UnknownDatabase", "answer_across", "join_results", "match_values",
    "parse_plan", "plan_question",
]
