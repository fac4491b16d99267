"""All configuration in one place: defaults < TOML file < ``TAGQL_*`` environment variables < arguments.

The TOML file is ``$TAGQL_CONFIG`` if set, else ``~/.config/tagql/config.toml`` (if it exists).
Nested keys map to environment variables with ``__``: ``[llm] backend = "openai"`` is
``TAGQL_LLM__BACKEND=openai``. See ``docs/configuration.md``.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from tagql.errors import ConfigError


def user_config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tagql"


def user_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tagql"


class LLMSettings(BaseModel):
    """Which language model answers. ``local`` runs llama.cpp in-process; ``openai`` calls any
    OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp server, OpenAI)."""

    backend: Literal["local", "openai"] = "local"
    # local: a model pack name ("qwen2.5-coder-1.5b", "qwen2.5-0.5b"), a re-quantized pack
    # ("qwen2.5-coder-1.5b-q4_0": same weights, 1.9x faster decoding here, same BIRD accuracy in
    # bench/ask/bird.py; "qwen2.5-0.5b-q4_0") or a path to any GGUF file
    model: str = "qwen2.5-coder-1.5b-q4_0"
    n_ctx: int = 8192
    n_threads: int | None = None  # None = all cores
    seed: int = 0
    temperature: float = 0.0
    # local, temperature 0: verify guesses copied from the prompt in one batch (same output, faster)
    lookup_decoding: bool = True
    # ... and from the last N outputs under the same system prompt (SQL for one database repeats its
    # joins; ~10% faster SQL). Near-ties may then resolve differently depending on what was asked
    # before (2 of 30 SQL in bench/ask/decoding.py); 0 makes each output depend on its prompt only.
    recent_outputs: int = 20
    # local: keep each evaluated schema prompt's KV state under <cache_dir>/kv/ (~30 MB per 1k tokens),
    # so the first question on a database in a new process skips its evaluation
    persist_prefixes: bool = True
    # local: let llama.cpp repack the weights for this CPU's fastest kernels (AMX on recent Xeons, REPACK).
    # They round differently from the plain kernels, and the 1.5B model's near ties follow: on an AMX Xeon,
    # P(yes) for "Palo Alto is a city in Silicon Valley" is 0.22 with them and 0.55 without (0.55 as on
    # AVX2 hosts); prompts evaluate ~2.6x faster with them there. false: the same numerics on every
    # x86 host (to compare benchmark runs across machines), slower.
    extra_buffers: bool = True
    # openai-compatible endpoint; several comma-separated URLs (or ``endpoints``) make a pool (tagql.llm.pool)
    base_url: str = "http://127.0.0.1:8080/v1"
    api_key: str | None = None  # falls back to $OPENAI_API_KEY
    openai_model: str = "default"
    request_timeout_s: float = 120.0
    # a pool of OpenAI-compatible servers of one model: requests go to the least busy one, a failing one is
    # left out and the request asked of another (docs/deployment.md)
    endpoints: list[str] = Field(default_factory=list)
    concurrency: int = Field(default=1, ge=1)  # requests in flight per endpoint (LM operators run that many)
    # LM calls this process may make through the endpoints (one run; a service's lifetime); 0 = no budget.
    # The call after the last stops with one line; answers already paid for stay in the operator cache
    max_calls: int = Field(default=0, ge=0)


class DatabaseSettings(BaseModel):
    """Limits on every query tagql runs against a user's database."""

    statement_timeout_s: float = 30.0
    row_cap: int = 10_000
    sample_values: int = 3  # distinct example values shown per text column in the prompt


