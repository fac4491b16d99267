"""Faults (issue 35 item 3): the LLM endpoint down, slow, answering garbage, 429/5xx or cut mid-response; the
database file deleted or locked mid-session; PostgreSQL killing the session mid-query; a full disk and a
read-only folder under the knowledge store, the operator cache and the service's state store; ``kill -9`` of
a writer mid-transaction. Each: one clear line (a ``TagqlError``), a retry where a retry is right, and nothing
stored before lost or corrupted (``PRAGMA integrity_check`` and every acknowledged item read back)."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fake_llm import FakeLLMServer

import tagql
from tagql.config import DatabaseSettings
from tagql.db.connection import open_database
from tagql.errors import DatabaseNotFound, LLMOutputError, LLMUnavailable, QueryFailed, TagqlError
from tagql.llm import user
from tagql.llm.llama_server import free_port
from tagql.llm.openai_compat import OpenAICompatLLM

WORKER = Path(__file__).with_name("store_worker.py")
ROOT = os.geteuid() == 0


def _llm(url: str, timeout_s: float = 5.0) -> OpenAICompatLLM:
    llm = OpenAICompatLLM(url, "fake", timeout_s=timeout_s)
    llm.retry_backoff_s = 0.01
    return llm


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert isinstance(exc, TagqlError) and "\n" not in text and "Traceback" not in text, text
    return text


# -- the LLM endpoint ---------------------------------------------------------------------------------


def test_llm_endpoint_down_is_one_line_without_retries() -> None:
    llm = _llm(f"http://127.0.0.1:{free_port()}/v1")
    start = time.perf_counter()
    with pytest.raises(LLMUnavailable) as info:
        llm.complete([user("hi")])
    assert "cannot reach the LLM endpoint" in _one_line(info.value)
    assert time.perf_counter() - start < 2


def test_llm_endpoint_too_slow_stops_at_the_request_timeout() -> None:
    with FakeLLMServer(["slow"]) as srv:
        srv.delay_s = 3.0
        llm = _llm(srv.base_url, timeout_s=0.5)
        start = time.perf_counter()
        with pytest.raises(LLMUnavailable) as info:
            llm.complete([user("hi")])
        took = time.perf_counter() - start
    assert "did not answer within 0.5 s" in _one_line(info.value) and "REQUEST_TIMEOUT_S" in str(info.value)
    assert took < 0.5 * 1.5 + 0.3 and len(srv.requests) == 1  # a slow server is not asked twice


@pytest.mark.parametrize("mode", ["garbage", "nochoices"])
def test_llm_garbage_is_an_output_error(mode: str) -> None:
    with FakeLLMServer([mode]) as srv:
        with pytest.raises(LLMOutputError) as info:
            _llm(srv.base_url).complete([user("hi")])
    assert "malformed response" in _one_line(info.value) and len(srv.requests) == 1


@pytest.mark.parametrize("transient", ["429", "500", "502", "503", "cut"])
def test_transient_llm_failures_are_retried(transient: str) -> None:
    with FakeLLMServer([transient, transient, "ok"], reply="SELECT 1") as srv:
        reply = _llm(srv.base_url).complete([user("hi")])
    assert reply.text == "SELECT 1" and len(srv.requests) == 3


@pytest.mark.parametrize(("mode", "says"), [
    ("429", "rate-limiting requests (HTTP 429 after 3 tries)"),
    ("503", "answered HTTP 503 after 3 tries"),
    ("500", "answered HTTP 500 after 3 tries"),
    ("cut", "closed the connection mid-response (RemoteProtocolError, 3 tries)"),
])
def test_persistent_llm_failures_give_up_with_one_line(mode: str, says: str) -> None:
    with FakeLLMServer([mode]) as srv:
        with pytest.raises(LLMUnavailable) as info:
            _llm(srv.base_url).complete([user("hi")])
    assert says in _one_line(info.value) and len(srv.requests) == 3


def test_a_stream_arrives_in_pieces_and_a_server_ignoring_stream_still_answers() -> None:
    for mode in ("ok", "plain"):
        pieces: list[str] = []
        with FakeLLMServer([mode], reply="There are 750 superheroes.") as srv:
            done = _llm(srv.base_url).stream([user("hi")], on_text=pieces.append)
        assert done.text == "There are 750 superheroes." == "".join(pieces)
        assert len(pieces) == (3 if mode == "ok" else 1)


def test_a_stream_cut_after_text_went_out_is_one_line_and_not_repeated() -> None:
    pieces: list[str] = []
    with FakeLLMServer(["streamcut", "ok"], reply="There are 750 superheroes.") as srv:
        with pytest.raises(LLMUnavailable) as info:
            _llm(srv.base_url).stream([user("hi")], on_text=pieces.append)
    assert "failed mid-stream" in _one_line(info.value) and pieces == ["There ar"] and len(srv.requests) == 1


@pytest.mark.parametrize("transient", ["429", "503", "cut"])
def test_a_stream_refused_before_any_text_is_retried(transient: str) -> None:
    pieces: list[str] = []
    with FakeLLMServer([transient, "ok"], reply="750.") as srv:
        done = _llm(srv.base_url).stream([user("hi")], on_text=pieces.append)
    assert done.text == "750." and len(srv.requests) == 2


def test_retry_after_is_honoured_and_capped() -> None:
    import httpx

    llm = _llm("http://127.0.0.1:9/v1")
    llm.max_retry_after_s = 4.0
    assert llm._retry_delay(httpx.Response(429, headers={"Retry-After": "2"}), 0) == 2.0
    assert llm._retry_delay(httpx.Response(429, headers={"Retry-After": "3600"}), 0) == 4.0
    assert llm._retry_delay(httpx.Response(503), 1) == pytest.approx(0.02)  # no header: exponential


def test_a_question_over_a_failing_endpoint_is_one_line_and_a_recovered_one_answers(demo_db_path: Path) -> None:
    def reply(body: dict) -> str:
        return "SELECT COUNT(*) FROM superhero" if "CREATE TABLE" in body["messages"][0]["content"] else "750."

    with FakeLLMServer(["503", "503", "503", "ok"], reply=reply) as srv:
        tq = tagql.connect(demo_db_path, llm=_llm(srv.base_url))
        with pytest.raises(LLMUnavailable) as info:
            tq.ask("How many superheroes are there?")
        assert "HTTP 503 after 3 tries" in _one_line(info.value)
        answer = tq.ask("How many superheroes are there?")  # the endpoint is back: the same session answers
    assert answer.values == [750] and answer.answer == "750"  # one value: said as it is (answer.one_column_answer)


def test_the_cli_over_a_dead_endpoint_prints_one_line(demo_db_path: Path, tmp_path: Path) -> None:
    env = {**os.environ, "TAGQL_LLM__BACKEND": "openai", "TAGQL_LLM__BASE_URL": f"http://127.0.0.1:{free_port()}/v1",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"), "NO_COLOR": "1", "COLUMNS": "300"}
    run = subprocess.run([sys.executable, "-m", "tagql.cli", "ask", "--db", str(demo_db_path), "How many heroes?"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr + run.stdout
    lines = [ln for ln in (run.stderr + run.stdout).splitlines() if ln.strip()]
    assert any("cannot reach the LLM endpoint" in ln for ln in lines), lines
    # a mistyped command line is click's usage message, not a traceback (typer's vendored click errors)
    run = subprocess.run([sys.executable, "-m", "tagql.cli", "ask", "a", "b"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr and "unexpected extra argument" in run.stderr


@pytest.mark.anyio
async def test_the_service_answers_503_when_the_endpoint_is_down(tmp_path: Path, demo_db_path: Path) -> None:
    import httpx

    from tagql.config import load_settings
    from tagql.service.app import create_app
    from tagql.service.state import StateStore

    settings = load_settings(knowledge_dir=tmp_path / "knowledge")
    settings.service.databases = {"superhero": str(demo_db_path)}
    app = create_app(settings, llm=_llm(f"http://127.0.0.1:{free_port()}/v1"),
                     store=StateStore(f"sqlite:///{tmp_path / 'state.sqlite'}"), host="127.0.0.1")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://tagql") as c:
        r = await c.post("/v1/ask", json={"question": "How many heroes?", "database": "superhero"})
    assert r.status_code == 503 and "cannot reach the LLM endpoint" in r.json()["error"]
    assert "\n" not in r.json()["error"]


@pytest.fixture()
def anyio_backend() -> str:
    return "asyncio"


# -- the database under the session ------------------------------------------------------------------


def test_database_file_deleted_mid_session(tmp_path: Path, demo_db_path: Path) -> None:
    path = tmp_path / "hero.sqlite"
    shutil.copy(demo_db_path, path)
    db = open_database(path)
    assert db.execute("SELECT COUNT(*) FROM superhero").rows == [(750,)]
    path.unlink()
    # a pooled connection still holds the open file: it reads it whole (never a torn half)
    assert db.execute("SELECT COUNT(*) FROM superhero").rows == [(750,)]
    db.engine.dispose()  # every new connection has to open the path again
    with pytest.raises(DatabaseNotFound) as info:
        db.execute("SELECT COUNT(*) FROM superhero")
    assert "is gone (deleted or moved while tagql was running)" in _one_line(info.value)
    shutil.copy(demo_db_path, path)  # put back: the same Database answers again
    assert db.execute("SELECT COUNT(*) FROM superhero").rows == [(750,)]


def test_database_locked_by_a_writer_waits_at_most_the_statement_timeout(tmp_path: Path, demo_db_path: Path) -> None:
    path = tmp_path / "hero.sqlite"
    shutil.copy(demo_db_path, path)
    db = open_database(path, settings=DatabaseSettings(statement_timeout_s=1.0))
    writer = sqlite3.connect(path)
    writer.execute("BEGIN EXCLUSIVE")  # another program's write transaction (rollback journal: readers wait)
    writer.execute("UPDATE superhero SET height_cm = height_cm WHERE id = 1")
    start = time.perf_counter()
    with pytest.raises(QueryFailed) as info:
        db.execute("SELECT COUNT(*) FROM superhero")
    took = time.perf_counter() - start
    assert "locked by another program's write (waited 1 s)" in _one_line(info.value) and "retry" in str(info.value)
    assert took < 1.5 * 1.0
    writer.rollback()
    writer.close()
    assert db.execute("SELECT COUNT(*) FROM superhero").rows == [(750,)]  # usable afterwards


def test_truncated_database_file_is_one_line(tmp_path: Path, demo_db_path: Path) -> None:
    path = tmp_path / "hero.sqlite"
    shutil.copy(demo_db_path, path)
    db = open_database(path)
    with path.open("r+b") as f:
        f.truncate(8192)
    with pytest.raises(QueryFailed) as info:
        db.execute("SELECT COUNT(*) FROM superhero")
    assert "malformed" in _one_line(info.value)


@pytest.mark.postgres
def test_postgres_session_killed_mid_query(postgres_url: str) -> None:
    """What a server restart does to a running query (without restarting the server other tests share): a
    superuser terminates this query's backend. One line, and the next query runs on a fresh connection."""
    admin_url = os.environ.get("TAGQL_TEST_POSTGRES_SUPERUSER_URL")
    if not admin_url:
        pytest.skip("needs TAGQL_TEST_POSTGRES_SUPERUSER_URL (.ci/run)")
    import psycopg

    db = open_database(postgres_url, settings=DatabaseSettings(statement_timeout_s=20))
    marker = f"tagql_fault_{random.Random(7).randrange(10**9)}"
    killed: list[int] = []

    def kill() -> None:
        with psycopg.connect(admin_url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as admin:
            for _ in range(100):
                rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE query LIKE %s AND pid <> "
                                     "pg_backend_pid()", (f"%{marker}%",)).fetchall()
                if rows:
                    killed.extend(r[0] for r in rows)
                    admin.execute("SELECT pg_terminate_backend(%s)", (rows[0][0],))
                    return
                time.sleep(0.1)

    t = threading.Thread(target=kill)
    t.start()
    start = time.perf_counter()
    with pytest.raises(TagqlError) as info:
        db.execute(f"SELECT COUNT(*) AS {marker} FROM generate_series(1, 3000) a, generate_series(1, 3000) b, "
                   "generate_series(1, 3000) c")
    t.join()
    assert killed and time.perf_counter() - start < 15
    _one_line(info.value)
    assert db.execute("SELECT COUNT(*) FROM superhero").rows == [(750,)]  # the pool reconnects


