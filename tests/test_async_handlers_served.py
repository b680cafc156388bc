"""Async handlers in real processes: ``serve sink``, ``consume`` (RabbitMQ and NATS) and a
mounted ``Inbox.asgi()`` under uvicorn each await an ``async def`` handler inside the
receipt's transaction, so its row exists exactly once after a send and a re-send; a plain
handler runs in a worker thread, never on the event loop; and a kill -9 while an async
handler is between its write and the commit leaves nothing, so the re-send applies once.

The databases are read from the test's own connections, never through the services.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nats
import pika
import pytest

from ackledger import Inbox, NotAcknowledged, new_event, send_http
from ackledger.envelope import canonical_json
from ackledger.ops.processes import cli_command, start_service

from . import pg
from .opshelp import free_port, wait_until

pytestmark = pytest.mark.slow

TYPE = "com.example.order.placed"
PLAIN = "com.example.order.noted"

#: The user's module: an async handler, a plain one that says where it ran, and a hold that
#: parks the async handler between its write and the commit (the kill -9 test's moment).
HANDLERS = """
import asyncio
import os
import threading


async def ship(tx, event):
    await asyncio.sleep(0)
    tx.execute("INSERT INTO shipments (id, place) VALUES (?, ?)", (event["id"], "async"))
    hold = os.environ.get("HOLD_FILE")
    if hold:
        open(hold, "w").close()
        await asyncio.sleep(60)


def note(tx, event):
    try:
        asyncio.get_running_loop()
        place = "on an event loop"
    except RuntimeError:
        place = "thread " + threading.current_thread().name
    slow = float(event["data"].get("sleep", 0))
    if slow:
        import time

        time.sleep(slow)
    tx.execute("INSERT INTO shipments (id, place) VALUES (?, ?)", (event["id"], place))


HANDLERS = {"com.example.order.placed": ship, "com.example.order.noted": note}
"""

SHIPMENTS = "CREATE TABLE shipments (id TEXT PRIMARY KEY, place TEXT NOT NULL)"


def placed(event_id: str, kind: str = TYPE, **data: Any) -> dict[str, Any]:
    return new_event(kind, {"order": event_id, **data}, source="/orders", id=event_id)


class Shop:
    """The user's folder: the handlers module and the inbox's database (SQLite or PG)."""

    def __init__(self, folder: Path, db: str) -> None:
        self.folder = folder
        self.db = db
        (folder / "shop_events.py").write_text(HANDLERS, encoding="utf-8")
        self.execute(SHIPMENTS)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(self.folder)}

    def execute(self, sql: str) -> None:
        if self.db.startswith("postgresql://"):
            pg.rows(self.db, sql)
            return
        conn = sqlite3.connect(self.db)
        try:
            conn.execute(sql)
            conn.commit()
        finally:
            conn.close()

    def shipments(self) -> list[tuple[Any, ...]]:
        sql = "SELECT id, place FROM shipments ORDER BY id"
        if self.db.startswith("postgresql://"):
            return pg.rows(self.db, sql)
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()

    def receipt(self, event_id: str) -> dict[str, Any] | None:
        with Inbox(self.db) as inbox:
            return inbox.receipt(event_id, source="/orders")


@pytest.fixture
def shop(tmp_path: Path) -> Shop:
    db = tmp_path / "shipping.db"
    Inbox(db).close()
    return Shop(tmp_path, str(db))


def test_serve_sink_awaits_an_async_handler_and_runs_a_plain_one_off_the_loop(
    shop: Shop,
) -> None:
    err = shop.folder / "sink.err"
    command = ["serve", "sink", "--db", shop.db, "--port", "0"]
    command += ["--handlers", "shop_events:HANDLERS"]
    with start_service(command, env={"PYTHONPATH": str(shop.folder)}, stderr_path=err) as sink:
        url = sink.base_url + "/events"
        for _ in range(2):  # a send and a re-send
            assert send_http(placed("o-1"), url) is True
            assert send_http(placed("n-1", PLAIN), url) is True
    assert shop.shipments() == [("n-1", "thread ackledger-inbox-0"), ("o-1", "async")]
    said = err.read_text()
    assert f"{TYPE} (async)" in said and f"{PLAIN} (plain)" in said
    assert "never awaited" not in said


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_kill_9_inside_an_async_handler_commits_nothing_and_the_resend_applies_once(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    if kind == "postgres":
        db = request.getfixturevalue("pg_url")
    else:
        db = str(tmp_path / "shipping.db")
        Inbox(db).close()
    shop = Shop(tmp_path, db)
    hold = tmp_path / "in-the-handler"
    command = ["serve", "sink", "--db", db, "--port", "0", "--handlers", "shop_events:HANDLERS"]
    env = {"PYTHONPATH": str(tmp_path), "HOLD_FILE": str(hold)}
    with start_service(command, env=env) as sink:
        url = sink.base_url + "/events"
        sent = subprocess.Popen(
            [sys.executable, "-c", f"from ackledger import send_http; import json, sys; "
             f"send_http(json.loads(sys.argv[1]), {url!r}, timeout=60)",
             canonical_json(placed("o-9"))],
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until(hold.exists, "the handler to have written and be waiting")
        sink.process.kill()  # SIGKILL: between the handler's write and the commit
        sink.process.wait(10)
        assert sent.wait(30) != 0  # never acknowledged
    assert shop.shipments() == []
    assert shop.receipt("o-9") is None
    # The relay's re-send, to a sink started again: applied once.
    with start_service(command, env={"PYTHONPATH": str(tmp_path)}) as sink:
        url = sink.base_url + "/events"
        assert send_http(placed("o-9"), url) is True
        assert send_http(placed("o-9"), url) is True
    assert shop.shipments() == [("o-9", "async")]
    found = shop.receipt("o-9")
    assert found is not None and found["receipts"] == 2


# --- a mounted inbox in the user's own app, under uvicorn -----------------------------------

APP = """
import os

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from ackledger import Inbox
from shop_events import HANDLERS

