"""``sink.session_factory`` on real SQLite files: the inbox's transactions held in a
SQLAlchemy ``Session``, an aiosqlite ``AsyncSession`` or a ``Connection``, the batch's prefix
rule kept, a failing handler's rows gone with its receipt; and how a session's database is
told from ``--db``; and on PostgreSQL, what one consumed message costs in statements.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import String, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from ackledger import Inbox, new_event
from ackledger.sink.session_factory import SessionInbox, SqlAlchemySessions
from ackledger.store.place import place_of_target, place_of_url

TYPE = "com.example.shipment.requested"


class Base(DeclarativeBase):
    pass


class Shipment(Base):
    __tablename__ = "shipments"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)


def ship(session: Any, event: dict[str, Any]) -> None:
    session.add(Shipment(id=event["data"].get("row", event["id"])))
    if event["data"].get("fail"):
        raise RuntimeError("the carrier is down")  # after the add: its row must go too


async def ship_async(session: Any, event: dict[str, Any]) -> None:
    session.add(Shipment(id=event["id"]))
    await session.flush()
    if event["data"].get("fail"):
        raise RuntimeError("the carrier is down")


def ship_core(connection: Any, event: dict[str, Any]) -> None:
    connection.execute(text("INSERT INTO shipments (id) VALUES (:id)"), {"id": event["id"]})
    if event["data"].get("fail"):
        raise RuntimeError("the carrier is down")


def shipped(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [row[0] for row in conn.execute("SELECT id FROM shipments ORDER BY id")]
    finally:
        conn.close()


def requested(event_id: str, **data: Any) -> dict[str, Any]:
    return new_event(TYPE, data, source="/orders", id=event_id)


def sync_factory(path: Path) -> Callable[[], object]:
    return sessionmaker(create_engine(f"sqlite:///{path}"))


def async_factory(path: Path) -> Callable[[], object]:
    return async_sessionmaker(create_async_engine(f"sqlite+aiosqlite:///{path}"))


def connection_factory(path: Path) -> Callable[[], object]:
    return create_engine(f"sqlite:///{path}").connect


@pytest.mark.parametrize(
    ("factory", "handler"),
    [(sync_factory, ship), (async_factory, ship_async), (connection_factory, ship_core)],
)
def test_a_session_commits_the_rows_with_their_receipts_and_keeps_the_prefix_rule(
    tmp_path: Path, factory: Callable[[Path], Callable[[], object]], handler: Any
) -> None:
    db = tmp_path / "shipping.db"
    Inbox(db).close()
    Base.metadata.create_all(create_engine(f"sqlite:///{db}"))
    sessions = SqlAlchemySessions(factory(db))
    sessions.check(str(db))
    with SessionInbox(db, transactions=sessions, handlers={TYPE: handler}) as inbox:
        (alone,) = inbox.receive_runs([[requested("s-1")]], awaiting=True)
        (again,) = inbox.receive_runs([[requested("s-1")]], awaiting=True)
        batch, other = inbox.receive_runs(
            [[requested("s-2"), requested("s-3", fail=1), requested("s-4")], [requested("s-5")]],
            awaiting=True,
        )
        (failed,) = inbox.receive_runs([[requested("s-6", fail=1)]], awaiting=True)
        assert (alone.statuses, again.statuses) == (["applied"], ["duplicate"])
        assert batch.statuses == ["applied"] and isinstance(batch.error, RuntimeError)
        assert other.statuses == ["applied"] and other.error is None
        assert failed.statuses == [] and isinstance(failed.error, RuntimeError)
        assert inbox.receipt("s-3") is None and inbox.receipt("s-6") is None
    assert shipped(db) == ["s-1", "s-2", "s-5"]


def test_savepoints_only_after_a_failure_and_a_handlers_rows_fail_as_its_own(
    tmp_path: Path,
) -> None:
    db = tmp_path / "shipping.db"
    Inbox(db).close()
    engine = create_engine(f"sqlite:///{db}")
    Base.metadata.create_all(engine)
    seen: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def statement(conn: Any, cursor: Any, sql: str, *rest: Any) -> None:
        seen.append(sql.split(maxsplit=1)[0].upper())

    sessions = SqlAlchemySessions(sessionmaker(engine))
    with SessionInbox(db, transactions=sessions, handlers={TYPE: ship}) as inbox:
        (alone,) = inbox.receive_runs([[requested("s-1")]], awaiting=True)
        assert alone.statuses == ["applied"] and seen == ["INSERT"]
        seen.clear()
        (batch,) = inbox.receive_runs([[requested("s-2"), requested("s-3")]], awaiting=True)
        # Each handler's rows flushed right after it, no savepoint while none fails.
        assert batch.statuses == ["applied", "applied"] and seen == ["INSERT"] * 2
        seen.clear()
        # Its row, still pending when the handler returned, breaks the key: the handler's
        # error (flushed in its call, not at the commit), and nothing of it stays.
        (clash,) = inbox.receive_runs([[requested("s-4", row="s-1")]], awaiting=True)
        assert clash.statuses == [] and isinstance(clash.error, IntegrityError)
        assert inbox.receipt("s-4") is None
        seen.clear()
        # In a group: the first attempt stops at the clash and is rolled back; the group is
        # applied again with a savepoint per handler, and only the clashing run stops.
        first, second = inbox.receive_runs(
            [[requested("s-5")], [requested("s-6", row="s-2")]], awaiting=True
        )
        assert first.statuses == ["applied"] and first.error is None
        assert second.statuses == [] and isinstance(second.error, IntegrityError)
        assert seen[:2] == ["INSERT", "INSERT"]
        assert seen[2:] == ["SAVEPOINT", "INSERT", "RELEASE", "SAVEPOINT", "INSERT", "ROLLBACK"]
        assert inbox.receipt("s-5") is not None and inbox.receipt("s-6") is None
        assert inbox.counters()["applied"] == 4
    assert shipped(db) == ["s-1", "s-2", "s-3", "s-5"]


def test_a_session_is_told_by_its_database_not_by_how_it_is_written(tmp_path: Path) -> None:
    db = tmp_path / "shipping.db"
    assert place_of_url(make_url(f"sqlite:///{db}")) == place_of_target(str(db))
    assert place_of_url(make_url("sqlite:///other.db")) != place_of_target(str(db))
    ours = place_of_target("postgresql://postgres@127.0.0.1/shop")
    for same in (
        "postgresql+psycopg://postgres@localhost:5432/shop",
        "postgresql+asyncpg://someone:secret@127.0.0.1/shop",
    ):
        assert place_of_url(make_url(same)) == ours, same
    for other in (
        "postgresql+psycopg://postgres@127.0.0.1:5433/shop",
        "postgresql+psycopg://postgres@127.0.0.1/billing",
        "postgresql+psycopg://postgres@db.internal/shop",
    ):
        assert place_of_url(make_url(other)) != ours, other


def test_a_session_on_another_file_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    db, other = tmp_path / "shipping.db", tmp_path / "other.db"
    with pytest.raises(ValueError, match="reaches another database than --db: SQLite file"):
        SqlAlchemySessions(sync_factory(other)).check(str(db))
    assert not db.exists()


def test_a_consumed_message_on_postgresql_is_one_transaction_of_two_statements(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    from ackledger._core.backoff import Backoff
    from ackledger.envelope import canonical_json
    from ackledger.sink.consume import Consumer

    engine = create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    Base.metadata.create_all(engine)
    commits: list[object] = []
    event.listen(engine, "commit", commits.append)
    # Each statement is a loopback round trip the consumer waits for: they, not the Python
    # around them, set its pace. Every psycopg connection is counted (the session's and the
    # inbox's own), so a read by key first or a second transaction shows as well.
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def counted(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query).split(maxsplit=1)[0].upper())
        return execute(cursor, query, *args, **kwargs)

    sessions = SqlAlchemySessions(sessionmaker(engine))
    with SessionInbox(pg_url, transactions=sessions, handlers={TYPE: ship}) as inbox:
        consumer = Consumer(inbox, Backoff(0.1, 1.0))
        with monkeypatch.context() as patch:
            patch.setattr(psycopg.Cursor, "execute", counted)
            for number in range(3):
                body = canonical_json(requested(f"s-{number}")).encode()
                verdict = consumer.handle(body, "application/cloudevents+json")
                assert verdict.outcome == "applied"
        # The receipt's claim numbered in the statement that takes its arrival number (and
        # the outcome's count, ahead), then the handler's row: an applied message needs no
        # last bump of the counters.
        assert sent == ["WITH", "INSERT"] * 3
        assert len(commits) == 3
        assert inbox.counters()["applied"] == 3
    engine.dispose()
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT id FROM shipments ORDER BY id").fetchall()
    assert [row[0] for row in rows] == ["s-0", "s-1", "s-2"]
