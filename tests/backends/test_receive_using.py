"""``Inbox.receive(event, using=...)`` and ``Inbox(name=...)`` on both databases (CONTRACT
section 12): the receipt and the handler's writes commit together in the caller's transaction,
or neither stays; inboxes of several names share one database and each applies an event once."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from ackledger import Conflict, Inbox, new_event

from .conftest import Target

SOURCE = "/orders-service"
PLACED = "com.example.order.placed"


def placed(order_id: str, total: int = 10) -> dict[str, Any]:
    return new_event(PLACED, {"order": order_id, "total": total}, source=SOURCE, id=order_id)


def own_connection(target: Target) -> Any:
    if target.dialect == "postgres":
        return psycopg.connect(target.ref)
    return sqlite3.connect(target.ref, timeout=30)


def mark(target: Target) -> str:
    return "%s" if target.dialect == "postgres" else "?"


def ship(conn: Any, event: dict[str, Any]) -> None:
    """A handler with the caller's own connection: sqlite3's and psycopg's ``execute``."""
    where = "%s" if isinstance(conn, psycopg.Connection) else "?"
    conn.execute(
        f"INSERT INTO shipments (order_id, total) VALUES ({where}, {where})",
        (event["data"]["order"], event["data"]["total"]),
    )


@pytest.fixture
def shop(target: Target) -> Iterator[Inbox]:
    with Inbox(target.ref, handlers={PLACED: ship}) as inbox:
        target.execute("CREATE TABLE shipments (order_id TEXT PRIMARY KEY, total INTEGER)")
        yield inbox


def seen(target: Target) -> tuple[list[Any], list[Any]]:
    """(shipments, receipts) as a second, independent connection sees them."""
    shipments = target.rows("SELECT order_id FROM shipments ORDER BY order_id")
    receipts = target.rows("SELECT id, name FROM ackledger_inbox ORDER BY id, name")
    return shipments, receipts


def test_the_receipt_commits_with_the_handlers_row_and_not_before(
    target: Target, shop: Inbox
) -> None:
    conn = own_connection(target)
    try:
        assert shop.receive(placed("o-1"), using=conn) == "applied"
        assert seen(target) == ([], [])  # nothing committed behind the caller's back
        conn.commit()
        assert seen(target) == ([("o-1",)], [("o-1", "default")])
        # Again, in the caller's next transaction: a duplicate, the handler not run.
        assert shop.receive(placed("o-1"), using=conn) == "duplicate"
        conn.commit()
        with pytest.raises(Conflict):
            shop.receive(placed("o-1", total=99), using=conn)
        conn.rollback()
    finally:
        conn.close()
    assert seen(target) == ([("o-1",)], [("o-1", "default")])
    assert shop.receipt("o-1", source=SOURCE)["receipts"] == 2  # type: ignore[index]


def test_the_callers_rollback_removes_both_and_a_retry_applies(target: Target, shop: Inbox) -> None:
    conn = own_connection(target)
    try:
        assert shop.receive(placed("o-2"), using=conn) == "applied"
        conn.rollback()
        assert seen(target) == ([], [])
        assert shop.receive(placed("o-2"), using=conn) == "applied"
        conn.commit()
    finally:
        conn.close()
    assert seen(target) == ([("o-2",)], [("o-2", "default")])


def test_a_raising_handler_leaves_nothing_once_the_caller_rolls_back(
    target: Target, target_inbox_of_failures: Inbox
) -> None:
    conn = own_connection(target)
    try:
        with pytest.raises(RuntimeError, match="out of boxes"):
            target_inbox_of_failures.receive(placed("o-3"), using=conn)
        conn.rollback()
    finally:
        conn.close()
    assert seen(target) == ([], [])


@pytest.fixture
def target_inbox_of_failures(target: Target) -> Iterator[Inbox]:
    def fails(conn: Any, event: dict[str, Any]) -> None:
        ship(conn, event)
        raise RuntimeError("out of boxes")

    with Inbox(target.ref, handlers={PLACED: fails}) as inbox:
        target.execute("CREATE TABLE shipments (order_id TEXT PRIMARY KEY, total INTEGER)")
        yield inbox


