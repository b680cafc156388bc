"""``ackledger consume`` against the real RabbitMQ and NATS JetStream on loopback.

Messages are published with pika and nats-py directly, in structured mode (the event's
canonical JSON); the consumer is a real process, the inbox a real SQLite file read back from
a separate connection. Every queue, exchange and stream has a name of its own and is deleted
after its test.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pika
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo

from ackledger import Inbox, new_event
from ackledger.envelope import canonical_json
from ackledger.ops.processes import cli_command, run_cli

from .conftest import raw_rows

pytestmark = pytest.mark.slow

HANDLERS = """
import os
import time

from ackledger import Rejected


def flaky(tx, event):
    # Fails on its first two attempts (counted in a file, outside the rolled-back transaction).
    with open(os.environ["FLAKY_FILE"], "a", encoding="utf-8") as tally:
        tally.write("x")
    with open(os.environ["FLAKY_FILE"], encoding="utf-8") as tally:
        if len(tally.read()) < 3:
            raise RuntimeError("the database is briefly away")
    tx.execute("INSERT INTO applied (id) VALUES (?)", (event["id"],))


def slow(tx, event):
    # Says it has begun (the test's cue to send a stop signal), then takes its time.
    open(os.environ["FLAKY_FILE"] + "." + event["id"], "w").close()
    time.sleep(1.5)
    tx.execute("INSERT INTO applied (id) VALUES (?)", (event["id"],))


def refuse(tx, event):
    raise Rejected("this event can never be applied")


def broken(tx, event):
    raise RuntimeError("the service behind it is away")


HANDLERS = {
    "com.example.flaky": flaky, "com.example.slow": slow, "com.example.refused": refuse,
    "com.example.broken": broken,
}
"""

AMQP = "amqp://guest:guest@127.0.0.1:5672/%2F"
NATS = "nats://127.0.0.1:4222"
WAIT_S = 20.0


def stock(sku: str, qty: int, event_id: str) -> dict[str, Any]:
    data = {"sku": sku, "qty": qty}
    return new_event("warehouse.stock.added", data, source="/wh", id=event_id)


def body(event: dict[str, Any]) -> bytes:
    return canonical_json(event).encode("utf-8")


def inventory(db: Path, sku: str) -> int:
    rows = raw_rows(db, "SELECT qty FROM inventory WHERE sku = ?", (sku,))
    return int(str(rows[0][0])) if rows else 0


def inbox_ids(db: Path) -> list[str]:
    return [str(row[0]) for row in raw_rows(db, "SELECT id FROM ackledger_inbox ORDER BY id")]


def eventually(check: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@dataclass
class ConsumerProcess:
    process: subprocess.Popen[bytes]
    out: Path
    err: Path

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError("the consumer did not stop on its signal") from None

    @property
    def stdout(self) -> str:
        return self.out.read_text(encoding="utf-8")

    @property
    def stderr(self) -> str:
        return self.err.read_text(encoding="utf-8")


@pytest.fixture
def start_consumer(tmp_path: Path) -> Iterator[Callable[..., ConsumerProcess]]:
    """Start ``ackledger consume ARGS`` with the test's handlers module importable."""
    (tmp_path / "shop_events.py").write_text(HANDLERS, encoding="utf-8")
    env = {
        **os.environ, "PYTHONPATH": str(tmp_path),
        "FLAKY_FILE": str(tmp_path / "flaky.tally"),
    }  # fmt: skip
    started: list[ConsumerProcess] = []

    def start(*args: str) -> ConsumerProcess:
        name = f"consumer-{len(started)}"
        out, err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        # Short backoffs unless the test gives its own.
        pace = (
            () if "--base-backoff" in args else ("--base-backoff", "0.05", "--max-backoff", "0.2")
        )
        with out.open("wb") as out_file, err.open("wb") as err_file:
            process = subprocess.Popen(
                cli_command("consume", *args, *pace),
                stdout=out_file, stderr=err_file, env=env, cwd=tmp_path,
            )  # fmt: skip
        started.append(ConsumerProcess(process, out, err))
        return started[-1]

    yield start
    for consumer in started:
        if consumer.process.poll() is None:
            consumer.process.kill()
            consumer.process.wait()


