"""The RabbitMQ sender against the real broker on loopback (127.0.0.1:5672, guest/guest).

Each test declares its own durable exchange and queue with pika directly, and deletes them
after. What counts as sent is the broker's publisher confirm with no return before it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
import pytest

import ackledger
from ackledger import InvalidEvent, NotAcknowledged, Outbox, UnsafeTarget, dispatch, dispatch_batch
from ackledger.envelope import canonical_json, validate_cloudevent
from ackledger.ops.faultproxy import FaultProxy
from ackledger.ops.processes import run_cli, start_service
from ackledger.relay.policy import PERMANENT, TRANSIENT, failure_of
from ackledger.relay.settings import RelaySettings
from ackledger.source.dispatch import own_stored, own_stored_event
from ackledger.wire.amqp import AmqpSender
from ackledger.wire.sender import Sender
from ackledger.wire.stored import stored_sender
from tests.events import SOURCE, lab
from tests.opshelp import start_relay, wait_until
from tests.rawserver import forbid_network
from tests.stored_events import LOOSE_ID, dispatchers, loosen, stored_events, stored_outbox

BROKER_PORT = 5672
TYPE = "warehouse.stock.added"
SECRET = "s3cr3t-Pw"


@dataclass
class Broker:
    """One test's exchange and queue (the queue bound for the lab's type only)."""

    channel: Any
    exchange: str
    queue: str

    def url(self, port: int = BROKER_PORT, *, password: str = "guest", extra: str = "") -> str:  # noqa: S107
        return f"amqp://guest:{password}@127.0.0.1:{port}/%2F?exchange={self.exchange}{extra}"

    def consume_url(self) -> str:
        """Where ``ackledger consume --from`` reads this test's queue."""
        return f"amqp://guest:guest@127.0.0.1:{BROKER_PORT}/%2F?queue={self.queue}"

    def messages(self) -> list[tuple[Any, bytes]]:
        """Everything in the queue, in order (taken off it)."""
        found: list[tuple[Any, bytes]] = []
        while True:
            method, props, body = self.channel.basic_get(self.queue, auto_ack=True)
            if method is None:
                return found
            found.append((props, body))

    def ids(self) -> list[str]:
        return [props.message_id for props, _ in self.messages()]


@pytest.fixture
def broker() -> Iterator[Broker]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", BROKER_PORT))
    channel = conn.channel()
    name = f"ackledger-test-{uuid.uuid4().hex[:12]}"
    channel.exchange_declare(name, "direct", durable=True)
    channel.queue_declare(name, durable=True)
    channel.queue_bind(name, name, TYPE)
    try:
        yield Broker(channel, name, name)
    finally:
        channel.queue_delete(name)
        channel.exchange_delete(name)
        conn.close()


@pytest.fixture
def closing() -> Iterator[list[Sender]]:
    """Senders to close after the test, whatever it did."""
    made: list[Sender] = []
    yield made
    for each in made:
        each.close()


def amqp(url: str, closing: list[Sender], **options: Any) -> Sender:
    made = ackledger.sender(url, **options)
    closing.append(made)
    return made


def other(event_id: str) -> dict[str, Any]:
    """An event of a type no queue is bound for: unroutable."""
    return ackledger.new_event("test.unbound", {"n": 1}, source=SOURCE, id=event_id)


def test_an_acked_event_is_a_persistent_message_with_its_cloudevents_headers(
    broker: Broker, closing: list[Sender]
) -> None:
    sender = amqp(broker.url(), closing)
    assert isinstance(sender, AmqpSender)
    event = {**lab("a-1", "snack-7", 7), "traceparent": f"00-{'1' * 32}-{'2' * 16}-01", "n": 25}
    assert sender.send(event) is True
    [(props, body)] = broker.messages()
    assert props.delivery_mode == 2
    assert props.content_type == "application/cloudevents+json"
    assert props.message_id == "a-1"
    assert props.type == TYPE
    assert body == canonical_json(validate_cloudevent(event)).encode()
    attributes = {name: value for name, value in event.items() if name != "data"}
    # Every attribute but data, under the binding's prefix (an integer as an integer). The
    # trace context also goes under its W3C name, where a consumer's tracing looks for it.
    expected = {f"cloudEvents:{k}": v for k, v in attributes.items()}
    assert props.headers == {**expected, "traceparent": event["traceparent"]}
    assert sender.refusal is None


