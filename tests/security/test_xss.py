"""Stored cross-site scripting through data (issue 35 item 5) in a real browser (the UI's Playwright set-up,
tests/ui/conftest.py): a database whose column names and cell values, a knowledge statement, a question and the
model's answer all carry script payloads (``<script>``, ``"><img onerror=...>``, ``javascript:`` links, inline
SVG handlers, an iframe, template syntax). The ask page and the knowledge page show them; no dialog fires, no
request leaves for the attacker's listener, no element the payloads describe exists in the page, and the
payloads read back as text."""

from __future__ import annotations

import socket
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tagql.config import load_settings
from tagql.llm.base import Message
from tagql.llm.scripted import ScriptedLLM
from tests.ui.conftest import CHROMIUM, Watched, open_page, run_server  # noqa: F401 - open_page: a fixture

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(scope="module")  # Playwright's sync API keeps an event loop running: end it with this module
def browser() -> Iterator[Any]:
    import os
    import shutil

    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        if os.environ.get("CI"):
            pytest.fail(f"no Chromium at {CHROMIUM} (.ci/run installs Debian's chromium)")
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


class Listener:
    """Where the payloads try to send requests: any connection counts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        self._stop = threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.hits += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


def payloads(port: int) -> list[str]:
    leak = f"http://127.0.0.1:{port}"
    return [
        "<script>alert('xss-script')</script>",
        f"\"><img src={leak}/img onerror=alert('xss-img')>",
        "javascript:alert('xss-link')",
        "<a href=\"javascript:alert('xss-a')\" id=xss-anchor>click me</a>",
        "<svg onload=alert('xss-svg')><circle r=5></circle></svg>",
        f"<iframe src=\"{leak}/frame\"></iframe>",
        "{{constructor.constructor('alert(1)')()}} ${alert(2)}",
        f"');fetch('{leak}/fetch');//",
    ]


@pytest.fixture()
def xss_server(tmp_path: Path) -> Iterator[tuple[str, list[str], Listener, Any]]:
    from tagql.service.app import create_app
    from tagql.service.state import StateStore

    listener = Listener()
    texts = payloads(listener.port)
    db = tmp_path / "xss.sqlite"
    conn = sqlite3.connect(db)
    cols = ["<img src=x onerror=alert('col')>", "<script>alert('col2')</script>", "label"]
    conn.execute("CREATE TABLE xss (" + ", ".join(f'"{c.replace(chr(34), chr(34) * 2)}" TEXT' for c in cols) + ")")
    conn.executemany("INSERT INTO xss VALUES (?, ?, ?)", [(p, p, f"row {i}") for i, p in enumerate(texts)])
    conn.commit()
    conn.close()

    def reply(messages: list[Message]) -> str:
        if "CREATE TABLE" in messages[0].content:
            return "SELECT * FROM xss"
        return texts[1] + " " + texts[3]  # the answer sentence carries payloads too

    settings = load_settings(knowledge_dir=tmp_path / "knowledge")
    settings.service.databases = {"xss": str(db)}
    app = create_app(settings, llm=ScriptedLLM(reply), store=StateStore(f"sqlite:///{tmp_path / 'state.sqlite'}"),
                     host="127.0.0.1")
    kb = app.state.service.registry.get("xss").knowledge_base(create=True)
    for p in texts:
        kb.add(p, p, status="proposed", reason=p)
    it = run_server(app)
    url = next(it)
    yield url, texts, listener, cols
    next(it, None)
    listener.close()


def _no_xss(w: Watched, dialogs: list[str], listener: Listener) -> None:
    page = w.page
    page.wait_for_timeout(500)  # let anything that would load or fire do so
    assert dialogs == [], dialogs
    assert listener.hits == 0
    assert w.foreign_requests() == [], w.foreign_requests()
    found = page.evaluate("""() => ({
        scripts: [...document.scripts].filter(s => !s.src).length,
        handlers: [...document.querySelectorAll('*')].filter(e => [...e.attributes].some(
            a => a.name.startsWith('on'))).length,
        jsLinks: [...document.querySelectorAll('[href],[src]')].filter(e => /^\\s*javascript:/i.test(
            e.getAttribute('href') || e.getAttribute('src') || '')).length,
        injected: document.querySelectorAll('#xss-anchor, iframe, svg circle, img[src="x"]').length,
    })""")
    assert found == {"scripts": 0, "handlers": 0, "jsLinks": 0, "injected": 0}, found


def test_payloads_in_data_question_answer_and_statements_never_execute(
        xss_server: tuple[str, list[str], Listener, Any], open_page: Any) -> None:
    url, texts, listener, cols = xss_server
    dialogs: list[str] = []
    w = open_page(url)
    page = w.page
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.get_by_label("Database").locator("option[value=xss]").wait_for(state="attached")
    page.get_by_label("Question").fill(texts[0] + " " + texts[2] + " what is in xss?")
    page.get_by_role("button", name="Ask", exact=True).click()
    turn = page.locator("section.turn").first
    turn.locator(".stages li", has_text="done").wait_for()
    headers = turn.locator("table.grid thead th").all_text_contents()
    assert headers[:3] == cols  # column names shown as text
    cells = turn.locator("table.grid tbody tr").evaluate_all(
        "trs => trs.map(tr => [...tr.cells].map(td => td.textContent))")
    assert [r[0] for r in cells] == texts  # every payload read back as the text it is
    assert texts[0] in page.content().replace("&lt;", "<").replace("&gt;", ">")  # the question, as text
    _no_xss(w, dialogs, listener)
    w.shot("xss-ask")

    k = open_page(url, "/knowledge")
    k.page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    k.page.locator("#kb-db option[value=xss]").wait_for(state="attached")
    k.page.locator("#statements tbody tr[data-id]").nth(len(texts) - 1).wait_for()
    shown = k.page.locator("#statements tbody").text_content()
    assert all(t in shown for t in texts)
    _no_xss(k, dialogs, listener)
    k.shot("xss-knowledge")
