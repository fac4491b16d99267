"""Knowledge, routing and TAG in a real browser: an expert signs in with a token and proposes a statement, a
reviewer approves it, the next answer uses it; an unsure route lists the candidates with their tables and the
pick is sent and stored; "reason over rows" shows the plan and the operators' progress; at 390 px too."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import PEOPLE, Server
from .test_ask_page import ask, table_rows


def test_statement_proposed_approved_then_used(server: Server, open_page: Any) -> None:
    store = server.store
    expert, reviewer = store.create_token("erin", "expert"), store.create_token("rui", "reviewer")
    # no token: the page asks for one
    w = open_page(server.url, "/knowledge")
    page = w.page
    page.get_by_role("heading", name="Sign in").wait_for()
    page.get_by_label("Token").fill(expert)
    page.get_by_role("button", name="Sign in").click()
    page.locator("#kb-db option[value=superhero]").wait_for(state="attached")
    # plain words -> the model's phrase and SQL, shown in the form for the expert to confirm
    page.get_by_label("In plain words").fill("Tall heroes are those over 2 metres.")
    page.get_by_role("button", name="Structure with the model").click()
    page.get_by_text("Proposed by the model: check the phrase and SQL, then Propose.").wait_for()
    assert page.get_by_label("Phrase users say").input_value() == "tall heroes"
    assert page.get_by_label("What it means in SQL").input_value() == "superhero.height_cm > 200"
    assert store.verified_examples("superhero") == [] and not page.locator("#statements tbody tr[data-id]").count()
    page.get_by_role("button", name="Propose").click()
    page.get_by_text("Proposed as #1").wait_for()
    row = page.locator("#statements tbody tr", has_text="tall heroes")
    assert row.locator(".status-proposed").text_content() == "proposed"
    # a statement on a column that does not exist: the data check says why
    page.get_by_label("Phrase users say").fill("heavy heroes")
    page.get_by_label("What it means in SQL").fill("superhero.mass > 1")
    page.get_by_role("button", name="Propose").click()
    page.get_by_text("Proposed as #2").wait_for()
    assert "mass" in page.locator("#statements tbody tr", has_text="heavy heroes").locator("td").nth(4).text_content()
    # the expert may not approve: the API's one line is shown
    row.get_by_role("button", name="Approve").click()
    row.get_by_text("the role 'expert' may not do this").wait_for()
    w.shot("knowledge-expert")

    r = open_page(server.url, "/knowledge", token=reviewer)
    row = r.page.locator("#statements tbody tr", has_text="tall heroes")
    row.get_by_label("Review note for statement 1").fill("checked against the data")
    row.get_by_role("button", name="Approve").click()
    r.page.locator("#statements tbody tr", has_text="tall heroes").locator(".status-approved").wait_for()
    heavy = r.page.locator("#statements tbody tr", has_text="heavy heroes")
    heavy.get_by_role("button", name="Edit").click()
    heavy.get_by_label("SQL of statement 2").fill("superhero.weight_kg > 100")
    heavy.get_by_label("Review note for statement 2").fill("mass is weight_kg")
    heavy.get_by_role("button", name="Save edit").click()
    heavy = r.page.locator("#statements tbody tr", has_text="superhero.weight_kg > 100")
    heavy.wait_for()
    heavy.get_by_label("Review note for statement 2").fill("too vague")
    heavy.get_by_role("button", name="Reject").click()
    r.page.locator("#statements tbody tr", has_text="heavy heroes").locator(".status-rejected").wait_for()
    assert [(h["action"], h["note"]) for h in store.reviews("superhero", 2)] == [
        ("propose", None), ("edit", "mass is weight_kg"), ("reject", "too vague")]
    assert [(h["action"], h["token_name"], h["note"]) for h in store.reviews("superhero", 1)] == [
        ("propose", "erin", None), ("approve", "rui", "checked against the data")]
    r.shot("knowledge-review")

    a = open_page(server.url, "/", token=reviewer)
    turn = ask(a.page, "How many tall heroes are there?")
    assert "height_cm > 200" in turn.get_by_label("SQL").input_value()
    assert "1 statement" in turn.locator(".stages").text_content()
    turn.get_by_text("Domain knowledge used (1)").click()
    assert turn.locator(".statements li").text_content() == "tall heroes refers to superhero.height_cm > 200"
    a.shot("ask-with-statement")
    for x in (w, r, a):
        assert x.foreign_requests() == []
    assert r.errors == a.errors == []
    # the expert's page: the browser's own notes of the refused requests (401 before signing in, 403 approving)
    assert all(e.startswith("console: Failed to load resource: the server responded with a status of 40")
               for e in w.errors), w.errors


def test_pick_a_routed_candidate(make_server: Any, open_page: Any, shared_data: Any,
                                 monkeypatch: pytest.MonkeyPatch, demo_db_path: Any) -> None:
    singers = shared_data / "spider" / "database" / "concert_singer" / "concert_singer.sqlite"
    server = make_server(collections={"mixed": [str(demo_db_path), str(singers)]})
    # bm25 routing reports no confidence; make "tallest" questions unsure so the 409 path runs for real
    monkeypatch.setattr("tagql.routing.hitl.confidence_note",
                        lambda cands: "low confidence (0.10): pick a database" if cands else None)
    w = open_page(server.url)
    page = w.page
    page.locator("#target option[value=mixed]").wait_for(state="attached")
    page.get_by_label("Question").fill("How many singers are there?")
    page.get_by_role("button", name="Ask", exact=True).click()
    turn = page.locator("section.turn").first
    turn.get_by_role("heading", name="Which database is it about?").wait_for()
    assert "low confidence (0.10): pick a database" in turn.get_by_role("alert").text_content()
    options = turn.locator(".candidates li")
    assert options.count() == 2
    assert "singer_in_concert" in options.filter(has_text="concert_singer").locator(".tables").text_content()
    assert "superhero" in options.filter(has_text="superhero").locator(".tables").text_content()
    w.shot("routing-unsure")
    turn.get_by_role("button", name="Use superhero").click()
    turn.locator(".stages li", has_text="done").wait_for()
    assert table_rows(turn) == [["750"]]
    assert "routed to superhero" in turn.locator(".stages").text_content()
    stored = [server.store.answer(i) for i in _answer_ids(server)]
    assert [(a["database"], a["picked"]) for a in stored] == [("superhero", "superhero")]
    w.shot("routing-picked")
    # the answer lists the candidates it was routed among; another pick re-asks on that database
    turn.get_by_text("Routed among 2 candidates").click()
    turn.get_by_role("button", name="Answer on concert_singer instead").click()
    turn.locator(".stages li", has_text="done").wait_for()
    assert table_rows(turn) == [["6"]]
    stored = sorted((a["database"], a["picked"]) for a in map(server.store.answer, _answer_ids(server)))
    assert stored == [("concert_singer", "concert_singer"), ("superhero", "superhero")]
    assert w.foreign_requests() == [] and w.errors == []


def _answer_ids(server: Server) -> list[str]:
    import sqlalchemy as sa

    from tagql.service.state import answers

    with server.store.engine.connect() as conn:
        return [r[0] for r in conn.execute(sa.select(answers.c.id))]


def test_reason_over_rows_shows_plan_and_progress(server: Server, open_page: Any) -> None:
    w = open_page(server.url, width=390, height=844)  # a phone
    page = w.page
    page.get_by_label("Reason over rows").check()
    turn = ask(page, "Which publishers are people?")
    plan = turn.locator("details", has_text="Plan: 1 LM operator")
    assert "filter" in plan.text_content() and "SELECT publisher_name FROM publisher" in plan.text_content()
    progress = turn.locator(".progress").text_content()
    assert "rows judged" in progress
    names = {r[0] for r in table_rows(turn)}
    assert names and names <= PEOPLE
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing wider than the phone
    w.shot("tag-390px")
    assert w.foreign_requests() == [] and w.errors == []



def test_a_wrong_answer_puts_its_phrase_on_the_unresolved_queue(server: Server, open_page: Any) -> None:
    w = open_page(server.url)
    turn = ask(w.page, "How many tall heroes are there?")
    turn.get_by_role("button", name="Not correct").click()
    turn.get_by_text("Not correct: thank you.").wait_for()
    k = open_page(server.url, "/knowledge?database=superhero", width=390, height=844)
    item = k.page.locator("#unresolved > li", has_text="tall")
    item.wait_for()
    assert k.page.evaluate("document.documentElement.scrollWidth") <= 390  # tables scroll inside their box
    assert "How many tall heroes are there?" in item.text_content() and "1 question" in item.text_content()
    item.get_by_role("button", name="Write a statement for this").click()
    phrase = k.page.get_by_label("Phrase users say").input_value()
    assert "tall" in phrase and k.page.evaluate("document.activeElement.id") == "add-sql"
    k.shot("knowledge-unresolved")
    item.get_by_role("button", name="Dismiss").click()
    k.page.get_by_text("Nothing unresolved.").wait_for()
    assert w.errors == k.errors == [] and w.foreign_requests() == k.foreign_requests() == []