def assert_stopped_line(consumer: ConsumerProcess) -> None:
    """A consumer stopped by SIGTERM says so in its log before it exits 0."""
    [stopped] = [line for line in consumer.stderr.splitlines() if " stopped:" in line]
    assert "INFO" in stopped and "SIGTERM" in stopped and "applied=1" in stopped


def handler_table(tmp_path: Path) -> Path:
    """The inbox's file, its schema made, with the flaky handler's table beside it."""
    db = tmp_path / "inbox.db"
    Inbox(db).close()
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE applied (id TEXT)")
    conn.commit()
    conn.close()
    return db


def counters(db: Path) -> dict[str, int]:
    with Inbox(db) as inbox:
        return inbox.counters()


def metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as answer:  # noqa: S310 - loopback
        text = answer.read().decode("utf-8")
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def metrics_url(consumer: ConsumerProcess) -> str:
    found: list[str] = []

    def printed() -> bool:
        for line in consumer.stdout.splitlines():
            if "metrics listening on " in line:
                found.append(line.rsplit(" ", 1)[1])
        return bool(found)

    eventually(printed, "the metrics URL")
    return found[0]


# --- RabbitMQ ------------------------------------------------------------------------------


@dataclass
class Rabbit:
    channel: Any
    queue: str
    dead: str

    @property
    def url(self) -> str:
        return f"{AMQP}?queue={self.queue}"

    def publish(self, payload: bytes, content_type: str = "application/cloudevents+json") -> None:
        properties = pika.BasicProperties(content_type=content_type, delivery_mode=2)
        self.channel.basic_publish("", self.queue, payload, properties, mandatory=True)

    def ready(self, queue: str) -> int:
        """Messages ready in ``queue`` (unacked ones on a live channel are not counted)."""
        return int(self.channel.queue_declare(queue, passive=True).method.message_count)

    def dead_letters(self) -> list[bytes]:
        found: list[bytes] = []
        while True:
            method, _, payload = self.channel.basic_get(self.dead, auto_ack=True)
            if method is None:
                return found
            found.append(payload)


@pytest.fixture
def rabbit() -> Iterator[Rabbit]:
    """A queue of its own whose dead-letter exchange routes to a dead-letter queue."""
    unique = uuid.uuid4().hex[:12]
    connection = pika.BlockingConnection(pika.URLParameters(AMQP))
    channel = connection.channel()
    channel.confirm_delivery()
    dlx, dead, queue = (f"test-consume-{kind}-{unique}" for kind in ("dlx", "dead", "q"))
    channel.exchange_declare(dlx, "fanout")
    channel.queue_declare(dead)
    channel.queue_bind(dead, dlx)
    channel.queue_declare(queue, arguments={"x-dead-letter-exchange": dlx})
    try:
        yield Rabbit(channel, queue, dead)
    finally:
        channel.queue_delete(queue)
        channel.queue_delete(dead)
        channel.exchange_delete(dlx)
        connection.close()


def test_amqp_applies_each_event_once_and_acks_the_duplicate(
    tmp_path: Path, rabbit: Rabbit, start_consumer: Callable[..., ConsumerProcess]
) -> None:
    db = tmp_path / "inbox.db"
    first, second = stock("tea", 3, "e-1"), stock("tea", 4, "e-2")
    for event in (first, first, second):
        rabbit.publish(body(event))
    consumer = start_consumer("--from", rabbit.url, "--db", str(db), "--metrics-port", "0")
    url = metrics_url(consumer)
    eventually(lambda: metric(url, "ackledger_consumer_duplicates_total") == 1, "the duplicate")
    eventually(lambda: metric(url, "ackledger_consumer_applied_total") == 2, "both applied")
    assert consumer.stop(signal.SIGTERM) == 0
    assert inventory(db, "tea") == 7  # the duplicate added nothing
    assert inbox_ids(db) == ["e-1", "e-2"]
    assert counters(db) == {"applied": 2, "duplicate": 1, "conflict": 0}
    # Nothing came back to the queue when the channel closed: all three were acked.
    assert rabbit.ready(rabbit.queue) == 0
    assert rabbit.dead_letters() == []
    assert f"amqp://guest:***@127.0.0.1:5672/%2F?queue={rabbit.queue}" in consumer.stdout


