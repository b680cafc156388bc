"""``relay --batch --inflight N``: several batches in flight to the real brokers at once.

Each batch is marked only on its own confirms (RabbitMQ) or PubAcks (JetStream), after every
batch before it was wholly acknowledged and marked; the first failure, in whichever batch,
stops the round and nothing after the failed event is marked, even what the broker took.
Everything is read back from connections of the test's own: the outbox's rows, the queue, the
stream, the consumer's inbox.
"""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bench.broker_campaign import pending_ids, stock_by_order
from bench.broker_routes import open_route

import ackledger
from ackledger import Outbox
from ackledger.envelope import canonical_json
from ackledger.ops.faultproxy import FaultProxy
from ackledger.ops.processes import Child, cli_command, run_cli
from ackledger.relay.loop import Relay
from ackledger.relay.pickers import WholeOutbox
from ackledger.relay.settings import RelaySettings
from ackledger.wire.amqp import AmqpSender
from ackledger.wire.nats import NatsSender
from ackledger.wire.sender import Refusal
from ackledger.wire.stored import Stored

from . import pg
from .events import SOURCE, lab
from .opshelp import wait_until
from .test_amqp_sender import Broker, broker  # noqa: F401 - the fixture is found by its name
from .test_broker_crash import PUBLISH_FRAME
from .test_consume import (  # noqa: F401 - the fixture is found by its name here
    ConsumerProcess,
    counters,
    eventually,
    start_consumer,
)
from .test_nats_sender import Stream, ok_only  # noqa: F401 - the fixture is found by its name

BATCH = 16


def _stored(events: list[dict[str, Any]]) -> list[Stored]:
    """The events as an outbox would hand them over: attributes and their canonical text."""
    return [Stored(event, canonical_json(event)) for event in events]


class _UsersSender:
    """A user's sender: no split send of its own, so it cannot keep batches in flight."""

    refusal: Refusal | None = None

    def send(self, event: dict[str, Any]) -> bool:
        return True

    def send_batch(self, events: list[dict[str, Any]]) -> int:
        return len(events)

    def close(self) -> None:
        pass


