"""The operating library that the CLI's verbs call, in-process: status, listings, schema state,
the trace table and the existing-database check."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ackledger import Inbox, Outbox, UnsafeTarget, new_event
from ackledger._core.timestamps import utc_timestamp
from ackledger.ops import status as status_module
from ackledger.ops.databases import existing_database
from ackledger.ops.listings import pending_table, quarantined_table
from ackledger.ops.status import Status, read_status, service_counters
from ackledger.ops.trace import trace, trace_text
from ackledger.store.schema import upgrade_schema


def test_utc_timestamp_is_iso_utc_and_a_question_mark_for_no_time() -> None:
    assert utc_timestamp(0) == "1970-01-01T00:00:00Z"
    assert utc_timestamp(1_800_000_000.9) == "2027-01-15T08:00:00Z"
    assert utc_timestamp(None) == "?"
    assert utc_timestamp("12") == "?"


def test_the_tables_of_pending_and_quarantined_events(source_db: Path) -> None:
    assert pending_table([]) == "nothing pending"
    assert quarantined_table([]) == "nothing quarantined"
    with Outbox(source_db, source="/shop") as ob:
        ob.accept({"id": "a", "sku": "pen", "qty": 2})
        ob.accept({"id": "b", "sku": "ink", "qty": 3})
        ob.publish(new_event("com.example.note", {"n": 1}, source="/notes", id="c"))
        ob.quarantine("a", "bad sku")
        pending, held = ob.pending(16), ob.quarantined()
    assert pending_table(pending).splitlines() == [
        f"{'seq':>8}  {'id':<32} {'type':<32} source",
        f"{2:>8}  {'b':<32} {'warehouse.stock.added':<32} /shop",
        f"{3:>8}  {'c':<32} {'com.example.note':<32} /notes",
    ]
    header, row = quarantined_table(held).splitlines()
    assert header == f"{'seq':>8}  {'id':<32} {'quarantined at':<20}  reason"
    assert row.startswith(f"{1:>8}  {'a':<32} ") and row.endswith("Z  bad sku")


def test_status_text_shows_the_figures_then_each_service() -> None:
    figures: dict[str, Any] = {
        "pending": 1, "oldest_pending_age_s": 2.25, "attempts": 3, "sent": 4,
        "quarantined": 0, "purged": 5, "last_error": None,
    }  # fmt: skip
    figures["ledger"] = {"url": "http://127.0.0.1:9", "error": "OSError: down"}
    figures["sink"] = {"url": "http://127.0.0.1:8", "applied": 7}
    lines = Status("src.db", figures).text().splitlines()
    assert lines == [
        "outbox  src.db",
        f"  {'pending':<20} 1",
        f"  {'oldest pending age':<20} 2.2 s",
        f"  {'attempts':<20} 3",
        f"  {'sent':<20} 4",
        f"  {'quarantined':<20} 0",
        f"  {'purged':<20} 5",
        f"  {'last error':<20} -",
        "sink    http://127.0.0.1:8",
        f"  {'applied':<20} 7",
        "ledger  http://127.0.0.1:9",
        f"  {'error':<20} OSError: down",
    ]


def test_service_counters_keep_the_services_own_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    samples = {"ackledger_sink_applied": 2.0, "ackledger_sink_lag": 0.5, "process_cpu": 1.0}
    monkeypatch.setattr(status_module, "scrape", lambda url, **_: samples)
    assert service_counters("sink", "http://127.0.0.1:8") == {
        "url": "http://127.0.0.1:8", "applied": 2, "lag": 0.5,
    }  # fmt: skip
    assert service_counters("ledger", "http://127.0.0.1:8") == {"url": "http://127.0.0.1:8"}


def test_read_status_refuses_a_bad_service_url_before_opening_the_outbox(tmp_path: Path) -> None:
    missing = tmp_path / "never.db"
    with pytest.raises(UnsafeTarget, match="base URL"):
        read_status(str(missing), ledger="http://127.0.0.1:1/events")  # a sink's route
    assert not missing.exists()


def test_existing_database_names_the_flag(tmp_path: Path) -> None:
    assert existing_database("postgresql://x/y", "db") == "postgresql://x/y"
    with pytest.raises(ValueError, match=r"^--sink: no database at"):
        existing_database(str(tmp_path / "typo.db"), "sink")
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (a)").connection.close()
    with pytest.raises(ValueError, match=r"^--db: .*without ackledger's schema"):
        existing_database(str(other), "db")


def test_upgrade_schema_names_migrations_this_version_does_not_know(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    first = upgrade_schema(str(db))
    assert first.applied == len(first.migrations) and first.unknown == []
    # Versions may skip a number (a branch's migration merged before another's).
    assert first.version == int(first.migrations[-1].split("_", 1)[0])
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "INSERT INTO ackledger_schema_migrations SELECT 999, '0999_future', applied_at "
            "FROM ackledger_schema_migrations LIMIT 1"
        )
    conn.close()
    again = upgrade_schema(str(db))
    assert (again.applied, again.version, again.unknown) == (0, 999, ["0999_future"])
    assert list(again.figures()) == ["target", "dialect", "applied", "version", "migrations"]
    assert again.text().startswith(f"{db}: applied 0 migration(s); schema at version 999 (")


def test_trace_text_is_one_row_and_one_detail_line_a_stage(source_db: Path, sink_db: Path) -> None:
    with Outbox(source_db) as ob:
        ob.accept({"id": "a", "sku": "pen", "qty": 1})
    Inbox(sink_db).close()
    report = trace("a", str(source_db), str(sink_db))
    lines = trace_text(report).splitlines()
    assert lines[0] == "trace of a"
    assert lines[1] == f"{'stage':<9} {'seen':<9} {'state':<28} where"
    assert len(lines) == 2 + 2 * len(report["stages"]) + 1
    assert lines[2].startswith(f"{'accepted':<9} {'yes':<9} {'order row':<28} table orders in")
    assert lines[-1] == f"verdict: {report['verdict']}"