class AnswerSettings(BaseModel):
    """Budget for the answer-generation prompt: how much of the result the LM sees."""

    max_rows_in_prompt: int = 20
    max_chars_in_prompt: int = 3000  # ~900 tokens; every prompt token costs time on a CPU
    max_answer_tokens: int = 160
    # who writes the answer of a result of ONE column (a value, or a list of values): "rows" says the values
    # as they are, without a model call; "model" asks the LM for a sentence as for every other result.
    # Results of several columns (values to relate) always get the LM's sentence. On the 12 latency questions
    # the 1.5B model's sentences for one-column results restated the value ("17"), cost 0.7-18.7 s, and two of
    # them misread the rows ("the lowest number of examples is Ammo"): docs/text2sql.md
    one_column_answer: Literal["rows", "model"] = "rows"
    max_sql_tokens: int = 384
    sql_retries: int = 1
    # a failed query that the model writes again word for word after the repair prompt: repeat_samples repairs
    # sampled from that conversation at sql_candidate_temperature, run, the result most agree on kept (0, or a
    # backend that cannot sample: one more greedy try from the first prompt with the error as a note); a TAG plan
    # repeated so gets that greedy try (llm/repeats.py). Off: with the 1.5B model it won back no BIRD dev or
    # test question, its samples repeat the query too (bench/ask/repeats.py, docs/text2sql.md)
    fresh_retry_on_repeat: bool = False
    repeat_samples: int = 4
    # the SQL prompt of a routed question (a collection, or one wide database): the routed tables plus up to
    # join_path_tables tables on the foreign-key paths between them, and in a table of more than
    # max_prompt_columns columns only its keys, the columns the question names and the first ones
    # (routing/linking.py; measured by bench/routing/wide_ex.py)
    join_path_tables: int = Field(default=3, ge=0)
    # in a database of more than wide_schema_tables tables, at most max_routed_tables of the router's tables
    # (best first) go into the SQL prompt before the bridges are added; 0 = every table the router lists (15
    # in a wide database: distractors beside the right tables). Smaller databases keep every routed table, as
    # measured on collections of them (bench/routing/e2e.py). 3 was picked before any run; 5 won one question
    # of 38 on Spider train and lost on dev (bench/routing/wide_ex.py; docs/routing.md), so the cheaper 3 stays
    max_routed_tables: int = Field(default=3, ge=0)
    wide_schema_tables: int = Field(default=50, ge=0)
    # how those max_routed_tables are picked: "context" ranks the router's tables by their score plus that of
    # their best key neighbour (routing/linking.py context_ranked; needs the ``ours`` router's scores), "router"
    # keeps its first ones. Gold tables shown at 3, Spider train 70.96 -> 74.72 %, dev 83.02 -> 88.48 %
    # (bench/routing/wide_coverage.py)
    wide_table_ranking: Literal["context", "router"] = "context"
    max_prompt_columns: int = Field(default=40, ge=1)
    # execution-guided SQL candidates (text2sql/candidates.py): the greedy query plus sql_candidates - 1 sampled
    # at sql_candidate_temperature (parallel sequences of one llama.cpp context), all run; the result most agree
    # on wins (sql_candidate_policy). 1 = greedy only. Measured by bench/ask/candidates.py (docs/benchmarks.md)
    sql_candidates: int = Field(default=1, ge=1, le=8)
    sql_candidate_temperature: float = 0.7
    sql_candidate_policy: Literal["majority", "majority_nonempty", "fallback"] = "majority"
    # when every try written with domain statements fails, write one more query without them
    fallback_without_statements: bool = True
    # how domain statements frame the question in the SQL prompt: "external" (BIRD's External
    # Knowledge lines, best with Qwen2.5-Coder) or "paper" (the domain-knowledge paper's wording)
    statement_style: Literal["external", "paper"] = "external"
    # fill a retrieved statement's canonical numbers ("more than {100} dollars") with the question's
    # ("more than 50 dollars") before it goes into the prompt (knowledge/instantiate.py)
    instantiate_statements: bool = True
    # honest abstention (text2sql/abstain.py): before writing SQL, ask whether the database can answer the
    # question at all (the model's P(yes), read with the SQL prompt's schema prefix, plus the question's words
    # that match nothing in the schema or its values); a question it cannot answer gets "This database does not
    # hold that" (Answer.abstained) instead of SQL. Thresholds fitted by bench/ask/abstention.py on train.
    abstain: bool = True  # on: P >= 0.94 / R >= 0.74 on dev and test, no correct answer refused (docs/text2sql.md)
    abstain_p_alone: float = 0.0  # abstain when P(yes) is below this (0: the yes/no is not asked)
    abstain_p_with_gap: float = 0.0  # ... or below this with at least abstain_min_uncovered unmatched words
    abstain_min_uncovered: int = 1
    abstain_coverage_alone: int = 2  # abstain at this many unmatched words whatever the model says (0: never)
    abstain_prompt: Literal["answerable", "answerable_missing"] = "answerable"  # the yes/no (prompts.toml)
    # show the stored values the question's words name (table.column = 'value', from a per-database index of
    # distinct text values cached under cache_dir/values/) right before the question in the SQL prompt
    # (tagql.text2sql.values; measured in bench/ask/values.py)
    value_hints: bool = True
    # the same for a question across databases (--method cross): off, since on the cross dev questions the
    # hints misled the 1.5B model ("life expectancy" -> constructors.name = 'Life'; Continent and Region both
    # = 'South America', ANDed) where it had answered right without them (docs/routing.md)
    cross_value_hints: bool = False


