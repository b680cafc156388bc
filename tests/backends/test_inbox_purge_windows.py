"""The purge's walk of the inbox's key in windows (migration 0010: no index on the time of
first arrival) and the oldest kept receipt it records, on every backend: every window is
walked, only receipts older than the cutoff go, a kill -9 between windows leaves a consistent
inbox that the next purge finishes, receipts arriving meanwhile stay, and the sink answers
while a purge of many windows runs."""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from ackledger import Inbox
from ackledger.ops.processes import start_service
from ackledger.store import open_backend
from ackledger.store.base import migrate
from ackledger.store.inbox import PURGED

from ..events import lab
from .conftest import Target

DAY = 86400.0


def _fill(inbox: Inbox, ids: list[str]) -> None:
    for start in range(0, len(ids), 16):
        batch = [lab(event_id, "apple", 1) for event_id in ids[start : start + 16]]
        assert inbox.receive_batch(batch).statuses == ["applied"] * len(batch)


def _age(target: Target, seconds: float, ids: list[str]) -> None:
    """Move receipts' first arrival ``seconds`` into the past (the test's hand on the clock)."""
    for start in range(0, len(ids), 200):
        part = ids[start : start + 200]
        target.execute(
            "UPDATE ackledger_inbox SET first_received_at = first_received_at - ? "
            f"WHERE id IN ({', '.join('?' * len(part))})",
            (seconds, *part),
        )


def _ids(target: Target) -> list[str]:
    return sorted(str(row[0]) for row in target.rows("SELECT id FROM ackledger_inbox"))


def _purged(target: Target) -> int:
    rows = target.rows("SELECT value FROM ackledger_counters WHERE name = ?", (PURGED,))
    return int(rows[0][0]) if rows else 0


def _recorded(target: Target) -> tuple[float | None, float | None, int]:
    """The inbox_oldest row, read from a separate connection."""
    [(oldest, cutoff, generation)] = target.rows(
        "SELECT first_received_at, cutoff, generation FROM ackledger_inbox_oldest"
    )
    return oldest, cutoff, int(generation)


def _first_received(target: Target, event_id: str) -> float:
    [(found,)] = target.rows(
        "SELECT first_received_at FROM ackledger_inbox WHERE id = ?", (event_id,)
    )
    return float(found)


def test_a_purge_walks_every_window_and_deletes_only_the_old(target: Target) -> None:
    ids = [f"k{n:02d}" for n in range(24)]
    # Windows of 4 keys: the first and the last two hold old receipts, the four between
    # none (a walk that stops at a window with fewer to delete than its size stops early).
    old = ["k00", "k01", "k13", "k22", "k23"]
    with Inbox(target.ref) as inbox:
        _fill(inbox, ids)
        _age(target, 40 * DAY, old)
        _age(target, 20 * DAY, ["k05"])
        _age(target, 10 * DAY, ["k17", "k21"])
        assert inbox.purge(30 * DAY, chunk=4) == 5
        assert _ids(target) == [event_id for event_id in ids if event_id not in old]
        assert _purged(target) == 5
        assert inbox.counters()["applied"] == 24
        # The oldest receipt kept is recorded, with the purge's cutoff, by the purge itself.
        oldest, cutoff, generation = _recorded(target)
        assert oldest == _first_received(target, "k05")
        assert cutoff is not None and abs(cutoff - (time.time() - 30 * DAY)) < 60
        assert generation == 1
        age = inbox.retention()["oldest_receipt_age_s"]
        assert 20 * DAY <= age < 20 * DAY + 60
        # Nothing left to delete: the next walk deletes nothing and records the same.
        assert inbox.purge(30 * DAY, chunk=4) == 0
        assert _recorded(target)[0] == oldest and _purged(target) == 5


def test_a_window_as_large_as_the_inbox_and_a_window_of_one(target: Target) -> None:
    ids = [f"w{n}" for n in range(7)]
    with Inbox(target.ref) as inbox:
        _fill(inbox, ids)
        _age(target, 40 * DAY, ids[::2])
        assert inbox.purge(30 * DAY, chunk=1) == 4
        assert _ids(target) == ids[1::2]
        _age(target, 40 * DAY, ids[1::2])
        assert inbox.purge(30 * DAY, chunk=100) == 3
        assert _ids(target) == []
        # It kept nothing: nothing is recorded, and an empty inbox has no oldest receipt.
        assert _recorded(target)[0] is None
        assert inbox.retention() == {"purged": 7, "oldest_receipt_age_s": None}


