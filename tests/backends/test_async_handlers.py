"""CONTRACT v3 §12: no handler is ever called and left unawaited, on every backend.

The sync ``receive`` and ``receive_batch`` cannot await, so they refuse an ``async def``
handler (and a plain one that returns an awaitable) with ``TypeError`` and write nothing: no
receipt, no count, not even an arrival number. Where the caller can await (the services and
consumers call ``receive_runs(..., awaiting=True)`` from a worker thread), the handler is
awaited inside the receipt's transaction and its effect commits with the receipt.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Any

import pytest

from ackledger import Inbox, Rejected, new_event
from ackledger.sink.handler_call import HandlerAwaiter, is_async_handler
from ackledger.sink.handler_tx import HandlerTransaction

from .conftest import Target

TYPE = "com.example.order.placed"
PLAIN = "com.example.order.noted"
SHOP = "urn:shop:orders"


def placed(event_id: str, total: int = 10, *, kind: str = TYPE) -> dict[str, Any]:
    return new_event(kind, {"total": total}, source=SHOP, id=event_id)


async def ship(tx: HandlerTransaction, event: dict[str, Any]) -> None:
    """A natural async handler: it awaits something, then writes its effect."""
    await asyncio.sleep(0)
    tx.execute(
        "INSERT INTO shipments (id, total) VALUES (?, ?)", (event["id"], event["data"]["total"])
    )
    if event["data"]["total"] < 0:
        raise Rejected("a negative total can never ship")


def note(tx: HandlerTransaction, event: dict[str, Any]) -> None:
    tx.execute("INSERT INTO shipments (id, total) VALUES (?, ?)", (event["id"], 0))


def returns_a_coroutine(tx: HandlerTransaction, event: dict[str, Any]) -> Any:
    """A plain function that hands back ``ship``'s coroutine (a lambda or a wrapper would)."""
    # Written first: the refusal must roll this back too.
    tx.execute("INSERT INTO shipments (id, total) VALUES (?, ?)", ("pre-" + event["id"], 0))
    return ship(tx, event)


class AsyncCallable:
    async def __call__(self, tx: HandlerTransaction, event: dict[str, Any]) -> None:
        await ship(tx, event)


def shipments(target: Target) -> list[tuple[Any, ...]]:
    return target.rows("SELECT id, total FROM shipments ORDER BY id")


def opened(target: Target, handlers: dict[str, Any]) -> Inbox:
    inbox = Inbox(target.ref, handlers=handlers)
    target.execute("CREATE TABLE shipments (id TEXT PRIMARY KEY, total INTEGER NOT NULL)")
    return inbox


@pytest.mark.parametrize("handler", [ship, AsyncCallable(), functools.partial(ship)])
def test_the_sync_receive_refuses_an_async_handler_and_writes_nothing(
    target: Target, handler: Any
) -> None:
    with opened(target, {TYPE: handler, PLAIN: note}) as inbox:
        assert inbox.async_types == frozenset({TYPE})
        before = target.dump()
        with pytest.raises(TypeError) as refused:
            inbox.receive(placed("o-1"))
        message = str(refused.value)
        assert TYPE in message and "async" in message
        assert "ship" in message or "AsyncCallable" in message
        # Not one row, not one count, not even an arrival number.
        assert target.dump() == before
        assert shipments(target) == []
        assert inbox.receipt("o-1") is None


def test_a_batch_with_an_async_handler_is_refused_whole_before_anything_is_written(
    target: Target,
) -> None:
    with opened(target, {TYPE: ship, PLAIN: note}) as inbox:
        before = target.dump()
        batch = [placed("n-1", kind=PLAIN), placed("o-1"), placed("n-2", kind=PLAIN)]
        with pytest.raises(TypeError, match="async"):
            inbox.receive_batch(batch)
        with pytest.raises(TypeError, match="async"):
            inbox.receive_runs([[placed("n-3", kind=PLAIN)], [placed("o-2")]])
        assert target.dump() == before
        assert shipments(target) == []
        # The plain handler's own events still apply, alone.
        assert inbox.receive(placed("n-1", kind=PLAIN)) == "applied"
        assert shipments(target) == [("n-1", 0)]


