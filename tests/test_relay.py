"""The relay as a real process against a real sink process: outages, signals, poison events."""

from __future__ import annotations

import json
import re
import shlex
import signal
from pathlib import Path
from typing import Any

import pytest

from ackledger import Inbox, Outbox
from ackledger.envelope.content import content_fingerprint
from ackledger.ops.faultproxy import FaultProxy
from ackledger.ops.processes import Service, run_cli, start_service
from ackledger.relay.policy import PERMANENT, TRANSIENT, failure_class
from tests.conftest import raw_rows
from tests.events import SOURCE, of
from tests.opshelp import (
    count,
    free_port,
    ids,
    metrics,
    one,
    process_state,
    settled,
    start_relay,
    wait_until,
)

pytestmark = pytest.mark.slow

PENDING = "sent = 0 AND quarantined = 0"


def _accept(source: Path, *events: dict[str, Any]) -> None:
    # The lab's source: the sink's own receipts (the poisoned one) are of the same identity.
    with Outbox(source, source=SOURCE) as outbox:
        for event in events:
            outbox.accept(event)


def _events(n: int, prefix: str = "ev") -> list[dict[str, Any]]:
    return [{"id": f"{prefix}-{i:03d}", "sku": f"sku-{i % 3}", "qty": i + 1} for i in range(n)]


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, PERMANENT), (404, PERMANENT), (413, PERMANENT), (422, PERMANENT), (408, TRANSIENT),
     (429, TRANSIENT), (500, TRANSIENT), (503, TRANSIENT), (None, TRANSIENT)],
)  # fmt: skip
def test_4xx_is_permanent_and_the_rest_transient(status: int | None, kind: str) -> None:
    assert failure_class(status) == kind


def test_a_relay_started_while_the_sink_is_down_drains_once_it_comes_up(tmp_path: Path) -> None:
    source, sink_db = tmp_path / "source.db", tmp_path / "sink.db"
    events = _events(5)
    _accept(source, *events)
    port = free_port()
    relay = start_relay(
        source, f"http://127.0.0.1:{port}/events", tmp_path / "relay.log", "--seed", "3"
    )
    try:
        # While the sink is down: attempts and the error are recorded on the head event, and
        # nothing else moves.
        wait_until(
            lambda: (
                int(raw_rows(source, "SELECT attempts FROM ackledger_outbox WHERE seq = 1")[0][0])  # type: ignore[call-overload]
                >= 3
            ),
            "failed attempts to be recorded",
        )
        [(error,)] = raw_rows(source, "SELECT last_error FROM ackledger_outbox WHERE seq = 1")
        assert "Connection" in str(error) or "refused" in str(error)
        down = metrics(relay.base_url)
        assert one(down, "ackledger_relay_pending", scope="database") == 5
        assert one(down, "ackledger_relay_sends_failed_total", **{"class": "transient"}) >= 1
        assert one(down, "ackledger_relay_sends_succeeded_total") == 0
        assert one(down, "ackledger_relay_oldest_pending_age_seconds", scope="database") > 0
        assert count(source, "sent = 1") == 0

        with start_service(
            ["serve", "sink", "--db", str(sink_db), "--port", str(port)],
            stderr_path=tmp_path / "sink.log",
        ):
            wait_until(lambda: count(source, PENDING) == 0, "the relay to drain the outbox")
            up = metrics(relay.base_url)
            assert one(up, "ackledger_relay_pending", scope="database") == 0
            assert one(up, "ackledger_relay_sends_succeeded_total") == 5
            assert one(up, "ackledger_relay_consecutive_failures") == 0
            # SIGINT is a stop request too: the relay finishes and exits 0.
            assert relay.stop(signal.SIGINT) == 0
    finally:
        relay.stop()
    assert ids(sink_db, "SELECT id FROM ackledger_inbox ORDER BY id") == [e["id"] for e in events]
    with Inbox(sink_db) as inbox:
        assert inbox.stock("sku-0") == 1 + 4  # qty of ev-000 and ev-003, once each
    log = (tmp_path / "relay.log").read_text()
    assert "send-failed" in log and "recovered" in log and "stopped" in log


