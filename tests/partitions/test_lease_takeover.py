"""A relay that dies holding a lease, and one that stops cleanly: what the operator sees and
how soon another relay goes on (real processes, a real ``kill -9``, real PostgreSQL)."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import pytest

from ackledger import Outbox
from ackledger.ops.processes import run_cli
from ackledger.ops.status import read_status
from ackledger.relay.leases import DEFAULT_TTL
from tests.partitions.test_relay_command import start_relay, stop, wait_until
from tests.plainreceiver import Answer, PlainReceiver, always

pytestmark = pytest.mark.slow

IDS = ("t-1", "t-2", "t-3")


class HangingReceiver(PlainReceiver):
    """Answers 204 (so ``--ack status``), but holds each answer while ``hang`` is set."""

    def __init__(self) -> None:
        self.hang = threading.Event()
        self.hang.set()
        self._let_go = threading.Event()
        super().__init__(self._answer)

    def _answer(self, n: int, sent: bytes) -> Answer:
        if self.hang.is_set():
            self._let_go.wait(60)
        return 204, {}, b""

    def let_go(self) -> None:
        self.hang.clear()
        self._let_go.set()

    def close(self) -> None:
        self.let_go()
        super().close()


def _publish(pg_url: str) -> None:
    with Outbox(pg_url) as outbox:
        for event_id in IDS:
            outbox.accept({"id": event_id, "sku": "tea", "qty": 1})


def _sent(pg_url: str) -> int:
    with Outbox(pg_url) as outbox:
        return int(outbox.stats()["sent"])


def test_a_killed_relay_s_lease_is_shown_and_taken_over_within_the_default_ttl(
    pg_url: str, tmp_path: Path
) -> None:
    _publish(pg_url)
    with HangingReceiver() as receiver:
        first = start_relay(pg_url, receiver.url, "relay-a", tmp_path / "a.log", "--ack", "status")
        try:
            wait_until(lambda: receiver.arrivals, "relay-a's first send")
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(30)
        killed = time.monotonic()
        receiver.let_go()
        log = tmp_path / "b.log"
        second = start_relay(pg_url, receiver.url, "relay-b", log, "--ack", "status")
        try:
            # Meanwhile the operator sees why nothing moves: relay-a's lease, not "sendable now".
            status = run_cli("status", "--source", pg_url, "--json")
            [held] = json.loads(status.stdout)["held_by_lease"]
            assert held["owner"] == "relay-a" and held["partition"] == "tea"
            assert held["pending"] == 3
            text = read_status(pg_url).text()
            assert "held by a lease of relay-a until" in text, text
            traced = run_cli("trace", "t-1", "--source", pg_url).stdout
            assert "held by a lease of relay-a until" in traced, traced
            wait_until(lambda: _sent(pg_url) == 3, "relay-b to send the partition")
            took = time.monotonic() - killed
        finally:
            assert stop(second) == 0
    assert took <= DEFAULT_TTL + 3, took
    said = [line for line in log.read_text().splitlines() if "lease-held" in line]
    assert said and "relay-a" in said[0] and "'tea'" in said[0], log.read_text()[-2000:]
    assert "held by a lease of relay-a" not in run_cli("trace", "t-1", "--source", pg_url).stdout


def test_a_relay_stopped_by_sigterm_releases_its_lease_for_an_immediate_takeover(
    pg_url: str, tmp_path: Path
) -> None:
    _publish(pg_url)
    with HangingReceiver() as receiver:
        first = start_relay(
            pg_url, receiver.url, "relay-a", tmp_path / "a.log", "--ack", "status",
            "--lease-ttl", "60",
        )  # fmt: skip
        wait_until(lambda: receiver.arrivals, "relay-a's first send")
        first.send_signal(signal.SIGTERM)
        receiver.let_go()  # the send in flight is answered, marked, then the relay stops
        assert first.wait(30) == 0
        stopped = time.monotonic()
        status = json.loads(run_cli("status", "--source", pg_url, "--json").stdout)
        assert status["held_by_lease"] == [] and status["pending"] == 2
        second = start_relay(pg_url, receiver.url, "relay-b", tmp_path / "b.log", "--ack", "status")
        try:
            wait_until(lambda: _sent(pg_url) == 3, "relay-b to send the rest")
            took = time.monotonic() - stopped
        finally:
            assert stop(second) == 0
    # Far below the 60 s lease that a kill would have left behind.
    assert took < 15, took


def test_a_clean_stop_also_releases_a_partition_parked_by_retry_after(
    pg_url: str, tmp_path: Path
) -> None:
    _publish(pg_url)
    log = tmp_path / "a.log"
    with PlainReceiver(always(503, headers={"Retry-After": "30"})) as receiver:
        relay = start_relay(
            pg_url, receiver.url, "relay-a", log, "--ack", "status", "--max-backoff", "30"
        )
        wait_until(lambda: "Retry-After" in log.read_text(), "the partition parked for 30 s")
        held = json.loads(run_cli("status", "--source", pg_url, "--json").stdout)["held_by_lease"]
        assert [lease["owner"] for lease in held] == ["relay-a"]
        assert stop(relay) == 0
    assert len(receiver.arrivals) == 1  # the wait was honoured while it ran
    status = json.loads(run_cli("status", "--source", pg_url, "--json").stdout)
    assert status["held_by_lease"] == [] and status["pending"] == 3
