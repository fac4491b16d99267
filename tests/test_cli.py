"""The command line without a model: one-line errors with exit status 2, schema and sql commands."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tagql.cli import app

runner = CliRunner()


def test_unknown_database_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["ask", "How many?", "--db", str(tmp_path / "missing.db")])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: database file")


def test_schema_command_prints_create_tables(demo_db_path: Path) -> None:
    result = runner.invoke(app, ["schema", "--db", str(demo_db_path)])
    assert result.exit_code == 0 and "CREATE TABLE superhero" in result.output


def test_sql_command_runs_checked_queries(demo_db_path: Path) -> None:
    ok = runner.invoke(app, ["sql", "SELECT COUNT(*) AS n FROM publisher", "--db", str(demo_db_path), "--json"])
    assert ok.exit_code == 0 and json.loads(ok.output) == {"columns": ["n"], "rows": [[25]], "truncated": False}
    bad = runner.invoke(app, ["sql", "DELETE FROM publisher", "--db", str(demo_db_path)])
    assert bad.exit_code == 2 and "only SELECT queries may run" in bad.output
    typo = runner.invoke(app, ["sql", "SELECT nam FROM publisher", "--db", str(demo_db_path)])
    assert typo.exit_code == 2 and "column 'nam' does not exist" in typo.output


def test_bad_openai_endpoint_is_one_line(demo_db_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TAGQL_LLM__BASE_URL", "http://127.0.0.1:9/v1")
    result = runner.invoke(app, ["ask", "How many heroes?", "--db", str(demo_db_path), "--llm", "openai"])
    assert result.exit_code == 2 and "cannot reach the LLM endpoint" in result.output


def test_missing_knowledge_store_is_reported_before_loading_a_model(demo_db_path: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["ask", "How many heroes?", "--db", str(demo_db_path), "--store", str(tmp_path / "no.kb")])
    assert result.exit_code == 2 and "knowledge store" in result.output and "does not exist" in result.output