def _batches(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    return [events[n : n + BATCH] for n in range(0, len(events), BATCH)]


def _unrouted(event_id: str) -> dict[str, Any]:
    """No queue is bound for this type: RabbitMQ returns it (``mandatory``)."""
    return ackledger.new_event("test.unbound", {"n": 1}, source=SOURCE, id=event_id)


def _sent(db: Path) -> list[str]:
    """The marked ids in outbox order, read on a connection of the test's own."""
    with sqlite3.connect(db) as conn:
        return [
            r[0]
            for r in conn.execute("SELECT id FROM ackledger_outbox WHERE sent = 1 ORDER BY seq")
        ]


def _outbox_of(db: Path, events: list[dict[str, Any]]) -> None:
    with Outbox(db) as outbox, outbox.transaction() as tx:
        for event in events:
            tx.enqueue(event)


# -- the split send of each own sender -----------------------------------------------------


def test_amqp_batches_in_flight_are_each_judged_by_their_own_confirms(
    broker: Broker,  # noqa: F811
) -> None:
    events = [lab(f"f-{n:02d}", "tea", 1) for n in range(48)]
    events[21] = _unrouted("f-21")  # the sixth of the middle batch
    wire = AmqpSender(broker.url(), timeout=5)
    try:
        flights = [wire.publish_stored(_stored(batch)) for batch in _batches(events)]
        # Published at once, before any confirm was awaited: the broker has them all.

        def queued() -> int:
            return int(
                broker.channel.queue_declare(broker.queue, passive=True).method.message_count
            )

        wait_until(lambda: queued() == 47, "all three batches queued")
        assert wire.confirmed(flights[0]) == BATCH
        assert wire.refusal is None
        assert wire.confirmed(flights[1]) == 5
        assert wire.refusal is not None and wire.refusal.event_id == "f-21"
        assert wire.refusal.permanent
        # The broker confirmed the third batch: the sender says so; the relay must not mark it
        # (test_a_return_in_the_middle_batch_marks_exactly_the_prefix_before_it).
        assert wire.confirmed(flights[2]) == BATCH
        assert wire.refusal is None
    finally:
        wire.close()


def test_amqp_settled_says_without_waiting_whether_the_confirms_are_in(
    broker: Broker,  # noqa: F811
) -> None:
    events = [lab(f"w-{n:02d}", "tea", 1) for n in range(2 * BATCH)]
    with FaultProxy(5672) as proxy:
        wire = AmqpSender(broker.url(proxy.port), timeout=5)
        try:
            assert wire.send_stored(_stored(events[:BATCH])) == BATCH  # connected
            proxy.delay_responses = 0.8  # the broker's answers now come late
            flight = wire.publish_stored(_stored(events[BATCH:]))
            assert not wire.settled(flight)
            wait_until(lambda: wire.settled(flight), "the confirms in")
            proxy.delay_responses = 0
            assert wire.confirmed(flight) == BATCH
        finally:
            wire.close()


def test_nats_batches_in_flight_are_each_judged_by_their_own_pubacks(
    ok_only: Stream,  # noqa: F811
) -> None:
    kinds = ["bad.x" if n == 21 else "ok.x" for n in range(48)]
    events = [
        ackledger.new_event(kind, {"n": n}, source=SOURCE, id=f"f-{n:02d}")
        for n, kind in enumerate(kinds)
    ]
    wire = NatsSender(ok_only.url(), timeout=5)
    try:
        flights = [wire.publish_stored(_stored(batch)) for batch in _batches(events)]
        wait_until(lambda: all(wire.settled(flight) for flight in flights), "every PubAck in")
        assert wire.confirmed(flights[0]) == BATCH
        assert wire.confirmed(flights[1]) == 5
        assert wire.refusal is not None and wire.refusal.event_id == "f-21"
        assert wire.refusal.status == 404  # no stream takes bad.x: permanent
        assert wire.confirmed(flights[2]) == BATCH
        assert ok_only.count() == 47
    finally:
        wire.close()


# -- the relay ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["amqp", "nats"])
def test_marks_land_in_order_each_batch_after_every_one_before_it(
    tmp_path: Path, kind: str
) -> None:
    db = tmp_path / "outbox.db"
    events = [lab(f"o-{n:03d}", "tea", 1) for n in range(200)]
    ids = [event["id"] for event in events]
    _outbox_of(db, events)
    seen: list[str] = []
    wrong: list[str] = []

    with open_route(kind) as route:
        settings = RelaySettings(url=route.relay_url, batch=True, inflight=4, poll_interval=0.05)
        with Outbox(db) as outbox:
            relay: Relay

            def delivered(event_id: str) -> None:
                # Called for each acknowledged id just before the marks of its batch (and of
                # the settled batches after it, in one commit): every id before it was
                # acknowledged already, in order; the marks are a prefix without it.
                position = ids.index(event_id)
                marked = _sent(db)
                if seen != ids[:position] or marked != ids[: len(marked)] or len(marked) > position:
                    wrong.append(f"{event_id}: {len(marked)} marked")
                seen.append(event_id)
                if event_id == ids[-1]:
                    relay.request_stop()

            wire = ackledger.sender(settings.url)
            try:
                relay = Relay(WholeOutbox(outbox, settings), wire=wire, after_delivery=delivered)
                runner = threading.Thread(target=relay.run)
                runner.start()
                runner.join(60)
                assert not runner.is_alive()
            finally:
                wire.close()
        published = route.seen_settled()
    assert not wrong, wrong[:5]
    assert seen == ids  # acknowledged in order, each once
    assert _sent(db) == ids
    # The next selection skipped what was in flight: nothing went twice.
    assert published == Counter(ids)


def test_a_return_in_the_middle_batch_marks_exactly_the_prefix_before_it(
    tmp_path: Path,
    broker: Broker,  # noqa: F811
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
) -> None:
    db, sink = tmp_path / "outbox.db", tmp_path / "sink.db"
    ids = [f"m-{n:02d}" for n in range(64)]
    with Outbox(db) as outbox:
        for event_id in ids:
            if event_id == "m-37":  # the sixth event of the third of four batches
                outbox.publish(_unrouted(event_id))
            else:
                outbox.accept({"id": event_id, "sku": f"sku-{event_id}", "qty": 1})
    relay = run_cli("relay", "--source", str(db), "--to", broker.url(), "--batch",
                    "--inflight", "4", "--poll-interval", "0.05",
                    "--on-poison", "stop")  # fmt: skip
    assert relay.returncode == 3, relay.stderr
    assert _sent(db) == ids[:37]
    # All four batches were out before the return was judged: the broker took the 26 after
    # m-37 too, and none of them is marked.
    queued = broker.channel.queue_declare(broker.queue, passive=True).method.message_count
    assert queued == 63
    assert pending_ids(db) == set(ids[37:])

    # With quarantine, m-37 is set aside and the rest goes again: applied once each.
    again = Child(["relay", "--source", str(db), "--to", broker.url(), "--batch", "--inflight",
                   "4", "--poll-interval", "0.05", "--on-poison", "quarantine"],
                  tmp_path / "relay.log")  # fmt: skip
    try:
        eventually(lambda: pending_ids(db) == {"m-37"}, "the rest sent")
    finally:
        assert again.stop() == 0
    assert _sent(db) == [i for i in ids if i != "m-37"]
    consumer = start_consumer("--from", broker.consume_url(), "--db", str(sink))
    eventually(lambda: counters(sink)["applied"] == 63, "each applied")
    # m-38..m-63 went three times: beside m-37 in both runs' windows, then once it was set
    # aside. The inbox answered the two re-sends of each as duplicates.
    eventually(lambda: counters(sink)["duplicate"] == 2 * 26, "the re-sends absorbed")
    assert consumer.stop(signal.SIGTERM) == 0
    assert stock_by_order(sink) == {i: 1 for i in ids if i != "m-37"}


def test_a_subject_no_stream_takes_in_the_middle_batch_marks_exactly_the_prefix_before_it(
    tmp_path: Path,
    ok_only: Stream,  # noqa: F811
) -> None:
    db = tmp_path / "outbox.db"
    ids = [f"m-{n:02d}" for n in range(64)]
    kinds = ["bad.x" if event_id == "m-37" else "ok.x" for event_id in ids]
    events = [ackledger.new_event(kind, {"n": 1}, source=SOURCE, id=event_id)
              for event_id, kind in zip(ids, kinds, strict=True)]  # fmt: skip
    _outbox_of(db, events)
    relay = run_cli("relay", "--source", str(db), "--to", ok_only.url(), "--batch",
                    "--inflight", "4", "--poll-interval", "0.05",
                    "--on-poison", "stop")  # fmt: skip
    assert relay.returncode == 3, relay.stderr
    assert _sent(db) == ids[:37]
    # JetStream stored the 26 after m-37 too (all four batches were out): none is marked.
    assert ok_only.count() == 63
    assert pending_ids(db) == set(ids[37:])


@pytest.mark.parametrize("broker_kind", ["amqp", "nats"])
def test_a_connection_cut_mid_window_marks_only_a_confirmed_prefix(
    tmp_path: Path,
    broker_kind: str,
    start_consumer: Callable[..., ConsumerProcess],  # noqa: F811
) -> None:
    source, sink = tmp_path / "source.db", tmp_path / "sink.db"
    ids = [f"c-{n:02d}" for n in range(64)]
    with Outbox(source) as outbox:
        for event_id in ids:
            outbox.accept({"id": event_id, "sku": f"sku-{event_id}", "qty": 1})
    through = BATCH + 5  # the first batch and five of the second reach the broker
    with (
        open_route(broker_kind) as route,
        FaultProxy(
            route.port, cut_before=PUBLISH_FRAME[broker_kind], cut_at=through + 1, cut_hold_s=2.0
        ) as proxy,
    ):
        to = route.relay_url_via(proxy.port)
        # A long backoff after the cut: the state it left can be read before the retry.
        relay = Child(["relay", "--source", str(source), "--to", to, "--batch", "--inflight",
                       "4", "--timeout", "3", "--poll-interval", "0.05", "--base-backoff", "30",
                       "--max-backoff", "30", "--seed", "1"], tmp_path / "relay.log")  # fmt: skip
        try:
            eventually(lambda: relay.said("send-failed"), "the cut noticed")
            assert proxy.cuts == 1
            at_the_cut = route.seen_settled()
            assert at_the_cut == Counter(ids[:through])
            left = pending_ids(source)
            marked = [i for i in ids if i not in left]
            # A prefix of what the broker confirmed; nothing after the cut.
            assert BATCH <= len(marked) <= through and marked == ids[: len(marked)]
        finally:
            assert relay.stop() == 0  # the backoff's wait ends on the stop
        # Healed: a relay through the same proxy sends the rest; the consumer applies once.
        relay = Child(["relay", "--source", str(source), "--to", to, "--batch", "--inflight",
                       "4", "--poll-interval", "0.05"], tmp_path / "relay2.log")  # fmt: skip
        try:
            eventually(lambda: not pending_ids(source), "the relay finished")
        finally:
            assert relay.stop() == 0
        consumer = start_consumer("--from", route.consume_url, "--db", str(sink))
        eventually(lambda: counters(sink)["applied"] == len(ids), "each applied")
        eventually(lambda: route.left() == 0, "every message acked")
        assert consumer.stop(signal.SIGTERM) == 0
        seen = route.seen_settled()
    assert set(seen) == set(ids)
    # Re-sent: only what the broker took at the cut and was not marked.
    assert sum(seen.values()) - len(ids) == through - len(marked)
    assert stock_by_order(sink) == dict.fromkeys(ids, 1)


@pytest.mark.parametrize("kind", ["amqp", "nats"])
def test_a_stop_finishes_the_batches_in_flight_and_marks_every_confirmed_one(
    tmp_path: Path, kind: str
) -> None:
    db = tmp_path / "outbox.db"
    ids = [f"s-{n:05d}" for n in range(12_000)]
    _outbox_of(db, [lab(event_id, "tea", 1) for event_id in ids])
    with open_route(kind) as route:
        relay = Child(["relay", "--source", str(db), "--to", route.relay_url, "--batch",
                       "--inflight", "8", "--poll-interval", "0.05"],
                      tmp_path / "relay.log")  # fmt: skip
        try:
            wait_until(lambda: len(_sent(db)) >= 500, "500 marked")
        finally:
            assert relay.stop() == 0
        published = route.seen_settled()
    marked = _sent(db)
    assert len(marked) < len(ids), "the stop came too late to prove anything"
    # Nothing the broker took was left unmarked, and each went once.
    assert published == Counter(marked)
    assert marked == ids[: len(marked)]


@pytest.mark.postgres
@pytest.mark.slow
def test_resends_after_a_kill_are_at_most_the_batches_in_flight(
    pg_url: str,
    broker: Broker,  # noqa: F811
    tmp_path: Path,
) -> None:
    inflight, total = 4, 4000
    events = [lab(f"k-{n:04d}", "tea", 1) for n in range(total)]  # one leased partition
    with Outbox(pg_url) as outbox, outbox.transaction() as tx:
        for event in events:
            tx.enqueue(event)
    log = tmp_path / "relay.log"

    def marked() -> int:
        return int(pg.rows(pg_url, "SELECT count(*) FROM ackledger_outbox WHERE sent = 1")[0][0])

    at = random.Random(14).randrange(200, 800)
    relay = [*cli_command("relay", "--source", pg_url, "--to", broker.url(), "--batch",
                          "--inflight", str(inflight), "--poll-interval", "0.05",
                          "--lease-ttl", "3")]  # the killed relay's lease ends soon  # fmt: skip
    with open(log, "ab") as err:
        first = subprocess.Popen(relay, stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_until(lambda: marked() >= at, f"{at} events marked")
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert marked() < total, "the kill came too late to prove anything"
    with open(log, "ab") as err:
        second = subprocess.Popen(relay, stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_until(lambda: marked() == total, "every event marked after the restart")
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(60)
    copies = Counter(props.message_id for props, _ in broker.messages())
    assert set(copies) == {e["id"] for e in events}  # none lost
    resent = sum(n - 1 for n in copies.values())
    assert resent <= inflight * BATCH, f"{resent} re-sends after one kill"
    assert all(n <= 2 for n in copies.values())


def test_at_its_defaults_a_held_poison_event_re_sends_only_its_own_batch(
    tmp_path: Path,
    broker: Broker,  # noqa: F811
) -> None:
    """No flags: eight batches in flight. The round that meets the poison event had all four
    batches out; every retry while it is held sends one batch at a time, so only the 15 events
    behind it in its own batch go again, not the 26 behind it in the window."""
    db, log = tmp_path / "outbox.db", tmp_path / "relay.log"
    ids = [f"m-{n:02d}" for n in range(64)]
    with Outbox(db) as outbox:
        for event_id in ids:
            if event_id == "m-37":
                outbox.publish(_unrouted(event_id))
            else:
                outbox.accept({"id": event_id, "sku": f"sku-{event_id}", "qty": 1})
    relay = Child(["relay", "--source", str(db), "--to", broker.url(), "--poll-interval",
                   "0.05", "--max-backoff", "0.2"], log)  # fmt: skip
    try:
        wait_until(lambda: log.read_text().count("holding-poison") >= 3, "m-37 held, retried")
    finally:
        assert relay.stop() == 0
    assert "inflight=8" in log.read_text().splitlines()[0]
    assert _sent(db) == ids[:37]
    queued = broker.channel.queue_declare(broker.queue, passive=True).method.message_count
    retried = queued - 63  # the first round's 63: every event but m-37
    assert retried >= 2 * 15 and retried % 15 == 0, f"{queued} messages in the queue"


def test_the_default_window_is_for_batch_rounds_to_a_broker_only(tmp_path: Path) -> None:
    amqp = "amqp://guest:guest@127.0.0.1:5672/%2F?exchange=x"
    assert RelaySettings(url=amqp).window == 8
    assert RelaySettings(url="nats://127.0.0.1:4222?subject=s").window == 8
    assert RelaySettings(url=amqp, inflight=1).window == 1
    assert RelaySettings(url=amqp, batch=False).window == 1
    assert RelaySettings(url=amqp, pipeline=True).window == 1
    assert RelaySettings(url="http://127.0.0.1:9/events", batch=True).window == 1

    with Outbox(tmp_path / "o.db") as outbox:
        Relay(WholeOutbox(outbox, RelaySettings(url=amqp)), wire=_UsersSender())


# -- what is refused ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--per-item", "--inflight", "4"], "inflight: only batch rounds"),
        (["--batch", "--inflight", "4", "--pipeline"], "does not combine with pipeline"),
        (["--batch", "--inflight", "0"], "--inflight: must be from 1 to 16"),
        (["--batch", "--inflight", "17"], "--inflight: must be from 1 to 16"),
        (["--batch", "--inflight", "two"], "--inflight: must be a whole number"),
    ],
)
def test_bad_inflight_options_are_one_line_exit_2_and_nothing_is_made(
    tmp_path: Path, args: list[str], says: str
) -> None:
    db = tmp_path / "never.db"
    done = run_cli("relay", "--source", str(db), "--to",
                   "amqp://guest:guest@127.0.0.1:5672/%2F?exchange=x", *args)  # fmt: skip
    assert done.returncode == 2
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert not db.exists()


def test_inflight_to_an_http_sink_or_a_users_sender_is_refused(tmp_path: Path) -> None:
    done = run_cli("relay", "--source", str(tmp_path / "never.db"), "--to",
                   "http://127.0.0.1:9/events", "--batch", "--inflight", "2")  # fmt: skip
    assert done.returncode == 2
    assert "for amqp:// and nats:// targets, not http://" in done.stderr
    settings = RelaySettings(url="amqp://guest:guest@127.0.0.1:5672/%2F?exchange=x",
                             batch=True, inflight=2)  # fmt: skip

    with Outbox(tmp_path / "o.db") as outbox, pytest.raises(ValueError, match="two halves"):
        Relay(WholeOutbox(outbox, settings), wire=_UsersSender())