inbox = Inbox(os.environ["SHOP_DB"], handlers=HANDLERS)


async def ping(request):
    return PlainTextResponse("pong")


app = Starlette(routes=[Route("/ping", ping), Mount("/", app=inbox.asgi())])
"""


@contextmanager
def uvicorn_app(shop: Shop) -> Iterator[str]:
    (shop.folder / "shop_app.py").write_text(APP, encoding="utf-8")
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "shop_app:app", "--app-dir", str(shop.folder)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--no-access-log"]
    log = shop.folder / "uvicorn.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env={**shop.env, "SHOP_DB": shop.db}
        )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(base + "/ping", timeout=5):  # noqa: S310 - loopback
                return True
        except OSError:
            return process.poll() is not None

    try:
        wait_until(up, "uvicorn to serve")
        assert process.poll() is None, log.read_text()
        yield base
    finally:
        process.terminate()
        process.wait(30)
    text = log.read_text()
    assert "Traceback" not in text and "never awaited" not in text, text


def test_a_mounted_inbox_awaits_async_handlers_and_never_blocks_the_hosts_loop(
    shop: Shop,
) -> None:
    with uvicorn_app(shop) as base:
        url = base + "/events"
        assert send_http(placed("o-1"), url) is True
        assert send_http(placed("o-1"), url) is True
        # A plain handler that takes 1.5 s: the host's own route answers meanwhile.
        slow = subprocess.Popen(
            [sys.executable, "-c", "from ackledger import send_http; import json, sys; "
             f"send_http(json.loads(sys.argv[1]), {url!r}, timeout=30)",
             canonical_json(placed("n-1", PLAIN, sleep=1.5))],
        )  # fmt: skip
        wait_until(lambda: _in_flight(shop), "the slow handler to start", timeout=20)
        started = time.monotonic()
        with urllib.request.urlopen(base + "/ping", timeout=10) as answer:  # noqa: S310
            assert answer.read() == b"pong"
        assert time.monotonic() - started < 0.75
        assert slow.wait(30) == 0
    assert shop.shipments() == [("n-1", "thread ackledger-inbox-0"), ("o-1", "async")]


def _in_flight(shop: Shop) -> bool:
    """The slow handler holds the write lock: SQLite refuses another writer at once."""
    conn = sqlite3.connect(shop.db, timeout=0)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.rollback()
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        conn.close()


# --- consume: RabbitMQ and NATS JetStream ---------------------------------------------------


@contextmanager
def consuming(shop: Shop, url: str) -> Iterator[subprocess.Popen[bytes]]:
    err = shop.folder / "consume.err"
    with err.open("wb") as err_file:
        process = subprocess.Popen(
            cli_command("consume", "--from", url, "--db", shop.db,
                        "--handlers", "shop_events:HANDLERS"),
            stdout=subprocess.DEVNULL, stderr=err_file, env=shop.env,
        )  # fmt: skip
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, err.read_text()
    said = err.read_text()
    assert f"{TYPE} (async)" in said and "never awaited" not in said, said


def _expect_both(shop: Shop) -> None:
    wait_until(lambda: len(shop.shipments()) == 2, "both events applied", timeout=30)
    time.sleep(0.5)  # the re-sends, had they applied again, would have failed by now
    assert shop.shipments() == [("n-1", "thread MainThread"), ("o-1", "async")]


def test_consume_from_rabbitmq_awaits_an_async_handler_once(shop: Shop) -> None:
    queue = f"test-async-handlers-{uuid.uuid4().hex[:12]}"
    connection = pika.BlockingConnection(pika.URLParameters("amqp://guest:guest@127.0.0.1/%2F"))
    channel = connection.channel()
    channel.queue_declare(queue)
    try:
        for event in (placed("o-1"), placed("o-1"), placed("n-1", PLAIN)):
            properties = pika.BasicProperties(
                content_type="application/cloudevents+json", delivery_mode=2
            )
            channel.basic_publish("", queue, canonical_json(event).encode(), properties)
        url = f"amqp://guest:guest@127.0.0.1:5672/%2F?queue={queue}"
        with consuming(shop, url):
            _expect_both(shop)
        assert channel.queue_declare(queue, passive=True).method.message_count == 0
    finally:
        channel.queue_delete(queue)
        connection.close()
    assert shop.receipt("o-1") is not None


def test_consume_from_nats_awaits_an_async_handler_once_off_its_loop(shop: Shop) -> None:
    unique = uuid.uuid4().hex[:12]
    stream, subject = f"TEST_ASYNC_{unique}", f"test.async.{unique}"

    async def setup() -> None:
        nc = await nats.connect("nats://127.0.0.1:4222")
        js = nc.jetstream()
        await js.add_stream(name=stream, subjects=[subject])
        for event in (placed("o-1"), placed("o-1"), placed("n-1", PLAIN)):
            await js.publish(subject, canonical_json(event).encode())
        await nc.close()

    async def teardown() -> None:
        nc = await nats.connect("nats://127.0.0.1:4222")
        await nc.jetstream().delete_stream(stream)
        await nc.close()

    asyncio.run(setup())
    try:
        with consuming(shop, f"nats://127.0.0.1:4222?stream={stream}&durable=shipping"):
            wait_until(lambda: len(shop.shipments()) == 2, "both events applied", timeout=30)
            time.sleep(0.5)
    finally:
        asyncio.run(teardown())
    rows = shop.shipments()
    assert rows[1] == ("o-1", "async") and rows[0][0] == "n-1"
    assert rows[0][1].startswith("thread ") and rows[0][1] != "thread MainThread"


def test_the_sync_receive_in_a_script_refuses_the_async_handler(shop: Shop) -> None:
    script = (
        "from ackledger import Inbox, new_event\n"
        "from shop_events import HANDLERS\n"
        "import sys\n"
        f"inbox = Inbox({shop.db!r}, handlers=HANDLERS)\n"
        "event = new_event('com.example.order.placed', {}, source='/orders', id='o-1')\n"
        "try:\n"
        "    inbox.receive(event)\n"
        "except TypeError as exc:\n"
        "    print(exc)\n"
        "    sys.exit(3)\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", script], env=shop.env, capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert "is async" in done.stdout and "never awaited" not in done.stderr
    assert shop.shipments() == [] and shop.receipt("o-1") is None


def test_a_send_to_a_sink_with_a_broken_handler_kind_stays_unacknowledged(shop: Shop) -> None:
    """The service path awaits; a handler that raises is a 503, nothing written."""
    module = shop.folder / "broken_events.py"
    module.write_text(
        "async def ship(tx, event):\n    raise RuntimeError('the carrier is down')\n"
        "HANDLERS = {'com.example.order.placed': ship}\n",
        encoding="utf-8",
    )
    command = [
        "serve",
        "sink",
        "--db",
        shop.db,
        "--port",
        "0",
        "--handlers",
        "broken_events:HANDLERS",
    ]
    with start_service(command, env={"PYTHONPATH": str(shop.folder)}) as sink:
        with pytest.raises(NotAcknowledged) as refused:
            send_http(placed("o-1"), sink.base_url + "/events")
        assert refused.value.status == 503
    assert shop.receipt("o-1") is None