@pytest.mark.parametrize("alone", [True, False])
def test_a_plain_handler_that_returns_an_awaitable_is_refused_and_rolled_back(
    target: Target, alone: bool
) -> None:
    with opened(target, {TYPE: returns_a_coroutine, PLAIN: note}) as inbox:
        before = target.dump()
        with pytest.raises(TypeError) as refused:
            if alone:
                inbox.receive(placed("o-1"))
            else:
                inbox.receive_batch([placed("n-1", kind=PLAIN), placed("o-1")])
        assert "returned coroutine" in str(refused.value)
        assert "returns_a_coroutine" in str(refused.value)
        # Its own write before the return, the batch's first event: all rolled back. (The
        # coroutine was closed, not left to warn "never awaited": warnings are errors here.)
        assert target.dump() == before
        assert shipments(target) == []


def _in_a_worker(call: Any) -> Any:
    """What the services do: the inbox called from a thread with no event loop running."""
    found: list[Any] = []
    worker = threading.Thread(target=lambda: found.append(call()))
    worker.start()
    worker.join(30)
    return found[0]


@pytest.mark.parametrize("handler", [ship, returns_a_coroutine])
def test_awaiting_applies_the_async_effect_once_with_its_receipt(
    target: Target, handler: Any
) -> None:
    with opened(target, {TYPE: handler}) as inbox:
        first = _in_a_worker(lambda: inbox.receive_runs([[placed("o-1", 7)]], awaiting=True))
        again = _in_a_worker(lambda: inbox.receive_runs([[placed("o-1", 7)]], awaiting=True))
        assert [result.statuses for result in first + again] == [["applied"], ["duplicate"]]
        expected = [("o-1", 7)] if handler is ship else [("o-1", 7), ("pre-o-1", 0)]
        assert shipments(target) == expected
        assert inbox.counters() == {"applied": 1, "duplicate": 1, "conflict": 0}


def test_awaiting_a_batch_runs_each_async_handler_in_the_transaction(target: Target) -> None:
    with opened(target, {TYPE: ship, PLAIN: note}) as inbox:
        batch = [placed("o-1", 1), placed("n-1", kind=PLAIN), placed("o-2", -1), placed("o-3")]
        (result,) = _in_a_worker(lambda: inbox.receive_runs([batch], awaiting=True))
        # The rejected one stops the batch; its own write is undone, the prefix commits.
        assert result.statuses == ["applied", "applied"]
        assert isinstance(result.error, Rejected)
        assert shipments(target) == [("n-1", 0), ("o-1", 1)]
        assert inbox.receipt("o-2") is None and inbox.receipt("o-3") is None


def test_an_awaiter_refuses_to_run_on_a_running_event_loop() -> None:
    async def inside() -> None:
        with HandlerAwaiter() as awaiter, pytest.raises(RuntimeError, match="worker thread"):
            awaiter(asyncio.sleep(0))  # closed unstarted: no "never awaited" warning

    asyncio.run(inside())


def test_registration_refuses_what_cannot_be_a_handler(tmp_path: Any) -> None:
    db = tmp_path / "never.db"

    def one_argument(event: dict[str, Any]) -> None:
        return None

    with pytest.raises(TypeError, match=r"handlers\['com.example.x'\] is not callable"):
        Inbox(db, handlers={"com.example.x": "ship"})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"must take \(tx, event\)"):
        Inbox(db, handlers={"com.example.x": one_argument})  # type: ignore[dict-item]
    assert not db.exists()
    assert is_async_handler(ship) and is_async_handler(AsyncCallable())
    assert is_async_handler(functools.partial(ship)) and not is_async_handler(note)
