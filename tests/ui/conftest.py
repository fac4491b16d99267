"""Browser tests of the web UI: a real uvicorn server of the service app on a free loopback port (in a thread
of the test process, so the scripted model can see what the test set up), driven by Playwright with Debian's
headless Chromium (/usr/bin/chromium; never `playwright install`). Every page records its requests and
console errors; every test leaves a screenshot in test-artifacts/ui/."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tagql.config import load_settings
from tagql.llm.base import Message
from tagql.llm.scripted import ScriptedLLM
from tests.loopback import run_app

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "ui"
CHROMIUM = os.environ.get("TAGQL_TEST_CHROMIUM", "/usr/bin/chromium")
PEOPLE = {"George Lucas", "J. K. Rowling", "J. R. R. Tolkien"}
PLAN = {"sql": "SELECT publisher_name FROM publisher ORDER BY publisher_name",
        "operators": [{"op": "filter", "instruction": "{publisher_name} is a person, not a company"}]}
PER_PUBLISHER = ("SELECT T2.publisher_name, COUNT(*) AS heroes FROM superhero AS T1 JOIN publisher AS T2 "
                 "ON T1.publisher_id = T2.id GROUP BY T2.publisher_name ORDER BY heroes DESC LIMIT 10")


def scripted(messages: list[Message]) -> str:
    """SQL prompts (they carry the schema) get SQL chosen from the question; answer prompts a short answer."""
    system, question = messages[0].content, messages[-1].content
    everything = " ".join(m.content for m in messages)
    if question.rstrip().endswith("Templatized Domain Statement:"):  # structuring an expert's plain words
        return "'tall heroes' refers to superhero.height_cm > 200"
    statement = re.search(r"<statement>(.*?)</statement>", question)
    if statement:  # a TAG filter's verdict on one row
        return "yes" if statement.group(1).split(" is ")[0] in PEOPLE else "no"
    if '"operators"' in everything or "plan" in system.lower():
        return json.dumps(PLAN)
    if "CREATE TABLE" not in system:
        return "Here is what the rows say."
    asked = re.findall(r"Query: (.*)", messages[1].content if len(messages) > 1 else question)
    q = (asked[-1] if asked else question).lower()
    if "CREATE TABLE singer" in system:
        return "SELECT COUNT(*) FROM singer" if "singer" in q else "SELECT name FROM singer"
    if "publisher" in q:
        return PER_PUBLISHER
    if "tall" in q:  # the statement "'tall heroes' refers to superhero.height_cm > 200", once approved
        where = " WHERE height_cm > 200" if "height_cm > 200" in everything else ""
        return f"SELECT superhero_name, height_cm FROM superhero{where} ORDER BY height_cm DESC"
    return "SELECT COUNT(*) FROM superhero"


@dataclass
class Server:
    url: str
    app: Any
    llm: ScriptedLLM

    @property
    def store(self) -> Any:
        return self.app.state.service.store


def run_server(app: Any) -> Iterator[str]:
    return run_app(app)


@pytest.fixture()
def make_server(tmp_path: Path, demo_db_path: Path) -> Iterator[Callable[..., Server]]:
    from tagql.service.app import create_app
    from tagql.service.state import StateStore

    running: list[Iterator[str]] = []

    def make(collections: dict[str, list[str]] | None = None, reply: Callable[[list[Message]], str] = scripted,
             ) -> Server:
        settings = load_settings(knowledge_dir=tmp_path / "knowledge", collections_dir=tmp_path / "collections")
        settings.service.databases = {"superhero": str(demo_db_path)}
        settings.tag.cache = False  # each test's TAG operators ask the scripted model
        if collections:
            from tagql.routing.collection import Collection

            for name, paths in collections.items():
                coll = Collection.create(name, settings=settings)
                for p in paths:
                    coll.add_database(p)
                coll.save()
            settings.service.databases = {}
            settings.service.collections = list(collections)
            settings.service.route_method = "bm25"
        llm = ScriptedLLM(reply)
        app = create_app(settings, llm=llm, store=StateStore(f"sqlite:///{tmp_path / 'state.sqlite'}"),
                         host="127.0.0.1")
        it = run_server(app)
        url = next(it)
        running.append(it)
        return Server(url, app, llm)

    yield make
    for it in running:
        next(it, None)


@pytest.fixture()
def server(make_server: Callable[..., Server]) -> Server:
    return make_server()


@pytest.fixture(scope="package")  # Playwright's sync API keeps an event loop running: end it with tests/ui
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        if os.environ.get("CI"):
            pytest.fail(f"no Chromium at {CHROMIUM} (.ci/run installs Debian's chromium)")
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@dataclass
class Watched:
    """A page and what it did: every request's URL, console errors and uncaught exceptions."""

    page: Any
    base: str
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    posts: list[tuple[str, Any]] = field(default_factory=list)  # (path, JSON body) of each POST

    def foreign_requests(self) -> list[str]:
        host = urlsplit(self.base).netloc
        return [u for u in self.requests
                if not u.startswith(("data:", "blob:")) and urlsplit(u).netloc != host]

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture()
def open_page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Callable[..., Watched]]:
    contexts: list[tuple[Any, Watched]] = []

    def open_(base: str, path: str = "/", width: int = 1280, height: int = 900, token: str | None = None
              ) -> Watched:
        context = browser.new_context(viewport={"width": width, "height": height}, accept_downloads=True)
        if token:
            context.add_init_script(f"sessionStorage.setItem('tagql-token', {token!r});")
        page = context.new_page()
        page.set_default_timeout(15000)
        w = Watched(page, base)
        page.on("request", lambda r: w.requests.append(r.url))
        page.on("request", lambda r: w.posts.append((urlsplit(r.url).path, json.loads(r.post_data or "null")))
                if r.method == "POST" else None)
        page.on("console", lambda m: w.errors.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: w.errors.append(f"pageerror: {e}"))
        page.goto(base + path)
        contexts.append((context, w))
        return w

    yield open_
    failed = getattr(request.node, "rep_call", None)
    for i, (context, w) in enumerate(contexts):
        if failed is not None and failed.failed:
            try:
                w.shot(f"{request.node.name}-failed-{i}")
            except Exception:  # noqa: BLE001 - a screenshot of a broken page is best effort
                pass
        context.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.rep_call = rep  # type: ignore[attr-defined]
