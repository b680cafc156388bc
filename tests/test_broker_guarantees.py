"""What faststream-outbox lacks and ours keeps, against the real RabbitMQ.

The broker benchmark (``bench/brokers``) measured the peer deleting every row RabbitMQ had
returned as unroutable and publishing non-persistent messages at its defaults. These tests hold
ours to the opposite, with the same setup as the benchmark: a PostgreSQL outbox, the
``ackledger relay`` process, a durable exchange and queue of the test's own, and everything
read back afterwards from other connections (the outbox table, the queue: test_amqp_sender's
``broker`` fixture, bound for the lab's type only). The seeded kill -9 campaign of ``bench/``
(the ``camp`` work) counts re-sends over many schedules; the last test here is its single,
exact case.
"""

from __future__ import annotations

import random
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ackledger import Outbox, new_event
from ackledger.ops.processes import cli_command
from ackledger.relay.settings import DEFAULT_INFLIGHT

from . import pg
from .events import SOURCE, lab
from .opshelp import wait_until
from .test_amqp_sender import Broker, broker  # noqa: F401 - the fixture is found by its name

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

#: No queue is bound for this type: RabbitMQ returns every such publish (``mandatory``).
UNROUTED = "warehouse.stock.misplaced"
BATCH = 16


def _misplaced(event_id: str, partition: str) -> dict[str, Any]:
    return new_event(UNROUTED, {"sku": "tea", "qty": 1}, source=SOURCE, id=event_id,
                     partitionkey=partition)  # fmt: skip


def _fill(url: str, events: list[dict[str, Any]]) -> None:
    with Outbox(url) as outbox, outbox.transaction() as tx:
        for event in events:
            tx.enqueue(event)


