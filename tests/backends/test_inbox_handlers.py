"""CONTRACT v2 section 6: an inbox's handlers run inside its transaction, on every backend."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from ackledger import Inbox, NoHandler, Rejected, new_event
from ackledger.sink.handler_tx import HandlerTransaction

from ..events import lab
from .conftest import Target

TYPE = "com.example.order.placed"
SHOP = "urn:shop:orders"


def placed(event_id: str, total: int = 10, *, source: str = SHOP) -> dict[str, Any]:
    return new_event(TYPE, {"total": total}, source=source, id=event_id)


class Recorder:
    """A user's handler: one row per order in the user's own table. It raises for the
    totals in ``failing`` after writing its row (so a leak of that write would show)."""

    def __init__(self, failing: dict[int, BaseException] | None = None) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()
        self.failing = failing or {}

    def __call__(self, tx: HandlerTransaction, event: dict[str, Any]) -> None:
        self.calls[event["source"], event["id"]] += 1
        tx.execute(
            "INSERT INTO shop_orders (source, id, total) VALUES (?, ?, ?)",
            (event["source"], event["id"], event["data"]["total"]),
        )
        assert tx.execute(
            "SELECT total FROM shop_orders WHERE source = ? AND id = ?",
            (event["source"], event["id"]),
        ) == [(event["data"]["total"],)]
        failure = self.failing.get(event["data"]["total"])
        if failure is not None:
            raise failure


def shop_table(target: Target) -> None:
    target.execute(
        "CREATE TABLE shop_orders (source TEXT NOT NULL, id TEXT NOT NULL, total INTEGER NOT NULL,"
        " PRIMARY KEY (source, id))"
    )


def user_rows(target: Target) -> list[tuple[Any, ...]]:
    return target.rows("SELECT source, id, total FROM shop_orders ORDER BY source, id")


def receipts(target: Target) -> list[tuple[Any, ...]]:
    return target.rows("SELECT source, id, type, receipts FROM ackledger_inbox ORDER BY source, id")


def recorded(target: Target) -> dict[str, list[tuple[Any, ...]]]:
    """Everything the databases hold but the arrival sequence: an attempt that records
    nothing may still use up arrival numbers (they are taken as a block; gaps are allowed)."""
    state = target.dump()
    state["ackledger_counters"] = [
        row for row in state["ackledger_counters"] if row[0] != "sink.arrival"
    ]
    return state


def opened(target: Target, handler: Recorder) -> Inbox:
    inbox = Inbox(target.ref, handlers={TYPE: handler})
    shop_table(target)
    return inbox


def test_a_handlers_own_write_commits_with_the_receipt(target: Target) -> None:
    handler = Recorder()
    with opened(target, handler) as inbox:
        assert inbox.receive(placed("p-1", 25)) == "applied"
        assert inbox.receive(placed("p-1", 25)) == "duplicate"  # runs nothing
        assert inbox.receive(lab("w-1", "snack-7", 3)) == "applied"  # the reference handler
        assert inbox.stock("snack-7") == 3
        assert inbox.counters() == {"applied": 2, "duplicate": 1, "conflict": 0}
        receipt = inbox.receipt("p-1", source=SHOP)
    assert handler.calls == {(SHOP, "p-1"): 1}
    assert user_rows(target) == [(SHOP, "p-1", 25)]
    assert receipt is not None and (receipt["type"], receipt["receipts"]) == (TYPE, 2)
    assert set(receipt) >= {"source", "id", "type", "fingerprint"}
    assert "sku" not in receipt and "qty" not in receipt


def test_no_handler_records_nothing(target: Target) -> None:
    with Inbox(target.ref) as inbox:  # only the reference handler
        inbox.receive(lab("w-1", "snack-7", 3))
        before = target.dump()
        with pytest.raises(NoHandler, match=TYPE):
            inbox.receive(placed("p-1"))
        assert target.dump() == before
        assert inbox.receipt("p-1") is None
        assert inbox.counters() == {"applied": 1, "duplicate": 0, "conflict": 0}


def test_rejected_records_nothing_and_propagates(target: Target) -> None:
    refusal = Rejected("an order of 13 can never be placed")
    handler = Recorder({13: refusal})
    with opened(target, handler) as inbox:
        inbox.receive(placed("p-0", 1))
        before = recorded(target)
        with pytest.raises(Rejected) as raised:
            inbox.receive(placed("p-1", 13))
        assert raised.value is refusal
        assert recorded(target) == before
        assert inbox.receipt("p-1") is None
    assert user_rows(target) == [(SHOP, "p-0", 1)]  # the handler's own row is gone too


def test_another_exception_records_nothing_propagates_and_a_retry_applies(target: Target) -> None:
    outage = ConnectionError("the pricing service is down")
    handler = Recorder({7: outage})
    with opened(target, handler) as inbox:
        before = recorded(target)
        with pytest.raises(ConnectionError) as raised:
            inbox.receive(placed("p-1", 7))
        assert raised.value is outage
        assert recorded(target) == before
        assert user_rows(target) == []
        # Transient: the same event, once the handler works, is applied (nothing recorded it).
        # (A lone event's handler runs once per receive; count from here all the same.)
        tried = handler.calls[SHOP, "p-1"]
        assert tried >= 1
        handler.failing.clear()
        assert inbox.receive(placed("p-1", 7)) == "applied"
        assert inbox.receive(placed("p-1", 7)) == "duplicate"
    assert handler.calls == {(SHOP, "p-1"): tried + 1}
    assert user_rows(target) == [(SHOP, "p-1", 7)]
    assert receipts(target) == [(SHOP, "p-1", TYPE, 2)]


def test_a_batch_stops_at_the_item_whose_handler_raises(target: Target) -> None:
    outage = RuntimeError("third one fails")
    handler = Recorder({3: outage})
    with opened(target, handler) as inbox:
        result = inbox.receive_batch(
            [placed("p-1", 1), lab("w-2", "snack-7", 2), placed("p-3", 3), placed("p-4", 4)]
        )
        assert result.statuses == ["applied", "applied"]
        assert result.error is outage
        assert inbox.stock("snack-7") == 2
        assert inbox.counters() == {"applied": 2, "duplicate": 0, "conflict": 0}
    # Events 1-2 and their effects; nothing of event 3 (its row was written, then undone), and
    # nothing after it.
    assert user_rows(target) == [(SHOP, "p-1", 1)]
    assert [row[:2] for row in receipts(target)] == [
        ("urn:ackledger:test", "w-2"),
        (SHOP, "p-1"),
    ]
    assert (SHOP, "p-4") not in handler.calls


def test_a_failing_handler_in_one_run_leaves_the_other_runs_applied(target: Target) -> None:
    handler = Recorder({22: Rejected("no"), 33: TimeoutError("slow")})
    with opened(target, handler) as inbox:
        results = inbox.receive_runs(
            [
                [placed("a-1", 1), placed("a-2", 2)],
                [placed("b-1", 21), placed("b-2", 22), placed("b-3", 23)],
                [placed("c-1", 31), lab("c-2", "pen", 5)],
                [placed("d-1", 33)],
            ]
        )
        assert [r.statuses for r in results] == [
            ["applied", "applied"],
            ["applied"],
            ["applied", "applied"],
            [],
        ]
        assert [type(r.error) for r in results] == [type(None), Rejected, type(None), TimeoutError]
        assert inbox.stock("pen") == 5
        assert inbox.counters() == {"applied": 5, "duplicate": 0, "conflict": 0}
    # Applied with no savepoint, the group stopped at b-2's failure and was rolled back whole;
    # applied again, each handler in a savepoint of its own, every run went as far as it could.
    ran = {event_id: count for (_, event_id), count in handler.calls.items()}
    assert ran == {"a-1": 2, "a-2": 2, "b-1": 2, "b-2": 2, "c-1": 1, "d-1": 1}
    assert [row[1] for row in user_rows(target)] == ["a-1", "a-2", "b-1", "c-1"]
    assert sorted(row[1] for row in receipts(target)) == ["a-1", "a-2", "b-1", "c-1", "c-2"]


def test_duplicates_by_identity_run_nothing(target: Target) -> None:
    handler = Recorder()
    with opened(target, handler) as inbox:
        first = inbox.receive_batch([placed("p-1"), placed("p-2"), placed("p-1")])
        assert first.statuses == ["applied", "applied", "duplicate"]
        again = inbox.receive_runs([[placed("p-2"), placed("p-3")], [placed("p-1")]])
        assert [r.statuses for r in again] == [["duplicate", "applied"], ["duplicate"]]
        # time is not content: the same identity at another time is still a duplicate.
        later = {**placed("p-3"), "time": "2026-12-01T12:00:00Z"}
        assert inbox.receive(later) == "duplicate"
    assert handler.calls == {(SHOP, "p-1"): 1, (SHOP, "p-2"): 1, (SHOP, "p-3"): 1}
    assert [row[1] for row in user_rows(target)] == ["p-1", "p-2", "p-3"]
    assert [row[3] for row in receipts(target)] == [3, 2, 2]


def test_the_same_id_from_two_sources_is_two_events(target: Target) -> None:
    handler = Recorder()
    with opened(target, handler) as inbox:
        assert inbox.receive(placed("p-1", 5, source="/north")) == "applied"
        assert inbox.receive(placed("p-1", 6, source="/south")) == "applied"  # no conflict
        assert inbox.receive(lab("w-1", "snack-7", 2, source="/north")) == "applied"
        assert inbox.receive(lab("w-1", "snack-7", 3, source="/south")) == "applied"
        assert inbox.stock("snack-7") == 5
        north = inbox.receipt("p-1", source="/north")
        south = inbox.receipt("p-1", source="/south")
        both = inbox.receipts("p-1")
    assert handler.calls == {("/north", "p-1"): 1, ("/south", "p-1"): 1}
    assert user_rows(target) == [("/north", "p-1", 5), ("/south", "p-1", 6)]
    assert north is not None and south is not None
    assert (north["source"], south["source"]) == ("/north", "/south")
    assert north["fingerprint"] != south["fingerprint"]
    assert sorted(r["source"] for r in both) == ["/north", "/south"]


def _arrivals(target: Target) -> int:
    found = target.rows("SELECT value FROM ackledger_counters WHERE name = 'sink.arrival'")
    return int(found[0][0]) if found else 0


def test_a_lone_failing_handler_commits_only_its_arrival_number(target: Target) -> None:
    """A lone event's handler runs once; its failure undoes its claim and its writes, and
    what is committed is the arrival number it took, nothing else: the same as for the same
    failure in a batch."""
    outage = ConnectionError("the pricing service is down")
    handler = Recorder({7: outage})
    with opened(target, handler) as inbox:
        inbox.receive(placed("p-0", 1))
        before, taken = recorded(target), _arrivals(target)
        with pytest.raises(ConnectionError) as raised:
            inbox.receive(placed("p-1", 7))
        assert raised.value is outage
        assert handler.calls[SHOP, "p-1"] == 1  # run once
        lone = recorded(target), _arrivals(target)
        # In a batch of one: the same state, the same one number taken.
        result = inbox.receive_batch([placed("p-1", 7)])
        assert result.statuses == [] and result.error is outage
        general = recorded(target), _arrivals(target)
        assert lone == (before, taken + 1)
        assert general == (before, taken + 2)
        # The next event takes the next number.
        assert inbox.receive(placed("p-2", 2)) == "applied"
    rows = target.rows("SELECT id, arrival, last_arrival FROM ackledger_inbox WHERE id = 'p-2'")
    assert rows == [("p-2", taken + 3, taken + 3)]
    assert user_rows(target) == [(SHOP, "p-0", 1), (SHOP, "p-2", 2)]


def test_a_lone_event_of_a_users_handler_is_counted_with_its_receipt(target: Target) -> None:
    """The lean path's counts: applied and the arrival number, in the receipt's transaction,
    each lone event numbered in turn, the reference handler's among them."""
    handler = Recorder()
    with opened(target, handler) as inbox:
        assert inbox.receive(placed("p-1", 3)) == "applied"
        assert inbox.receive(lab("w-1", "snack-7", 2)) == "applied"
        assert inbox.receive(placed("p-2", 4)) == "applied"
        assert inbox.receive(placed("p-1", 3)) == "duplicate"
        assert inbox.counters() == {"applied": 3, "duplicate": 1, "conflict": 0}
        assert inbox.stock("snack-7") == 2
    rows = target.rows(
        "SELECT id, arrival, last_arrival, receipts FROM ackledger_inbox ORDER BY arrival"
    )
    assert rows == [("p-1", 1, 4, 2), ("w-1", 2, 2, 1), ("p-2", 3, 3, 1)]
    assert _arrivals(target) == 4
    assert user_rows(target) == [(SHOP, "p-1", 3), (SHOP, "p-2", 4)]


