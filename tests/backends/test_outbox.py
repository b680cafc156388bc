"""CONTRACT section 3 (Outbox) on every backend."""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

import pytest

from ackledger import Conflict, InvalidEvent, Outbox, dispatch_batch, warehouse
from ackledger.store.outbox import MARK_CHUNK

from ..events import SOURCE, lab, of
from .conftest import Target


def ev(event_id: str, sku: str = "sku-1", qty: int = 1) -> dict[str, Any]:
    return {"id": event_id, "sku": sku, "qty": qty}


def counts(target: Target) -> tuple[object, object]:
    """How many orders and events the database holds, read independently."""
    return (
        target.rows("SELECT COUNT(*) FROM orders")[0][0],
        target.rows("SELECT COUNT(*) FROM ackledger_outbox")[0][0],
    )


def no_open_transaction(outbox: Outbox, target: Target) -> bool:
    backend: Any = outbox.backend
    if target.dialect == "sqlite" and backend.in_transaction():
        return False
    return target.can_lock_exclusively()


def test_accept_writes_order_and_event_in_acceptance_order(target: Target) -> None:
    with Outbox(target.ref) as ob:
        first = ob.accept(ev("b-1", "apple", 3))
        second = ob.accept(ev("a-1", "pear", 5))
    assert first < second
    assert target.rows("SELECT id, sku, qty FROM orders ORDER BY id") == [
        ("a-1", "pear", 5),
        ("b-1", "apple", 3),
    ]
    # The order's event: a warehouse.stock.added event keyed by the sku, from the outbox's source.
    assert target.rows("SELECT DISTINCT source, type FROM ackledger_outbox") == [
        (ob.source, warehouse.TYPE)
    ]
    assert target.rows("SELECT id, subject, partitionkey FROM ackledger_outbox ORDER BY seq") == [
        ("b-1", "apple", "apple"),
        ("a-1", "pear", "pear"),
    ]
    assert target.rows(
        "SELECT seq, id, subject, data, sent FROM ackledger_outbox ORDER BY seq"
    ) == [
        (first, "b-1", "apple", '{"qty":3,"sku":"apple"}', 0),
        (second, "a-1", "pear", '{"qty":5,"sku":"pear"}', 0),
    ]


def test_identical_event_again_returns_its_seq_and_writes_nothing(target: Target) -> None:
    with Outbox(target.ref) as ob:
        seq = ob.accept(ev("e1"))
        ob.accept(ev("e2"))
        before = target.dump()
        assert ob.accept(ev("e1")) == seq
        assert ob.accept({"qty": 1, "sku": "sku-1", "id": "e1"}) == seq  # key order is no content
        assert target.dump() == before
    assert counts(target) == (2, 2)


def test_same_id_other_content_is_a_conflict_and_writes_nothing(target: Target) -> None:
    with Outbox(target.ref) as ob:
        ob.accept(ev("e1", qty=1))
        before = target.dump()
        with pytest.raises(Conflict, match="e1"):
            ob.accept(ev("e1", qty=2))
        with pytest.raises(Conflict), ob.transaction() as tx:
            tx.enqueue(lab("e1", "other", 1, source=ob.source))
        assert target.dump() == before
    assert counts(target) == (1, 1)
    assert target.rows("SELECT data FROM ackledger_outbox") == [('{"qty":1,"sku":"sku-1"}',)]


#: Events the contract refuses, with the field each refusal names.
INVALID: list[tuple[object, str]] = [
    ({"id": "x", "sku": "s"}, "qty"),
    ({"id": "x", "sku": "s", "qty": True}, "qty"),
    ({"id": "x", "sku": "s", "qty": "3"}, "qty"),
    ({"id": "x", "sku": "s", "qty": 1.0}, "qty"),
    ({"id": "", "sku": "s", "qty": 1}, "id"),
    ({"id": "x\ny", "sku": "s", "qty": 1}, "id"),
    ({"id": "x", "sku": "s", "qty": 1, "extra": 1}, "extra"),
    ([1, 2], "event"),
]


def as_event(bad: object) -> object:
    """The lab event a bad flat order would make (a non-object stays as it is)."""
    if not isinstance(bad, dict):
        return bad
    event: dict[str, object] = {"specversion": "1.0", "source": SOURCE, "type": warehouse.TYPE}
    event["id"] = bad["id"]
    event["data"] = {name: value for name, value in bad.items() if name != "id"}
    return event


