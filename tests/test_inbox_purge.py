"""``ackledger inbox purge`` and the sink's retention metrics, end to end on a SQLite file (the
library's purge on both databases: tests/backends/test_inbox_purge.py)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from ackledger import Inbox, Outbox
from ackledger._dev.procs import Service, run_cli
from ackledger.ops.probe import scrape

from .events import lab

DAY = 86400.0


def _age(db: Path, seconds: float, event_id: str) -> None:
    conn = sqlite3.connect(db, isolation_level=None, timeout=30)
    try:
        conn.execute(
            "UPDATE inbox SET first_received_at = first_received_at - ? WHERE id = ?",
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