class TagSettings(BaseModel):
    """LM operators (semantic filter/map/rank/aggregate) and hybrid plans."""

    max_lm_calls: int = 200  # per question; exceeding it stops with a clear error
    # a join over a key the database lost chooses each row's far name once (LM_CHOOSE, then cached for every
    # later question): up to this many such calls come on top of max_lm_calls, so the first question over
    # sakila's 599 cities or superhero's 750 heroes can run at all (bench/tag/lost_link.py: choosing placed
    # rows better than a yes/no filter per name, F1 0.659 vs 0.464 on the train databases); the same for a fact
    # asked of each stored row by LM_MAP / LM_NUMBER (a column the database lacks: world_1's 239 independence
    # years), each counted before the statement runs (udf.budget_facts); 0 = no allowance
    max_link_calls: int = 1000
    batch_size: int = 1  # rows per LM call for filter/map (1 = one grammar-constrained call per distinct row)
    cache: bool = True  # persistent operator cache under cache_dir/tag_cache.sqlite
    # the operator cache in a shared database instead of the file: a SQLAlchemy URL of a tagql state store
    # (its tag_ops table), so service replicas and re-runs elsewhere share LM verdicts; `tagql serve` with
    # service.tag_cache = "state" sets it to service.state_url
    cache_url: str = ""
    agg_chunk_chars: int = 4000  # hierarchical aggregation: characters of rows per summarised chunk
    udf_timeout_s: float = 600.0  # statement timeout for SQL that calls LM functions
    plan_exemplars: int = 2  # solved plans of the most similar questions shown with each plan prompt (0: none)
    # a plan column no table has (WHERE country = 'Japan' on circuits) becomes LM_MAP('the country of {name}',
    # name) for a question that needs the LM (tag/plan.py invented_fact_columns); measured on the hidden-column
    # pool (docs/tag.md: dev 0.25 -> 0.33, test 0.00 -> 0.00, so off)
    map_invented_columns: bool = False
    # the same after validation, for a column no table of the plan's query has and no join repair can add
    # (``nationality`` on circuits; tag/plan.py Planner._validated), instead of asking the model again; and a
    # join over a key the database does not have becomes LM_CHOOSE among the far table's stored names
    # (tag/plan.py orphaned_joins)
    unplaced_columns_to_lm: bool = True
    # a plan whose WHERE filter the LM judges false for every stored value of its column (customers "in
    # Portugal" filtered on their support rep's Employee.Country, all 'Canada') goes back to the planner,
    # naming the columns of the other tables, when the column has at most filter_check_inputs distinct
    # values (the verdicts are the ones the statement would ask for anyway; tag/plan.py Planner.make)
    filter_check_inputs: int = Field(default=50, ge=0)
    # cheap-first filter cascade (embedding proxy + LM-labelled sample, bench/tag/cascade.py: 2.3x fewer LM
    # calls at equal accuracy): "on" = every filter of >= cascade_min_inputs distinct inputs, "auto" = only a
    # filter that would otherwise exceed max_lm_calls, "off" = the LM judges every input
    cascade: Literal["auto", "on", "off"] = "on"
    cascade_sample: int = 16  # inputs the LM labels first
    cascade_min_inputs: int = 40
    # a filter's yes/no from the LM's P(yes) over all its inputs, cut at their widest gap (tagql.tag.verdicts;
    # needs token probabilities: the local backend); false = each generated yes/no on its own
    split_verdicts: bool = True
    # the local model of the TAG methods (plans, LM operators, their answers, and the baselines measured beside
    # them): the shipped Q4_K_M weights, whose yes/no probabilities and plans the TAG path depends on; plain
    # `ask` keeps llm.model (the faster Q4_0 re-quantization). Dev set, same host and code: tag 0.60 with it,
    # 0.40 with Q4_0 (bench/results/archive/tag_accuracy_s24_q4km.json). "" = llm.model; ignored for other
    # backends.
    model: str = "qwen2.5-coder-1.5b"


class EmbedSettings(BaseModel):
    # sentence embeddings (knowledge retrieval, routing, TAG row retrieval and filter cascades):
    # "onnx" = MiniLM int8 on ONNX Runtime (the `local` extra, no PyTorch); "torch" = MiniLM fp32 on
    # sentence-transformers (the `embed` extra). Vectors of the two are not mixed: stores re-embed and a
    # router index built with the other one asks for a rebuild. Measured: bench/embed/backends.py
    backend: Literal["onnx", "torch"] = "onnx"