def test_amqp_rejects_what_can_never_apply_to_the_dead_letter_queue(
    tmp_path: Path, rabbit: Rabbit, start_consumer: Callable[..., ConsumerProcess]
) -> None:
    db = tmp_path / "inbox.db"
    good = stock("tea", 5, "e-ok")
    refused = new_event("com.example.refused", {"n": 1}, source="/shop", id="r-1")
    unhandled = new_event("com.example.unknown", {"n": 1}, source="/shop", id="u-1")
    conflicting = stock("tea", 50, "e-ok")  # same identity, other content
    invalid_event = {**good, "id": "e-bad", "specversion": "0.3"}
    bad = [body(refused), body(unhandled), b"not json", body(invalid_event), body(conflicting)]
    rabbit.publish(body(good))
    for payload in bad:
        rabbit.publish(payload)
    rabbit.publish(body(good), content_type="text/plain")  # not a structured-mode event
    consumer = start_consumer(
        "--from", rabbit.url, "--db", str(db), "--handlers", "shop_events:HANDLERS",
        "--metrics-port", "0",
    )  # fmt: skip
    eventually(lambda: rabbit.ready(rabbit.dead) == len(bad) + 1, "the dead letters")
    url = metrics_url(consumer)
    assert metric(url, "ackledger_consumer_rejected_total") == len(bad) + 1
    assert metric(url, "ackledger_consumer_applied_total") == 1
    assert consumer.stop() == 0
    assert sorted(rabbit.dead_letters()) == sorted([*bad, body(good)])
    assert inventory(db, "tea") == 5
    assert inbox_ids(db) == ["e-ok"]
    assert rabbit.ready(rabbit.queue) == 0
    assert consumer.stderr.count("rejected:") == len(bad) + 1


def test_amqp_redelivers_a_transient_failure_until_it_applies(
    tmp_path: Path, rabbit: Rabbit, start_consumer: Callable[..., ConsumerProcess]
) -> None:
    db = handler_table(tmp_path)
    rabbit.publish(body(new_event("com.example.flaky", {"n": 1}, source="/shop", id="f-1")))
    consumer = start_consumer(
        "--from", rabbit.url, "--db", str(db), "--handlers", "shop_events:HANDLERS",
        "--metrics-port", "0",
    )  # fmt: skip
    eventually(lambda: inbox_ids(db) == ["f-1"], "the third attempt to apply it")
    url = metrics_url(consumer)
    eventually(lambda: metric(url, "ackledger_consumer_applied_total") == 1, "the ack counted")
    assert metric(url, "ackledger_consumer_failed_total") == 2
    assert consumer.stop() == 0
    assert (tmp_path / "flaky.tally").read_text(encoding="utf-8") == "xxx"
    assert raw_rows(db, "SELECT id FROM applied") == [("f-1",)]
    assert consumer.stderr.count("failed:") == 2
    assert rabbit.ready(rabbit.queue) == 0
    assert rabbit.dead_letters() == []  # transient: never dead-lettered


def test_amqp_crash_after_commit_before_ack_is_a_duplicate_on_redelivery(
    tmp_path: Path, rabbit: Rabbit, start_consumer: Callable[..., ConsumerProcess]
) -> None:
    db = tmp_path / "inbox.db"
    for number, qty in enumerate((1, 2, 4), 1):
        rabbit.publish(body(stock("tea", qty, f"e-{number}")))
    crashed = start_consumer("--from", rabbit.url, "--db", str(db), "--exit-after-commit", "75")
    assert crashed.process.wait(WAIT_S) == 75
    assert inventory(db, "tea") == 1  # e-1 committed, never acked
    eventually(lambda: rabbit.ready(rabbit.queue) == 3, "the unacked messages back")
    consumer = start_consumer("--from", rabbit.url, "--db", str(db))
    eventually(lambda: counters(db)["applied"] == 3, "the rest applied")
    eventually(lambda: counters(db)["duplicate"] == 1, "the redelivered one as a duplicate")
    assert consumer.stop(signal.SIGINT) == 0
    assert inventory(db, "tea") == 7  # exact: e-1 applied once
    assert rabbit.ready(rabbit.queue) == 0