@pytest.mark.parametrize("mode", ["batch", "pipeline", "each", "last", "item-pipeline"])
def test_sigterm_mid_send_leaves_every_event_either_sent_or_pending(
    tmp_path: Path, sink_db: Path, sink_service: Service, mode: str
) -> None:
    source = tmp_path / "source.db"
    events = _events(60)
    _accept(source, *events)
    # Every answer is held after the sink has committed, so the relay spends its time waiting
    # for ACKs: the signal lands while an applied batch is not yet acknowledged.
    with FaultProxy(sink_service.port, delay_responses=0.2) as proxy:
        flags = {
            "batch": ["--batch", "--limit", "4"],
            # A batch's marks land while the next one travels: a stop still waits for them.
            "pipeline": ["--batch", "--limit", "4", "--pipeline"],
            "each": ["--limit", "16"],
            # Marks wait for the disk once per round: a stop mid-round still leaves them all.
            "last": ["--limit", "16", "--mark-sync", "last"],
            # Each event's mark lands while the next one travels: a stop waits for the last.
            "item-pipeline": ["--limit", "16", "--pipeline"],
        }[mode]
        relay = start_relay(source, proxy.url, tmp_path / "relay.log", *flags)
        try:
            wait_until(lambda: count(source, "sent = 1") >= 4, "the first events to be sent")
            assert relay.stop(signal.SIGTERM, timeout=30) == 0
        finally:
            relay.stop()
    sent = set(ids(source, "SELECT id FROM ackledger_outbox WHERE sent = 1"))
    pending = set(ids(source, f"SELECT id FROM ackledger_outbox WHERE {PENDING}"))
    assert sent | pending == {e["id"] for e in events} and not sent & pending
    assert pending, "the relay should have been stopped mid-way"
    # Read the sink from its own connection: exactly what is marked sent arrived, once.
    inbox = set(ids(sink_db, "SELECT id FROM ackledger_inbox"))
    assert inbox == sent
    assert raw_rows(sink_db, "SELECT MAX(receipts) FROM ackledger_inbox") == [(1,)]
    # A fresh relay finishes the rest; the clean stop left nothing to re-send.
    _drain_and_check_applied_once(source, sink_db, sink_service, events, tmp_path)
    assert (
        raw_rows(sink_db, "SELECT value FROM ackledger_counters WHERE name = 'sink.duplicate'")
        == []
    )


def _drain_and_check_applied_once(
    source: Path, sink_db: Path, sink: Service, events: list[dict[str, Any]], folder: Path
) -> None:
    """A fresh relay drains what is left; then every event is in the sink, applied once."""
    relay = start_relay(source, sink.base_url + "/events", folder / "relay2.log")
    try:
        wait_until(lambda: count(source, PENDING) == 0, "the second relay to drain")
    finally:
        assert relay.stop() == 0
    assert set(ids(sink_db, "SELECT id FROM ackledger_inbox")) == {e["id"] for e in events}
    stock: dict[Any, Any] = dict(raw_rows(sink_db, "SELECT sku, qty FROM inventory"))  # type: ignore[arg-type]
    for sku in ("sku-0", "sku-1", "sku-2"):
        assert stock[sku] == sum(e["qty"] for e in events if e["sku"] == sku)


POISON = {"id": "p-2", "sku": "tea", "qty": 1}


@pytest.fixture
def poisoned_sink(sink_db: Path, tmp_path: Path) -> Any:
    """A sink that already holds p-2 with other content: it answers 422 for ours."""
    with Inbox(sink_db) as inbox:
        inbox.receive(of({**POISON, "qty": 99}))
    service = start_service(
        ["serve", "sink", "--db", str(sink_db), "--port", "0"], stderr_path=tmp_path / "sink.log"
    )
    yield service
    service.stop()


def _poison_source(source: Path) -> None:
    _accept(
        source,
        {"id": "a-1", "sku": "pen", "qty": 1},
        POISON,
        {"id": "c-3", "sku": "pen", "qty": 3},
    )


