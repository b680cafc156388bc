"""Outbox operations on every backend: quarantine, requeue (and its reorder record), stats,
purge. Which indexes SQLite reads them through is in tests/test_sqlite_outbox.py."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ackledger import Outbox

from .conftest import Target


def _event(event_id: str, sku: str = "pen", qty: int = 1) -> dict[str, Any]:
    return {"id": event_id, "sku": sku, "qty": qty}


@pytest.fixture
def outbox(target: Target) -> Iterator[Outbox]:
    with Outbox(target.ref) as ob:
        for name in ("a", "b", "c", "d"):
            ob.accept(_event(name))
        yield ob


def _ids(ob: Outbox) -> list[str]:
    return [item["id"] for item in ob.pending()]


def _log_count(target: Target) -> int:
    value: Any = target.rows("SELECT COUNT(*) FROM ackledger_outbox_log")[0][0]
    return int(value)


def test_quarantine_takes_a_pending_event_out_of_pending_and_never_counts_it_sent(
    outbox: Outbox, target: Target
) -> None:
    assert outbox.quarantine("b", "HTTP 422 at the sink") == 2
    assert _ids(outbox) == ["a", "c", "d"]
    stats = outbox.stats()
    assert (stats["pending"], stats["quarantined"], stats["sent"]) == (3, 1, 0)
    [listed] = outbox.quarantined()
    assert (listed["id"], listed["seq"], listed["reason"]) == ("b", 2, "HTTP 422 at the sink")
    assert target.rows("SELECT sent, quarantined FROM ackledger_outbox WHERE id = 'b'") == [(0, 1)]
    [entry] = outbox.history("b")
    assert (entry["kind"], entry["detail"]) == ("quarantined", {"reason": "HTTP 422 at the sink"})


def test_quarantine_refuses_unknown_sent_and_already_quarantined_events_writing_nothing(
    outbox: Outbox, target: Target
) -> None:
    outbox.mark_sent("a")
    outbox.quarantine("b", "first")
    before = target.rows("SELECT * FROM ackledger_outbox ORDER BY seq")
    with pytest.raises(KeyError):
        outbox.quarantine("nope", "x")
    with pytest.raises(ValueError, match="'a' is sent, not pending"):
        outbox.quarantine("a", "x")
    with pytest.raises(ValueError, match="'b' is quarantined, not pending"):
        outbox.quarantine("b", "again")
    with pytest.raises(ValueError, match=r"^reason:"):
        outbox.quarantine("c", "   ")
    with pytest.raises(ValueError, match="event_id"):
        outbox.quarantine("bad\nid", "x")
    assert target.rows("SELECT * FROM ackledger_outbox ORDER BY seq") == before
    assert _log_count(target) == 1


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


def test_requeue_refuses_what_is_not_quarantined(outbox: Outbox, target: Target) -> None:
    outbox.mark_sent("a")
    with pytest.raises(KeyError):
        outbox.requeue("nope")
    with pytest.raises(ValueError, match="'a' is sent, not quarantined"):
        outbox.requeue("a")
    with pytest.raises(ValueError, match="'b' is pending, not quarantined"):
        outbox.requeue("b")
    assert _log_count(target) == 0


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
    outbox: Outbox, target: Target
) -> None:
    outbox.mark_sent("a", attempted=True)
    outbox.record_failure("b", "boom")
    outbox.mark_sent("b", attempted=True)
    outbox.quarantine("c", "poison")
    old = time.time() - 10 * 86400
    # a is sent long ago; c and d were created long ago but never sent.
    target.execute("UPDATE ackledger_outbox SET sent_at = ? WHERE id = 'a'", (old,))
    target.execute("UPDATE ackledger_outbox SET created_at = ? WHERE id IN ('c', 'd')", (old,))
    for bad in (-1, math.nan, math.inf, True, "7d"):
        with pytest.raises(ValueError, match="older_than_seconds"):
            outbox.purge(bad)  # type: ignore[arg-type]
        assert outbox.stats()["purged"] == 0
    assert outbox.purge(7 * 86400) == 1
    assert [r[0] for r in target.rows("SELECT id FROM ackledger_outbox ORDER BY seq")] == [
        "b", "c", "d",
    ]  # fmt: skip
    assert outbox.purge(0) == 1
    assert [r[0] for r in target.rows("SELECT id FROM ackledger_outbox ORDER BY seq")] == ["c", "d"]
    stats = outbox.stats()
    assert (stats["sent"], stats["attempts"], stats["purged"]) == (2, 3, 2)
    assert (stats["pending"], stats["quarantined"]) == (1, 1)
    assert _ids(outbox) == ["d"]
