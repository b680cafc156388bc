"""The in-process client runs requests as a served process does: every request on one event
loop, off the test's thread, so the sink's group commit gathers the requests that arrive
together."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from starlette.types import Receive, Scope, Send

from tests.conftest import raw_rows
from tests.events import SOURCE, lab
from tests.inprocess import InProcess
from tests.race import at_once


def test_requests_from_many_threads_share_one_event_loop_of_their_own() -> None:
    seen: list[tuple[int, int]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append((threading.get_ident(), id(asyncio.get_running_loop())))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    with InProcess(app) as client:
        answers = at_once(range(8), lambda i, _: client.request("GET", f"/{i}")[0])
    assert answers == [204] * 8
    assert len(set(seen)) == 1 and seen[0][0] != threading.get_ident()


def test_the_same_event_from_16_threads_at_once_is_applied_once(
    sink_app: InProcess, sink_db: Path
) -> None:
    event = lab("e1", "tea", 2)
    answers = at_once(range(16), lambda i, _: sink_app.post("/events", event))
    assert [status for status, _, _ in answers] == [200] * 16
    assert sorted(body["status"] for _, _, body in answers) == ["applied"] + ["duplicate"] * 15
    assert all((body["id"], body["source"]) == ("e1", SOURCE) for _, _, body in answers)
    assert raw_rows(sink_db, "SELECT source, id, receipts FROM ackledger_inbox") == [
        (SOURCE, "e1", 16)
    ]
    assert raw_rows(sink_db, "SELECT sku, qty FROM inventory") == [("tea", 2)]
