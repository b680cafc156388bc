"""``serve sink --session`` and ``consume --session`` on PostgreSQL, with real processes: an
ORM handler (a SQLAlchemy model ``Shipment``) writes in the user's own session, which commits
with the event's receipt. A re-send is a duplicate and the row exists once; a raising handler
leaves neither row nor receipt; a kill -9 after the session's commit and before the ACK makes
the re-send a duplicate, and one before the commit leaves nothing, so the re-send applies.

The databases are read from the test's own connections, never through the services.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import nats
import pytest

from ackledger import NotAcknowledged, new_event, send_http
from ackledger.envelope import canonical_json
from ackledger.ops.processes import cli_command, start_service
from ackledger.wire.http import close_connections

from . import pg
from .opshelp import wait_until
from .rabbit import publish, rabbit_queue

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

TYPE = "com.example.shipment.requested"

#: The user's module: a model, a session factory (sync and async), a handler that saves the
#: model, and two holds for the kill -9 tests: in the handler, after its flush (before the
#: commit), and in the session's after_commit hook (after the commit, before the ACK).
SHOP = """
import itertools
import os
import time

from sqlalchemy import String, create_engine, event as orm_event
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

URL = os.environ["SHOP_DB"]


class Base(DeclarativeBase):
    pass


class Shipment(Base):
    __tablename__ = "shipments"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    sku: Mapped[str] = mapped_column(String(64))


engine = create_engine(URL.replace("postgresql://", "postgresql+psycopg://", 1))
Session = sessionmaker(engine)
async_engine = create_async_engine(URL.replace("postgresql://", "postgresql+asyncpg://", 1))
AsyncSession = async_sessionmaker(async_engine)
NOT_CALLABLE = 7


def hold(name):
    path = os.environ.get(name)
    if path:
        open(path, "w").close()
        time.sleep(60)


@orm_event.listens_for(Session, "after_commit")
def committed(session):
    if not session.in_nested_transaction():  # the commit itself, not a savepoint's release
        hold("HOLD_AFTER_COMMIT")


def ship(session, event):
    session.add(Shipment(id=event["id"], sku=event["data"]["sku"]))
    if event["data"]["sku"] == "out-of-stock":
        raise RuntimeError("the carrier is down")
    session.flush()
    hold("HOLD_BEFORE_COMMIT")


async def ship_async(session, event):
    session.add(Shipment(id=event["id"], sku=event["data"]["sku"]))
    await session.flush()


HANDLERS = {"com.example.shipment.requested": ship}
ASYNC_HANDLERS = {"com.example.shipment.requested": ship_async}

made = itertools.count(1)


# A factory that numbers its sessions: the handler writes its session's number.
def numbered():
    session = Session()
    session.info["number"] = next(made)
    return session


def ship_numbered(session, event):
    time.sleep(float(event["data"].get("sleep", 0)))
    session.add(Shipment(id=event["id"], sku=str(session.info["number"])))