def test_a_batch_is_published_in_order_and_fully_confirmed(
    broker: Broker, closing: list[Sender]
) -> None:
    sender = amqp(broker.url(), closing)
    events = [lab(f"b-{i:02d}", "s", i + 1) for i in range(16)]
    assert sender.send_batch(events) == 16
    assert broker.ids() == [e["id"] for e in events]
    with pytest.raises(ValueError, match="1-16"):
        sender.send_batch([lab(f"c-{i}", "s", 1) for i in range(17)])
    with pytest.raises(ValueError, match="1-16"):
        sender.send_batch([])


def test_an_unroutable_event_is_not_acknowledged_and_is_permanent(
    broker: Broker, closing: list[Sender]
) -> None:
    sender = amqp(broker.url(extra="&routing_key=nowhere"), closing)
    with pytest.raises(NotAcknowledged, match="unroutable") as caught:
        sender.send(lab("u-1", "s", 1))
    assert caught.value.permanent is True
    assert failure_of(caught.value, None, "u-1").kind == PERMANENT
    assert broker.messages() == []


def test_a_batch_counts_only_the_confirmed_prefix_before_a_return(
    broker: Broker, closing: list[Sender]
) -> None:
    # No routing_key: each event's type routes it, and only the lab's type is bound.
    sender = amqp(broker.url(), closing)
    batch = [lab("p-1", "s", 1), other("p-2"), lab("p-3", "s", 1)]
    assert sender.send_batch(batch) == 1
    refusal = sender.refusal
    assert refusal is not None
    assert (refusal.event_id, refusal.permanent) == ("p-2", True)
    judged = failure_of(NotAcknowledged("only 1 of 3"), refusal)
    assert (judged.event_id, judged.kind) == ("p-2", PERMANENT)
    # The next batch forgets the last refusal.
    assert sender.send_batch([lab("p-4", "s", 1)]) == 1
    assert sender.refusal is None


def test_a_nack_is_not_an_ack_and_is_transient(broker: Broker, closing: list[Sender]) -> None:
    # A queue that holds one message and rejects publishes beyond it: the broker nacks them.
    name = f"{broker.queue}-full"
    args = {"x-max-length": 1, "x-overflow": "reject-publish"}
    broker.channel.queue_declare(name, durable=True, arguments=args)
    broker.channel.queue_bind(name, broker.exchange, "full")
    try:
        sender = amqp(broker.url(extra="&routing_key=full"), closing)
        assert sender.send(lab("n-1", "s", 1)) is True
        with pytest.raises(NotAcknowledged, match="nack") as caught:
            sender.send(lab("n-2", "s", 1))
        assert caught.value.permanent is False
        assert failure_of(caught.value, None, "n-2").kind == TRANSIENT
        assert sender.send_batch([lab("n-3", "s", 1)]) == 0
        assert sender.refusal is not None
        assert sender.refusal.permanent is False
    finally:
        broker.channel.queue_delete(name)


def test_dispatch_marks_only_confirmed_events_and_nothing_on_a_return(
    broker: Broker, closing: list[Sender], tmp_path: Path
) -> None:
    sender = amqp(broker.url(), closing)
    with Outbox(tmp_path / "source.db", source=SOURCE) as outbox:
        for event in (lab("d-1", "s", 1), lab("d-2", "s", 2), other("d-3"), lab("d-4", "s", 4)):
            outbox.publish(event)
        with pytest.raises(NotAcknowledged, match="unroutable"):
            dispatch(outbox, sender.send)
        assert [e["id"] for e in outbox.pending()] == ["d-3", "d-4"]
        assert broker.ids() == ["d-1", "d-2"]
        # The same through one batch: the return marks nothing, and nothing after it.
        with pytest.raises(NotAcknowledged):
            dispatch_batch(outbox, sender.send_batch)
        assert [e["id"] for e in outbox.pending()] == ["d-3", "d-4"]


