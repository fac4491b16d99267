"""A new user's first hour (issue 31): bad inputs x commands give one line and exit status 2, never a
traceback; the README's commands run in a fresh process with an empty home and print what the README shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tagql.cli import app

runner = CliRunner()


def _no_model(*args, **kwargs):
    raise AssertionError("a bad input must be refused before the model loads")


def _bad_targets(tmp_path: Path) -> dict[str, str]:
    text_file = tmp_path / "notes.txt"
    text_file.write_text("not a database\n")
    return {
        "missing file": str(tmp_path / "missing.sqlite"),
        "not a database": str(text_file),
        "a directory": str(tmp_path),
        "malformed URL": "postgresql+psycopg://u:p@[::1/x",
        "unknown scheme": "nosuchdb://host/x",
    }


COMMANDS = {
    "ask": lambda db: ["ask", "How many heroes?", "--db", db],
    "ask --json": lambda db: ["ask", "How many heroes?", "--db", db, "--json"],
    "ask --method tag": lambda db: ["ask", "How many heroes?", "--db", db, "--method", "tag"],
    "sql": lambda db: ["sql", "SELECT 1", "--db", db],
    "sql --json": lambda db: ["sql", "SELECT 1", "--db", db, "--json"],
    "schema": lambda db: ["schema", "--db", db],
    "knowledge add": lambda db: ["knowledge", "add", "--db", db, "--structured", "'x' refers to t.a = 1"],
    "knowledge check": lambda db: ["knowledge", "check", "--db", db],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_bad_database_inputs_x_commands_are_one_line(command: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("tagql.api.make_llm", _no_model)
    monkeypatch.setenv("TAGQL_KNOWLEDGE_DIR", str(tmp_path / "kb"))
    for label, target in _bad_targets(tmp_path).items():
        result = runner.invoke(app, COMMANDS[command](target))
        assert result.exit_code == 2, (command, label, result.output, result.exception)
        assert isinstance(result.exception, SystemExit), (command, label, result.exception)
        out = result.stdout.strip()
        if "--json" in command:
            assert json.loads(out)["ok"] is False, (command, label, out)
        else:
            lines = [ln for ln in result.output.splitlines() if ln.strip() and not ln.startswith("--method")]
            assert len(lines) == 1 and lines[0].startswith("error: "), (command, label, result.output)


@pytest.mark.parametrize("args", [
    ["ask", "   ", "--db", "DEMO"],
    ["ask", "How many?"],
    ["ask", "How many?", "--db", "DEMO", "--collection", "x"],
    ["ask", "How many?", "--collection", "no-such-collection"],
    ["sql", "SELECT * FROM", "--db", "DEMO"],
    ["sql", "SELECT 1; DROP TABLE superhero", "--db", "DEMO"],
    ["sql", "SELECT nope FROM superhero", "--db", "DEMO"],
    ["route", "--collection", "no-such-collection", "--question", "How many?"],
    ["knowledge", "list", "--store", "MISSING"],
])
def test_other_bad_inputs_are_one_line(args: list[str], demo_db_path: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("tagql.api.make_llm", _no_model)
    monkeypatch.setenv("TAGQL_COLLECTIONS_DIR", str(tmp_path / "collections"))
    args = [str(demo_db_path) if a == "DEMO" else str(tmp_path / "missing.kb") if a == "MISSING" else a for a in args]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, (args, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), (args, result.exception)
    assert "Traceback" not in result.output
    if "route" not in args:
        lines = [ln for ln in result.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), result.output


def _fresh_env(tmp_path: Path) -> dict[str, str]:
    """An empty home; only the assembled model is reused (tests/llm/test_model_pack.py covers assembly)."""
    from tagql.config import load_settings

    home = tmp_path / "home"
    cache = home / ".cache" / "tagql"
    cache.mkdir(parents=True)
    (cache / "models").symlink_to(Path(load_settings().cache_dir).expanduser() / "models")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAGQL_")}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), XDG_CONFIG_HOME=str(home / ".config"))
    return env


def _tagql(env: dict[str, str], *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tagql.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.model
def test_readme_commands_in_a_fresh_home(tmp_path: Path, demo_db_path: Path, shared_data: Path) -> None:
    env = _fresh_env(tmp_path)
    demo = _tagql(env, "demo")
    assert demo.returncode == 0 and "Traceback" not in demo.stderr, demo.stderr
    assert demo.stdout.count("answer:") == 3 and "SELECT" in demo.stdout and "LM calls" in demo.stdout

    ask = _tagql(env, "ask", "Which 3 superheroes are the tallest?", "--db", str(demo_db_path), "--json")
    got = json.loads(ask.stdout)
    assert ask.returncode == 0 and got["database"] == "superhero" and len(got["rows"]) == 3 and got["answer"]

    schema = _tagql(env, "schema", "--db", str(demo_db_path), "--json")
    assert schema.returncode == 0 and "superhero" in [t["name"] for t in json.loads(schema.stdout)["tables"]]
    config = _tagql(env, "config", "--json")
    assert config.returncode == 0 and json.loads(config.stdout)["found"] is False

    store = str(tmp_path / "superhero.kb")
    add = _tagql(env, "knowledge", "add", "--db", str(demo_db_path), "--store", store, "--json",
                 "Giants are superheroes taller than 250 cm")
    assert add.returncode == 0, add.stderr
    added = [json.loads(line) for line in add.stdout.splitlines()]
    assert added and added[0]["status"] == "proposed" and "approved" in add.stderr
    review = _tagql(env, "knowledge", "review", "--store", store, "--approve", str(added[0]["id"]), "--json")
    assert review.returncode == 0 and json.loads(review.stdout)["status"] == "approved"

    concert = shared_data / "spider" / "database" / "concert_singer" / "concert_singer.sqlite"
    index = _tagql(env, "route", "index", "shop", "--db", str(demo_db_path), "--db", str(concert), "--json")
    assert index.returncode == 0 and json.loads(index.stdout)["databases"] == 2, index.stderr
    routed = _tagql(env, "ask", "How many singers do we have?", "--collection", "shop", "--json")
    got = json.loads(routed.stdout)
    assert routed.returncode == 0 and got["database"] == "concert_singer" and got["values"] == [6], routed.stdout