def test_invalid_events_are_refused_naming_the_field_and_write_nothing(target: Target) -> None:
    # One database for all of them: refusals are checked before any write, on every backend.
    with Outbox(target.ref) as ob:
        ob.accept(ev("seed"))
        before = target.dump()
        for bad, field in INVALID:
            with pytest.raises(InvalidEvent, match=field) as refused:
                ob.accept(bad)
            assert refused.value.field == field, bad
            with pytest.raises(InvalidEvent), ob.transaction() as tx:
                tx.execute("UPDATE orders SET qty = 99")
                tx.enqueue(as_event(bad))
            assert target.dump() == before, bad


def test_transaction_commits_business_write_and_event_together(target: Target) -> None:
    with Outbox(target.ref) as ob:
        with ob.transaction() as tx:
            tx.execute("CREATE TABLE notes (id TEXT PRIMARY KEY, body TEXT NOT NULL)")
        with ob.transaction() as tx:
            tx.execute("INSERT INTO notes (id, body) VALUES (?, ?)", ("n1", "100% real?"))
            assert tx.execute("SELECT body FROM notes WHERE id = ?", ("n1",)) == [("100% real?",)]
            assert tx.execute("SELECT COUNT(*) FROM notes WHERE body LIKE '100%'") == [(1,)]
            event = {**lab("e1", "box", 1), "partitionkey": "customer-7"}
            seq = tx.enqueue(event)
        assert ob.pending() == [{**event, "seq": seq}]
    assert target.rows("SELECT id, body FROM notes") == [("n1", "100% real?")]
    assert target.rows("SELECT seq, partition_key, partitionkey FROM ackledger_outbox") == [
        (seq, "customer-7", "customer-7")
    ]
    # tx.enqueue writes the event only (no lab call: not even the lab's tables); accept also
    # writes the order.
    assert not target.has_table("orders")


def test_transaction_that_fails_keeps_neither_write(target: Target) -> None:
    with Outbox(target.ref) as ob:
        with ob.transaction() as tx:
            tx.execute("CREATE TABLE notes (id TEXT PRIMARY KEY)")
        with pytest.raises(RuntimeError, match="business rule"), ob.transaction() as tx:
            tx.execute("INSERT INTO notes (id) VALUES (?)", ("n1",))
            tx.enqueue(lab("e1", "sku-1", 1))
            raise RuntimeError("business rule broken")
        with pytest.raises(InvalidEvent), ob.transaction() as tx:
            tx.execute("INSERT INTO notes (id) VALUES (?)", ("n2",))
            tx.enqueue({**lab("e2", "s", 1), "id": "bad\nid"})
        assert ob.pending() == []
    assert target.rows("SELECT COUNT(*) FROM notes") == [(0,)]
    assert target.rows("SELECT COUNT(*) FROM ackledger_outbox") == [(0,)]


def test_partition_is_the_partitionkey_and_is_checked(target: Target) -> None:
    with Outbox(target.ref) as ob:
        ob.accept(ev("e1", "apple"))  # an order's event is keyed by its sku
        with ob.transaction() as tx:
            tx.enqueue(lab("e2", "apple", 1))
            unkeyed = {key: v for key, v in lab("e3", "apple", 1).items() if key != "partitionkey"}
            tx.enqueue(unkeyed)  # no partitionkey: the one shared partition
        before = target.dump()
        for bad in ("", "x" * 257, 7):
            with (
                pytest.raises(InvalidEvent, match="partitionkey") as refused,
                ob.transaction() as tx,
            ):
                tx.enqueue({**lab("e4", "pear", 1), "partitionkey": bad})
            assert refused.value.field == "partitionkey"
        assert target.dump() == before
    assert target.rows(
        "SELECT id, partition_key, partitionkey FROM ackledger_outbox ORDER BY seq"
    ) == [
        ("e1", "apple", "apple"),
        ("e2", "apple", "apple"),
        ("e3", "", None),
    ]


