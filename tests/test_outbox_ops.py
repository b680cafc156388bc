"""Outbox operations: quarantine, requeue (and its reorder record), stats, purge, indexes."""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ackledger import Outbox
from ackledger.store.base import Params, Row
from ackledger.store.sqlite import SqliteTx
from tests.conftest import raw_rows


def _event(event_id: str, sku: str = "pen", qty: int = 1) -> dict[str, Any]:
    return {"id": event_id, "sku": sku, "qty": qty}


@pytest.fixture
def outbox(source_db: Path) -> Outbox:
    ob = Outbox(source_db)
    for name in ("a", "b", "c", "d"):
        ob.accept(_event(name))
    return ob


def _ids(ob: Outbox) -> list[str]:
    return [item["id"] for item in ob.pending()]


def _log_count(path: Path) -> int:
    value: Any = raw_rows(path, "SELECT COUNT(*) FROM outbox_log")[0][0]
    return int(value)


def test_quarantine_takes_a_pending_event_out_of_pending_and_never_counts_it_sent(
    outbox: Outbox, source_db: Path
) -> None:
    assert outbox.quarantine("b", "HTTP 422 at the sink") == 2
    assert _ids(outbox) == ["a", "c", "d"]
    stats = outbox.stats()
    assert (stats["pending"], stats["quarantined"], stats["sent"]) == (3, 1, 0)
    [listed] = outbox.quarantined()
    assert (listed["id"], listed["seq"], listed["reason"]) == ("b", 2, "HTTP 422 at the sink")
    assert raw_rows(source_db, "SELECT sent, quarantined FROM outbox WHERE id = 'b'") == [(0, 1)]
    [entry] = outbox.history("b")
    assert (entry["kind"], entry["detail"]) == ("quarantined", {"reason": "HTTP 422 at the sink"})


def test_quarantine_refuses_unknown_sent_and_already_quarantined_events_writing_nothing(
    outbox: Outbox, source_db: Path
) -> None:
    outbox.mark_sent("a")
    outbox.quarantine("b", "first")
    before = raw_rows(source_db, "SELECT * FROM outbox ORDER BY seq")
    with pytest.raises(KeyError):
        outbox.quarantine("nope", "x")
    with pytest.raises(ValueError, match="'a' is sent, not pending"):
        outbox.quarantine("a", "x")
    with pytest.raises(ValueError, match="'b' is quarantined, not pending"):
        outbox.quarantine("b", "again")
    with pytest.raises(ValueError, match=r"^reason:"):
        outbox.quarantine("c", "   ")
    with pytest.raises(ValueError, match="event_id"):
        outbox.quarantine("bad id", "x")
    assert raw_rows(source_db, "SELECT * FROM outbox ORDER BY seq") == before
    assert _log_count(source_db) == 1


def test_requeue_puts_it_back_at_its_seq_and_records_who_overtook_it(outbox: Outbox) -> None:
    outbox.mark_sent("a")  # delivered before the quarantine: not an overtaker
    outbox.quarantine("b", "poison")
    outbox.mark_sent_many(["c", "d"])
    outbox.accept(_event("e"))
    record = outbox.requeue("b")
    assert record["seq"] == 2
    assert record["overtaken_by"] == ["c", "d"]
    assert record["overtaken_count"] == 2
    assert _ids(outbox) == ["b", "e"]  # back ahead of later pending events, by seq
    kinds = [entry["kind"] for entry in outbox.history("b")]
    assert kinds == ["quarantined", "requeued"]
    assert outbox.history("b")[1]["detail"]["overtaken_by"] == ["c", "d"]
    assert outbox.stats()["quarantined"] == 0


def test_a_second_quarantine_records_only_what_overtook_it_the_second_time(
    outbox: Outbox,
) -> None:
    outbox.quarantine("a", "one")
    outbox.mark_sent("b")
    assert outbox.requeue("a")["overtaken_by"] == ["b"]
    time.sleep(0.01)  # sent_at of b must be before the second quarantine
    outbox.quarantine("a", "two")
    outbox.mark_sent("c")
    assert outbox.requeue("a")["overtaken_by"] == ["c"]


def test_requeue_refuses_what_is_not_quarantined(outbox: Outbox, source_db: Path) -> None:
    outbox.mark_sent("a")
    with pytest.raises(KeyError):
        outbox.requeue("nope")
    with pytest.raises(ValueError, match="'a' is sent, not quarantined"):
        outbox.requeue("a")
    with pytest.raises(ValueError, match="'b' is pending, not quarantined"):
        outbox.requeue("b")
    assert _log_count(source_db) == 0


def test_stats_count_attempts_sent_quarantined_and_the_latest_unsent_error(
    outbox: Outbox,
) -> None:
    outbox.record_failure("a", "ConnectionRefusedError")
    outbox.mark_sent("a", attempted=True)
    outbox.record_failure("b", "HTTP 503")
    outbox.record_failure("c", "HTTP 422")
    outbox.quarantine("c", "poison")
    time.sleep(0.01)
    outbox.record_failure("d", "TimeoutError")
    stats = outbox.stats()
    assert stats["pending"] == 2  # b, d
    assert stats["sent"] == 1
    assert stats["quarantined"] == 1
    assert stats["attempts"] == 5
    assert stats["last_error"]["id"] == "d"
    assert stats["last_error"]["error"] == "TimeoutError"
    created = outbox.event("b")["created_at"]  # type: ignore[index]
    assert 0 <= stats["oldest_pending_age_s"] <= time.time() - created


def test_purge_deletes_only_sent_rows_older_than_the_cutoff_and_keeps_the_totals(
    outbox: Outbox, source_db: Path
) -> None:
    outbox.mark_sent("a", attempted=True)
    outbox.record_failure("b", "boom")
    outbox.mark_sent("b", attempted=True)
    outbox.quarantine("c", "poison")
    old = time.time() - 10 * 86400
    conn = sqlite3.connect(source_db)
    with conn:  # a is sent long ago; c and d were created long ago but never sent
        conn.execute("UPDATE outbox SET sent_at = ? WHERE id = 'a'", (old,))
        conn.execute("UPDATE outbox SET created_at = ? WHERE id IN ('c', 'd')", (old,))
    conn.close()
    assert outbox.purge(7 * 86400) == 1
    assert [r[0] for r in raw_rows(source_db, "SELECT id FROM outbox ORDER BY seq")] == [
        "b", "c", "d",
    ]  # fmt: skip
    assert outbox.purge(0) == 1
    assert [r[0] for r in raw_rows(source_db, "SELECT id FROM outbox ORDER BY seq")] == ["c", "d"]
    stats = outbox.stats()
    assert (stats["sent"], stats["attempts"], stats["purged"]) == (2, 3, 2)
    assert (stats["pending"], stats["quarantined"]) == (1, 1)
    assert _ids(outbox) == ["d"]


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, True, "7d"])
def test_purge_refuses_bad_ages(outbox: Outbox, bad: object) -> None:
    outbox.mark_sent("a")
    with pytest.raises(ValueError, match="older_than_seconds"):
        outbox.purge(bad)  # type: ignore[arg-type]
    assert outbox.stats()["purged"] == 0


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
                tx.enqueue(_event(f"old-{n}"))
        ob.mark_sent_many([f"old-{n}" for n in range(5000)])
        ob.accept(_event("new-1"))
        ob.accept(_event("new-2"))
        assert _ids(ob) == ["new-1", "new-2"]
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
