"""``POST /events`` reads a lone event by key in the request's own turn: a re-send is
answered at once, outside the group commit; whatever needs the write joins the group, and the
flush still decides what the read could not know.

The sink's real ASGI app on a real database (SQLite's file, PostgreSQL), called as a server
calls it. A request answered in its own turn is one whose call completes without waiting:
its coroutine finishes at its first step.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Coroutine, MutableMapping
from pathlib import Path
from typing import Any

import pytest

from ackledger.sink.app import create_sink_app
from ackledger.sink.inbox import Inbox

from ..events import SOURCE, lab
from .conftest import Target

_HEADERS = [(b"content-type", b"application/cloudevents+json")]

#: (status, headers, body) of an answer.
Answer = tuple[int, list[tuple[bytes, bytes]], bytes]
Call = Coroutine[Any, Any, Answer]
Route = Callable[[dict[str, Any]], Call]


def _run(inbox: Inbox, steps: Callable[[Route], Coroutine[Any, Any, None]]) -> None:
    """``steps(post)`` on a running loop, ``post(event)`` being the app's call for a POST."""
    app = create_sink_app(inbox)

    async def post(event: dict[str, Any]) -> Answer:
        scope = {"type": "http", "method": "POST", "path": "/events", "headers": _HEADERS}
        sent: list[MutableMapping[str, Any]] = []

        async def receive() -> dict[str, Any]:
            body = json.dumps(event).encode()
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        await app(scope, receive, send)
        start, body = sent
        return start["status"], start["headers"], body["body"]

    asyncio.run(steps(post))


def _at_once(call: Call) -> Answer:
    """The answer of a call that completes without waiting (fails if it waits)."""
    try:
        call.send(None)
    except StopIteration as done:
        answer: Answer = done.value
        return answer
    call.close()
    raise AssertionError("the request waited for something before its answer")


async def _waiting(call: Call) -> asyncio.Task[Answer]:
    """The call started, and found waiting (for the group's commit)."""
    task = asyncio.ensure_future(call)
    await asyncio.sleep(0)
    assert not task.done(), "answered without waiting for the group"
    return task


def _status(answer: Answer) -> tuple[int, Any, bool]:
    status, headers, body = answer
    replayed = (b"idempotent-replayed", b"true") in headers
    return status, json.loads(body).get("status"), replayed


def test_a_resend_is_answered_in_its_own_turn_and_counted(target: Target) -> None:
    event = lab("r1", "s1", 2)
    with Inbox(target.ref) as inbox:

        async def steps(post: Route) -> None:
            first = await _waiting(post(event))  # a new event waits for the group's commit
            assert _status(await first) == (200, "applied", False)
            # Answered without waiting: noted and counted all the same.
            assert _status(_at_once(post(event))) == (200, "duplicate", True)
            assert inbox.counters() == {"applied": 1, "duplicate": 1, "conflict": 0}
            assert inbox.receipt("r1", source=SOURCE)["receipts"] == 2  # type: ignore[index]

        _run(inbox, steps)
        assert inbox.stock("s1") == 2


@pytest.mark.parametrize(
    ("qty", "expected", "counts"),
    [
        (2, (200, "duplicate", True), {"applied": 1, "duplicate": 1, "conflict": 0}),
        (3, (422, 422, False), {"applied": 1, "duplicate": 0, "conflict": 1}),
    ],
)
def test_an_identity_taken_between_the_read_and_the_flush_is_decided_by_the_claim(
    target: Target, qty: int, expected: tuple[int, Any, bool], counts: dict[str, int]
) -> None:
    """Read free in the request's turn, then applied by another inbox on the same file (a
    second sink process) before the flush: a re-send of it, or a conflict, not a second
    apply."""
    with Inbox(target.ref) as inbox, Inbox(target.ref) as other:

        async def steps(post: Route) -> None:
            waiting = await _waiting(post(lab("m1", "s1", 2)))
            assert other.receive(lab("m1", "s1", qty)) == "applied"
            assert _status(await waiting) == expected

        _run(inbox, steps)
        assert inbox.counters() == counts
        assert inbox.stock("s1") == qty


def test_two_copies_in_one_turn_both_join_the_group(target: Target) -> None:
    with Inbox(target.ref) as inbox:

        async def steps(post: Route) -> None:
            # Both read the identity free (nothing is committed till the flush).
            first = asyncio.ensure_future(post(lab("t1", "s1", 2)))
            second = asyncio.ensure_future(post(lab("t1", "s1", 2)))
            await asyncio.sleep(0)
            assert not first.done() and not second.done()
            assert _status(await first) == (200, "applied", False)
            assert _status(await second) == (200, "duplicate", True)

        _run(inbox, steps)
        assert inbox.counters() == {"applied": 1, "duplicate": 1, "conflict": 0}
        assert inbox.stock("s1") == 2


def test_a_conflict_found_by_the_read_is_refused_and_counted_durably(target: Target) -> None:
    with Inbox(target.ref) as inbox:
        assert inbox.receive(lab("c1", "s1", 2)) == "applied"

        async def steps(post: Route) -> None:
            # Counted by the general way, in the group.
            status, _, body = await (await _waiting(post(lab("c1", "s1", 5))))
            assert status == 422
            assert json.loads(body)["type"].endswith("/conflict")

        _run(inbox, steps)
        assert inbox.counters() == {"applied": 1, "duplicate": 0, "conflict": 1}
        assert inbox.stock("s1") == 2


def test_a_database_error_on_the_read_is_503(tmp_path: Path) -> None:
    """(SQLite only: another connection renames the table the read needs.)"""
    path = tmp_path / "sink.db"
    with Inbox(path) as inbox:
        assert inbox.receive(lab("d1", "s1", 2)) == "applied"
        # Another process breaks the table under the sink: its next read fails.
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("ALTER TABLE ackledger_inbox RENAME TO inbox_gone")
        conn.close()

        async def steps(post: Route) -> None:
            status, headers, body = _at_once(post(lab("d1", "s1", 2)))
            assert status == 503
            assert (b"retry-after", b"1") in headers
            assert json.loads(body)["type"].endswith("/unavailable")

        _run(inbox, steps)