def test_a_sqlalchemy_session_handler_writes_an_orm_model(target: Target) -> None:
    from sqlalchemy import Integer, String, create_engine
    from sqlalchemy.orm import DeclarativeBase, Session, mapped_column

    class Base(DeclarativeBase):
        pass

    class Shipment(Base):
        # Columns without annotations: this module's annotations are strings
        # (``from __future__``), which SQLAlchemy resolves at module level only.
        __tablename__ = "shipments"
        order_id = mapped_column(String, primary_key=True)
        total = mapped_column(Integer)

    handled: list[object] = []

    def ship_orm(session: Session, event: dict[str, Any]) -> None:
        handled.append(session)
        session.add(Shipment(order_id=event["data"]["order"], total=event["data"]["total"]))
        session.flush()

    if target.dialect == "postgres":
        url = target.ref.replace("postgresql://", "postgresql+psycopg://", 1)
    else:
        url = f"sqlite:///{target.ref}"
    engine = create_engine(url)
    try:
        Base.metadata.create_all(engine)
        with Inbox(target.ref, handlers={PLACED: ship_orm}) as inbox:
            with Session(engine) as session:
                assert inbox.receive(placed("o-4", 7), using=session) == "applied"
                assert handled == [session]  # the caller's own object, not a wrapper
                assert seen(target) == ([], [])
                session.commit()
            assert seen(target) == ([("o-4",)], [("o-4", "default")])
            with Session(engine) as session:
                assert inbox.receive(placed("o-5"), using=session) == "applied"
                session.rollback()
                assert inbox.receive(placed("o-4", 7), using=session) == "duplicate"
                session.commit()
                assert session.get(Shipment, "o-4") is not None
            assert seen(target) == ([("o-4",)], [("o-4", "default")])
    finally:
        engine.dispose()


def test_bad_using_is_refused_naming_it_and_nothing_is_written(target: Target, shop: Inbox) -> None:
    before = target.dump()
    with pytest.raises(TypeError, match=r"using: expected .*; got builtins\.object"):
        shop.receive(placed("o-6"), using=object())
    assert target.dump() == before


def test_an_async_handler_with_using_is_refused_before_writing(target: Target) -> None:
    async def ship_later(conn: Any, event: dict[str, Any]) -> None:
        ship(conn, event)

    with Inbox(target.ref, handlers={PLACED: ship_later}) as inbox:
        before = target.dump()
        conn = own_connection(target)
        try:
            with pytest.raises(TypeError, match="async"):
                inbox.receive(placed("o-7"), using=conn)
            conn.commit()  # even a commit keeps nothing: nothing was written
        finally:
            conn.close()
        assert target.dump() == before


def test_two_inbox_names_on_one_database_each_apply_once(target: Target) -> None:
    applied: list[tuple[str, str]] = []

    def noting(name: str) -> Any:
        def handler(tx: Any, event: dict[str, Any]) -> None:
            applied.append((name, event["id"]))

        return handler

    with (
        Inbox(target.ref, name="shipping", handlers={PLACED: noting("shipping")}) as shipping,
        Inbox(target.ref, name="billing", handlers={PLACED: noting("billing")}) as billing,
    ):
        assert (shipping.name, billing.name) == ("shipping", "billing")
        for _ in range(2):
            for inbox in (shipping, billing):
                inbox.receive(placed("o-8"))
        assert sorted(applied) == [("billing", "o-8"), ("shipping", "o-8")]
        assert target.rows("SELECT name, receipts FROM ackledger_inbox ORDER BY name") == [
            ("billing", 2),
            ("shipping", 2),
        ]
        # Each reads its own receipts: an inbox of a third name has none.
        assert shipping.receipt("o-8") is not None
        with Inbox(target.ref, name="audit") as audit:
            assert audit.receipt("o-8") is None
            assert audit.receipts("o-8") == []
        # A purge of one name deletes its receipts alone.
        target.execute("UPDATE ackledger_inbox SET first_received_at = 1.0")
        assert billing.purge(3600.0) == 1
        assert shipping.receipt("o-8") is not None
        assert billing.receipt("o-8") is None
        assert billing.retention()["oldest_receipt_age_s"] is None
        assert shipping.retention()["oldest_receipt_age_s"] > 3600.0


