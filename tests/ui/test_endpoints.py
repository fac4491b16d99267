"""The UI's own endpoints over HTTP (a real loopback server, no browser; sync, since the browser tests' Playwright
keeps an event loop running in this process): the pages and their headers, POST /v1/chart, and the
structuring preview POST /v1/databases/{name}/statements/structure (expert role, nothing stored)."""

from __future__ import annotations

import httpx

from .conftest import Server


def test_pages_and_chart(server: Server) -> None:
    with httpx.Client(base_url=server.url) as c:
        page = c.get("/")
        assert page.status_code == 200 and '<label for="question">Question</label>' in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert (c.get("/knowledge")).status_code == 200
        js = c.get("/ui/static/js/ask.js")
        assert js.status_code == 200 and "javascript" in js.headers["content-type"]
        assert "innerHTML" not in js.text  # data goes into the page as text only
        chart = (c.post("/v1/chart", json={"columns": ["publisher_name", "n"],
                                                 "rows": [["Marvel", 387], ["DC", 224]]})).json()
        assert (chart["mark"], chart["x"], chart["y"]) == ("bar", "publisher_name", "n")
        bad = c.post("/v1/chart", json={"columns": ["a"], "rows": [[1], [2]], "x": "nope"})
        assert bad.status_code == 400 and bad.json()["error"].startswith("no column 'nope' for x")


def test_structure_preview_needs_an_expert_and_stores_nothing(server: Server) -> None:
    store = server.store
    reader, expert = store.create_token("rea", "reader"), store.create_token("erin", "expert")
    body = {"nl": "Tall heroes are those over 2 metres."}
    with httpx.Client(base_url=server.url) as c:
        r = c.post("/v1/databases/superhero/statements/structure", json=body,
                         headers={"authorization": f"Bearer {reader}"})
        assert r.status_code == 403
        as_expert = {"authorization": f"Bearer {expert}"}
        r = c.post("/v1/databases/superhero/statements/structure", json=body, headers=as_expert)
        assert r.json() == {"ok": True, "nl": "Tall heroes are those over 2 metres.", "text": "tall heroes",
                            "sql": "superhero.height_cm > 200", "problem": ""}
        listed = c.get("/v1/databases/superhero/statements", headers=as_expert)
        assert listed.json()["statements"] == []
        missing = c.post("/v1/databases/nope/statements/structure", json=body, headers=as_expert)
        assert missing.status_code == 404