class ServiceSettings(BaseModel):
    """``tagql serve``: what the REST service offers and its limits (docs/service.md). Databases and
    collections are registered here (or with ``--db`` / ``--collection``); clients only name them."""

    host: str = "127.0.0.1"
    port: int = 8000
    databases: dict[str, str] = Field(default_factory=dict)  # name -> SQLite/DuckDB path or SQLAlchemy URL
    collections: list[str] = Field(default_factory=list)  # routing collections (``tagql route index``)
    route_method: Literal["ours", "bm25", "dense"] = "ours"  # how collections route questions
    # answers, feedback, verified examples and token hashes; "" = SQLite at <config dir>/service.sqlite;
    # a postgresql:// URL lets several replicas share one state
    state_url: str = ""
    # where the registered databases' statements live: "files" = <knowledge_dir>/<name>.kb (shared with
    # `tagql knowledge`), "state" = the state store's tables (replicas share them; seeded once from the file)
    knowledge: Literal["files", "state"] = "files"
    # where LM operator verdicts are cached: "files" = tag.cache_url or <cache_dir>/tag_cache.sqlite per host,
    # "state" = the state store's tag_ops table (replicas share every verdict)
    tag_cache: Literal["files", "state"] = "files"
    queue_size: int = 8  # questions waiting for or running on the model; one more gets 429
    workers: int = 1  # questions answered at once (1 for the embedded model; more for an endpoint)
    retry_after_s: int = 5  # the Retry-After a 429 carries
    ask_timeout_s: float = 600.0  # a question not answered by then gets 504
    max_body_bytes: int = 64_000
    max_question_chars: int = 2_000
    max_sql_chars: int = 20_000


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TAGQL_", env_nested_delimiter="__", extra="ignore")

    llm: LLMSettings = Field(default_factory=LLMSettings)
    db: DatabaseSettings = Field(default_factory=DatabaseSettings)
    answer: AnswerSettings = Field(default_factory=AnswerSettings)
    tag: TagSettings = Field(default_factory=TagSettings)
    embed: EmbedSettings = Field(default_factory=EmbedSettings)
    service: ServiceSettings = Field(default_factory=ServiceSettings)
    cache_dir: Path = Field(default_factory=user_cache_dir)
    knowledge_dir: Path = Field(default_factory=lambda: user_config_dir() / "knowledge")
    # routing collections (schema graph, synthetic questions, router index), one folder per name
    collections_dir: Path = Field(default_factory=lambda: user_cache_dir() / "collections")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _TomlSource(settings_cls))


def for_tag(settings: Settings) -> Settings:
    """``settings`` with ``llm.model`` set to ``tag.model``, the model the TAG methods run on (the same
    settings when ``tag.model`` is empty or the backend is not the local one)."""
    if not settings.tag.model or settings.llm.backend != "local" or settings.tag.model == settings.llm.model:
        return settings
    return settings.model_copy(update={"llm": settings.llm.model_copy(update={"model": settings.tag.model})})


def config_path() -> Path:
    env = os.environ.get("TAGQL_CONFIG")
    return Path(env).expanduser() if env else user_config_dir() / "config.toml"


class _TomlSource(PydanticBaseSettingsSource):
    """Reads the TOML config file; a missing default file is fine, a broken one is an error."""

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls)
        path = config_path()
        self._data: dict[str, Any] = {}
        if path.exists():
            try:
                self._data = tomllib.loads(path.read_text())
            except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read config file {path}: {exc}", "fix or remove the file") from exc
        elif os.environ.get("TAGQL_CONFIG"):
            raise ConfigError(f"config file {path} does not exist", "unset TAGQL_CONFIG or create the file")

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]


def default_settings() -> Settings:
    """The built-in defaults, ignoring the environment and the config file. A stage given no settings
    uses these: only entry points (the public API, the CLI, the service, benchmarks) read the
    environment, so a library call never changes behaviour because of a variable it cannot see."""
    return Settings.model_construct()


def load_settings(**overrides: Any) -> Settings:
    """Build the settings, turning validation problems into one-line ``ConfigError``s."""
    try:
        return Settings(**overrides)
    except SettingsError as exc:  # an environment value that must be JSON (a dict or list setting) is not
        raise ConfigError(f"invalid setting: {_first_line(exc)}",
                          "dict and list settings from the environment are JSON, e.g. "
                          "TAGQL_SERVICE__DATABASES='{\"name\": \"path\"}'") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"invalid setting {where}: {first['msg']}", "see docs/configuration.md") from exc