def test_the_record_of_a_later_cutoff_is_never_replaced_by_an_earlier_one(
    target: Target,
) -> None:
    with Inbox(target.ref) as inbox:
        _fill(inbox, ["a", "b", "c"])
        _age(target, 50 * DAY, ["a"])
        _age(target, 20 * DAY, ["b"])
        inbox.purge(30 * DAY)
        first = _recorded(target)
        assert first[0] == _first_received(target, "b") and first[2] == 1
        # A longer horizon (an earlier cutoff) deletes nothing the last purge kept; the row of
        # the later cutoff stays, as two purges at once leave it.
        assert inbox.purge(60 * DAY) == 0
        assert _recorded(target) == first
        # A later cutoff records again.
        assert inbox.purge(10 * DAY) == 1
        oldest, cutoff, generation = _recorded(target)
        assert oldest == _first_received(target, "c") and generation == 2
        assert first[1] is not None and cutoff is not None and cutoff > first[1]


def test_the_oldest_receipt_is_scanned_for_once_then_read_from_the_record(
    target: Target,
) -> None:
    """Never a full scan per read: what a scan found is kept until a purge records again. The
    test proves it by changing a receipt's time by hand after the scan, which a second scan
    would see."""
    with Inbox(target.ref) as inbox:
        _fill(inbox, ["s1", "s2"])
        _age(target, 5 * DAY, ["s1"])
        assert _recorded(target)[0] is None  # never purged: nothing recorded
        age = inbox.retention()["oldest_receipt_age_s"]
        assert 5 * DAY <= age < 5 * DAY + 60
        _age(target, 3 * DAY, ["s2"])  # s2 is now 3 days old; no purge: not seen
        _age(target, 10 * DAY, ["s1"])
        age = inbox.retention()["oldest_receipt_age_s"]
        assert 5 * DAY <= age < 5 * DAY + 60
        # Another process scans once of its own.
        with Inbox(target.ref) as other:
            age = other.retention()["oldest_receipt_age_s"]
            assert 15 * DAY <= age < 15 * DAY + 60
        # A purge records what it kept, and every reader reads that.
        assert inbox.purge(12 * DAY) == 1
        assert _recorded(target)[0] == _first_received(target, "s2")
        age = inbox.retention()["oldest_receipt_age_s"]
        assert 3 * DAY <= age < 3 * DAY + 60


@pytest.fixture(params=["sqlite", "postgres"])
def unmigrated(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    """A database without any schema yet."""
    if request.param == "sqlite":
        return Target("sqlite", str(tmp_path / "old.db"))
    return Target("postgres", request.getfixturevalue("pg_empty_url"))


def test_opening_a_database_of_migration_0009_records_its_oldest_and_drops_the_index(
    unmigrated: Target,
) -> None:
    target = unmigrated
    backend = open_backend(target.ref, migrate_schema=False)
    try:
        migrate(backend, upto=9)
    finally:
        backend.close()
    rows = [("/tests/v9", f"r{n}", 1_000_000.0 + n) for n in range(5)]
    for source, event_id, at in rows:
        target.execute(
            "INSERT INTO ackledger_inbox (source, id, type, fingerprint, first_received_at, "
            "last_received_at, receipts, arrival, last_arrival) "
            "VALUES (?, ?, 'warehouse.stock.added', 'f', ?, ?, 1, 1, 1)",
            (source, event_id, at + 10, at + 10),
        )
    target.execute("UPDATE ackledger_inbox SET first_received_at = 999.0 WHERE id = 'r3'")
    assert "ackledger_inbox_first_received" in _index_names(target)
    with Inbox(target.ref) as inbox:  # opening migrates
        assert "ackledger_inbox_first_received" not in _index_names(target)
        assert _recorded(target) == (999.0, None, 0)
        assert len(_ids(target)) == 5
        assert inbox.receipt("r3", source="/tests/v9") is not None
        assert inbox.retention()["oldest_receipt_age_s"] >= time.time() - 999.0 - 1


def _index_names(target: Target) -> set[str]:
    if target.dialect == "postgres":
        found = target.rows("SELECT indexname FROM pg_indexes WHERE tablename = 'ackledger_inbox'")
    else:
        found = target.rows("SELECT name FROM sqlite_master WHERE type = 'index'")
    return {str(row[0]) for row in found}


# --- processes: a kill -9 between windows, the sink serving during a purge ---------------

_PURGER = """
import sys
from ackledger import Inbox
with Inbox(sys.argv[1]) as inbox:
    print("start", flush=True)
    gone = inbox.purge(float(sys.argv[2]), chunk=int(sys.argv[3]))
    print("done", gone, flush=True)
"""


def _purger(target: Target, horizon: float, window: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _PURGER, target.ref, str(horizon), str(window)],
        stdout=subprocess.PIPE,
        text=True,
    )


def _write_lock(target: Target) -> AbstractContextManager[None]:
    """Hold what a purge's DELETE needs, from another connection: SQLite's one writer's
    lock; on PostgreSQL a SHARE lock on the inbox (reads go on, deletes wait)."""
    return target.holding_writes("LOCK TABLE ackledger_inbox IN SHARE MODE")