def slow_pair(tmp_path: Path) -> tuple[Path, list[bytes], Path]:
    """Two events of the slow handler, and the file its first one creates when it begins."""
    events = [new_event("com.example.slow", {"n": n}, source="/shop", id=f"s-{n}") for n in (1, 2)]
    return handler_table(tmp_path), [body(event) for event in events], tmp_path / "flaky.tally.s-1"


def test_amqp_sigterm_finishes_the_message_in_hand_then_exits_0(
    tmp_path: Path, rabbit: Rabbit, start_consumer: Callable[..., ConsumerProcess]
) -> None:
    db, payloads, begun = slow_pair(tmp_path)
    for payload in payloads:
        rabbit.publish(payload)
    handlers = ("--handlers", "shop_events:HANDLERS")
    consumer = start_consumer("--from", rabbit.url, "--db", str(db), *handlers)
    eventually(begun.exists, "the first event in hand")
    assert consumer.stop(signal.SIGTERM) == 0
    assert_stopped_line(consumer)
    # The one in hand was applied and acked; the prefetched second went back, unapplied.
    assert raw_rows(db, "SELECT id FROM applied") == [("s-1",)]
    assert rabbit.ready(rabbit.queue) == 1
    again = start_consumer("--from", rabbit.url, "--db", str(db), *handlers)
    eventually(lambda: counters(db)["applied"] == 2, "the second applied")
    assert again.stop() == 0
    assert counters(db)["duplicate"] == 0  # the first was acked before the exit
    assert rabbit.ready(rabbit.queue) == 0


def test_amqp_wrong_password_is_one_line_without_it(tmp_path: Path, rabbit: Rabbit) -> None:
    url = f"amqp://guest:wrong-s3cret@127.0.0.1:5672/%2F?queue={rabbit.queue}"
    done = run_cli("consume", "--from", url, "--db", str(tmp_path / "inbox.db"), timeout=30)
    assert done.returncode == 1, done.stderr
    assert "wrong-s3cret" not in done.stdout + done.stderr
    assert "access refused" in done.stderr


def test_amqp_wrong_vhost_says_the_login_was_refused(tmp_path: Path, rabbit: Rabbit) -> None:
    vhost = f"no-such-vhost-{uuid.uuid4().hex[:8]}"
    url = f"amqp://guest:guest@127.0.0.1:5672/{vhost}?queue={rabbit.queue}"
    done = run_cli("consume", "--from", url, "--db", str(tmp_path / "inbox.db"), timeout=30)
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    assert f"refused user 'guest' on vhost {vhost!r}" in line
    assert "no such vhost" in line and "Traceback" not in done.stderr


def test_amqp_missing_queue_is_named(tmp_path: Path) -> None:
    queue = f"test-consume-missing-{uuid.uuid4().hex[:12]}"
    done = run_cli("consume", "--from", f"{AMQP}?queue={queue}", "--db", str(tmp_path / "i.db"))
    assert done.returncode == 1
    assert queue in done.stderr and "not found" in done.stderr


# --- NATS JetStream ------------------------------------------------------------------------


