"""``ackledger publish``, ``pending --json`` and ``trace`` on generic CloudEvents (CONTRACT v2
section 8): real processes on real SQLite files."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ackledger import Inbox, Outbox, new_event
from ackledger.ops.processes import run_cli
from ackledger.sink.handler_tx import HandlerTransaction
from tests.conftest import raw_rows
from tests.test_cli import assert_one_line_error

pytestmark = pytest.mark.slow

NOTE = "com.example.note.kept"


def publish(source: Path, event: object, *extra: str) -> Any:
    return run_cli("publish", "--source", str(source), *extra, stdin=json.dumps(event))


def published_seq(source: Path, event: object, *extra: str) -> int:
    result = publish(source, event, *extra)
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith("\n") and len(result.stdout.splitlines()) == 1
    return int(result.stdout)


def pending_json(source: Path) -> list[dict[str, Any]]:
    result = run_cli("pending", "--source", str(source), "--json")
    assert result.returncode == 0, result.stderr
    items: list[dict[str, Any]] = json.loads(result.stdout)
    return items


def test_publish_prints_the_seq_and_pending_lists_the_cloudevents(source_db: Path) -> None:
    first = {"id": "n-1", "type": NOTE, "data": {"text": "hi", "tags": ["a", 1]}}
    second = {"specversion": "1.0", "id": "n-2", "source": "/elsewhere", "type": NOTE}
    assert published_seq(source_db, first, "--event-source", "/notes") == 1
    assert published_seq(source_db, second) == 2
    # The same event again is the same event: its seq, nothing written.
    assert published_seq(source_db, first) == 1
    assert pending_json(source_db) == [
        # specversion and the outbox's own source filled in; data kept as given.
        {"specversion": "1.0", "source": "/notes", **first, "seq": 1},
        {**second, "seq": 2},
    ]
    assert raw_rows(
        source_db, "SELECT seq, source, id, type, sent FROM ackledger_outbox ORDER BY seq"
    ) == [
        (1, "/notes", "n-1", NOTE, 0),
        (2, "/elsewhere", "n-2", NOTE, 0),
    ]
    table = run_cli("pending", "--source", str(source_db)).stdout.splitlines()
    assert [line.split() for line in table[1:]] == [
        ["1", "n-1", NOTE, "/notes"],
        ["2", "n-2", NOTE, "/elsewhere"],
    ]
    limited = run_cli("pending", "--source", str(source_db), "--json", "--limit", "1")
    assert [item["id"] for item in json.loads(limited.stdout)] == ["n-1"]


@pytest.mark.parametrize(
    ("stdin", "word"),
    [
        ("{not json", "stdin"),
        ("[1, 2]", "event"),
        (json.dumps({"id": "n-1"}), "type"),
        (json.dumps({"id": "n\u0001", "type": NOTE}), "id"),
        (json.dumps({"specversion": "0.3", "id": "n", "type": NOTE}), "specversion"),
        (json.dumps({"id": "n", "type": NOTE, "datacontenttype": "text"}), "datacontenttype"),
        (json.dumps({"id": "n", "type": NOTE, "Bad": 1}), "Bad"),
        # The reference type's schema is checked on the way in.
        (
            json.dumps(
                {"id": "w", "type": "warehouse.stock.added", "data": {"sku": "s", "qty": 0}}
            ),
            "data.qty",
        ),
        # v1's flat order is not an event.
        (json.dumps({"id": "snack-7", "sku": "snack", "qty": 7}), "type"),
    ],
)
def test_a_bad_event_is_one_line_exit_2_and_creates_no_file(
    tmp_path: Path, stdin: str, word: str
) -> None:
    missing = tmp_path / "never.db"
    result = run_cli("publish", "--source", str(missing), stdin=stdin)
    assert_one_line_error(result, word)
    assert not missing.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_conflict_or_another_source_is_refused_and_writes_nothing(source_db: Path) -> None:
    event = {"id": "n-1", "type": NOTE, "data": {"text": "hi"}}
    assert published_seq(source_db, event, "--event-source", "/notes") == 1
    before = raw_rows(source_db, "SELECT * FROM ackledger_outbox ORDER BY seq")
    assert_one_line_error(publish(source_db, {**event, "data": {"text": "ho"}}), "n-1")
    assert_one_line_error(publish(source_db, event, "--event-source", "/other"), "/notes")
    assert raw_rows(source_db, "SELECT * FROM ackledger_outbox ORDER BY seq") == before


def _keep_note(tx: HandlerTransaction, event: dict[str, Any]) -> None:
    tx.execute("INSERT INTO notes (id) VALUES (?)", (event["id"],))


def _notes_sink(path: Path) -> None:
    """A sink database with the user's own table for the handler's effect."""
    Inbox(path).close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE notes (id TEXT PRIMARY KEY)")
    conn.close()


def _trace(event_id: str, source: Path, sink: Path) -> dict[str, Any]:
    result = run_cli(
        "trace", event_id, "--source", str(source), "--sink", str(sink), "--json"
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _stages(report: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {stage["stage"]: stage for stage in report["stages"]}


def test_trace_of_a_published_generic_event(source_db: Path, sink_db: Path) -> None:
    assert published_seq(source_db, {"id": "n-1", "type": NOTE}, "--event-source", "/notes") == 1
    _notes_sink(sink_db)

    # Pending, not at the sink; not a lab order: its first evidence is the outbox row, and the
    # trace says so rather than "no order row".
    report = _trace("n-1", source_db, sink_db)
    stages = _stages(report)
    accepted = stages["accepted"]
    assert accepted["seen"] == "yes" and accepted["state"] == "published", accepted
    assert NOTE in accepted["detail"] and "seq=1" in accepted["detail"]
    assert stages["outbox"]["state"] == "pending" and "seq=1" in stages["outbox"]["detail"]
    assert stages["sink"]["seen"] == "no"
    assert stages["sent"]["seen"] == "no"

    # Applied at the sink (by the user's handler), not yet marked: the ACK may have been lost.
    (event,) = [{k: v for k, v in item.items() if k != "seq"} for item in pending_json(source_db)]
    with Inbox(sink_db, handlers={NOTE: _keep_note}) as inbox:
        assert inbox.receive(event) == "applied"
    assert raw_rows(sink_db, "SELECT id FROM notes") == [("n-1",)]
    report = _trace("n-1", source_db, sink_db)
    stages = _stages(report)
    assert stages["sink"]["seen"] == "yes" and "received 1 time(s)" in stages["sink"]["detail"]
    assert "CONFLICT" not in stages["sink"]["detail"]  # the same content at both ends
    assert stages["ack"]["seen"] == "unknown"
    assert "not marked" in report["verdict"]

    # Marked: delivered.
    with Outbox(source_db) as ob:
        ob.mark_sent("n-1")
    report = _trace("n-1", source_db, sink_db)
    assert _stages(report)["sent"]["seen"] == "yes"
    assert report["verdict"] == "delivered and marked sent"

    # A receipt of another source with the same id is not this event's.
    other = new_event(NOTE, source="/elsewhere", id="n-2")
    assert published_seq(source_db, {"id": "n-2", "type": NOTE}) == 2
    with Inbox(sink_db, handlers={NOTE: _keep_note}) as inbox:
        inbox.receive(other)
    assert _stages(_trace("n-2", source_db, sink_db))["sink"]["seen"] == "no"