def test_pending_is_in_seq_order_even_when_ids_sort_otherwise(target: Target) -> None:
    ids = ["zulu", "alpha", "mike", "9-first-by-digit", "bravo"]
    with Outbox(target.ref) as ob:
        seqs = [ob.accept(ev(event_id, f"sku-{n % 2}")) for n, event_id in enumerate(ids)]
        items = ob.pending()
    assert [item["id"] for item in items] == ids
    assert [item["seq"] for item in items] == seqs == sorted(seqs)
    assert items[0] == {**of(ev("zulu", "sku-0"), source=ob.source), "seq": seqs[0]}
    assert all(
        item == {**of(ev(item["id"], f"sku-{n % 2}"), source=ob.source), "seq": item["seq"]}
        for n, item in enumerate(items)
    )


def test_pending_limit_bounds_and_types(target: Target) -> None:
    with Outbox(target.ref) as ob:
        for n in range(20):
            ob.accept(ev(f"e{n:02d}"))
        assert len(ob.pending(1)) == 1
        assert len(ob.pending(16)) == 16
        assert len(ob.pending()) == 16
        for bad in (0, 17, -1, True, False, 1.0, 1.5, "3", None):
            with pytest.raises(ValueError, match="limit"):
                ob.pending(bad)  # type: ignore[arg-type]
        assert [item["id"] for item in ob.pending(3)] == ["e00", "e01", "e02"]
        ob.mark_sent("e01")
        assert [item["id"] for item in ob.pending(3)] == ["e00", "e02", "e03"]


def test_pending_writes_nothing_and_leaves_no_transaction_open(target: Target) -> None:
    with Outbox(target.ref) as ob:
        ob.accept(ev("e1"))
        ob.accept(ev("e2"))
        before = target.dump()
        assert len(ob.pending()) == 2
        assert target.dump() == before
        assert no_open_transaction(ob, target)


def test_mark_sent_is_idempotent_and_unknown_ids_raise_key_error(target: Target) -> None:
    with Outbox(target.ref) as ob:
        ob.accept(ev("e1"))
        ob.accept(ev("e2"))
        ob.mark_sent("e1")
        ob.mark_sent("e1")
        assert [item["id"] for item in ob.pending()] == ["e2"]
        before = target.dump()
        with pytest.raises(KeyError):
            ob.mark_sent("nope")
        assert target.dump() == before
    assert target.rows("SELECT id, sent FROM ackledger_outbox ORDER BY seq") == [
        ("e1", 1),
        ("e2", 0),
    ]


def test_several_outbox_objects_share_one_database(target: Target) -> None:
    with Outbox(target.ref) as one, Outbox(target.ref) as two:
        one.accept(ev("e1"))
        assert two.accept(ev("e1")) == one.pending()[0]["seq"]
        two.accept(ev("e2"))
        assert [item["id"] for item in one.pending()] == ["e1", "e2"]


def test_a_transaction_inside_another_is_refused_not_left_hanging(target: Target) -> None:
    with Outbox(target.ref) as ob:
        with pytest.raises((RuntimeError, sqlite3.OperationalError)), ob.transaction() as tx:
            tx.enqueue(lab("outer", "same-partition", 1, source=ob.source))
            ob.accept(ev("inner", "same-partition"))  # would wait for the outer's lock
        assert ob.pending() == []
        ob.accept(ev("after"))
    assert target.rows("SELECT id FROM ackledger_outbox") == [("after",)]


def test_an_order_whose_event_was_purged_cannot_be_accepted_again(target: Target) -> None:
    with Outbox(target.ref) as ob:
        ob.accept(ev("o-1"))
        ob.mark_sent("o-1")
        with ob.transaction() as tx:  # what a purge leaves: the order without its event
            tx.execute("DELETE FROM ackledger_outbox WHERE id = ?", ("o-1",))
        with pytest.raises(Conflict, match="purged"):
            ob.accept(ev("o-1"))
    assert counts(target) == (1, 0)


def test_mark_sent_many_marks_more_than_one_statement_holds(target: Target) -> None:
    count = MARK_CHUNK + 40  # more than one chunk
    ids = [f"m{number}" for number in range(count)]
    with Outbox(target.ref) as ob:
        with ob.transaction() as tx:
            for event_id in ids:
                tx.enqueue(lab(event_id, "sku-1", 1))
        ob.mark_sent_many([*ids, ids[0]], attempted=True)
    assert target.rows("SELECT sent, attempts FROM ackledger_outbox") == [(1, 1)] * count


