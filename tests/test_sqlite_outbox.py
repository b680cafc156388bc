"""What only a SQLite outbox has: WAL files, pragmas, page sizes, file paths, query plans.

The contract itself runs on every backend in tests/backends/test_outbox.py.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest

from ackledger import Outbox
from ackledger.store.base import Params, Row
from ackledger.store.sqlite import PAGE_SIZE, SqliteTx
from tests.conftest import raw_connect, raw_rows
from tests.events import lab


def ev(event_id: str, sku: str = "snack", qty: int = 1) -> dict[str, object]:
    return {"id": event_id, "sku": sku, "qty": qty}


def test_pending_writes_nothing_and_leaves_no_transaction(source_db: Path) -> None:
    with Outbox(source_db) as outbox:
        outbox.accept(ev("o-1"))
        watcher = raw_connect(source_db)
        before = watcher.execute("PRAGMA data_version").fetchone()
        size_before = os.path.getsize(str(source_db) + "-wal")
        assert outbox.pending() and outbox.pending(1)
        # Another connection can take the write lock at once: no read lock upgraded, no tx open.
        other = sqlite3.connect(source_db, isolation_level=None, timeout=0)
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        other.close()
        assert not outbox.backend.in_transaction()  # type: ignore[attr-defined]
        assert watcher.execute("PRAGMA data_version").fetchone() == before
        assert os.path.getsize(str(source_db) + "-wal") == size_before
        watcher.close()


def test_storage_settings(source_db: Path) -> None:
    with Outbox(source_db) as outbox:
        assert outbox.backend.synchronous == "FULL"  # type: ignore[attr-defined]
    with Outbox(source_db, synchronous="NORMAL") as outbox:
        assert outbox.backend.synchronous == "NORMAL"  # type: ignore[attr-defined]
    assert raw_rows(source_db, "PRAGMA journal_mode") == [("wal",)]
    with pytest.raises(ValueError, match="synchronous"):
        Outbox(source_db, synchronous="OFF")


def test_new_databases_get_small_pages_and_old_ones_keep_theirs(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.db"
    with Outbox(fresh) as outbox:
        outbox.accept(ev("p-1"))
    assert raw_rows(fresh, "PRAGMA page_size") == [(PAGE_SIZE,)]
    # A database made elsewhere (here: SQLite's default page size, then WAL) keeps its pages,
    # and everything still works in it.
    made = tmp_path / "made.db"
    conn = sqlite3.connect(made)
    conn.execute("PRAGMA page_size = 4096")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE mine (x)")
    conn.close()
    with Outbox(made) as outbox:
        outbox.accept(ev("p-2"))
        assert [p["id"] for p in outbox.pending()] == ["p-2"]
    assert raw_rows(made, "PRAGMA page_size") == [(4096,)]


def test_pending_reads_only_the_partial_index(source_db: Path) -> None:
    with Outbox(source_db):
        pass
    plan = raw_rows(
        source_db,
        "EXPLAIN QUERY PLAN SELECT seq, event FROM ackledger_outbox "
        "WHERE sent = 0 AND quarantined = 0 ORDER BY seq LIMIT 16",
    )
    details = " ".join(str(row[-1]) for row in plan)
    assert "outbox_pending" in details
    assert "TEMP B-TREE" not in details


def test_bad_targets(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        Outbox(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="directory"):
        Outbox(tmp_path)
    with pytest.raises(ValueError, match="does not exist"):
        Outbox(tmp_path / "missing" / "x.db")
    with pytest.raises(ValueError, match="scheme"):
        Outbox("mysql://localhost/x")


class _Recording(SqliteTx):
    """Runs statements on a real connection and remembers them, to ask SQLite for their plan."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(conn)
        self.seen: list[tuple[str, Params]] = []

    def execute(self, sql: str, params: Params = ()) -> list[Row]:
        self.seen.append((sql, params))
        return super().execute(sql, params)

    def executemany(self, sql: str, params: Sequence[Params]) -> None:
        raise NotImplementedError


def test_pending_and_its_summary_read_through_the_partial_index_as_the_table_grows(
    source_db: Path,
) -> None:
    with Outbox(source_db) as ob:
        with ob.transaction() as tx:
            for n in range(5000):
                tx.enqueue(lab(f"old-{n}", "pen", 1))
        ob.mark_sent_many([f"old-{n}" for n in range(5000)])
        ob.accept(ev("new-1", "pen"))
        ob.accept(ev("new-2", "pen"))
        assert [item["id"] for item in ob.pending()] == ["new-1", "new-2"]
        assert ob.stats()["pending"] == 2
    conn = sqlite3.connect(source_db)
    conn.execute("ANALYZE")
    recording = _Recording(conn)
    recording.outbox_pending(16)
    recording.outbox_pending_summary()
    recording.outbox_quarantined()
    indexes = []
    for sql, params in recording.seen:
        plan = " ".join(str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
        assert "USING" in plan and "INDEX" in plan, plan  # never a bare table scan
        indexes.append(plan)
    assert all("outbox_pending" in plan for plan in indexes[:3])
    assert "outbox_quarantined" in indexes[3]
    conn.close()
