"""The model queue is fair: FIFO per token, round robin across tokens, so one client flooding the queue
does not starve another; the capacity (429) and cancellation still hold."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tagql.llm.base import Message
from tagql.llm.scripted import ScriptedLLM
from tagql.service.core import AskQueue, QueueFull

from .conftest import sql_then_answer
from .test_api import wait_for


def test_round_robin_across_owners_fifo_within() -> None:
    queue = AskQueue(size=9, workers=1)
    gate, started, order = threading.Event(), threading.Event(), []

    def job(name: str) -> Callable[[], str]:
        def run() -> str:
            if name == "a0":
                started.set()
                assert gate.wait(10)
            order.append(name)
            return name
        return run

    first, ahead = queue.submit(job("a0"), owner="ann")
    assert ahead == 0 and started.wait(10)  # a0 runs; everything below queues behind it
    aheads = {}
    for i in range(1, 6):  # ann floods the queue
        aheads[f"a{i}"] = queue.submit(job(f"a{i}"), owner="ann")[1]
    aheads["b0"] = queue.submit(job("b0"), owner="bob")[1]
    aheads["c0"] = queue.submit(job("c0"), owner="cy")[1]
    aheads["b1"] = queue.submit(job("b1"), owner="bob")[1]
    with pytest.raises(QueueFull):
        queue.submit(job("x"), owner="dan")
    gate.set()
    assert first.result(10) == "a0"
    for _ in range(1000):  # a0's place frees as it ends
        try:
            last, _ = queue.submit(job("c1"), owner="cy")
            break
        except QueueFull:
            threading.Event().wait(0.01)
    assert last.result(10) == "c1"
    for _ in range(1000):
        if queue.pending == 0:
            break
        threading.Event().wait(0.01)
    # bob's and cy's questions do not wait behind ann's five
    assert order[:6] == ["a0", "a1", "b0", "c0", "a2", "b1"]
    assert sorted(order) == sorted(["a0", *(f"a{i}" for i in range(1, 6)), "b0", "b1", "c0", "c1"])
    assert [n for n in order if n.startswith("a")] == [f"a{i}" for i in range(6)]  # FIFO per owner
    # what each was told was ahead of it (a0 running + the round robin at that moment)
    assert aheads["a1"] == 1 and aheads["a5"] == 5 and aheads["b0"] == 2 and aheads["c0"] == 3
    assert aheads["b1"] == 5  # a0 running, a1 b0 c0 (first turn), a2 (ann's second turn: before bob's)
    assert queue.pending == 0
    queue.shutdown()


def test_a_cancelled_queued_question_never_runs() -> None:
    queue = AskQueue(size=4, workers=1)
    gate, ran = threading.Event(), []
    running, _ = queue.submit(lambda: gate.wait(10), owner="ann")
    queued, _ = queue.submit(lambda: ran.append("b"), owner="bob")
    assert queued.cancel() and queue.pending == 1
    gate.set()
    assert running.result(10) is True
    after, _ = queue.submit(lambda: ran.append("c"), owner="bob")
    after.result(10)
    assert ran == ["c"]
    queue.shutdown()


@pytest.mark.anyio
async def test_one_token_flooding_does_not_starve_another(make_app: Callable[..., Any]) -> None:
    release, asked = threading.Event(), []
    answer = sql_then_answer()

    def reply(messages: list[Message]) -> str:
        if "CREATE TABLE" in messages[0].content:
            asked.append(messages[-1].content.rsplit("Question:", 1)[-1].strip().splitlines()[0])
            assert release.wait(10)
        return answer(messages)

    app = make_app(llm=ScriptedLLM(reply), queue_size=8)
    store = app.state.service.store
    flood = {"authorization": f"Bearer {store.create_token('flood', 'reader')}"}
    other = {"authorization": f"Bearer {store.create_token('other', 'reader')}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        def ask(n: str, who: dict) -> asyncio.Task:
            return asyncio.create_task(c.post("/v1/ask", headers=who,
                                              json={"question": f"How many superheroes {n}?", "database": "superhero"}))

        tasks = [ask("f1", flood)]
        await wait_for(lambda: len(asked) == 1)
        tasks += [ask(f"f{i}", flood) for i in range(2, 6)]
        await wait_for(lambda: app.state.service.queue.pending == 5)
        tasks.append(ask("o1", other))
        await wait_for(lambda: app.state.service.queue.pending == 6)
        release.set()
        assert [(await t).status_code for t in tasks] == [200] * 6
    order = [q.split("superheroes ")[1].rstrip("?") for q in asked]
    assert order[:3] == ["f1", "f2", "o1"], asked  # behind one of flood's, not all five