def _wait_for(check: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


@pytest.mark.slow
def test_a_kill_9_between_windows_leaves_a_consistent_inbox_the_next_purge_finishes(
    target: Target,
) -> None:
    old = [f"o{n:04d}" for n in range(1200)]
    kept = [f"o{n:04d}x" for n in range(0, 1200, 60)]  # between the old ones in key order
    with Inbox(target.ref) as inbox:
        _fill(inbox, old + kept)
    _age(target, 40 * DAY, old)
    _age(target, 20 * DAY, kept)
    with Inbox(target.ref) as inbox:
        # A first purge with a longer horizon deletes nothing and records the oldest (40 d).
        assert inbox.purge(45 * DAY) == 0
    before = _recorded(target)
    assert before[0] == _first_received(target, old[0])

    with _purger(target, 30 * DAY, 5) as purger:
        try:
            _wait_for(lambda: _purged(target) > 0, "the purge's first window")
            with _write_lock(target):
                # The purge's next DELETE waits for the lock: it is between two windows.
                gone = _purged(target)
                assert purger.poll() is None and 0 < gone < len(old)
                purger.send_signal(signal.SIGKILL)
                purger.wait(30)
        finally:
            if purger.poll() is None:
                purger.kill()
    assert purger.returncode == -signal.SIGKILL
    # Consistent: what is missing is old and counted once, every kept receipt is there, and
    # the record is the last finished purge's (an older receipt than any kept: too old,
    # never too young).
    left = _ids(target)
    assert set(kept) <= set(left)
    assert len(old) - (len(left) - len(kept)) == _purged(target)
    assert _purged(target) >= gone
    assert _recorded(target) == before
    remaining = len(old) - _purged(target)
    with Inbox(target.ref) as inbox:
        assert inbox.purge(30 * DAY, chunk=5) == remaining
    assert _ids(target) == sorted(kept)
    assert _purged(target) == len(old)
    oldest, _, generation = _recorded(target)
    assert oldest == min(_first_received(target, event_id) for event_id in kept)
    assert generation > before[2]


class _Poster(threading.Thread):
    """One keep-alive client posting new events back to back; records when each answer came."""

    def __init__(self, base_url: str, ids: list[str]) -> None:
        super().__init__()
        self._base = base_url.removeprefix("http://")
        self._ids = ids
        self.answers: list[tuple[float, str, int, str]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        host, port = self._base.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            for event_id in self._ids:
                if self.stop.is_set():
                    return
                body = json.dumps(lab(event_id, "pear", 1)).encode()
                conn.request(
                    "POST", "/events", body, {"Content-Type": "application/cloudevents+json"}
                )
                answer = conn.getresponse()
                status = json.loads(answer.read()).get("status", "")
                self.answers.append((time.monotonic(), event_id, answer.status, status))
        finally:
            conn.close()


@pytest.mark.slow
def test_the_sink_answers_and_keeps_new_receipts_while_a_purge_of_many_windows_runs(
    target: Target, tmp_path: Path
) -> None:
    # Old and new ids interleave in key order: new receipts land both in windows the purge
    # has walked and in windows it has not reached yet.
    old = [f"{n % 10}-old-{n:05d}" for n in range(3000)]
    new = [f"{n % 10}-new-{n:05d}" for n in range(20_000)]
    with Inbox(target.ref) as inbox:
        _fill(inbox, old)
    _age(target, 40 * DAY, old)
    args = ["serve", "sink", "--db", target.ref, "--port", "0"]
    with start_service(args, stderr_path=tmp_path / "sink.log") as sink:
        poster = _Poster(sink.base_url, new)
        poster.start()
        try:
            _wait_for(lambda: len(poster.answers) >= 20, "the first answers")
            with _purger(target, 30 * DAY, 10) as purger:
                assert purger.stdout is not None
                assert purger.stdout.readline().strip() == "start"
                began = time.monotonic()
                done = purger.stdout.readline().split()
                ended = time.monotonic()
                assert purger.wait(60) == 0
        finally:
            poster.stop.set()
            poster.join(60)
    assert done == ["done", str(len(old))]
    # Every post was answered, applied, and its receipt is there; only the old went.
    assert poster.answers and all(a[2:] == (200, "applied") for a in poster.answers)
    posted = [event_id for _, event_id, _, _ in poster.answers]
    assert _ids(target) == sorted(posted)
    assert _purged(target) == len(old)
    # The sink answered all through the purge, not only once it ended: answers in its first
    # half (a purge in one transaction holds SQLite's one writer for all of it).
    during = [at for at, *_ in poster.answers if began <= at <= ended]
    first_half = [at for at in during if at <= began + (ended - began) / 2]
    assert len(during) >= 20 and len(first_half) >= 5, (len(during), len(first_half))