@dataclass
class Jet:
    stream: str
    subject: str

    def url(self, durable: str) -> str:
        return f"{NATS}?stream={self.stream}&durable={durable}"

    def publish(self, *payloads: bytes) -> None:
        async def go() -> None:
            nc = await nats.connect(NATS)
            js = nc.jetstream()
            for payload in payloads:
                await js.publish(self.subject, payload)
            await nc.close()

        asyncio.run(go())

    def precreate(self, durable: str, ack_wait: float) -> None:
        """The durable consumer as an operator would make it: a short ack wait, so that an
        unacked (or wrongly nacked) message would be back within a test's patience."""
        config = ConsumerConfig(
            durable_name=durable, ack_policy=AckPolicy.EXPLICIT, ack_wait=ack_wait
        )
        asyncio.run(_manage(lambda js: js.add_consumer(self.stream, config)))

    def info(self, durable: str) -> ConsumerInfo:
        found: ConsumerInfo = asyncio.run(
            _manage(lambda js: js.consumer_info(self.stream, durable))
        )
        return found


async def _manage(call: Callable[[Any], Any]) -> Any:
    nc = await nats.connect(NATS)
    try:
        return await call(nc.jetstream())
    finally:
        await nc.close()


@pytest.fixture
def jet() -> Iterator[Jet]:
    unique = uuid.uuid4().hex[:12]
    jet = Jet(f"TEST_CONSUME_{unique}", f"test.consume.{unique}")
    asyncio.run(_manage(lambda js: js.add_stream(name=jet.stream, subjects=[jet.subject])))
    try:
        yield jet
    finally:
        asyncio.run(_manage(lambda js: js.delete_stream(jet.stream)))


def settled(info: ConsumerInfo) -> bool:
    return info.num_pending == 0 and info.num_ack_pending == 0


def test_nats_applies_each_event_once_and_acks_the_duplicate(
    tmp_path: Path, jet: Jet, start_consumer: Callable[..., ConsumerProcess]
) -> None:
    db = tmp_path / "inbox.db"
    first, second = stock("tea", 3, "e-1"), stock("tea", 4, "e-2")
    jet.publish(body(first), body(first), body(second))
    consumer = start_consumer("--from", jet.url("inbox"), "--db", str(db), "--metrics-port", "0")
    url = metrics_url(consumer)
    eventually(lambda: metric(url, "ackledger_consumer_duplicates_total") == 1, "the duplicate")
    eventually(lambda: metric(url, "ackledger_consumer_applied_total") == 2, "both applied")
    eventually(lambda: settled(jet.info("inbox")), "all three acked")
    assert consumer.stop(signal.SIGINT) == 0
    assert inventory(db, "tea") == 7
    assert counters(db) == {"applied": 2, "duplicate": 1, "conflict": 0}
    info = jet.info("inbox")
    assert info.config.max_ack_pending == 16  # the consumer it created is bounded
    assert info.ack_floor is not None and info.ack_floor.stream_seq == 3


def test_nats_terms_what_can_never_apply(
    tmp_path: Path, jet: Jet, start_consumer: Callable[..., ConsumerProcess]
) -> None:
    db = tmp_path / "inbox.db"
    jet.precreate("inbox", ack_wait=1.0)
    refused = new_event("com.example.refused", {"n": 1}, source="/shop", id="r-1")
    unhandled = new_event("com.example.unknown", {"n": 1}, source="/shop", id="u-1")
    jet.publish(body(refused), body(unhandled), b"{not json", body(stock("tea", 2, "e-1")))
    consumer = start_consumer(
        "--from", jet.url("inbox"), "--db", str(db), "--handlers", "shop_events:HANDLERS"
    )
    eventually(lambda: settled(jet.info("inbox")), "all four settled")
    time.sleep(2.5)  # past the ack wait: a nacked or unacked message would be back by now
    assert consumer.stop() == 0
    assert consumer.stderr.count("rejected:") == 3  # each refused once, never redelivered
    info = jet.info("inbox")
    assert info.num_redelivered == 0 and settled(info)
    assert inventory(db, "tea") == 2
    assert inbox_ids(db) == ["e-1"]