def _relay(url: str, to: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    command = cli_command("relay", "--source", url, "--to", to, "--poll-interval", "0.05",
                          "--base-backoff", "0.05", "--max-backoff", "0.3", *extra)  # fmt: skip
    with open(log, "ab") as err:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    process.wait(60)


def _rows(url: str, where: str) -> list[str]:
    return [
        str(r[0])
        for r in pg.rows(url, f"SELECT id FROM ackledger_outbox WHERE {where} ORDER BY seq")
    ]


def test_a_returned_message_is_marked_nowhere_and_quarantined(
    pg_url: str,
    broker: Broker,  # noqa: F811
    tmp_path: Path,
) -> None:
    events = [lab(f"ok-{n}", "tea", 1) if n % 3 else _misplaced(f"lost-{n}", "tea")
              for n in range(30)]  # fmt: skip
    lost = sorted(e["id"] for e in events if e["type"] == UNROUTED)
    _fill(pg_url, events)
    relay = _relay(pg_url, broker.url(), tmp_path / "relay.log", "--batch", "--on-poison",
                   "quarantine")  # fmt: skip
    try:
        wait_until(lambda: not _rows(pg_url, "sent = 0 AND quarantined = 0"), "a drained outbox")
    finally:
        _stop(relay)
    assert sorted(_rows(pg_url, "quarantined = 1")) == lost
    assert sorted(_rows(pg_url, "sent = 1")) == sorted(
        e["id"] for e in events if e["id"] not in lost
    )
    assert not set(_rows(pg_url, "sent = 1")) & set(lost)  # the peer deletes these rows
    taken = [props.message_id for props, _ in broker.messages()]
    routable = [e["id"] for e in events if e["id"] not in lost]
    assert not set(taken) & set(lost)
    # A batch's confirmed events after a returned one are not its acknowledged prefix: they
    # stay pending and go again (at-least-once), never more than a batch per return.
    assert list(dict.fromkeys(taken)) == routable
    assert len(taken) - len(routable) <= BATCH * len(lost)


@pytest.mark.parametrize(
    ("flags", "published"),
    # A batch (the default) publishes ok-3 with the returned message: confirmed, never marked
    # after a return, so it goes again. Per item, nothing is published after the return.
    [((), ["ok-1", "ok-3"]), (("--per-item",), ["ok-1"])],
    ids=["default", "per-item"],
)
def test_with_the_stop_policy_a_returned_message_stays_pending_and_the_relay_exits_3(
    pg_url: str,
    broker: Broker,  # noqa: F811
    tmp_path: Path,
    flags: tuple[str, ...],
    published: list[str],
) -> None:
    _fill(pg_url, [lab("ok-1", "tea", 1), _misplaced("lost-2", "tea"), lab("ok-3", "tea", 1)])
    relay = _relay(pg_url, broker.url(), tmp_path / "relay.log", "--on-poison", "stop", *flags)
    try:
        assert relay.wait(120) == 3
    finally:
        _stop(relay)
    assert _rows(pg_url, "sent = 1") == ["ok-1"]
    assert _rows(pg_url, "sent = 0 AND quarantined = 0") == ["lost-2", "ok-3"]  # order kept
    assert [props.message_id for props, _ in broker.messages()] == published


@pytest.mark.parametrize("batch", [False, True], ids=["per-item", "batch"])
def test_every_message_is_persistent_when_read_back_from_the_queue(
    pg_url: str,
    broker: Broker,  # noqa: F811
    tmp_path: Path,
    batch: bool,
) -> None:
    events = [lab(f"e-{n}", f"p{n % 4}", 1) for n in range(40)]
    _fill(pg_url, events)
    flag = "--batch" if batch else "--per-item"
    relay = _relay(pg_url, broker.url(), tmp_path / "relay.log", flag)
    try:
        wait_until(lambda: not _rows(pg_url, "sent = 0"), "every event marked")
    finally:
        _stop(relay)
    taken = broker.messages()
    assert sorted(props.message_id for props, _ in taken) == sorted(e["id"] for e in events)
    # The peer's default (persist=False) leaves delivery_mode 1: lost on a broker restart.
    assert {props.delivery_mode for props, _ in taken} == {2}


@pytest.mark.parametrize(
    ("flags", "batches"), [([], DEFAULT_INFLIGHT), (["--inflight", "1"], 1)],
    ids=["defaults", "one-batch"],
)  # fmt: skip
def test_resends_after_a_kill_are_at_most_the_batches_in_flight(
    pg_url: str,
    broker: Broker,  # noqa: F811
    tmp_path: Path,
    flags: list[str],
    batches: int,
) -> None:
    # Enough that the kill lands mid-drain: at its defaults the relay marks 600 events in less
    # than the poll below takes to see the first hundred.
    total = 3000
    # One partition: at most ``batches`` batches of 16 in flight at any moment.
    events = [lab(f"k-{n:04d}", "tea", 1) for n in range(total)]
    _fill(pg_url, events)
    log = tmp_path / "relay.log"
    at = random.Random(14).randrange(100, 400)  # a seeded schedule
    # No flags: a relay to a broker batches by default, with its batches in flight.
    first = _relay(pg_url, broker.url(), log, *flags)
    try:
        wait_until(lambda: len(_rows(pg_url, "sent = 1")) >= at, f"{at} events marked")
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    finally:
        _stop(first)
    marked_before = len(_rows(pg_url, "sent = 1"))
    assert marked_before < total, "the kill came too late to prove anything"
    second = _relay(pg_url, broker.url(), log, *flags)
    try:
        wait_until(lambda: not _rows(pg_url, "sent = 0"), "every event marked after the restart")
    finally:
        _stop(second)
    ids = [props.message_id for props, _ in broker.messages()]
    copies = Counter(ids)
    assert set(copies) == {e["id"] for e in events}  # none lost
    resent = sum(n - 1 for n in copies.values())
    # Only what was published and not yet marked when the kill came can go twice.
    assert resent <= batches * BATCH, f"{resent} re-sends after one kill"
    assert all(n <= 2 for n in copies.values())
