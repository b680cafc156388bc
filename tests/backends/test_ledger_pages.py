"""Paged ``GET /deliveries`` and ``GET /attempts`` on both databases: a default page and a
cap, an ``after`` cursor, ``Link: rel="next"`` on a full page, 400 naming a bad parameter."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from ackledger import Ledger
from ackledger.ledger.ledger import check_request
from ackledger.ledger.pages import DEFAULT_PAGE

from ..conftest import serve_ledger_in_process
from ..inprocess import InProcess
from .conftest import Target


def _fill(target: Target, case_id: str, keys: int) -> None:
    with Ledger(target.ref) as ledger:
        reqs = [check_request(case_id, f"w{i}", "pod", "idempotent", None) for i in range(keys)]
        ledger.submit_many(reqs)


def _next(headers: httpx.Headers) -> str | None:
    link = headers.get("link")
    if link is None:
        return None
    found = re.fullmatch(r'<([^>]+)>; rel="next"', link)
    assert found, link
    return found.group(1)


def _walk(app: InProcess, path: str) -> tuple[list[dict[str, Any]], int]:
    """Every row of a listing by following its next links; (rows, pages)."""
    rows: list[dict[str, Any]] = []
    pages = 0
    url: str | None = path
    while url is not None:
        status, headers, page = app.call("GET", url)
        assert status == 200, page
        rows += page
        pages += 1
        url = _next(headers)
    return rows, pages


@pytest.mark.parametrize(
    ("route", "number"), [("deliveries", "delivery_no"), ("attempts", "attempt_no")]
)
def test_pages_follow_their_cursor_to_every_row_once(
    target: Target, route: str, number: str
) -> None:
    _fill(target, "paged", 7)
    _fill(target, "other", 2)
    with serve_ledger_in_process(target.ref) as app:
        rows, pages = _walk(app, f"/{route}?case_id=paged&limit=3")
        assert pages == 3  # 3 + 3 + 1: the short page is the last, and has no link
        assert [row["work_id"] for row in rows] == [f"w{i}" for i in range(7)]
        numbers = [row[number] for row in rows]
        assert numbers == sorted(numbers) and len(set(numbers)) == 7
        _, headers, first = app.call("GET", f"/{route}?limit=3&case_id=paged")
        assert _next(headers) == f"/{route}?limit=3&case_id=paged&after={first[-1][number]}"
        everything, _ = _walk(app, f"/{route}?limit=4")
        assert len(everything) == 9


def test_the_default_page_is_bounded(target: Target) -> None:
    _fill(target, "many", DEFAULT_PAGE + 1)
    with serve_ledger_in_process(target.ref) as app:
        status, headers, page = app.call("GET", "/deliveries")
        assert status == 200 and len(page) == DEFAULT_PAGE
        after = page[-1]["delivery_no"]
        assert _next(headers) == f"/deliveries?after={after}"
        status, headers, rest = app.call("GET", f"/deliveries?after={after}")
        assert [row["work_id"] for row in rest] == [f"w{DEFAULT_PAGE}"] and _next(headers) is None


BAD_QUERIES = [
    ("limit=0", "limit"),
    ("limit=10001", "limit"),
    ("limit=abc", "limit"),
    ("limit=-1", "limit"),
    ("limit=%201", "limit"),
    ("limit=1&limit=2", "limit"),
    ("after=-1", "after"),
    ("after=1.5", "after"),
    ("after=99999999999999999999", "after"),
    ("after=", "after"),
    ("cursor=3", "cursor"),
]


def test_bad_page_parameters_are_400_naming_them(target: Target) -> None:
    with serve_ledger_in_process(target.ref) as app:
        for query, field in BAD_QUERIES:
            for route in ("/deliveries", "/attempts"):
                status, _, problem = app.call("GET", f"{route}?{query}")
                assert status == 400 and problem["field"] == field, (route, query, problem)


def test_the_python_api_pages_too_and_refuses_bad_values(target: Target) -> None:
    _fill(target, "api", 5)
    with Ledger(target.ref) as ledger:
        assert len(ledger.deliveries("api")) == 5  # unpaged unless asked
        first = ledger.deliveries("api", limit=2)
        rest = ledger.deliveries("api", after=first[-1]["delivery_no"])
        assert [r["work_id"] for r in first + rest] == [f"w{i}" for i in range(5)]
        assert len(ledger.attempts(limit=1)) == 1
        for bad in ({"limit": 0}, {"limit": True}, {"after": -1}, {"after": "3"}):
            with pytest.raises(ValueError, match=next(iter(bad))):
                ledger.deliveries(**bad)
