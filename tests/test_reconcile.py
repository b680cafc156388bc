"""``ackledger reconcile``: the outbox and the sink compared, on SQLite, on PostgreSQL (also
mixed), and against a sink service; each class of disagreement made for real and found."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from ackledger import Inbox, Outbox, new_event
from ackledger.ops import reconcile as reconciling
from ackledger.ops.faultproxy import FaultProxy
from ackledger.ops.processes import Service, run_cli
from tests.opshelp import count, start_relay

SOURCE = "/shop/orders"


def ev(event_id: str, qty: int = 1, *, source: str = SOURCE) -> dict[str, Any]:
    return new_event(
        "warehouse.stock.added", {"sku": "tea", "qty": qty}, source=source, id=event_id
    )


def disagree(source: str, sink: str) -> None:
    """One event of each class, and two that agree:
    ok: sent + receipt; new: pending, no receipt (not yet sent: nothing to say);
    lost-ack: pending + receipt; held: quarantined + receipt; gone: sent, no receipt (alarm);
    other: receipt with other content (alarm); purged: a receipt of ours with no outbox row;
    foreign: a receipt of another producer (not this outbox's business); refused: sent, and
    refused for good by the sink's consumer (alarm, never counted as marked without receipt).
    """
    with Outbox(source, source=SOURCE) as outbox:
        for name in ("ok", "new", "lost-ack", "held", "gone", "other", "refused"):
            outbox.publish(ev(name))
        outbox.mark_sent("ok")
        outbox.mark_sent("gone")
        outbox.mark_sent("refused")
        outbox.quarantine("held", "operator")
    refuse(sink, "refused")
    with Inbox(sink) as inbox:
        for name in ("ok", "lost-ack", "held"):
            inbox.receive(ev(name))
        inbox.receive(ev("other", qty=5))
        inbox.receive(ev("purged"))
        inbox.receive(ev("foreign", source="/someone/else"))


def refuse(sink: str, event_id: str) -> None:
    """What a consumer keeps of an event it refused for good (``consume`` records it so)."""
    with Inbox(sink) as inbox, inbox.backend.write() as tx:
        message = json.dumps(ev(event_id)).encode()
        tx.refused_record(event_id, SOURCE, "Rejected: never", message=message,
                          content_type=None, now=time.time())  # fmt: skip


def classes(report: dict[str, Any]) -> dict[str, tuple[int | None, list[str]]]:
    return {name: (found["count"], found["ids"]) for name, found in report["classes"].items()}


EXPECTED = {
    "applied_not_marked": (1, ["lost-ack"]),
    "applied_quarantined": (1, ["held"]),
    "marked_without_receipt": (1, ["gone"]),
    "refused_at_sink": (1, ["refused"]),
    "other_content": (1, ["other"]),
    "unknown_to_outbox": (1, ["purged"]),
}


def test_every_class_is_found_on_sqlite_and_the_command_exits_1(tmp_path: Path) -> None:
    source, sink = tmp_path / "source.db", tmp_path / "sink.db"
    disagree(str(source), str(sink))
    done = run_cli("reconcile", "--source", str(source), "--sink", str(sink), "--json")
    assert done.returncode == 1, done.stderr  # three alarms
    report = json.loads(done.stdout)
    assert classes(report) == EXPECTED
    assert report["alarms"] == 3
    assert report["checked"] == {"outbox_rows": 7, "receipts": 5}  # the foreign one skipped
    text = run_cli("reconcile", "--source", str(source), "--sink", str(sink))
    assert text.returncode == 1
    assert "ALARM marked_without_receipt: 1" in text.stdout and "verdict: 3 alarm(s)" in text.stdout
    assert "ALARM refused_at_sink: 1" in text.stdout
    assert "ALARM applied_not_marked" not in text.stdout  # harmless


def test_a_consistent_pair_exits_0_and_reads_in_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, sink = tmp_path / "source.db", tmp_path / "sink.db"
    with Outbox(source, source=SOURCE) as outbox, Inbox(sink) as inbox:
        for number in range(11):
            outbox.publish(ev(f"e-{number:02d}"))
            inbox.receive(ev(f"e-{number:02d}"))
            outbox.mark_sent(f"e-{number:02d}")
    monkeypatch.setattr(reconciling, "CHUNK", 3)  # 11 rows: four chunks on each side
    report = reconciling.reconcile(str(source), str(sink), max_ids=2)
    assert report["alarms"] == 0 and report["checked"] == {"outbox_rows": 11, "receipts": 11}
    assert all(count == 0 for count, _ in classes(report).values())
    done = run_cli("reconcile", "--source", str(source), "--sink", str(sink))
    assert done.returncode == 0 and "verdict: consistent" in done.stdout


def test_reconcile_and_trace_read_the_inbox_name_they_are_given(tmp_path: Path) -> None:
    """Receipts of the inbox named billing alone: the default inbox of the same database
    has none, so only ``--inbox-name billing`` finds the sent events applied."""
    source, sink = tmp_path / "source.db", tmp_path / "sink.db"
    with Outbox(source, source=SOURCE) as outbox, Inbox(sink, name="billing") as billing:
        for number in range(3):
            outbox.publish(ev(f"b-{number}"))
            billing.receive(ev(f"b-{number}"))
            outbox.mark_sent(f"b-{number}")
    base = ("reconcile", "--source", str(source), "--sink", str(sink), "--json")
    default = run_cli(*base)
    assert default.returncode == 1, default.stderr
    assert classes(json.loads(default.stdout))["marked_without_receipt"][0] == 3
    named = run_cli(*base, "--inbox-name", "billing")
    assert named.returncode == 0, named.stdout + named.stderr
    assert json.loads(named.stdout)["checked"] == {"outbox_rows": 3, "receipts": 3}
    traced = [
        json.loads(run_cli("trace", "b-1", "--source", str(source), "--sink", str(sink),
                           "--json", *more).stdout)
        for more in ((), ("--inbox-name", "billing"))
    ]  # fmt: skip
    sink_seen = [
        next(stage["seen"] for stage in report["stages"] if stage["stage"] == "sink")
        for report in traced
    ]
    assert sink_seen == ["no", "yes"]
    bad = run_cli(*base, "--inbox-name", "")
    assert bad.returncode == 2 and "--inbox-name: must not be empty" in bad.stderr


def test_ids_shown_are_capped_and_the_rest_counted(tmp_path: Path) -> None:
    source, sink = tmp_path / "source.db", tmp_path / "sink.db"
    with Outbox(source, source=SOURCE) as outbox:
        for number in range(5):
            outbox.publish(ev(f"g-{number}"))
            outbox.mark_sent(f"g-{number}")
    Inbox(sink).close()
    done = run_cli("reconcile", "--source", str(source), "--sink", str(sink), "--max-ids", "2")
    assert done.returncode == 1
    assert "ids: g-0, g-1 (and 3 more)" in done.stdout
    # The option's earlier name still works, and is not offered in the help.
    done = run_cli("reconcile", "--source", str(source), "--sink", str(sink), "--show", "1")
    assert done.returncode == 1
    assert "ids: g-0 (and 4 more)" in done.stdout
    shown = run_cli("reconcile", "--help")
    assert "--max-ids" in shown.stdout and "--show" not in shown.stdout


@pytest.mark.postgres
def test_postgres_and_a_mixed_pair(tmp_path: Path, pg_url: str) -> None:
    # The outbox and the inbox in one PostgreSQL database.
    disagree(pg_url, pg_url)
    assert classes(reconciling.reconcile(pg_url, pg_url)) == EXPECTED
    # A PostgreSQL outbox against a SQLite inbox: each side in its own order, no merge.
    sink = tmp_path / "sink.db"
    refuse(str(sink), "refused")
    with Inbox(sink) as inbox:
        for name in ("ok", "lost-ack", "held", "gone", "purged"):
            inbox.receive(ev(name))
    mixed = classes(reconciling.reconcile(pg_url, str(sink)))
    assert mixed["marked_without_receipt"] == (0, [])
    assert mixed["refused_at_sink"] == (1, ["refused"])
    assert mixed["applied_not_marked"] == (1, ["lost-ack"])
    assert mixed["unknown_to_outbox"] == (1, ["purged"])


def test_against_a_sink_service_only_the_outbox_rows_are_checked(
    source_db: Path, sink_db: Path, sink_service: Service
) -> None:
    with Outbox(source_db, source=SOURCE) as outbox:
        for name in ("a", "b"):
            outbox.publish(ev(name))
        outbox.mark_sent("b")
    with Inbox(sink_db) as inbox:
        inbox.receive(ev("a"))
    done = run_cli(
        "reconcile", "--source", str(source_db), "--sink", sink_service.base_url, "--json"
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["receipts_checked"] is False
    found = classes(report)
    assert found["applied_not_marked"] == (1, ["a"])
    assert found["marked_without_receipt"] == (1, ["b"])
    assert found["unknown_to_outbox"][0] is None


@pytest.mark.parametrize(
    ("args", "word"),
    [
        (["--sink", "missing.db"], "missing.db"),
        (["--sink", "http://sink.invalid:1"], "sink.invalid"),
        (["--sink", "SINK", "--max-ids", "-1"], "--max-ids"),
        ([], "--sink"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path: Path, args: list[str], word: str) -> None:
    source, sink = tmp_path / "source.db", tmp_path / "sink.db"
    Outbox(source).close()
    Inbox(sink).close()
    args = [str(sink) if arg == "SINK" else arg for arg in args]
    done = run_cli("reconcile", "--source", str(source), *args)
    assert done.returncode == 2, done.stdout
    assert done.stderr.count("\n") == 1 and word in done.stderr
    assert "Traceback" not in done.stderr


def test_no_false_alarm_while_a_relay_is_running(
    tmp_path: Path,
    source_db: Path,
    sink_db: Path,
    sink_service: Service,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reconcile runs over and over while a real relay process drains the outbox into the
    sink: events move from pending to applied to marked under its feet, and no run may call
    one of them sent without a receipt. (Reading the sink before the outbox would: a row
    marked between the two reads looks sent with no receipt.)"""
    real_lookup = reconciling._inbox_lookup

    def slow_lookup(inbox: Inbox) -> reconciling.Lookup:
        lookup = real_lookup(inbox)

        def after_a_while(rows: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
            found = lookup(rows)
            # The relay goes on after the sink was read: anything reconcile read of the
            # outbox after this moment (a wrong order) would see marks the sink read missed.
            time.sleep(0.05)
            return found

        return after_a_while

    monkeypatch.setattr(reconciling, "_inbox_lookup", slow_lookup)
    with Outbox(source_db, source=SOURCE) as outbox:
        for n in range(150):
            outbox.publish(ev(f"run-{n}"))
    runs: list[tuple[int, int, dict[str, Any]]] = []
    # The proxy's delay per answer keeps the relay busy for seconds, so that many reconcile
    # runs overlap its marks.
    with FaultProxy(sink_service.port, delay_responses=0.002) as proxy:
        relay = start_relay(source_db, proxy.url, tmp_path / "relay.log")
        try:
            while True:
                before = count(source_db, "sent = 0")
                report = reconciling.reconcile(str(source_db), str(sink_db), max_ids=3)
                runs.append((before, count(source_db, "sent = 0"), report))
                if before == 0:
                    break
        finally:
            relay.stop()
    false_alarms = [report["classes"] for _, _, report in runs if report["alarms"]]
    assert false_alarms == []
    overlapped = [run for run in runs if run[0] > run[1] > 0]
    assert len(overlapped) >= 3, f"only {len(overlapped)} run(s) overlapped the relay's marks"
    last = runs[-1][2]["classes"]
    assert {name: found["count"] for name, found in last.items()} == dict.fromkeys(last, 0)