def test_a_failing_handler_gives_its_identity_back_to_the_runs_after_it(target: Target) -> None:
    """A handler fails in the middle of a run: its writes, its claim and the claims after it
    in that run are undone, and a later run of the same group holding one of those identities
    applies it as new (with its own content), its arrival number the next one in turn."""
    outage = ConnectionError("the pricing service is down")
    handler = Recorder({7: outage})
    with opened(target, handler) as inbox:
        results = inbox.receive_runs(
            [
                [placed("g-1", 1), placed("g-2", 7), placed("g-3", 3)],
                [placed("g-2", 2), placed("g-3", 4), placed("g-1", 1)],
            ]
        )
        assert [r.statuses for r in results] == [["applied"], ["applied", "applied", "duplicate"]]
        assert results[0].error is outage and results[1].error is None
        assert inbox.counters() == {"applied": 3, "duplicate": 1, "conflict": 0}
    assert user_rows(target) == [(SHOP, "g-1", 1), (SHOP, "g-2", 2), (SHOP, "g-3", 4)]
    # g-1 1, g-2's failure 2 (shown nowhere), then the second run: 3, 4, 5.
    rows = target.rows(
        "SELECT id, arrival, last_arrival, receipts FROM ackledger_inbox ORDER BY id"
    )
    assert [tuple(int(v) if k else v for k, v in enumerate(r)) for r in rows] == [
        ("g-1", 1, 5, 2),
        ("g-2", 3, 3, 1),
        ("g-3", 4, 4, 1),
    ]
    assert handler.calls[SHOP, "g-3"] == 1  # the first run's g-3 never ran