@pytest.mark.parametrize("flags", [[], ["--batch"], ["--batch", "--pipeline"]])
def test_a_poison_event_is_quarantined_and_the_relay_moves_on(
    tmp_path: Path, poisoned_sink: Service, sink_db: Path, flags: list[str]
) -> None:
    source = tmp_path / "source.db"
    _poison_source(source)
    relay = start_relay(
        source, poisoned_sink.base_url + "/events", tmp_path / "relay.log",
        "--on-poison", "quarantine", *flags,
    )  # fmt: skip
    try:
        wait_until(lambda: count(source, PENDING) == 0, "a-1 and c-3 to go, p-2 to be held")
        samples = metrics(relay.base_url)
    finally:
        assert relay.stop() == 0
    rows = {
        row[0]: row[1:]
        for row in raw_rows(
            source, "SELECT id, sent, quarantined, quarantine_reason FROM ackledger_outbox"
        )
    }
    assert rows["a-1"][:2] == (1, 0) and rows["c-3"][:2] == (1, 0)
    assert rows["p-2"][:2] == (0, 1)
    assert "422" in str(rows["p-2"][2])
    assert ids(sink_db, "SELECT id FROM ackledger_inbox ORDER BY id") == ["a-1", "c-3", "p-2"]
    # Untouched: the receipt keeps the other content's fingerprint, the stock its effect.
    theirs = content_fingerprint(of({**POISON, "qty": 99}))
    assert raw_rows(sink_db, "SELECT fingerprint FROM ackledger_inbox WHERE id = 'p-2'") == [
        (theirs,)
    ]
    assert raw_rows(sink_db, "SELECT qty FROM inventory WHERE sku = 'tea'") == [(99,)]
    assert one(samples, "ackledger_relay_poison_alerts_total", action="quarantine") == 1
    assert one(samples, "ackledger_relay_sends_failed_total", **{"class": "permanent"}) == 1
    assert one(samples, "ackledger_relay_quarantined", scope="database") == 1
    assert (
        one(samples, "ackledger_relay_outbox_sent_total", scope="database") == 2
    )  # quarantine is not success
    log = (tmp_path / "relay.log").read_text().splitlines()
    alerts = [line for line in log if " ERROR " in line and "poison" in line]
    assert alerts and "p-2" in alerts[0] and "ALERT" in alerts[0]
    listed = run_cli("quarantined", "--source", str(source), "--json")
    assert [item["id"] for item in json.loads(listed.stdout)] == ["p-2"]


@pytest.mark.parametrize("batch", [False, True])
def test_a_poison_event_stops_the_relay_under_the_stop_policy_with_an_alert(
    tmp_path: Path, poisoned_sink: Service, batch: bool
) -> None:
    source = tmp_path / "source.db"
    _poison_source(source)
    relay = start_relay(
        source, poisoned_sink.base_url + "/events", tmp_path / "relay.log",
        "--log-format", "json", "--on-poison", "stop", *(["--batch"] if batch else []),
    )  # fmt: skip
    try:
        assert relay.process.wait(60) == 3
    finally:
        relay.stop()
    assert ids(source, "SELECT id FROM ackledger_outbox WHERE sent = 1") == ["a-1"]
    assert ids(source, f"SELECT id FROM ackledger_outbox WHERE {PENDING} ORDER BY seq") == [
        "p-2",
        "c-3",
    ]
    [(attempts, error)] = raw_rows(
        source, "SELECT attempts, last_error FROM ackledger_outbox WHERE id='p-2'"
    )
    assert attempts == 1
    assert "422" in str(error) and "other content" in str(error)
    lines = (tmp_path / "relay.log").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]
    poison = [r for r in records if r["event"] == "poison"]
    assert poison and poison[0]["level"] == "error" and poison[0]["id"] == "p-2"
    [stopped] = [r for r in records if r["event"] == "stopped-on-poison"]
    said = [line for line in lines if line.startswith("ackledger relay: stopped on poison")]
    assert said and "p-2" in said[0] and "trace p-2" in said[0]
    # Every command the relay suggests runs as printed (no option left out).
    trace, quarantine = re.findall(r"`ackledger ([^`]*)`", stopped["message"])
    commands = [*re.findall(r"`ackledger ([^`]*)`", said[0]), trace, quarantine]
    for command in commands:
        done = run_cli(*shlex.split(command))
        assert done.returncode in (0, 1), (command, done.stderr)
    assert ids(source, "SELECT id FROM ackledger_outbox WHERE quarantined = 1") == ["p-2"]
    # ... and so does the way back that ``quarantine`` prints.
    held = run_cli("quarantine", "c-3", "--source", str(source), "--reason", "held")
    [requeue] = re.findall(r"`ackledger ([^`]*)`", held.stdout)
    assert run_cli(*shlex.split(requeue)).returncode == 0, requeue
    assert ids(source, "SELECT id FROM ackledger_outbox WHERE quarantined = 1") == ["p-2"]


