"""``ackledger relay --source postgresql://``: one of N relays, with the relay's policies."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest

from ackledger import Inbox, Outbox
from ackledger.ops.processes import Service, cli_command
from tests.conftest import raw_rows
from tests.events import lab

pytestmark = pytest.mark.slow


def start_relay(source: str, url: str, owner: str, log: Path, *extra: str) -> subprocess.Popen[str]:
    args = ["--source", source, "--to", url, "--owner", owner, "--poll-interval", "0.1"]
    with log.open("w") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            cli_command("relay", *args, "--max-backoff", "0.5", *extra),
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )


def wait_until(check: object, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def poison_between(sink_db: Path, source: str, before: str, after: str) -> None:
    """Events ``before``, "bad", ``after`` in one partition, where the sink already holds
    "bad" with other content: it answers 422 to every send of it."""
    with Outbox(source) as outbox, Inbox(sink_db) as inbox:
        inbox.receive(lab("bad", "tea", 99, source=outbox.source))
        for event_id in (before, "bad", after):
            outbox.accept({"id": event_id, "sku": "tea", "qty": 1})


def stop(process: subprocess.Popen[str]) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(30)


def test_three_relays_share_the_partitions_and_keep_their_order(
    pg_url: str, sink_service: Service, sink_db: Path, tmp_path: Path
) -> None:
    skus = [f"sku-{i}" for i in range(8)]
    with Outbox(pg_url) as outbox:
        for n in range(400):
            outbox.accept({"id": f"e-{n:04d}", "sku": skus[n % 8], "qty": 1})
    url = sink_service.base_url + "/events"
    logs = [tmp_path / "a.log", tmp_path / "b.log", tmp_path / "c.log"]
    relays = [
        start_relay(pg_url, url, "relay-a", logs[0], "--batch", "--limit", "4"),
        # One event a request, each mark (lease-checked) committed behind the next send.
        start_relay(pg_url, url, "relay-b", logs[1], "--pipeline"),
        # Marks behind the next send, still checking the lease.
        start_relay(pg_url, url, "relay-c", logs[2], "--batch", "--limit", "4", "--pipeline"),
    ]
    try:
        with Outbox(pg_url) as outbox:
            wait_until(lambda: outbox.stats()["pending"] == 0, "the outbox to drain")
    finally:
        codes = [stop(relay) for relay in relays]
    assert codes == [0, 0, 0], [log.read_text()[-2000:] for log in logs]
    reports = [json.loads(log.read_text().strip().splitlines()[-1]) for log in logs]
    assert sum(r["sent"] for r in reports) >= 400
    arrivals = raw_rows(sink_db, "SELECT id FROM ackledger_inbox ORDER BY arrival")
    assert len(arrivals) == 400
    by_partition: dict[str, list[str]] = defaultdict(list)
    for (event_id,) in arrivals:  # a receipt keeps no data: e-N's sku is skus[N % 8]
        by_partition[skus[int(str(event_id)[2:]) % 8]].append(str(event_id))
    for ids in by_partition.values():
        assert ids == sorted(ids)  # ids were accepted in this order within each sku
    assert raw_rows(sink_db, "SELECT sum(qty) FROM inventory") == [(400,)]


@pytest.mark.parametrize("batch", [False, True])
def test_a_poison_event_is_quarantined_and_its_partition_goes_on(
    pg_url: str, sink_service: Service, sink_db: Path, tmp_path: Path, batch: bool
) -> None:
    poison_between(sink_db, pg_url, "t-1", "t-2")
    log = tmp_path / "relay.log"
    extra = ["--on-poison", "quarantine", *(["--batch"] if batch else [])]
    relay = start_relay(pg_url, sink_service.base_url + "/events", "relay-q", log, *extra)
    try:
        with Outbox(pg_url) as outbox:
            wait_until(lambda: outbox.stats()["pending"] == 0, "t-2 to be sent")
            held = outbox.quarantined()
    finally:
        assert stop(relay) == 0
    assert [item["id"] for item in held] == ["bad"]
    assert "422" in held[0]["reason"]
    assert "ALERT" in log.read_text()
    assert raw_rows(sink_db, "SELECT id FROM ackledger_inbox ORDER BY arrival") == [
        ("bad",),
        ("t-1",),
        ("t-2",),
    ]


def test_under_stop_a_poison_event_ends_the_relay_with_exit_3(
    pg_url: str, sink_service: Service, sink_db: Path, tmp_path: Path
) -> None:
    with Outbox(pg_url) as outbox, Inbox(sink_db) as inbox:
        inbox.receive(lab("bad", "tea", 99, source=outbox.source))
        outbox.accept({"id": "bad", "sku": "tea", "qty": 1})
    log = tmp_path / "relay.log"
    relay = start_relay(
        pg_url, sink_service.base_url + "/events", "relay-s", log, "--on-poison", "stop"
    )
    assert relay.wait(60) == 3, log.read_text()
    assert "poison" in log.read_text()
    with Outbox(pg_url) as outbox:
        assert [item["id"] for item in outbox.pending()] == ["bad"]


def test_sqlite_sources_keep_the_single_loop(source_db: Path, tmp_path: Path) -> None:
    Outbox(source_db).close()
    log = tmp_path / "relay.log"
    relay = start_relay(str(source_db), "http://127.0.0.1:9/events", "ignored", log)
    # Stopped once it runs (a fixed sleep stopped it while it still imported, on a loaded
    # machine: killed by the signal, exit -15).
    wait_until(lambda: "relaying to" in log.read_text(), "the single loop to start")
    assert stop(relay) == 0
    assert "leasing partitions" not in log.read_text()


def test_log_format_json_covers_the_partition_relay(
    pg_url: str, sink_service: Service, sink_db: Path, tmp_path: Path
) -> None:
    poison_between(sink_db, pg_url, "j-1", "j-2")
    log = tmp_path / "relay.log"
    extra = ["--log-format", "json", "--on-poison", "quarantine", "--seed", "3"]
    relay = start_relay(pg_url, sink_service.base_url + "/events", "relay-j", log, *extra)
    try:
        with Outbox(pg_url) as outbox:
            wait_until(lambda: outbox.stats()["pending"] == 0, "j-2 to be sent")
    finally:
        assert stop(relay) == 0
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    *logged, report = lines  # the last line is the worker's report
    assert report["owner"] == "relay-j" and report["quarantined"] == ["bad"]
    events = [line["event"] for line in logged]
    assert events[0] == "started" and events[-1] == "stopped"
    assert {"sent", "poison", "quarantined"} <= set(events)
    assert all(line["owner"] == "relay-j" for line in logged)
    poison = next(line for line in logged if line["event"] == "poison")
    assert poison["id"] == "bad" and poison["level"] == "error"


def test_an_outage_after_a_refusal_is_not_taken_for_poison(
    pg_url: str, sink_service: Service, sink_db: Path, tmp_path: Path
) -> None:
    """A batch relay whose last answer was a 422 must judge the next failure by itself: a
    sink that is down is transient, and the events waiting for it are not quarantined."""
    with Outbox(pg_url) as outbox, Inbox(sink_db) as inbox:
        inbox.receive(lab("bad", "tea", 99, source=outbox.source))
        outbox.accept({"id": "bad", "sku": "tea", "qty": 1})
    log = tmp_path / "relay.log"
    extra = ["--batch", "--on-poison", "quarantine"]
    relay = start_relay(pg_url, sink_service.base_url + "/events", "relay-o", log, *extra)
    try:
        with Outbox(pg_url) as outbox:
            wait_until(lambda: outbox.stats()["quarantined"] == 1, "bad to be quarantined")
            sink_service.stop()  # the refusal was the relay's last answer
            outbox.accept({"id": "later", "sku": "coffee", "qty": 1})
            wait_until(lambda: outbox.stats()["attempts"] >= 2, "a send to the stopped sink")
            time.sleep(1.0)  # more rounds against the stopped sink
            held = [item["id"] for item in outbox.quarantined()]
            waiting = [item["id"] for item in outbox.pending()]
    finally:
        assert stop(relay) == 0
    assert held == ["bad"], log.read_text()[-2000:]
    assert waiting == ["later"]


def test_under_hold_a_poison_event_waits_in_its_partition_while_the_others_go_on(
    pg_url: str, sink_service: Service, sink_db: Path, tmp_path: Path
) -> None:
    poison_between(sink_db, pg_url, "h-1", "h-2")
    with Outbox(pg_url) as outbox:
        for n in range(5):
            outbox.accept({"id": f"o-{n}", "sku": "coffee", "qty": 1})
    log = tmp_path / "relay.log"
    # The default policy; each held try parks the partition for --max-backoff (0.5 s here).
    relay = start_relay(pg_url, sink_service.base_url + "/events", "relay-h", log)
    try:
        wait_until(lambda: log.read_text().count("holding it") >= 3, "three held tries of bad")
        assert relay.poll() is None  # alive: no exit 3, no crash loop
        with Outbox(pg_url) as outbox:
            pending = [item["id"] for item in outbox.pending()]
            assert outbox.stats()["quarantined"] == 0
    finally:
        assert stop(relay) == 0
    assert pending == ["bad", "h-2"], log.read_text()[-2000:]
    applied = {str(row[0]) for row in raw_rows(sink_db, "SELECT id FROM ackledger_inbox")}
    assert {f"o-{n}" for n in range(5)} | {"h-1"} <= applied
