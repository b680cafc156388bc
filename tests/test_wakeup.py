"""PostgreSQL wake-up: an idle relay LISTENs, ``publish`` NOTIFYs in its own
transaction, and polling stays the source of truth.

Every relay here polls every 30 s, so an event that arrives within 10 s was sent because a
notification woke the relay: a functional bound, not a speed figure (bench/wakeup.py measures
the latency). The relays are real (in-process threads, and one ``ackledger relay`` process),
the sink is a real ``serve sink`` process, the outbox a real PostgreSQL database.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from ackledger import Outbox
from ackledger.ops.processes import Service, start_service
from ackledger.relay.loop import Relay
from ackledger.relay.pickers import LeasedPartitions, Picker, WholeOutbox
from ackledger.relay.settings import RelaySettings
from ackledger.store.postgres.notify import APPLICATION_NAME
from ackledger.wire.sender import sender

from . import pg
from .conftest import raw_rows
from .events import lab
from .opshelp import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

LONG_POLL = 30.0
#: Well under LONG_POLL: arriving this soon needs the notification.
PROMPT = 10.0


def _listeners(url: str) -> list[int]:
    """The backend pids of this database's listening connections."""
    dbname = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    return [
        int(row[0])
        for row in pg.rows(
            url,
            "SELECT pid FROM pg_stat_activity WHERE datname = ? AND application_name = ?",
            (dbname, APPLICATION_NAME),
        )
    ]


def _received(sink_db: Path, event_id: str) -> bool:
    return bool(raw_rows(sink_db, "SELECT 1 FROM ackledger_inbox WHERE id = ?", (event_id,)))


def _arrival_seconds(sink_db: Path, event_id: str, limit: float) -> float | None:
    """Seconds until the sink holds ``event_id``, or None if not within ``limit``."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if _received(sink_db, event_id):
            return time.monotonic() - started
        time.sleep(0.02)
    return None


PICKERS: dict[str, Callable[[Outbox, RelaySettings], Picker]] = {
    "single": WholeOutbox,
    "partitions": LeasedPartitions,
}


@contextmanager
def _relay(
    url: str, sink: Service, kind: str, poll: float = LONG_POLL, **told: object
) -> Iterator[tuple[Relay, list[str]]]:
    """A relay thread on the outbox at ``url``, idle and listening when this yields."""
    settings = RelaySettings(
        url=sink.base_url + "/events",
        poll_interval=poll,
        owner="wake-1" if kind == "partitions" else None,
        **told,  # type: ignore[arg-type]
    )
    lines: list[str] = []
    with Outbox(url) as outbox:
        wire = sender(settings.url)
        relay = Relay(
            PICKERS[kind](outbox, settings), wire=wire, stop=threading.Event(), log=lines.append
        )

        def run() -> None:
            try:
                relay.run()
            finally:
                wire.close()  # its kept-alive connections belong to this thread

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            if settings.listen:
                wait_until(lambda: bool(_listeners(url)), "the relay's LISTEN connection")
            time.sleep(0.3)  # past its first look at the (empty) outbox: idle now
            yield relay, lines
        finally:
            relay.request_stop()
            thread.join(timeout=15)
    assert not thread.is_alive()


@pytest.mark.parametrize("kind", sorted(PICKERS))
def test_an_idle_relay_sends_a_new_event_well_before_its_poll_interval(
    pg_url: str, sink_service: Service, sink_db: Path, kind: str
) -> None:
    with _relay(pg_url, sink_service, kind) as (relay, _), Outbox(pg_url) as outbox:
        for n in range(3):  # each time idle again, each time woken
            outbox.publish(lab(f"wake-{kind}-{n}", "pen", 1))
            took = _arrival_seconds(sink_db, f"wake-{kind}-{n}", PROMPT)
            assert took is not None, f"not sent within {PROMPT} s (poll {LONG_POLL} s)"
        assert relay.idle.woken >= 1  # a send can also find the next event still busy
        wait_until(lambda: outbox.pending() == [], "the marks")


def test_a_rolled_back_publish_wakes_nothing_and_sends_nothing(
    pg_url: str, sink_service: Service, sink_db: Path
) -> None:
    with _relay(pg_url, sink_service, "single") as (relay, _), Outbox(pg_url) as outbox:
        with psycopg.connect(pg_url) as conn:
            outbox.publish(lab("never", "pen", 1), using=conn)
            conn.rollback()
            time.sleep(2.0)
            assert relay.idle.woken == 0
            assert not _received(sink_db, "never")
            # The same on the caller's connection, committed: the NOTIFY rode in its
            # transaction, so this one wakes the relay.
            outbox.publish(lab("committed", "pen", 1), using=conn)
            conn.commit()
        assert _arrival_seconds(sink_db, "committed", PROMPT) is not None
        assert relay.idle.woken == 1
        assert not _received(sink_db, "never")


def test_a_relay_whose_listening_connection_is_cut_still_sends_at_the_poll_interval(
    pg_url: str, sink_service: Service, sink_db: Path
) -> None:
    with _relay(pg_url, sink_service, "single", poll=2.0) as (relay, lines):
        (pid,) = _listeners(pg_url)
        pg.rows(pg_url, "SELECT pg_terminate_backend(?)", (pid,))
        wait_until(lambda: any("connection lost" in line for line in lines), "the cut noticed")
        with Outbox(pg_url) as outbox:
            outbox.publish(lab("after-cut", "pen", 1))
        assert _arrival_seconds(sink_db, "after-cut", 30.0) is not None
        # It listens again (a new connection) and is woken again.
        wait_until(lambda: _listeners(pg_url) not in ([], [pid]), "a new LISTEN connection")
        woken = relay.idle.woken
        time.sleep(0.3)
        with Outbox(pg_url) as outbox:
            outbox.publish(lab("relistened", "pen", 1))
        assert _arrival_seconds(sink_db, "relistened", 30.0) is not None
        wait_until(lambda: relay.idle.woken > woken, "a wake on the new connection")


def test_without_listen_the_relay_only_polls(
    pg_url: str, sink_service: Service, sink_db: Path
) -> None:
    with _relay(pg_url, sink_service, "single", poll=3.0, listen=False) as (relay, _):
        assert _listeners(pg_url) == []
        with Outbox(pg_url) as outbox:
            outbox.publish(lab("polled", "pen", 1))
        assert _arrival_seconds(sink_db, "polled", 30.0) is not None
        assert relay.idle.woken == 0


def test_the_relay_command_listens(
    pg_url: str, sink_service: Service, sink_db: Path, tmp_path: Path
) -> None:
    relay = start_service(
        ["relay", "--source", pg_url, "--to", sink_service.base_url + "/events",
         "--poll-interval", str(LONG_POLL), "--metrics-port", "0"],
        stderr_path=tmp_path / "relay.log",
    )  # fmt: skip
    try:
        wait_until(lambda: bool(_listeners(pg_url)), "the relay's LISTEN connection")
        time.sleep(0.3)
        with Outbox(pg_url) as outbox:
            outbox.publish(lab("by-command", "pen", 1))
        assert _arrival_seconds(sink_db, "by-command", PROMPT) is not None
    finally:
        assert relay.stop() == 0


def test_listen_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="listen"):
        RelaySettings(url="http://127.0.0.1:9/events", listen="yes")  # type: ignore[arg-type]