NUMBERED = {"com.example.shipment.requested": ship_numbered}
"""

SHIPMENTS = "CREATE TABLE shipments (id VARCHAR(64) PRIMARY KEY, sku VARCHAR(64) NOT NULL)"


def requested(event_id: str, sku: str = "tea") -> dict[str, Any]:
    return new_event(TYPE, {"sku": sku}, source="/orders", id=event_id)


class Shop:
    def __init__(self, folder: Path, db: str) -> None:
        self.folder = folder
        self.db = db
        (folder / "shop_orm.py").write_text(SHOP, encoding="utf-8")
        pg.rows(db, SHIPMENTS)

    def env(self, **extra: str) -> dict[str, str]:
        return {"PYTHONPATH": str(self.folder), "SHOP_DB": self.db, **extra}

    def shipments(self) -> list[tuple[Any, ...]]:
        return pg.rows(self.db, "SELECT id, sku FROM shipments ORDER BY id")

    def receipts(self, event_id: str) -> list[tuple[Any, ...]]:
        sql = "SELECT receipts FROM ackledger_inbox WHERE source = '/orders' AND id = ?"
        return pg.rows(self.db, sql, (event_id,))


@pytest.fixture
def shop(tmp_path: Path, pg_url: str) -> Shop:
    return Shop(tmp_path, pg_url)


def sink_command(shop: Shop, session: str = "shop_orm:Session") -> list[str]:
    command = ["serve", "sink", "--db", shop.db, "--port", "0", "--session", session]
    return [*command, "--handlers", "shop_orm:HANDLERS"]


def test_serve_sink_commits_the_orm_handlers_row_with_the_receipt(shop: Shop) -> None:
    err = shop.folder / "sink.err"
    with start_service(sink_command(shop), env=shop.env(), stderr_path=err) as sink:
        url = sink.base_url + "/events"
        assert send_http(requested("s-1"), url) is True
        assert send_http(requested("s-1"), url) is True  # the re-send: a duplicate
        with pytest.raises(NotAcknowledged) as refused:
            send_http(requested("s-2", "out-of-stock"), url)
        assert refused.value.status == 503
        # The lab's own handler writes SQL: it gets the session's transaction, not the session.
        lab = new_event("warehouse.stock.added", {"sku": "snack", "qty": 7}, source="/lab", id="w")
        assert send_http(lab, url) is True
    assert pg.rows(shop.db, "SELECT qty FROM inventory WHERE sku = 'snack'") == [(7,)]
    assert shop.shipments() == [("s-1", "tea")]
    assert shop.receipts("s-1") == [(2,)]
    assert shop.receipts("s-2") == []  # the raising handler's session rolled back: no row


def test_requests_that_wait_together_share_one_session(shop: Shop) -> None:
    """Group commit: the requests that arrive while a transaction is in its handler are
    applied in the next transaction together, in one session of the factory."""
    command = ["serve", "sink", "--db", shop.db, "--port", "0"]
    command += ["--session", "shop_orm:numbered", "--handlers", "shop_orm:NUMBERED"]
    with start_service(command, env=shop.env()) as sink:
        url = sink.base_url + "/events"
        slow = new_event(TYPE, {"sku": "tea", "sleep": 1.0}, source="/orders", id="g-0")
        first = threading.Thread(target=_send_and_close, args=(slow, url))
        first.start()
        wait_until(lambda: _in_a_transaction(shop), "the first handler to be running")
        rest = [threading.Thread(target=_send_and_close, args=(requested(f"g-{n}"), url))
                for n in range(1, 7)]  # fmt: skip
        for thread in rest:
            thread.start()
        for thread in [first, *rest]:
            thread.join(30)
    numbers = dict(shop.shipments())
    assert sorted(numbers) == [f"g-{n}" for n in range(7)]
    later = {numbers[f"g-{n}"] for n in range(1, 7)}
    assert len(later) < 6 and numbers["g-0"] not in later, numbers


def _send_and_close(event: dict[str, Any], url: str) -> None:
    """A send from a thread of its own, which closes its kept-alive connection after."""
    try:
        assert send_http(event, url) is True
    finally:
        close_connections()


def _in_a_transaction(shop: Shop) -> bool:
    """Whether a connection to the database other than the test's own is inside a
    transaction (the sink's session, in its handler)."""
    sql = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND state = 'idle in transaction' AND pid <> pg_backend_pid()"
    )
    return bool(pg.rows(shop.db, sql)[0][0] > 0)


def test_a_batch_keeps_its_prefix_and_a_failing_handlers_rows_go(shop: Shop) -> None:
    batch = [requested("b-1"), requested("b-2", "out-of-stock"), requested("b-3")]
    with start_service(sink_command(shop), env=shop.env()) as sink:
        answer = _post_batch(sink.base_url + "/events/batch", batch)
    assert [ack["id"] for ack in answer["acks"]] == ["b-1"]
    assert answer["error"]["index"] == 1 and answer["error"]["status"] == 503
    # b-2's pending row was added before it raised: its savepoint took it away.
    assert shop.shipments() == [("b-1", "tea")]


