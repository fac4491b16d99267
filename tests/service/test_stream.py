"""Stage events over SSE: they arrive in pipeline order (sql before the answer), end with ``done`` carrying
the stored answer's id or with ``error``; a client that goes away cancels the question."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tagql.llm.scripted import ScriptedLLM

from .conftest import sql_then_answer

pytestmark = pytest.mark.anyio

SSE = {"accept": "text/event-stream"}


def parse(text: str) -> list[tuple[str, Any]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        events.append((lines["event"], json.loads(lines["data"])))
    return events


async def test_events_in_stage_order_then_done_with_id(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/ask", headers=SSE,
                          json={"question": "How many superheroes are there?", "database": "superhero"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = parse(r.text)
    names = [name for name, _ in events]
    assert names == ["queued", "statements", "sql", "rows", "answer", "done"]
    data = dict(events)
    assert data["sql"] == {"sql": "SELECT COUNT(*) FROM superhero"}
    assert data["rows"]["rows"] == [[750]] and data["answer"]["answer"] == "750"  # one value: said as it is
    stored = (await client.get(f"/v1/answers/{data['done']['id']}")).json()
    assert stored["values"] == [750] and data["done"]["values"] == [750]


async def test_failure_is_an_error_event(make_app: Callable[..., Any]) -> None:
    app = make_app(llm=ScriptedLLM(sql_then_answer(sql="SELECT nothing FROM nowhere")))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        r = await c.post("/v1/ask", headers=SSE, json={"question": "How many?", "database": "superhero"})
        plain = await c.post("/v1/ask", json={"question": "How many?", "database": "superhero"})
    name, data = parse(r.text)[-1]
    assert name == "error" and data["ok"] is False and data["status"] == plain.status_code == 422
    assert data["error"] == plain.json()["error"]


async def test_a_client_going_away_cancels_the_question(make_app: Callable[..., Any]) -> None:
    from tagql.service.app import _events
    from tagql.service.core import Job

    started, release = threading.Event(), threading.Event()
    stages: list[str] = []
    answer = sql_then_answer()

    def reply(messages: Any) -> str:
        started.set()
        assert release.wait(10)
        return answer(messages)

    app = make_app(llm=ScriptedLLM(reply))
    service = app.state.service
    session = service.registry.get("superhero")
    job, loop, events = Job(), asyncio.get_running_loop(), asyncio.Queue()

    def on_event(name: str, data: Any) -> None:
        job.check()
        stages.append(name)
        loop.call_soon_threadsafe(events.put_nowait, (name, data))

    fut, _ = service.queue.submit(lambda: session.ask("How many superheroes are there?", on_event=on_event))
    fut.add_done_callback(lambda _f: loop.call_soon_threadsafe(events.put_nowait, None))
    stream = _events(fut, job, events, 0, lambda a: a.to_dict(), 60)
    assert (await stream.__anext__()).startswith("event: queued")
    assert (await stream.__anext__()).startswith("event: statements")
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
    await stream.aclose()  # the client disconnected while the model writes SQL
    assert job.cancelled.is_set()
    release.set()
    with pytest.raises(Exception, match="the client went away"):
        await asyncio.wrap_future(fut)
    assert stages == ["statements"]  # it stopped before running the SQL


async def test_answer_tokens_stream_after_the_sql_event(make_app: Callable[..., Any]) -> None:
    sentence = "There are 750 superheroes in the database."
    # two columns: the model writes the sentence (one column is said without it, answer.one_column_answer)
    sql = "SELECT COUNT(*) AS heroes, 'all' AS scope FROM superhero"
    app = make_app(llm=ScriptedLLM(sql_then_answer(sql=sql, answer=sentence), stream_s=0))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        r = await c.post("/v1/ask", headers=SSE,
                         json={"question": "How many superheroes are there?", "database": "superhero"})
    events = parse(r.text)
    names = [name for name, _ in events]
    tokens = [data for name, data in events if name == "answer" and "token" in data]
    assert names[:4] == ["queued", "statements", "sql", "rows"] and names[-2:] == ["answer", "done"]
    assert names.index("sql") < names.index("answer")  # the SQL before the first answer token
    assert len(tokens) == len(sentence.split()) and "".join(t["token"] for t in tokens) == sentence
    assert [t["answer"] for t in tokens][-1] == sentence and tokens[0]["answer"] == "There "  # text so far
    assert events[-2][1] == {"answer": sentence, "values": [[750, "all"]]}  # the checked sentence closes it


def test_the_model_wrapper_stops_a_generation_at_the_next_step() -> None:
    from tagql.service.core import Cancelled, Job, StoppableLLM

    llm = ScriptedLLM(lambda _m: "word " * 100, stream_s=0.02)  # 2 s of tokens; stopped after 0.1 s
    model, job = StoppableLLM(lambda: llm), Job()
    timer = threading.Timer(0.1, job.cancelled.set)
    timer.start()
    with model.answering(job.check), pytest.raises(Cancelled):
        model.complete([], max_tokens=500)  # an unconstrained call runs as a stream inside answering()
    assert len(llm.streamed) < 100  # stopped mid-generation (token count, not wall time: CI may be loaded)
    assert model.usage.calls == 0  # a stopped generation is not accounted
    assert model.complete([]).text == "word " * 100  # outside answering(): the plain call
    assert model.name == "scripted" and model.supports_stream
