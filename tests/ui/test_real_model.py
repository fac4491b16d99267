"""The web UI over a real `tagql serve` process (the CLI, uvicorn, the embedded local model): one question on
the demo database, its SQL and rows in the page, no foreign request, no console error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.loopback import free_port, wait_until_healthy

from .conftest import REPO
from .test_ask_page import first_paint_ms, table_rows

pytestmark = pytest.mark.model


def test_one_question_with_the_local_model(tmp_path: Path, demo_db_path: Path, open_page: Any) -> None:
    config = tmp_path / "tagql.toml"
    config.write_text(f'knowledge_dir = "{tmp_path / "knowledge"}"\n'
                      f'[service]\nstate_url = "sqlite:///{tmp_path / "state.sqlite"}"\n')
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(REPO / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tagql.cli", "serve", "--config", str(config), "--port", str(port),
         "--db", f"superhero={demo_db_path}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(base, tries=600)
        w = open_page(base)
        page = w.page
        page.set_default_timeout(900_000)  # a shared 2-core host: the first question reads the schema
        page.locator("#target option[value=superhero]").wait_for(state="attached")
        print(f"first paint {first_paint_ms(page):.0f} ms")
        page.get_by_label("Question").fill("How many superheroes have blue eyes?")
        page.get_by_role("button", name="Ask", exact=True).click()
        turn = page.locator("section.turn").first
        turn.locator(".stages li", has_text="done").wait_for()
        sql = turn.get_by_label("SQL").input_value()
        assert sql.upper().startswith("SELECT") and "superhero" in sql
        rows = table_rows(turn)
        assert rows and rows[0][0].isdigit(), rows
        print(f"SQL {sql!r} rows {rows} answer {turn.locator('.answer-text').text_content()!r}; "
              f"{turn.locator('p.meta').last.text_content()}")
        w.shot("real-model")
        assert w.foreign_requests() == [] and w.errors == []
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert "Uvicorn running on http://127.0.0.1" in out