def test_with_using_two_names_each_apply_once(target: Target, shop: Inbox) -> None:
    with Inbox(target.ref, name="billing", handlers={PLACED: ship}) as billing:
        conn = own_connection(target)
        try:
            assert shop.receive(placed("o-9"), using=conn) == "applied"
            conn.execute(f"DELETE FROM shipments WHERE order_id = {mark(target)}", ("o-9",))
            assert billing.receive(placed("o-9"), using=conn) == "applied"
            assert billing.receive(placed("o-9"), using=conn) == "duplicate"
            conn.commit()
        finally:
            conn.close()
    assert seen(target) == ([("o-9",)], [("o-9", "billing"), ("o-9", "default")])


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "must not be empty"),
        ("x" * 65, "at most 64 characters, got 65"),
        ("ship\nping", "must not hold control characters"),
        ("bill\x1b[31m", "must not hold control characters"),
    ],
)
def test_a_bad_name_is_refused_and_nothing_is_opened(
    tmp_path: Any, name: str, message: str
) -> None:
    path = tmp_path / "sink.db"
    with pytest.raises(ValueError, match=rf"^name: {message}"):
        Inbox(path, name=name)
    assert not path.exists()


def test_a_database_without_ackledgers_schema_is_refused_before_writing(tmp_path: Any) -> None:
    with Inbox(tmp_path / "sink.db", handlers={PLACED: ship}) as inbox:
        plain = sqlite3.connect(tmp_path / "plain.db")
        try:
            plain.execute("CREATE TABLE shipments (order_id TEXT PRIMARY KEY, total INTEGER)")
            plain.commit()
            with pytest.raises(ValueError, match="no ackledger schema"):
                inbox.receive(placed("o-13"), using=plain)
            plain.commit()
            assert plain.execute("SELECT * FROM shipments").fetchall() == []
        finally:
            plain.close()


def test_a_name_that_is_not_text_is_a_type_error(tmp_path: Any) -> None:
    with pytest.raises(TypeError, match="name: must be a str, got int"):
        Inbox(tmp_path / "sink.db", name=5)  # type: ignore[arg-type]


# --- two transactions receiving one identity at once ---


def _thread_connection(target: Target) -> Any:
    if target.dialect == "postgres":
        return psycopg.connect(target.ref)
    return sqlite3.connect(target.ref, timeout=30, check_same_thread=False)


def _race(target: Target, shop: Inbox, *, first_commits: bool) -> str:
    """The first transaction applies and holds; the second receives the same identity on
    its own connection meanwhile, then the first commits or rolls back. The second's answer."""
    first, second = own_connection(target), _thread_connection(target)
    try:
        assert shop.receive(placed("o-10"), using=first) == "applied"
        # The second waits on the first's claim of the key (PostgreSQL), or for the one
        # writer's lock (SQLite), until the first ends.
        thread, answer = _waiting(target, shop, second, placed("o-10"))
        if first_commits:
            first.commit()
        else:
            first.rollback()
        thread.join(10)
        assert not thread.is_alive()
    finally:
        first.close()
        second.close()
    (result,) = answer
    assert isinstance(result, str), result
    return result