@pytest.mark.parametrize(
    ("args", "word"),
    [
        (["--to", "http://example.invalid/events"], "host"),
        (["--to", "http://127.0.0.1:1/elsewhere#top"], "fragment"),
        (["--limit", "17"], "limit"),
        (["--base-backoff", "5", "--max-backoff", "1"], "backoff"),
        (["--poll-interval", "0"], "poll-interval"),
        (["--on-poison", "ignore"], "on-poison"),
        (["--mark-sync", "sometimes"], "mark-sync"),
        (["--pipeline", "--mark-sync", "last"], "mark-sync"),
        (["--inflight", "2"], "batch"),
        (["--log-format", "xml"], "log-format"),
        (["--metrics-port", "70000"], "metrics-port"),
    ],
)
def test_relay_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], word: str) -> None:
    source = tmp_path / "source.db"
    _accept(source, POISON)
    before = raw_rows(source, "SELECT * FROM ackledger_outbox")
    base = ["relay", "--source", str(source), "--to", "http://127.0.0.1:1/events"]
    result = run_cli(*base, *args, timeout=30)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and word in result.stderr
    assert raw_rows(source, "SELECT * FROM ackledger_outbox") == before


def test_relay_refuses_a_missing_source_without_creating_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    result = run_cli("relay", "--source", str(missing), "--to", "http://127.0.0.1:1/events")
    assert result.returncode == 2 and "no database" in result.stderr
    assert not missing.exists()


@pytest.mark.parametrize(
    ("flags", "unmarked"),
    # How many events a kill can leave applied but not marked: the round being sent and,
    # behind it, the marks in flight (one batch, one event) or none (inline marks).
    [(["--batch", "--pipeline"], 16), (["--mark-sync", "last"], 1), (["--pipeline"], 2)],
)
def test_kill_9_mid_run_then_a_fresh_relay_applies_every_event_once(
    tmp_path: Path, sink_db: Path, sink_service: Service, flags: list[str], unmarked: int
) -> None:
    """The modes that commit marks behind or without waiting for the disk: a relay killed
    with SIGKILL (no finally, no close) loses at most some marks; the events behind them are
    sent again and the sink absorbs them."""
    source = tmp_path / "source.db"
    events = _events(400)
    _accept(source, *events)
    with FaultProxy(sink_service.port, delay_responses=0.002) as proxy:
        relay = start_relay(source, proxy.url, tmp_path / "relay.log", "--limit", "8", *flags)
        try:
            wait_until(lambda: count(source, "sent = 1") >= 40, "some events to be sent")
            relay.process.send_signal(signal.SIGKILL)
            relay.process.wait(30)
        finally:
            relay.stop()
    _killed_then_drained(source, sink_db, sink_service, events, tmp_path, unmarked=unmarked)


def test_kill_9_of_a_pipelined_relay_between_an_ack_and_its_mark_re_sends_it_once(
    tmp_path: Path, sink_db: Path, sink_service: Service
) -> None:
    """``relay --pipeline``, one event at a time: stopped by its drill right after the 30th
    ACK (before that event's mark is handed over), then killed. That event is re-sent, and so
    is the 29th if its mark, committed behind the 30th send, had not landed yet."""
    source = tmp_path / "source.db"
    events = _events(120)
    _accept(source, *events)
    relay = start_relay(
        source, sink_service.base_url + "/events", tmp_path / "relay.log",
        "--pipeline", "--limit", "8", "--stop-self-after-acks", "30",
    )  # fmt: skip
    try:
        wait_until(lambda: process_state(relay.process.pid) == "T", "the drill's stop")
        relay.process.send_signal(signal.SIGKILL)
        relay.process.wait(30)
    finally:
        relay.stop()
    resent = _killed_then_drained(source, sink_db, sink_service, events, tmp_path, unmarked=2)
    assert events[29]["id"] in resent and resent <= {events[28]["id"], events[29]["id"]}