def test_nats_naks_a_transient_failure_until_it_applies(
    tmp_path: Path, jet: Jet, start_consumer: Callable[..., ConsumerProcess]
) -> None:
    db = handler_table(tmp_path)
    jet.publish(body(new_event("com.example.flaky", {"n": 1}, source="/shop", id="f-1")))
    consumer = start_consumer(
        "--from", jet.url("inbox"), "--db", str(db), "--handlers", "shop_events:HANDLERS"
    )
    eventually(lambda: inbox_ids(db) == ["f-1"], "the third attempt to apply it")
    eventually(lambda: settled(jet.info("inbox")), "the ack")
    assert consumer.stop() == 0
    assert (tmp_path / "flaky.tally").read_text(encoding="utf-8") == "xxx"
    assert raw_rows(db, "SELECT id FROM applied") == [("f-1",)]
    assert consumer.stderr.count("failed:") == 2


def test_nats_crash_after_commit_before_ack_is_a_duplicate_on_redelivery(
    tmp_path: Path, jet: Jet, start_consumer: Callable[..., ConsumerProcess]
) -> None:
    db = tmp_path / "inbox.db"
    jet.precreate("inbox", ack_wait=1.0)
    jet.publish(*(body(stock("tea", qty, f"e-{n}")) for n, qty in enumerate((1, 2, 4), 1)))
    crashed = start_consumer(
        "--from", jet.url("inbox"), "--db", str(db), "--exit-after-commit", "75"
    )
    assert crashed.process.wait(WAIT_S) == 75
    assert inventory(db, "tea") == 1
    consumer = start_consumer("--from", jet.url("inbox"), "--db", str(db))
    eventually(lambda: counters(db)["applied"] == 3, "the rest applied")
    eventually(lambda: counters(db)["duplicate"] == 1, "the redelivered one as a duplicate")
    eventually(lambda: settled(jet.info("inbox")), "all acked")
    assert consumer.stop() == 0
    assert inventory(db, "tea") == 7


def test_nats_sigterm_finishes_the_message_in_hand_then_exits_0(
    tmp_path: Path, jet: Jet, start_consumer: Callable[..., ConsumerProcess]
) -> None:
    db, payloads, begun = slow_pair(tmp_path)
    jet.precreate("inbox", ack_wait=3.0)  # longer than the slow handler takes
    jet.publish(*payloads)
    handlers = ("--handlers", "shop_events:HANDLERS")
    consumer = start_consumer("--from", jet.url("inbox"), "--db", str(db), *handlers)
    eventually(begun.exists, "the first event in hand")
    assert consumer.stop(signal.SIGTERM) == 0
    assert_stopped_line(consumer)
    assert raw_rows(db, "SELECT id FROM applied") == [("s-1",)]
    time.sleep(3.5)  # past the ack wait: an unacked first event would come back as a duplicate
    again = start_consumer("--from", jet.url("inbox"), "--db", str(db), *handlers)
    eventually(lambda: counters(db)["applied"] == 2, "the second applied")
    eventually(lambda: settled(jet.info("inbox")), "all acked")
    assert again.stop() == 0
    assert counters(db)["duplicate"] == 0


def test_nats_durable_deleted_while_consuming_is_a_permanent_stop(
    tmp_path: Path, jet: Jet, start_consumer: Callable[..., ConsumerProcess]
) -> None:
    db = tmp_path / "inbox.db"
    consumer = start_consumer("--from", jet.url("gone"), "--db", str(db))
    eventually(lambda: "consuming" in consumer.stderr, "the consumer started")
    asyncio.run(_manage(lambda js: js.delete_consumer(jet.stream, "gone")))
    # Not retried for ever as an idle one would be: exit 1, naming what is missing.
    assert consumer.process.wait(WAIT_S) == 1
    assert "durable consumer 'gone'" in consumer.stderr and "not found" in consumer.stderr