# -- the stores: full disk, read-only folder, kill -9 ------------------------------------------------


def _worker(*args: str, kill_after: float | None = None, timeout: float = 120) -> tuple[int, list[str]]:
    proc = subprocess.Popen([sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    if kill_after is not None:
        # wait for the store to be open (imports take a while on a loaded machine), then write for a while
        assert proc.stdout is not None
        first = proc.stdout.readline()
        time.sleep(kill_after)
        proc.kill()
        out, err = proc.communicate(timeout=timeout)
        out = first + out
    else:
        out, err = proc.communicate(timeout=timeout)
    assert "Traceback" not in err, err
    if not out.endswith("\n"):  # killed mid-line: that line was not acknowledged
        out = out[: out.rfind("\n") + 1]
    return proc.returncode, out.splitlines()


def _acked(lines: list[str]) -> set[str]:
    return {ln.split(" ", 1)[1] for ln in lines if ln.startswith("ack ")}


def _contents(kind: str, path: Path) -> list[str]:
    """Integrity check, then every stored key (with repeats, so a duplicate shows)."""
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        query = {"kb": "SELECT text FROM statements", "cache": "SELECT key FROM ops",
                 "state": "SELECT question FROM answers"}[kind]
        return [r[0] for r in conn.execute(query)]
    finally:
        conn.close()


def _target(kind: str, path: Path) -> str:
    return f"sqlite:///{path}" if kind == "state" else str(path)


STORES = ["kb", "cache", "state"]


@pytest.mark.parametrize("kind", STORES)
def test_kill_9_of_a_writer_loses_nothing_acknowledged(kind: str, tmp_path: Path) -> None:
    path = tmp_path / f"{kind}.sqlite"
    rng = random.Random(35)
    acked: set[str] = set()
    for round_ in range(4):
        code, lines = _worker(kind, _target(kind, path), f"r{round_}", "100000", kill_after=rng.uniform(0.2, 0.8))
        assert code == -9
        acked |= _acked(lines)
    stored = _contents(kind, path)
    assert len(stored) == len(set(stored))  # nothing twice
    assert acked and acked <= set(stored)  # every acknowledged write survived
    # and the store still takes writes
    code, lines = _worker(kind, _target(kind, path), "after", "3")
    assert code == 0 and _acked(lines) == {"after-0", "after-1", "after-2"}


@pytest.mark.parametrize("kind", STORES)
def test_full_disk_is_one_line_and_keeps_what_was_stored(kind: str, tmp_path: Path) -> None:
    path = tmp_path / f"{kind}.sqlite"
    code, lines = _worker(kind, _target(kind, path), "before", "20")
    assert code == 0
    before = set(_contents(kind, path))
    limit = path.stat().st_size + 16_384
    code, lines = _worker(kind, _target(kind, path), "full", "2000", "--fsize", str(limit))
    if kind == "cache":  # a cache that cannot write goes on in memory: the question still gets its answer
        assert code == 0 and any(ln.startswith("problem") for ln in lines), lines[-3:]
        assert any(ln.startswith("mem ") for ln in lines)
    else:
        assert code == 3, lines[-3:]
        error = next(ln for ln in lines if ln.startswith("error "))
        assert "nothing" in error and "stored" in error, error
        if kind == "kb":
            assert "the disk is full" in error
    after = _contents(kind, path)
    assert len(after) == len(set(after)) and before <= set(after) and _acked(lines) <= set(after)


@pytest.fixture()
def open_tmp() -> Any:
    """A temporary folder the unprivileged user can reach (pytest's own is private to root)."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="tagql-ro-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("kind", STORES)
def test_read_only_folder_reads_and_refuses_writes_with_one_line(kind: str, open_tmp: Path) -> None:
    folder = open_tmp / "ro"
    folder.mkdir()
    path = folder / f"{kind}.sqlite"
    code, _ = _worker(kind, _target(kind, path), "before", "10")
    assert code == 0
    before = _contents(kind, path)
    for extra in folder.iterdir():  # a clean close leaves no -wal/-shm; make sure
        assert extra == path, extra
    folder.chmod(0o555)
    path.chmod(0o444)
    try:
        args = ["--nobody"] if ROOT else []  # root ignores file modes: run the writer unprivileged
        code, lines = _worker(kind, _target(kind, path), "ro", "5", *args)
    finally:
        folder.chmod(0o755)
        path.chmod(0o644)
    if kind == "cache":
        assert code == 0 and any("readonly" in ln for ln in lines if ln.startswith("problem")), lines
    else:
        assert code == 3, lines
        error = next(ln for ln in lines if ln.startswith("error "))
        assert "read-only" in error or "readonly" in error, error
        if kind == "kb":
            assert lines[0] == "open"  # the store opened for reading; only the write was refused
    assert _contents(kind, path) == before


def test_read_only_knowledge_store_still_answers_retrieval(open_tmp: Path) -> None:
    from store_worker import HashEmbedder

    from tagql.knowledge.store import KnowledgeBase, KnowledgeStoreError

    tmp_path = open_tmp
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "k.kb"
    kb = KnowledgeBase.open(path, create=True, embedder=HashEmbedder())
    kb.add("tall heroes", "superhero.height_cm > 200", status="approved")
    kb.close()
    code = "\n".join([
        "import os, sys",
        "sys.path[:0] = sys.argv[1:3]",
        "from store_worker import HashEmbedder",
        "from tagql.knowledge.store import KnowledgeBase, KnowledgeStoreError",
        "import tagql.knowledge.retrieval",
        "if os.geteuid() == 0:",
        "    os.setgid(65534); os.setuid(65534)  # root ignores file modes",
        "kb = KnowledgeBase.open(sys.argv[3], embedder=HashEmbedder())",
        "print(kb.read_only, [s.text for s in kb.retriever('dense').retrieve('tall heroes', 1)])",
        "try:",
        "    kb.add('x', '')",
        "except KnowledgeStoreError as e:",
        "    print(e)",
    ])
    args = [str(Path(__file__).parent), str(Path(__file__).resolve().parents[2] / "src"), str(path)]
    folder.chmod(0o555)
    try:
        run = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    finally:
        folder.chmod(0o755)
    assert run.returncode == 0, run.stderr
    first, second = run.stdout.splitlines()
    assert first == "True ['tall heroes']"
    assert "its folder is read-only" in second and "nothing was stored" in second
    assert KnowledgeBase.open(path).count()["approved"] == 1
    with pytest.raises(KnowledgeStoreError):
        KnowledgeBase.open(tmp_path / "missing.kb")


def test_state_store_write_failure_is_a_state_error(tmp_path: Path) -> None:
    from tagql.service.state import StateError, StateStore

    store = StateStore(f"sqlite:///{tmp_path / 'state.sqlite'}")
    store.save_answer({"question": "q"}, target="d", token_name=None)
    blocker = sqlite3.connect(tmp_path / "state.sqlite", timeout=0)
    blocker.execute("BEGIN IMMEDIATE")  # a writer that never finishes
    store.engine.dispose()
    import sqlalchemy as sa

    fast: Any = sa.create_engine(f"sqlite:///{tmp_path / 'state.sqlite'}", connect_args={"timeout": 0.2})
    store.engine = fast
    with pytest.raises(StateError) as info:
        store.save_answer({"question": "q2"}, target="d", token_name=None)
    assert "database is locked; nothing of this request was stored" in _one_line(info.value)
    blocker.rollback()
    assert [r[0] for r in sqlite3.connect(tmp_path / "state.sqlite").execute("SELECT question FROM answers")] == ["q"]