def test_dispatch_batch_marks_a_fully_confirmed_batch(
    broker: Broker, closing: list[Sender], tmp_path: Path
) -> None:
    sender = amqp(broker.url(), closing)
    with Outbox(tmp_path / "source.db", source=SOURCE) as outbox:
        ids = [f"e-{i:02d}" for i in range(20)]
        for event_id in ids:
            outbox.publish(lab(event_id, "s", 1))
        assert dispatch_batch(outbox, sender.send_batch) == ids[:16]
        assert dispatch_batch(outbox, sender.send_batch) == ids[16:]
        assert outbox.pending() == []
    assert broker.ids() == ids


def _publish(source: Path, *events: dict[str, Any]) -> None:
    with Outbox(source, source=SOURCE) as outbox:
        for event in events:
            outbox.publish(event)


def test_the_dispatch_command_publishes_and_exits_0(broker: Broker, tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    _publish(source, lab("c-1", "s", 1), lab("c-2", "s", 2))
    done = run_cli("dispatch", "--source", str(source), "--to", broker.url())
    assert done.returncode == 0, done.stderr
    assert "dispatched 2 event(s)" in done.stdout
    assert broker.ids() == ["c-1", "c-2"]
    with Outbox(source) as outbox:
        assert outbox.pending() == []


def test_the_dispatch_command_publishes_the_stored_text(broker: Broker, tmp_path: Path) -> None:
    """``ackledger dispatch`` (one event at a time) sends each event as the outbox stored it."""
    source = tmp_path / "source.db"
    stored_outbox(source).close()
    loose = loosen(source)
    done = run_cli("dispatch", "--source", str(source), "--to", broker.url(extra=ROUTED))
    assert done.returncode == 0, done.stderr
    bodies = _by_id(broker)
    assert list(bodies) == [e["id"] for e in stored_events()]
    assert bodies[LOOSE_ID][1] == loose


def test_the_dispatch_command_stops_on_a_return_with_exit_1(broker: Broker, tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    _publish(source, other("r-1"))
    done = run_cli("dispatch", "--source", str(source), "--to", broker.url())
    assert done.returncode == 1
    assert "unroutable" in done.stderr
    assert "still pending: r-1" in done.stderr


@pytest.mark.slow
def test_the_relay_drains_the_outbox_to_the_broker_and_stops_on_sigterm(
    broker: Broker, tmp_path: Path
) -> None:
    source = tmp_path / "source.db"
    ids = [f"r-{i:02d}" for i in range(40)]
    _publish(source, *(lab(event_id, "s", 1) for event_id in ids))
    relay = start_relay(source, broker.url(), tmp_path / "relay.log", "--batch")
    try:
        wait_until(lambda: _pending(source) == 0, "the relay to drain the outbox")
    finally:
        code = relay.stop(signal.SIGTERM)
    assert code == 0
    assert broker.ids() == ids
    log = (tmp_path / "relay.log").read_text()
    assert "relaying to amqp://guest:***@127.0.0.1:5672/" in log


@pytest.mark.slow
@pytest.mark.parametrize("flags", [(), ("--per-item",)], ids=["batches", "per-item"])
def test_the_relay_quarantines_an_unroutable_event_and_goes_on(
    broker: Broker, tmp_path: Path, flags: tuple[str, ...]
) -> None:
    source = tmp_path / "source.db"
    _publish(source, lab("q-1", "s", 1), other("q-2"), lab("q-3", "s", 1))
    relay = start_relay(
        source, broker.url(), tmp_path / "relay.log", "--on-poison", "quarantine", *flags
    )
    try:
        wait_until(lambda: _pending(source) == 0, "the relay to drain the outbox")
    finally:
        assert relay.stop(signal.SIGTERM) == 0
    delivered = broker.ids()
    if flags:
        assert delivered == ["q-1", "q-3"]
    else:
        # A batch is marked up to its first refusal: q-3, confirmed after the unroutable q-2,
        # stays pending and goes again (at least once), and q-2 never reaches the queue.
        assert delivered[0] == "q-1" and set(delivered) == {"q-1", "q-3"}
    with Outbox(source) as outbox:
        assert outbox.stats()["quarantined"] == 1


def _pending(source: Path) -> int:
    with Outbox(source) as outbox:
        return int(outbox.stats()["pending"])


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Any connection or name look-up fails the test (pika connects with socket.connect)."""
    return forbid_network(monkeypatch)


@pytest.mark.parametrize(
    ("url", "word"),
    [
        (f"amqp://guest:{SECRET}@rabbit.invalid:5672/%2F?exchange=x", "not allowed"),
        (f"amqp://guest:{SECRET}@10.1.2.3/%2F?exchange=x", "not allowed"),
        (f"amqp://guest:{SECRET}@127.0.0.1@rabbit.invalid/?exchange=x", "not allowed"),
        (f"amqp://guest:{SECRET}@127.0.0.1/%2F", "exchange parameter is missing"),
        (f"amqp://guest:{SECRET}@127.0.0.1/%2F?exchange=", "exchange must not be empty"),
        (f"amqp://guest:{SECRET}@127.0.0.1/?exchange=x&queue=q", "unknown query parameter"),
        (f"amqp://guest:{SECRET}@127.0.0.1/?exchange=x&exchange=y", "2 times"),
        (f"amqp://guest:{SECRET}@127.0.0.1:0/?exchange=x", "port 0"),
        (f"amqps://guest:{SECRET}@127.0.0.1/?exchange=x", "scheme"),
    ],
)
def test_a_refused_target_raises_before_any_connection_without_the_password(
    url: str, word: str, no_network: list[object]
) -> None:
    with pytest.raises(UnsafeTarget, match=word) as caught:
        ackledger.sender(url)
    assert SECRET not in str(caught.value)
    # The relay refuses it up front the same way.
    with pytest.raises(UnsafeTarget, match=word):
        RelaySettings(url=url)
    assert no_network == []


def test_an_explicit_allow_list_admits_another_host(no_network: list[object]) -> None:
    url = f"amqp://guest:{SECRET}@rabbit.invalid:5673/orders?exchange=x&routing_key=k"
    built = ackledger.sender(url, allowed_hosts=["rabbit.invalid"])
    assert isinstance(built, AmqpSender)
    target = built.target
    assert (target.host, target.port, target.vhost, target.exchange, target.routing_key) == (
        "rabbit.invalid", 5673, "orders", "x", "k",
    )  # fmt: skip
    assert SECRET not in repr(built)
    assert SECRET not in repr(target)
    assert no_network == []


def test_a_wrong_password_raises_and_is_not_repeated(broker: Broker, closing: list[Sender]) -> None:
    sender = amqp(broker.url(password=SECRET), closing)
    with pytest.raises(ConnectionError) as caught:
        sender.send(lab("w-1", "s", 1))
    assert "cannot connect" in str(caught.value)
    assert SECRET not in str(caught.value)
    assert broker.messages() == []


@pytest.mark.slow
def test_the_relay_never_prints_the_password(broker: Broker, tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    _publish(source, lab("x-1", "s", 1))
    relay = start_relay(source, broker.url(password=SECRET), tmp_path / "relay.log")
    try:
        wait_until(
            lambda: "cannot connect" in (tmp_path / "relay.log").read_text(),
            "the relay to report the refused login",
        )
    finally:
        assert relay.stop(signal.SIGTERM) == 0
    log = (tmp_path / "relay.log").read_text()
    assert SECRET not in log
    assert _pending(source) == 1


def test_a_cut_connection_raises_and_the_next_send_reconnects(
    broker: Broker, closing: list[Sender]
) -> None:
    with FaultProxy(BROKER_PORT) as proxy:
        sender = amqp(broker.url(proxy.port), closing)
        assert sender.send(lab("k-1", "s", 1)) is True
        # The broker takes the next publish, but the connection is cut before its confirm.
        proxy.drop_responses = 1
        with pytest.raises(OSError, match="connection lost"):
            sender.send(lab("k-2", "s", 1))
        assert sender.send(lab("k-3", "s", 1)) is True
        assert proxy.connections == 2
    # k-2 was published exactly once: the failed send did not publish it again.
    assert broker.ids() == ["k-1", "k-2", "k-3"]


def test_a_cut_mid_batch_keeps_no_unconfirmed_event(
    broker: Broker, closing: list[Sender], tmp_path: Path
) -> None:
    with FaultProxy(BROKER_PORT) as proxy, Outbox(tmp_path / "s.db", source=SOURCE) as outbox:
        for i in range(5):
            outbox.publish(lab(f"m-{i}", "s", 1))
        sender = amqp(broker.url(proxy.port), closing)
        assert sender.send(lab("m-first", "s", 1)) is True  # the connection is made
        proxy.drop_responses = 1
        with pytest.raises(OSError):
            dispatch_batch(outbox, sender.send_batch)
        assert len(outbox.pending()) == 5
        assert dispatch_batch(outbox, sender.send_batch) == [f"m-{i}" for i in range(5)]


def test_no_confirm_within_the_time_out_is_not_an_ack(
    broker: Broker, closing: list[Sender]
) -> None:
    with FaultProxy(BROKER_PORT) as proxy:
        sender = amqp(broker.url(proxy.port), closing, timeout=0.5)
        assert sender.send(lab("t-1", "s", 1)) is True
        proxy.delay_responses = 2.0  # the confirm comes, but too late
        with pytest.raises(TimeoutError, match=r"no publisher confirm within 0\.5 s"):
            sender.send(lab("t-2", "s", 1))
        proxy.delay_responses = 0.0
        assert sender.send(lab("t-3", "s", 1)) is True
        assert proxy.connections == 2


def test_without_pika_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pika", None)
    monkeypatch.delitem(sys.modules, "ackledger.wire.amqp")
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'ackledger\[amqp\]'"):
        ackledger.sender("amqp://guest:guest@127.0.0.1/%2F?exchange=x")


def test_without_pika_the_command_says_so_in_one_line(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    _publish(source, lab("z-1", "s", 1))
    script = (
        "import sys; sys.modules['pika'] = None; from ackledger.cli import main; sys.exit(main())"
    )
    url = "amqp://guest:guest@127.0.0.1/%2F?exchange=x"
    done = subprocess.run(
        [sys.executable, "-c", script, "dispatch", "--source", str(source), "--to", url],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "pip install 'ackledger[amqp]'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def _my_connections() -> list[str]:
    """The broker's pids of this process's sender connections (rabbitmqctl)."""
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl is not installed: the broker cannot be told to close")
    listed = subprocess.run(
        ["rabbitmqctl", "-q", "list_connections", "pid", "client_properties"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if listed.returncode != 0:
        pytest.skip(f"rabbitmqctl cannot reach the broker: {listed.stderr.strip()[:200]}")
    # The sender names its connection (client property connection_name) after its process.
    mine = f"ackledger sender (pid {os.getpid()})"
    return [line.split("\t")[0] for line in listed.stdout.splitlines() if mine in line]


@pytest.mark.slow
def test_a_connection_the_broker_closed_between_sends_is_replaced_before_publishing(
    broker: Broker, closing: list[Sender]
) -> None:
    sender = amqp(broker.url(), closing)
    assert sender.send(lab("s-1", "s", 1)) is True
    [pid] = _my_connections()
    subprocess.run(
        ["rabbitmqctl", "-q", "close_connection", pid, "test: closed by the broker"],
        capture_output=True, timeout=60, check=True,
    )  # fmt: skip
    wait_until(lambda: _my_connections() == [], "the broker to drop the connection")
    # Noticed before anything is published on it: this send goes on a new connection, once.
    assert sender.send(lab("s-2", "s", 1)) is True
    assert len(_my_connections()) == 1
    assert broker.ids() == ["s-1", "s-2"]


def test_a_missing_exchange_is_permanent_and_named_and_a_later_send_succeeds(
    broker: Broker, closing: list[Sender]
) -> None:
    sender = amqp(broker.url(), closing)
    assert sender.send(lab("h-1", "s", 1)) is True
    broker.channel.exchange_delete(broker.exchange)
    # RabbitMQ closes the channel (404 NOT_FOUND): no confirm, so no ACK; and nothing sent
    # there can be routed until the exchange exists again, so it is not retried as transient.
    named = f"no exchange '{broker.exchange}' in vhost '/'"
    with pytest.raises(NotAcknowledged, match=named) as caught:
        sender.send(lab("h-2", "s", 1))
    assert caught.value.permanent
    assert failure_of(caught.value, None, "h-2").kind == PERMANENT
    broker.channel.exchange_declare(broker.exchange, "direct", durable=True)
    broker.channel.queue_bind(broker.queue, broker.exchange, TYPE)
    assert sender.send(lab("h-3", "s", 1)) is True
    assert broker.ids() == ["h-1", "h-3"]


def test_the_relay_stops_on_a_missing_exchange_naming_it(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    _publish(source, lab("m-1", "s", 1))
    exchange = f"no-such-exchange-{uuid.uuid4().hex[:8]}"
    url = f"amqp://guest:guest@127.0.0.1:{BROKER_PORT}/%2F?exchange={exchange}"
    args = ["relay", "--source", str(source), "--to", url, "--on-poison", "stop"]
    done = run_cli(*args, "--max-backoff", "0.2", timeout=30)
    assert done.returncode == 3, done.stderr  # a poison event, not a retry for ever
    assert f"no exchange '{exchange}' in vhost '/'" in done.stderr.splitlines()[-1]
    assert "failure_class=transient" not in done.stderr
    with Outbox(source) as outbox:
        assert [e["id"] for e in outbox.pending()] == ["m-1"]


@pytest.mark.slow
def test_partition_relays_on_postgresql_publish_each_partition_in_order(
    pg_url: str, broker: Broker, tmp_path: Path
) -> None:
    skus = [f"sku-{i}" for i in range(6)]
    with Outbox(pg_url, source=SOURCE) as outbox:
        for n in range(120):
            outbox.publish(lab(f"g-{n:03d}", skus[n % 6], 1))
    common = ["relay", "--source", pg_url, "--to", broker.url(), "--metrics-port", "0"]
    common += ["--poll-interval", "0.05", "--max-backoff", "0.3"]
    relays = [
        start_service([*common, "--owner", owner, *extra], stderr_path=tmp_path / f"{owner}.log")
        for owner, extra in (("relay-a", ("--batch", "--limit", "4")), ("relay-b", ()))
    ]
    try:
        with Outbox(pg_url) as outbox:
            wait_until(lambda: outbox.stats()["pending"] == 0, "the outbox to drain", 120)
    finally:
        codes = [relay.stop(signal.SIGTERM, 30) for relay in relays]
    assert codes == [0, 0]
    arrived = [
        (props.headers["cloudEvents:partitionkey"], props.message_id)
        for props, _ in broker.messages()
    ]
    assert sorted(event_id for _, event_id in arrived) == [f"g-{n:03d}" for n in range(120)]
    for sku in skus:
        in_queue = [event_id for key, event_id in arrived if key == sku]
        assert in_queue == sorted(in_queue)


# -- the stored path (wire/stored.py): the outbox's text, not a copy -------------------------

#: Every event to the test's queue, whatever its type.
ROUTED = "&routing_key=warehouse.stock.added"


def test_the_stored_text_is_what_the_sender_would_encode(tmp_path: Path) -> None:
    with stored_outbox(tmp_path / "o.db") as outbox:
        selection = outbox.pending()
        assert [item["id"] for item in selection] == [e["id"] for e in stored_events()]
        for item in selection:
            event = {name: value for name, value in item.items() if name != "seq"}
            assert item.text == canonical_json(validate_cloudevent(event))  # type: ignore[attr-defined]


def test_only_an_own_unwrapped_send_batch_takes_stored_events(
    broker: Broker, closing: list[Sender]
) -> None:
    wire = amqp(broker.url(extra=ROUTED), closing)
    assert isinstance(wire, AmqpSender)
    assert own_stored(wire.send_batch) == wire.send_stored
    assert own_stored(lambda events: wire.send_batch(events)) is None  # noqa: PLW0108
    assert own_stored(wire.send) is None
    assert own_stored_event(wire.send) == wire.send_stored_event
    assert own_stored_event(lambda event: wire.send(event)) is None  # noqa: PLW0108

    class Edited(AmqpSender):
        def send_batch(self, events: list[dict[str, Any]]) -> int:
            return super().send_batch(events)

    edited = Edited(broker.url(extra=ROUTED))
    closing.append(edited)
    # A subclass or a patch that changes send_batch may do anything to the events: copies.
    assert own_stored(edited.send_batch) is None
    # Only send_batch was changed: send still takes the stored event.
    assert own_stored_event(edited.send) == edited.send_stored_event
    assert stored_sender(edited) is None
    patched = AmqpSender(broker.url(extra=ROUTED))
    closing.append(patched)
    patched.send_batch = edited.send_batch  # type: ignore[method-assign]
    assert stored_sender(patched) is None
    assert stored_sender(wire) is wire


def _by_id(broker: Broker) -> dict[str, tuple[Any, bytes]]:
    return {props.message_id: (props, body) for props, body in broker.messages()}


@pytest.mark.parametrize("per", ["batch", "item"])
def test_the_stored_path_sends_the_stored_bytes_with_the_same_headers(
    broker: Broker, closing: list[Sender], tmp_path: Path, per: str
) -> None:
    wire = amqp(broker.url(extra=ROUTED), closing)
    own, wrapped = dispatchers(wire, per)
    ids = [e["id"] for e in stored_events()]
    # The copy path first (a wrapper), then the stored path (the own method), same events.
    with stored_outbox(tmp_path / "copies.db") as outbox:
        loose = loosen(tmp_path / "copies.db")
        assert wrapped(outbox) == ids
    copied = _by_id(broker)
    with stored_outbox(tmp_path / "stored.db") as outbox:
        assert loosen(tmp_path / "stored.db") == loose
        assert own(outbox) == ids
        assert outbox.pending() == []
    stored = _by_id(broker)
    assert stored.keys() == copied.keys()
    for event_id, (props, body) in stored.items():
        copy_props, copy_body = copied[event_id]
        # The same headers (no ``seq``: it is the outbox's, not an attribute) and properties.
        assert props.headers == copy_props.headers
        assert "cloudEvents:seq" not in props.headers
        assert props.delivery_mode == copy_props.delivery_mode == 2
        assert (props.content_type, props.type) == (copy_props.content_type, copy_props.type)
        assert json.loads(body) == json.loads(copy_body)
        if event_id == LOOSE_ID:
            assert body == loose  # the stored bytes, as they are
            assert copy_body == canonical_json(json.loads(loose)).encode()
        else:
            assert body == copy_body


def test_a_wrapper_gets_copies_and_what_it_changes_is_validated_before_any_publish(
    broker: Broker, closing: list[Sender], tmp_path: Path
) -> None:
    wire = amqp(broker.url(extra=ROUTED), closing)

    def edits(events: list[dict[str, Any]]) -> int:
        for event in events:
            event["data"]["qty"] = 99
        return wire.send_batch(events)

    def breaks(events: list[dict[str, Any]]) -> int:
        del events[-1]["type"]
        return wire.send_batch(events)

    with stored_outbox(tmp_path / "o.db") as outbox:
        dispatch_batch(outbox, edits)
        assert {json.loads(body)["data"]["qty"] for _, body in broker.messages()} == {99}
        for event in stored_events():
            outbox.publish({**event, "id": "x" + event["id"]})
        with pytest.raises(InvalidEvent):
            dispatch_batch(outbox, breaks)
        # Checked before the first publish: nothing went, nothing was marked.
        assert broker.messages() == []
        assert len(outbox.pending()) == len(stored_events())


@pytest.mark.parametrize("flags", [("--batch",), ("--batch", "--pipeline")])
def test_the_batch_relay_and_the_item_relay_send_the_stored_text(
    broker: Broker, tmp_path: Path, flags: tuple[str, ...]
) -> None:
    """``relay --batch`` (also behind marks) and the per-item relay both take the stored path:
    the rewritten row goes as its stored bytes, not as what a copy would encode to."""
    source = tmp_path / "source.db"
    ids = [e["id"] for e in stored_events()]
    stored_outbox(source).close()
    loose = loosen(source)
    for args in (flags, ()):
        relay = start_relay(source, broker.url(extra=ROUTED), tmp_path / "relay.log", *args)
        try:
            wait_until(lambda: _pending(source) == 0, "the relay to drain the outbox")
        finally:
            assert relay.stop(signal.SIGTERM) == 0
        bodies = _by_id(broker)
        assert list(bodies) == ids
        assert bodies[LOOSE_ID][1] == loose
        _requeue(source)


def _requeue(source: Path) -> None:
    """Every event pending again, for the next relay of the same outbox."""
    conn = sqlite3.connect(source)
    try:
        conn.execute("UPDATE ackledger_outbox SET sent = 0, sent_at = NULL")
        conn.commit()
    finally:
        conn.close()