def test_mark_sent_many_with_an_unknown_id_marks_nothing(target: Target) -> None:
    with Outbox(target.ref) as ob:
        ob.accept(ev("known"))
        with pytest.raises(KeyError, match="ghost"):
            ob.mark_sent_many(["known", "ghost"])
    assert target.rows("SELECT sent FROM ackledger_outbox") == [(0,)]


def test_a_batch_mark_counts_a_repeated_id_once_and_an_unknown_one_marks_none(
    target: Target,
) -> None:
    # A batch's mark is one statement without a transaction on PostgreSQL (all or none by
    # itself): the same rules as the transaction it replaced.
    with Outbox(target.ref) as ob:
        for name in ("a", "b", "c"):
            ob.accept(ev(name))
        with pytest.raises(KeyError, match="ghost"):
            ob.mark_sent_many(["a", "b", "a", "ghost", "b"], attempted=True)
        assert target.rows("SELECT id, sent, attempts FROM ackledger_outbox ORDER BY seq") == [
            ("a", 0, 0), ("b", 0, 0), ("c", 0, 0),
        ]  # fmt: skip
        ob.mark_sent_many(["b", "a", "b"], attempted=True)
        ob.mark_sent_many(["a", "b"], attempted=False)  # again: idempotent, no attempt
    assert target.rows("SELECT id, sent, attempts FROM ackledger_outbox ORDER BY seq") == [
        ("a", 1, 1), ("b", 1, 1), ("c", 0, 0),
    ]  # fmt: skip


def test_pending_inside_the_outboxs_own_transaction_is_refused(target: Target) -> None:
    # The selection is one statement without a BEGIN of its own: inside a transaction of the
    # same outbox it would read (and a dispatch would send) what is not committed yet.
    with Outbox(target.ref) as ob:
        ob.accept(ev("committed"))
        with pytest.raises((RuntimeError, sqlite3.OperationalError)), ob.transaction() as tx:
            tx.enqueue(lab("uncommitted", "sku-1", 1, source=ob.source))
            ob.pending()
        with pytest.raises((RuntimeError, sqlite3.OperationalError)), ob.transaction() as tx:
            tx.enqueue(lab("uncommitted", "sku-1", 1, source=ob.source))
            dispatch_batch(ob, len)
        assert [item["id"] for item in ob.pending()] == ["committed"]
    assert target.rows("SELECT id, sent FROM ackledger_outbox") == [("committed", 0)]


def test_a_per_item_mark_inside_the_outboxs_own_transaction_is_refused(target: Target) -> None:
    # The mark of one id is one statement that is its own transaction (Backend.statement):
    # inside an open transaction of the same outbox it would join it and commit (or roll back)
    # only with it, so it is refused like any nested transaction, and marks nothing.
    with Outbox(target.ref) as ob:
        ob.accept(ev("committed"))
        with pytest.raises((RuntimeError, sqlite3.OperationalError)), ob.transaction() as tx:
            tx.enqueue(lab("uncommitted", "sku-1", 1, source=ob.source))
            ob.mark_sent("committed", attempted=True)
        assert no_open_transaction(ob, target)
        assert [item["id"] for item in ob.pending()] == ["committed"]
    assert target.rows("SELECT id, sent, attempts FROM ackledger_outbox") == [("committed", 0, 0)]


def test_a_per_item_mark_waits_for_another_writer_then_commits(target: Target) -> None:
    # An autocommit UPDATE takes the write lock as BEGIN IMMEDIATE does: it waits for another
    # connection's write transaction (the busy timeout) instead of failing, and once it returns
    # its mark is committed, seen by another connection, with nothing left open.
    with Outbox(target.ref) as ob:
        ob.accept(ev("held"))
        done = threading.Event()
        errors: list[BaseException] = []

        def mark() -> None:
            try:
                ob.mark_sent("held", attempted=True)
            except BaseException as exc:  # reported by the assertion below
                errors.append(exc)
            done.set()

        with target.holding_writes("SELECT 1 FROM ackledger_outbox FOR UPDATE"):
            marker = threading.Thread(target=mark)
            marker.start()
            assert not done.wait(0.3)  # held back, not failed
        marker.join(30)
        assert errors == []
        assert target.rows("SELECT sent, attempts FROM ackledger_outbox") == [(1, 1)]
        assert no_open_transaction(ob, target)
