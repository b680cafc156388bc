"""A quarantine that lands while the event's send is in flight: the ACK's mark counts the
attempt but does not mark the event sent, so the operator's hold holds (found by review: the
event used to end up sent AND quarantined, vanish from the list, and be purged)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ackledger import Outbox, dispatch, dispatch_batch

from ..sends import partition_worker
from .conftest import Target


def _state(target: Target, event_id: str) -> tuple[Any, ...]:
    return target.rows(
        "SELECT sent, quarantined, attempts FROM ackledger_outbox WHERE id = ?", (event_id,)
    )[0]


def _accept(target: Target, *ids: str) -> None:
    with Outbox(target.ref) as outbox:
        for event_id in ids:
            outbox.accept({"id": event_id, "sku": "pen", "qty": 1})


@pytest.mark.parametrize("batch", [False, True])
def test_a_hold_placed_during_the_send_survives_its_ack(target: Target, batch: bool) -> None:
    _accept(target, "e-1", "e-2")
    with Outbox(target.ref) as relay, Outbox(target.ref) as operator:

        def hold(event_ids: object) -> None:
            # Between the sink's ACK and the relay's mark, as an operator's command would.
            first = event_ids[0] if isinstance(event_ids, list) else event_ids
            if first == "e-1":
                operator.quarantine("e-1", "hold: customer asked to stop")

        if batch:
            marked = dispatch_batch(relay, len, 16, after_delivery=hold)
        else:
            marked = dispatch(relay, lambda event: True, 16, after_delivery=hold)
        assert marked == ["e-1", "e-2"]  # both were acknowledged
        assert _state(target, "e-1") == (0, 1, 1)  # held: not sent, its attempt counted
        assert _state(target, "e-2")[:2] == (1, 0)
        assert [item["id"] for item in operator.quarantined()] == ["e-1"]
        assert operator.stats()["sent"] == 1
        assert operator.purge(0) == 1  # e-2 only: a held event is never purged
        operator.requeue("e-1")
        assert dispatch(relay, lambda event: True, 16) == ["e-1"]  # re-sent; the inbox absorbs
    assert _state(target, "e-1")[:2] == (1, 0)


def test_the_partition_worker_keeps_the_hold_too(target: Target) -> None:
    _accept(target, "p-1")
    stop = threading.Event()
    with Outbox(target.ref) as operator:

        def hold(event_id: str) -> None:
            operator.quarantine(event_id, "hold")
            stop.set()

        with Outbox(target.ref) as relay:
            partition_worker(
                relay, owner="w", send=lambda event: True, stop=stop, after_delivery=hold,
                poll_interval=0.01,
            ).run()  # fmt: skip
        assert [item["id"] for item in operator.quarantined()] == ["p-1"]
    assert _state(target, "p-1") == (0, 1, 1)


def test_failures_with_any_text_are_recorded(target: Target) -> None:
    """A sink's detail may hold NUL (PostgreSQL text cannot), half a surrogate pair (neither
    database can store it) or newlines: the failure is still counted, its text made storable,
    and the relay goes on instead of dying on the record (found by review)."""
    _accept(target, "odd")
    with Outbox(target.ref) as outbox:
        outbox.record_failure("odd", "HTTP 422: a\x00b\ud800c\nforged line" + "x" * 3000)
        outbox.amend_error("odd", "HTTP 422 in batch: \x00\x1b[2J")
        row = outbox.event("odd")
    assert row is not None and row["attempts"] == 1
    assert row["last_error"] == "HTTP 422 in batch:   [2J"  # NUL and ESC became spaces
    outbox_reason = target.rows("SELECT last_error FROM ackledger_outbox WHERE id = 'odd'")[0][0]
    assert outbox_reason.isprintable()