def test_nats_fetches_no_more_than_the_durables_own_limit(
    tmp_path: Path, jet: Jet, start_consumer: Callable[..., ConsumerProcess]
) -> None:
    """A durable its owner made with max_ack_pending=1: a fetch of our own 16 got one message
    and then waited out its 0.5 s time-out for the rest, each time (10 s for these 20)."""
    config = ConsumerConfig(
        durable_name="one-at-a-time", ack_policy=AckPolicy.EXPLICIT, max_ack_pending=1
    )
    asyncio.run(_manage(lambda js: js.add_consumer(jet.stream, config)))
    jet.publish(*(body(stock("tea", 1, f"t-{n:02d}")) for n in range(20)))
    db = tmp_path / "inbox.db"
    started = time.monotonic()
    consumer = start_consumer("--from", jet.url("one-at-a-time"), "--db", str(db))
    eventually(lambda: "consuming" in consumer.stderr, "the consumer started")
    eventually(lambda: inventory(db, "tea") == 20, "all twenty applied")
    took = time.monotonic() - started
    assert consumer.stop() == 0
    [consuming] = [line for line in consumer.stderr.splitlines() if " consuming:" in line]
    assert "batch=1" in consuming
    assert took < 6.0, f"{took:.1f} s for 20 messages: fetches wait for more than the limit"
    assert jet.info("one-at-a-time").config.max_ack_pending == 1  # used as its owner made it


def test_nats_missing_stream_is_named(tmp_path: Path) -> None:
    stream = f"TEST_CONSUME_MISSING_{uuid.uuid4().hex[:12]}"
    url = f"{NATS}?stream={stream}&durable=d"
    done = run_cli("consume", "--from", url, "--db", str(tmp_path / "i.db"), timeout=30)
    assert done.returncode == 1
    assert stream in done.stderr and "not found" in done.stderr


# --- refused before anything is opened ---------------------------------------------------


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("amqp://guest:s3cret@broker.invalid:5672/%2F?queue=q", "broker.invalid"),
        ("nats://user:s3cret@broker.invalid:4222?stream=S&durable=d", "broker.invalid"),
        ("amqp://guest:s3cret@127.0.0.1:5672/%2F", "queue="),
        ("amqp://guest:s3cret@127.0.0.1:5672/%2F?queue=q&prefetch=0", "prefetch="),
        ("amqp://guest:s3cret@127.0.0.1:5672/%2F?queue=q&prefetch=100000", "prefetch="),
        ("amqp://guest:s3cret@127.0.0.1:5672/%2F?queue=q&exchange=x", "exchange="),
        ("nats://127.0.0.1:4222?stream=S", "durable="),
        ("nats://127.0.0.1:4222?stream=a.b&durable=d", "stream="),
        ("amqps://guest:s3cret@127.0.0.1:5671/%2F?queue=q", "amqps"),
        ("http://127.0.0.1:8080/events", "http"),
    ],
)
def test_a_bad_source_is_one_line_exit_2_and_writes_nothing(
    tmp_path: Path, url: str, named: str
) -> None:
    db = tmp_path / "never.db"
    done = run_cli("consume", "--from", url, "--db", str(db))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ackledger: error: --from:"), done.stderr
    assert named in lines[0]
    assert "s3cret" not in done.stderr and "Traceback" not in done.stderr
    assert not db.exists()


def test_an_allowed_host_is_widened_only_by_allow_host(tmp_path: Path) -> None:
    # broker.invalid never resolves: allowed, the consumer tries it (and retries) until stopped.
    url = "amqp://guest:s3cret@broker.invalid:5672/%2F?queue=q"
    command = cli_command("consume", "--from", url, "--db", str(tmp_path / "i.db"),
                          "--allow-host", "broker.invalid")  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # Its first line says it started (a loaded machine can take seconds to get there);
        # then give it a moment to try the broker before it is stopped.
        assert process.stdout is not None
        first = process.stdout.readline()
        time.sleep(1.0)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=WAIT_S)
        out = first + out
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert b"broker-error" in err and b"s3cret" not in out + err
    assert b"amqp://guest:***@broker.invalid:5672/%2F?queue=q" in out


def test_the_help_names_both_brokers() -> None:
    done = run_cli("consume", "--help")
    assert done.returncode == 0
    assert "amqp://" in done.stdout and "nats://" in done.stdout
    assert "--exit-after-commit" not in done.stdout  # a drill, not a feature