def _killed_then_drained(
    source: Path,
    sink_db: Path,
    sink: Service,
    events: list[dict[str, Any]],
    folder: Path,
    *,
    unmarked: int,
) -> set[str]:
    """After a kill -9: at most ``unmarked`` events applied but not marked; a fresh relay
    sends exactly those again (the sink counts each as a duplicate) and the rest once.
    Returns those re-sent."""
    assert count(source, PENDING) > 0, "the relay should have been killed mid-way"
    # Each database read from its own connection, once the request in flight (if any) is
    # over: what the sink applied that the outbox does not know as sent.
    applied = settled(lambda: set(ids(sink_db, "SELECT id FROM ackledger_inbox")))
    marked = set(ids(source, "SELECT id FROM ackledger_outbox WHERE sent = 1"))
    assert marked <= applied
    assert len(applied - marked) <= unmarked
    _drain_and_check_applied_once(source, sink_db, sink, events, folder)
    again = set(ids(sink_db, "SELECT id FROM ackledger_inbox WHERE receipts > 1"))
    assert again == applied - marked
    assert raw_rows(sink_db, "SELECT MAX(receipts) FROM ackledger_inbox") == [(2 if again else 1,)]
    duplicates = raw_rows(
        sink_db, "SELECT value FROM ackledger_counters WHERE name = 'sink.duplicate'"
    )
    assert duplicates == ([(len(again),)] if again else [])
    return again


def _sent_records(log: Path) -> list[dict[str, Any]]:
    lines = log.read_text().splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]
    return [r for r in records if r["event"] in ("sent", "stopped")]


def test_a_busy_relay_writes_one_sent_line_a_second_counting_every_event(
    tmp_path: Path, sink_service: Service
) -> None:
    # One event a round (--limit 1): a line per round was a sixth of the relay's CPU per event.
    source, log = tmp_path / "source.db", tmp_path / "relay.log"
    events = _events(40, "busy")
    _accept(source, *events)
    relay = start_relay(
        source, sink_service.base_url + "/events", log, "--limit", "1", "--log-format", "json"
    )
    try:
        wait_until(lambda: count(source, "sent = 1") == 40, "the relay to drain the outbox")
        # The line that waited for its second is written while the relay idles, not at stop.
        wait_until(
            lambda: (
                sum(r.get("ids") is not None for r in _sent_records(log)) >= 2
                and sum(int(r["message"].split()[1]) for r in _sent_records(log)) == 40
            ),
            "the waiting sent line",
        )
        sent = _sent_records(log)
    finally:
        relay.stop()
    # 40 one-event rounds took well under a few seconds: a line per second, not per round.
    assert 2 <= len(sent) <= 4
    assert sent[0]["message"] == "sent 1 event(s)" and sent[0]["ids"] == ["busy-000"]
    assert sent[-1]["last"] == "busy-039"
    listed = [i for r in sent for i in r["ids"] if not i.startswith("+")]
    assert listed == [e["id"] for e in events][: len(listed)]  # in order, the first ones


def test_a_stop_writes_the_waiting_sent_line_before_the_stopped_line(
    tmp_path: Path, sink_service: Service
) -> None:
    source, log = tmp_path / "source.db", tmp_path / "relay.log"
    _accept(source, *_events(30, "stop"))
    relay = start_relay(
        source, sink_service.base_url + "/events", log, "--limit", "1", "--log-format", "json"
    )
    try:
        wait_until(lambda: count(source, "sent = 1") == 30, "the relay to drain the outbox")
        assert relay.stop() == 0  # at once: the events after the first line still wait
    finally:
        relay.stop()
    records = _sent_records(log)
    assert records[-1]["event"] == "stopped"
    counted = [int(r["message"].split()[1]) for r in records if r["event"] == "sent"]
    assert sum(counted) == 30
    assert records[-2]["last"] == "stop-029"