def _post_batch(url: str, events: list[dict[str, Any]]) -> Any:
    import json
    import urllib.request

    body = json.dumps(events).encode()
    request = urllib.request.Request(  # noqa: S310 - loopback
        url, body, {"Content-Type": "application/cloudevents-batch+json"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - loopback
        return json.loads(answer.read())


def test_serve_sink_runs_an_async_session_and_awaits_its_handler(shop: Shop) -> None:
    err = shop.folder / "sink.err"
    command = ["serve", "sink", "--db", shop.db, "--port", "0"]
    command += ["--session", "shop_orm:AsyncSession", "--handlers", "shop_orm:ASYNC_HANDLERS"]
    with start_service(command, env=shop.env(), stderr_path=err) as sink:
        url = sink.base_url + "/events"
        for event_id in ("a-1", "a-2", "a-1"):
            assert send_http(requested(event_id), url) is True
    assert shop.shipments() == [("a-1", "tea"), ("a-2", "tea")]
    assert shop.receipts("a-1") == [(2,)]
    said = err.read_text()
    assert "never awaited" not in said and "Traceback" not in said, said


# --- consume from RabbitMQ ------------------------------------------------------------------


def start_consume(
    shop: Shop, url: str, err: Path, session: str = "Session", **env: str
) -> subprocess.Popen[bytes]:
    handlers = "ASYNC_HANDLERS" if session == "AsyncSession" else "HANDLERS"
    command = cli_command("consume", "--from", url, "--db", shop.db, "--session",
                          f"shop_orm:{session}", "--handlers", f"shop_orm:{handlers}")  # fmt: skip
    with err.open("ab") as err_file:
        return subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=err_file,
            env={**os.environ, **shop.env(**env)},
        )  # fmt: skip


def stop(process: subprocess.Popen[bytes], err: Path) -> None:
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0, err.read_text()
    assert "stopped" in err.read_text()


def test_consume_from_rabbitmq_commits_the_orm_row_with_the_receipt(shop: Shop) -> None:
    err = shop.folder / "consume.err"
    with rabbit_queue("test-session") as (url, channel):
        for event in (requested("c-1"), requested("c-1"), requested("c-2", "out-of-stock")):
            publish(channel, url, event)
        consumer = start_consume(shop, url, err)
        try:
            wait_until(lambda: shop.receipts("c-1") == [(2,)], "the send and the re-send")
            wait_until(lambda: "RuntimeError" in err.read_text(), "the failing handler's retry")
        finally:
            stop(consumer, err)
    assert shop.shipments() == [("c-1", "tea")]
    assert shop.receipts("c-2") == []


def test_consume_from_nats_runs_an_async_session_off_its_loop(shop: Shop) -> None:
    unique = uuid.uuid4().hex[:12]
    stream, subject = f"TEST_SESSION_{unique}", f"test.session.{unique}"

    async def publish_twice() -> None:
        nc = await nats.connect("nats://127.0.0.1:4222")
        js = nc.jetstream()
        await js.add_stream(name=stream, subjects=[subject])
        for event in (requested("n-1"), requested("n-1")):
            await js.publish(subject, canonical_json(event).encode())
        await nc.close()

    async def delete_stream() -> None:
        nc = await nats.connect("nats://127.0.0.1:4222")
        await nc.jetstream().delete_stream(stream)
        await nc.close()

    err = shop.folder / "consume.err"
    asyncio.run(publish_twice())
    try:
        url = f"nats://127.0.0.1:4222?stream={stream}&durable=shipping"
        consumer = start_consume(shop, url, err, session="AsyncSession")
        try:
            wait_until(lambda: shop.receipts("n-1") == [(2,)], "the send and the re-send")
        finally:
            stop(consumer, err)
    finally:
        asyncio.run(delete_stream())
    assert shop.shipments() == [("n-1", "tea")]
    said = err.read_text()
    assert "never awaited" not in said and "Traceback" not in said, said


@pytest.mark.parametrize("moment", ["HOLD_AFTER_COMMIT", "HOLD_BEFORE_COMMIT"])
def test_consume_killed_around_the_sessions_commit(shop: Shop, moment: str) -> None:
    """kill -9 after the commit, before the ACK: the redelivery is a duplicate. Before the
    commit: nothing was written, and the redelivery applies."""
    err = shop.folder / "consume.err"
    hold = shop.folder / "held"
    with rabbit_queue("test-session") as (url, channel):
        publish(channel, url, requested("k-1"))
        consumer = start_consume(shop, url, err, **{moment: str(hold)})
        try:
            wait_until(hold.exists, "the consumer to be held at the moment")
        finally:
            consumer.kill()  # SIGKILL
            consumer.wait(10)
        committed = moment == "HOLD_AFTER_COMMIT"
        assert shop.shipments() == ([("k-1", "tea")] if committed else [])
        assert shop.receipts("k-1") == ([(1,)] if committed else [])
        again = start_consume(shop, url, err)  # the broker redelivers the unacked message
        try:
            wait_until(lambda: shop.receipts("k-1") == [(2 if committed else 1,)], "redelivery")
        finally:
            stop(again, err)
    assert shop.shipments() == [("k-1", "tea")]


@pytest.mark.parametrize("moment", ["HOLD_AFTER_COMMIT", "HOLD_BEFORE_COMMIT"])
def test_serve_sink_killed_around_the_sessions_commit(shop: Shop, moment: str) -> None:
    hold = shop.folder / "held"
    command = sink_command(shop)
    with start_service(command, env=shop.env(**{moment: str(hold)})) as sink:
        url = sink.base_url + "/events"
        sent = subprocess.Popen(
            [sys.executable, "-c", "from ackledger import send_http; import json, sys; "
             f"send_http(json.loads(sys.argv[1]), {url!r}, timeout=60)",
             canonical_json(requested("k-2"))],
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until(hold.exists, "the sink to be held at the moment")
        sink.process.kill()  # SIGKILL
        sink.process.wait(10)
        assert sent.wait(30) != 0  # never acknowledged
    committed = moment == "HOLD_AFTER_COMMIT"
    assert shop.shipments() == ([("k-2", "tea")] if committed else [])
    with start_service(command, env=shop.env()) as sink:
        assert send_http(requested("k-2"), sink.base_url + "/events") is True
    assert shop.shipments() == [("k-2", "tea")]
    assert shop.receipts("k-2") == [(2 if committed else 1,)]


# --- refused at start -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("shop_orm", "no ':' in it"),
        ("no_such_module:Session", "no module named 'no_such_module'"),
        ("shop_orm:Nothing", "has no attribute 'Nothing'"),
        ("shop_orm:NOT_CALLABLE", "got int"),
    ],
)
def test_a_bad_session_spec_is_one_line_and_exit_2(shop: Shop, spec: str, said: str) -> None:
    for command in (
        ["serve", "sink", "--db", shop.db, "--port", "0", "--session", spec],
        ["consume", "--from", "amqp://127.0.0.1/%2F?queue=q", "--db", shop.db, "--session", spec],
    ):
        done = subprocess.run(
            cli_command(*command), env={**os.environ, **shop.env()}, cwd=shop.folder,
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert said in done.stderr and "--session" in done.stderr, done.stderr


def test_a_session_on_another_database_is_refused_and_nothing_is_written(
    shop: Shop, pg_url: str
) -> None:
    other = pg.create_database()
    try:
        other_url = pg.url_for(other)
        done = subprocess.run(
            cli_command("serve", "sink", "--db", other_url, "--port", "0",
                        "--session", "shop_orm:Session"),
            env={**os.environ, **shop.env()}, capture_output=True, text=True, timeout=60,
            check=False,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert "reaches another database than --db" in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
        tables = pg.rows(other_url, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
        assert tables == [(0,)]
    finally:
        pg.drop_database(other)
