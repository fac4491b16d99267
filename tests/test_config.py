"""Configuration: defaults < TOML file < TAGQL_* environment < arguments; clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tagql.config import load_settings
from tagql.errors import ConfigError


def test_toml_then_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "tagql.toml"
    cfg.write_text('[llm]\nbackend = "openai"\nbase_url = "http://example:1/v1"\n[db]\nrow_cap = 7\n')
    monkeypatch.setenv("TAGQL_CONFIG", str(cfg))
    s = load_settings()
    assert (s.llm.backend, s.llm.base_url, s.db.row_cap) == ("openai", "http://example:1/v1", 7)
    monkeypatch.setenv("TAGQL_DB__ROW_CAP", "9")
    assert load_settings().db.row_cap == 9


def test_defaults_are_the_embedded_model_at_temperature_zero(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    s = load_settings()
    assert s.llm.backend == "local" and s.llm.model == "qwen2.5-coder-1.5b-q4_0" and s.llm.temperature == 0.0


def test_broken_toml_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[llm\nbackend = ")
    monkeypatch.setenv("TAGQL_CONFIG", str(cfg))
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings()


def test_invalid_value_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAGQL_LLM__BACKEND", "gpt-banana")
    with pytest.raises(ConfigError, match="invalid setting llm.backend"):
        load_settings()


def test_missing_explicit_config_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TAGQL_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings()


def test_the_tag_methods_run_on_their_own_model_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tagql.config import for_tag

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    s = load_settings()
    t = for_tag(s)
    assert (s.tag.model, t.llm.model, s.llm.model) == ("qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-q4_0")
    assert t.llm.n_ctx == s.llm.n_ctx and t.tag == s.tag  # nothing else changes
    assert for_tag(load_settings(tag={"model": ""})).llm.model == "qwen2.5-coder-1.5b-q4_0"  # "" = llm.model
    endpoint = load_settings(llm={"backend": "openai"})
    assert for_tag(endpoint) is endpoint  # an endpoint serves its own model
