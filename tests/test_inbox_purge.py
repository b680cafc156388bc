"""``ackledger inbox purge`` and the sink's retention metrics, end to end on a SQLite file (the
library's purge on both databases: tests/backends/test_inbox_purge.py)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from ackledger import Inbox, Outbox
from ackledger.ops.probe import scrape
from ackledger.ops.processes import Service, run_cli

from .conftest import raw_rows
from .events import lab

DAY = 86400.0


def _age(db: Path, seconds: float, event_id: str) -> None:
    conn = sqlite3.connect(db, isolation_level=None, timeout=30)
    try:
        conn.execute(
            "UPDATE ackledger_inbox SET first_received_at = first_received_at - ? WHERE id = ?",
            (seconds, event_id),
        )
    finally:
        conn.close()


def test_purge_never_creates_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    done = run_cli("inbox", "purge", "--db", str(missing), "--older-than", "1d")
    assert done.returncode == 2 and "--db" in done.stderr
    assert done.stderr.count("\n") == 1
    assert not missing.exists()


def test_a_running_sink_shows_purges_by_another_process(
    sink_db: Path, sink_service: Service
) -> None:
    with Inbox(sink_db) as inbox:
        for event_id in ("a", "b", "c"):
            inbox.receive(lab(event_id, "pen", 1))
    _age(sink_db, 40 * DAY, "a")
    _age(sink_db, 20 * DAY, "b")
    before = scrape(sink_service.base_url + "/metrics")
    assert before["ackledger_sink_purged"] == 0
    assert before["ackledger_sink_oldest_receipt_age_seconds"] >= 40 * DAY
    done = run_cli("inbox", "purge", "--sink", str(sink_db), "--older-than", "30d")
    assert done.returncode == 0, done.stderr
    after = scrape(sink_service.base_url + "/metrics")
    assert after["ackledger_sink_purged"] == 1
    assert 20 * DAY <= after["ackledger_sink_oldest_receipt_age_seconds"] < 21 * DAY
    # The outcome counters did not fall with the receipts.
    assert after["ackledger_sink_applied"] == before["ackledger_sink_applied"] == 3
    # `status --sink` shows both (what an operator watches).
    source = sink_db.parent / "source.db"
    Outbox(source).close()
    done = run_cli("status", "--source", str(source), "--sink", sink_service.base_url, "--json")
    assert done.returncode == 0, done.stderr
    sink = json.loads(done.stdout)["sink"]
    assert sink["purged"] == 1
    assert sink["oldest_receipt_age_seconds"] >= 20 * DAY


def test_a_purge_deletes_at_most_a_window_a_transaction_and_joins_sparse_windows(
    tmp_path: Path,
) -> None:
    """SQLite's own trace of the purge's writes: a write transaction never deletes more than a
    window's worth, and windows with few old receipts are deleted from together (at most ten
    windows a transaction), not one commit per window."""
    db = tmp_path / "sink.db"
    ids = [f"p{n:03d}" for n in range(200)]
    old = ids[:30] + ids[40:200:20]  # three full windows of 10, then one in 20
    with Inbox(db) as inbox:
        for start in range(0, len(ids), 50):
            inbox.receive_batch([lab(event_id, "pen", 1) for event_id in ids[start : start + 50]])
    for event_id in old:
        _age(db, 40 * DAY, event_id)
    with Inbox(db) as inbox:
        seen: list[str] = []
        conn = inbox._db._conn  # type: ignore[attr-defined]
        assert isinstance(conn, sqlite3.Connection)
        conn.set_trace_callback(seen.append)
        assert inbox.purge(30 * DAY, chunk=10) == len(old)
        conn.set_trace_callback(None)
        deletes = [statement for statement in seen if statement.startswith("DELETE")]
        # Each deleting transaction bumps the purged counter once, by what it deleted.
        bumps = [
            int(statement.split("VALUES ('sink.purged', ")[1].split(")")[0])
            for statement in seen
            if "'sink.purged'" in statement and statement.startswith("INSERT")
        ]
        assert bumps == [10, 10, 10, 5, 3]
        assert len(deletes) == len(bumps)
        assert sorted(
            str(row[0]) for row in raw_rows(db, "SELECT id FROM ackledger_inbox")
        ) == sorted(set(ids) - set(old))
