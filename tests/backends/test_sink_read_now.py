"""``POST /events`` reads a lone event by key in the request's own turn (bench/CHANGES.md item
117): a re-send is answered at once, outside the group commit; whatever needs the write joins
the group, and the flush still decides what the read could not know.

The sink's real app on a real database (SQLite's file, PostgreSQL); its direct route is
called as the protocol calls it (``answer(headers, body)``, then the ``Pending``'s answer
once the flush has run).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from ackledger.sink.app import create_sink_app
from ackledger.sink.inbox import Inbox
from ackledger.web.answers import Answer
from ackledger.web.direct import Outcome, Pending, direct_routes_of, settled

from ..events import SOURCE, lab
from .conftest import Target

_HEADERS = [(b"content-type", b"application/cloudevents+json")]

Route = Callable[[dict[str, Any]], Outcome]


def _run(inbox: Inbox, steps: Callable[[Route], Coroutine[Any, Any, None]]) -> None:
    """``steps(post)`` on a running loop, ``post(event)`` being the direct route's call."""
    route = direct_routes_of(create_sink_app(inbox))[b"/events"]

    def post(event: dict[str, Any]) -> Outcome:
        return route.answer(_HEADERS, json.dumps(event).encode())

    asyncio.run(steps(post))


def _status(answer: Answer) -> tuple[int, Any, bool]:
    body = json.loads(answer.body)
    replayed = (b"idempotent-replayed", b"true") in answer.header_pairs()
    return answer.status, body.get("status"), replayed


def test_a_resend_is_answered_in_its_own_turn_and_counted(target: Target) -> None:
    event = lab("r1", "s1", 2)
    with Inbox(target.ref) as inbox:

        async def steps(post: Route) -> None:
            first = post(event)
            assert isinstance(first, Pending)  # a new event waits for the group's commit
            assert _status(await settled(first)) == (200, "applied", False)
            again = post(event)
            # Settled before any turn of the loop: the answer itself, noted and counted.
            assert isinstance(again, Answer)
            assert _status(again) == (200, "duplicate", True)
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
            waiting = post(lab("m1", "s1", 2))
            assert isinstance(waiting, Pending)
            assert other.receive(lab("m1", "s1", qty)) == "applied"
            assert _status(await settled(waiting)) == expected

        _run(inbox, steps)
        assert inbox.counters() == counts
        assert inbox.stock("s1") == qty


def test_two_copies_in_one_turn_both_join_the_group(target: Target) -> None:
    with Inbox(target.ref) as inbox:

        async def steps(post: Route) -> None:
            # Both read the identity free (nothing is committed till the flush).
            first, second = post(lab("t1", "s1", 2)), post(lab("t1", "s1", 2))
            assert isinstance(first, Pending) and isinstance(second, Pending)
            assert _status(await settled(first)) == (200, "applied", False)
            assert _status(await settled(second)) == (200, "duplicate", True)

        _run(inbox, steps)
        assert inbox.counters() == {"applied": 1, "duplicate": 1, "conflict": 0}
        assert inbox.stock("s1") == 2


def test_a_conflict_found_by_the_read_is_refused_and_counted_durably(target: Target) -> None:
    with Inbox(target.ref) as inbox:
        assert inbox.receive(lab("c1", "s1", 2)) == "applied"

        async def steps(post: Route) -> None:
            refused = post(lab("c1", "s1", 5))
            assert isinstance(refused, Pending)  # counted by the general way, in the group
            answer = await settled(refused)
            assert answer.status == 422
            assert json.loads(answer.body)["type"].endswith("/conflict")

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
            answer = post(lab("d1", "s1", 2))
            assert isinstance(answer, Answer)
            assert answer.status == 503
            assert answer.headers == {"Retry-After": "1"}
            assert json.loads(answer.body)["type"].endswith("/unavailable")

        _run(inbox, steps)