def _waiting(
    target: Target, shop: Inbox, conn: Any, event: dict[str, Any]
) -> tuple[threading.Thread, list[object]]:
    """Receive ``event`` on ``conn`` and commit, in a thread of its own; returned once it
    waits for a lock another transaction holds, with the list its answer will be put in."""
    answer: list[object] = []

    def receive() -> None:
        try:
            answer.append(shop.receive(event, using=conn))
            conn.commit()
        except BaseException as exc:  # the test's thread: report, never swallow
            answer.append(exc)
            conn.rollback()

    thread = threading.Thread(target=receive)
    thread.start()
    if target.dialect == "postgres":
        deadline = time.monotonic() + 10
        while not _waits_for_a_lock(target, conn) and time.monotonic() < deadline:
            time.sleep(0.02)
    else:
        time.sleep(0.3)
    assert thread.is_alive() and not answer
    return thread, answer


def _waits_for_a_lock(target: Target, conn: psycopg.Connection[Any]) -> bool:
    pid = conn.info.backend_pid
    found = target.rows("SELECT wait_event_type FROM pg_stat_activity WHERE pid = ?", (pid,))
    return found == [("Lock",)]


def test_two_transactions_at_once_one_applies_the_other_is_a_duplicate_after_commit(
    target: Target, shop: Inbox
) -> None:
    assert _race(target, shop, first_commits=True) == "duplicate"
    assert seen(target) == ([("o-10",)], [("o-10", "default")])
    assert shop.receipt("o-10")["receipts"] == 2  # type: ignore[index]


def test_two_transactions_at_once_the_other_applies_if_the_first_rolled_back(
    target: Target, shop: Inbox
) -> None:
    assert _race(target, shop, first_commits=False) == "applied"
    assert seen(target) == ([("o-10",)], [("o-10", "default")])
    assert shop.receipt("o-10")["receipts"] == 1  # type: ignore[index]


def test_sqlite_callers_at_once_take_distinct_arrival_numbers(tmp_path: Any) -> None:
    """Two sqlite3 callers' transactions: the second waits for the one writer's lock before
    it takes its arrival number, so it never reuses the first's."""
    target = Target("sqlite", str(tmp_path / "shop.db"))
    with Inbox(target.ref, handlers={PLACED: ship}) as inbox:
        target.execute("CREATE TABLE shipments (order_id TEXT PRIMARY KEY, total INTEGER)")
        first = own_connection(target)
        second = sqlite3.connect(target.ref, timeout=30, check_same_thread=False)
        answer: list[object] = []
        try:
            assert inbox.receive(placed("o-11"), using=first) == "applied"
            thread = threading.Thread(
                target=lambda: answer.append(inbox.receive(placed("o-12"), using=second))
            )
            thread.start()
            time.sleep(0.3)  # the second is waiting for the writer's lock
            assert thread.is_alive()
            first.commit()
            thread.join(10)
            second.commit()
        finally:
            first.close()
            second.close()
        assert answer == ["applied"]
    assert target.rows("SELECT id, arrival FROM ackledger_inbox ORDER BY id") == [
        ("o-11", 1),
        ("o-12", 2),
    ]


def test_a_waiting_transaction_has_claimed_nothing_and_numbers_follow_the_commits(
    target: Target, shop: Inbox
) -> None:
    """The second transaction waits for the arrival numbers before it claims anything (the
    counter is locked ahead of every receipt, in the statement that claims them too): the
    first can still claim the very identity the second is receiving, with no deadlock, and
    each takes its numbers in the order of the commits."""
    first, second = own_connection(target), _thread_connection(target)
    try:
        assert shop.receive(placed("o-20"), using=first) == "applied"
        thread, answer = _waiting(target, shop, second, placed("o-21"))
        assert shop.receive(placed("o-21"), using=first) == "applied"
        first.commit()
        thread.join(10)
        assert not thread.is_alive()
    finally:
        first.close()
        second.close()
    assert answer == ["duplicate"]
    rows = target.rows("SELECT id, arrival, last_arrival FROM ackledger_inbox ORDER BY id")
    assert rows == [("o-20", 1, 1), ("o-21", 2, 3)]
    assert seen(target)[0] == [("o-20",), ("o-21",)]
    assert shop.counters() == {"applied": 2, "duplicate": 1, "conflict": 0}
