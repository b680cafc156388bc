"""Operating commands from the CLI on real databases and a real sink process:
status, trace, quarantine, requeue, quarantined, purge."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from ackledger import Inbox, Outbox
from ackledger.envelope.content import content_fingerprint
from ackledger.ops.processes import Service, run_cli
from tests.conftest import raw_rows
from tests.events import SOURCE, of
from tests.opshelp import free_port, ids
from tests.test_cli import assert_one_line_error

pytestmark = pytest.mark.slow


def _ev(event_id: str, sku: str = "pen", qty: int = 1) -> dict[str, Any]:
    return {"id": event_id, "sku": sku, "qty": qty}


def _cli_json(*args: str, code: int = 0) -> Any:
    result = run_cli(*args)
    assert result.returncode == code, result.stderr
    return json.loads(result.stdout)


def _dump(path: Path) -> list[Any]:
    return [
        raw_rows(path, "SELECT * FROM ackledger_outbox ORDER BY seq"),
        raw_rows(path, "SELECT * FROM ackledger_outbox_log ORDER BY seq"),
    ]


def _age_sent(path: Path, seconds: float) -> None:
    """Make every sent row look ``seconds`` older (a test cannot wait days)."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE ackledger_outbox SET sent_at = sent_at - ? WHERE sent = 1", (seconds,))
    conn.close()


# --- status --------------------------------------------------------------------------------


def test_status_numbers_match_a_database_whose_contents_are_known(source_db: Path) -> None:
    with Outbox(source_db) as ob:
        for name in ("e1", "e2", "e3", "e4", "e5"):
            ob.accept(_ev(name))
        ob.record_failure("e1", "ConnectionRefusedError: down")
        ob.record_failure("e1", "ConnectionRefusedError: down")
        ob.mark_sent("e1", attempted=True)  # 3 attempts, sent
        ob.mark_sent("e2", attempted=True)  # 1 attempt, sent
        ob.record_failure("e3", "HTTP 422")
        ob.quarantine("e3", "poison")  # 1 attempt, quarantined
        time.sleep(0.01)
        ob.record_failure("e4", "HTTP 503 instead of 200")  # 1 attempt, pending
        created_e4 = ob.event("e4")["created_at"]  # type: ignore[index]
    before = time.time()
    report = _cli_json("status", "--source", str(source_db), "--json")
    after = time.time()
    assert report["pending"] == 2  # e4, e5
    assert report["sent"] == 2
    assert report["quarantined"] == 1
    assert report["attempts"] == 6
    assert report["last_error"]["id"] == "e4"
    assert report["last_error"]["error"] == "HTTP 503 instead of 200"
    assert before - created_e4 <= report["oldest_pending_age_s"] <= after - created_e4
    table = run_cli("status", "--source", str(source_db)).stdout
    rows = {line[:22].strip(): line[22:].strip() for line in table.splitlines()[1:8]}
    assert rows["pending"] == "2" and rows["quarantined"] == "1" and rows["attempts"] == "6"
    assert "e4" in rows["last error"]


def test_status_reads_the_sink_counters_from_its_metrics(
    source_db: Path, sink_service: Service, sink_db: Path
) -> None:
    with Outbox(source_db, source=SOURCE) as ob:
        ob.accept(_ev("a"))
        ob.accept(_ev("b"))
    url = sink_service.base_url
    assert run_cli("dispatch", "--source", str(source_db), "--to", url + "/events").returncode == 0
    with Inbox(sink_db) as inbox:  # one duplicate, one conflict, straight into the inbox
        inbox.receive(of(_ev("a")))
        with pytest.raises(Exception, match="other content"):
            inbox.receive(of(_ev("b", qty=5)))
    report = _cli_json("status", "--source", str(source_db), "--sink", url, "--json")
    assert report["sink"]["applied"] == 2
    assert report["sink"]["duplicates"] == 1
    assert report["sink"]["conflicts"] == 1
    table = run_cli("status", "--source", str(source_db), "--sink", url).stdout
    assert "applied" in table and url in table


def _sink_figures(sink: str) -> dict[str, Any]:
    with Inbox(sink) as inbox:
        inbox.receive(of(_ev("a")))
        inbox.receive(of(_ev("a")))  # a duplicate
        with pytest.raises(Exception, match="other content"):
            inbox.receive(of(_ev("a", qty=5)))
    return {"applied": 1, "duplicates": 1, "conflicts": 1, "purged": 0}


def _status_of_sink(source_db: Path, sink: str) -> None:
    Outbox(source_db).close()
    expected = _sink_figures(sink)
    report = _cli_json("status", "--source", str(source_db), "--sink", sink, "--json")
    figures = report["sink"]
    assert {name: figures[name] for name in expected} == expected
    assert figures["oldest_receipt_age_seconds"] >= 0 and "url" not in figures
    assert "secret" not in json.dumps(report)
    table = run_cli("status", "--source", str(source_db), "--sink", sink)
    assert table.returncode == 0, table.stderr
    assert "duplicates" in table.stdout and "oldest_receipt_age_seconds" in table.stdout


def test_status_reads_a_sinks_inbox_database_as_trace_does(source_db: Path, sink_db: Path) -> None:
    """The same targets as trace, reconcile and the console: the inbox database too."""
    _status_of_sink(source_db, str(sink_db))
    missing = run_cli("status", "--source", str(source_db), "--sink", str(sink_db) + ".gone")
    assert_one_line_error(missing, "--sink")


@pytest.mark.postgres
def test_status_reads_a_sinks_postgresql_inbox(source_db: Path, pg_url: str) -> None:
    _status_of_sink(source_db, pg_url)
    # A database that cannot be reached is shown as such, exit 4, as a service that cannot.
    dead = f"postgresql://postgres:secret@127.0.0.1:{free_port()}/nowhere"
    report = _cli_json("status", "--source", str(source_db), "--sink", dead, "--json", code=4)
    assert "error" in report["sink"] and "secret" not in json.dumps(report)


def test_status_says_when_a_service_cannot_be_read(source_db: Path) -> None:
    Outbox(source_db).close()
    dead = f"http://127.0.0.1:{free_port()}"
    # The figures are shown all the same; exit 4 says a service was unreachable.
    report = _cli_json("status", "--source", str(source_db), "--ledger", dead, "--json", code=4)
    assert report["pending"] == 0
    assert "error" in report["ledger"] and report["ledger"]["url"] == dead


@pytest.mark.parametrize(
    ("args", "word"),
    [
        (["--sink", "http://sink.invalid:80"], "sink.invalid"),
        (["--ledger", "http://127.0.0.1:1/events"], "base URL"),
        (["--sink", "https://127.0.0.1:1"], "http"),
    ],
)
def test_status_refuses_bad_service_urls(source_db: Path, args: list[str], word: str) -> None:
    Outbox(source_db).close()
    assert_one_line_error(run_cli("status", "--source", str(source_db), *args), word)


# --- trace ---------------------------------------------------------------------------------


def _stages(report: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {stage["stage"]: stage for stage in report["stages"]}


def _trace(event_id: str, source: Path, sink: str, code: int = 0) -> dict[str, Any]:
    """``trace --json``; ``code`` 1: the id is known nowhere, 4: the sink could not be read."""
    report: dict[str, Any] = _cli_json(
        "trace", event_id, "--source", str(source), "--sink", sink, "--json", code=code
    )
    return report


def test_trace_shows_the_evidence_at_each_stage(
    source_db: Path, sink_db: Path, sink_service: Service
) -> None:
    url = sink_service.base_url
    with Outbox(source_db) as ob:
        ob.accept(_ev("snack-7", "snack", 7))

    # Pending: accepted, in the outbox, not at the sink, no ACK possible, not marked.
    pending = _stages(_trace("snack-7", source_db, str(sink_db)))
    assert pending["accepted"]["seen"] == "yes" and "qty=7" in pending["accepted"]["detail"]
    assert pending["outbox"]["state"] == "pending" and "seq=1" in pending["outbox"]["detail"]
    assert pending["sink"]["seen"] == "no" and str(sink_db) in pending["sink"]["where"]
    assert pending["ack"]["seen"] == "no"
    assert pending["sent"]["seen"] == "no"

    # At the sink but not marked: the relay died between the ACK and the mark.
    crashed = run_cli(
        "dispatch", "--source", str(source_db), "--to", url + "/events", "--exit-after-ack", "73"
    )  # fmt: skip
    assert crashed.returncode == 73
    report = _trace("snack-7", source_db, url)
    half = _stages(report)
    assert half["sink"]["seen"] == "yes" and "/events/snack-7" in half["sink"]["where"]
    assert half["ack"]["seen"] == "unknown" and "lost" in half["ack"]["detail"]
    assert half["sent"]["seen"] == "no"
    assert "not marked" in report["verdict"]
    text = run_cli("trace", "snack-7", "--source", str(source_db), "--sink", url).stdout
    assert "cannot be known" in text and "verdict:" in text

    # Sent: the re-send is acknowledged as a duplicate and the mark is written.
    assert run_cli("dispatch", "--source", str(source_db), "--to", url + "/events").returncode == 0
    report = _trace("snack-7", source_db, str(sink_db))
    done = _stages(report)
    assert done["sent"]["seen"] == "yes"
    assert done["ack"]["seen"] == "inferred"
    assert "received 2 time(s)" in done["sink"]["detail"]
    assert report["verdict"] == "delivered and marked sent"

    # Accepted only: after purge the outbox keeps no row; the order and the receipt remain.
    _age_sent(source_db, 2 * 86400)
    assert run_cli("purge", "--source", str(source_db), "--sent-older-than", "1d").returncode == 0
    report = _trace("snack-7", source_db, url)
    gone = _stages(report)
    assert gone["accepted"]["seen"] == "yes"
    assert gone["outbox"]["seen"] == "no" and "purged" in gone["outbox"]["detail"]
    assert gone["sink"]["seen"] == "yes"
    assert "purged" in report["verdict"]

    # Never seen anywhere.
    nothing = _trace("nobody-1", source_db, url, code=1)
    assert {s["seen"] for s in nothing["stages"]} <= {"no", "unknown"}
    assert nothing["verdict"].startswith("unknown here")


def test_trace_of_a_quarantined_conflicting_event(
    source_db: Path, sink_db: Path, tmp_path: Path
) -> None:
    with Inbox(sink_db) as inbox:
        inbox.receive(of(_ev("p-2", "tea", 99)))
    with Outbox(source_db, source=SOURCE) as ob:
        ob.accept(_ev("p-2", "tea", 1))
        ob.record_failure("p-2", "NotAcknowledged: HTTP 422 instead of 200")
        ob.quarantine("p-2", "sink refused it permanently")
    report = _trace("p-2", source_db, str(sink_db))
    stages = _stages(report)
    assert stages["outbox"]["state"] == "quarantined"
    assert "sink refused it permanently" in stages["outbox"]["detail"]
    assert "422" in stages["outbox"]["detail"]
    # v2 receipts keep no sku or qty: the sink's other content is named by its fingerprint.
    theirs = content_fingerprint(of(_ev("p-2", "tea", 99)))
    assert "CONFLICT" in stages["sink"]["detail"] and theirs[:12] in stages["sink"]["detail"]
    # No send of ours can be acknowledged, so the trace must not promise that one will be.
    assert stages["ack"]["seen"] == "no" and stages["ack"]["state"] == "refused"
    assert "next send completes" not in stages["ack"]["detail"]
    assert report["verdict"].startswith("quarantined: NOT delivered")


def test_trace_of_a_quarantined_event_the_sink_has_applied(source_db: Path, sink_db: Path) -> None:
    """The quarantine landed while the send was in flight (or the ACK was lost): the trace
    must not call it undelivered, nor say that the relay will send it (found by review)."""
    with Inbox(sink_db) as inbox:
        inbox.receive(of(_ev("q-1")))
    with Outbox(source_db, source=SOURCE) as ob:
        ob.accept(_ev("q-1"))
        ob.quarantine("q-1", "hold")
    report = _trace("q-1", source_db, str(sink_db))
    stages = _stages(report)
    assert stages["sink"]["seen"] == "yes"
    assert "in flight" in stages["ack"]["detail"] and "requeue" in stages["ack"]["detail"]
    assert "until requeued" in stages["sent"]["detail"]
    assert report["verdict"].startswith("quarantined, yet the sink has applied it")
    down = _trace("q-1", source_db, f"http://127.0.0.1:{free_port()}", code=4)
    assert "cannot be told" in down["verdict"] and "NOT delivered" not in down["verdict"]


def test_trace_of_an_id_this_outbox_never_had(source_db: Path, sink_db: Path) -> None:
    Outbox(source_db, source=SOURCE).close()
    with Inbox(sink_db) as inbox:
        inbox.receive(of(_ev("elsewhere")))
    report = _trace("elsewhere", source_db, str(sink_db))
    stages = _stages(report)
    assert "next send" not in stages["ack"]["detail"]  # there is no row to send again
    assert report["verdict"].startswith("at the sink; this outbox has no row for it")
    assert "never in this outbox" in report["verdict"]


def test_trace_with_the_sink_down_says_it_cannot_tell(source_db: Path) -> None:
    with Outbox(source_db) as ob:
        ob.accept(_ev("a"))
    report = _trace("a", source_db, f"http://127.0.0.1:{free_port()}", code=4)
    stages = _stages(report)
    assert stages["sink"]["seen"] == "unknown" and "cannot tell" in stages["sink"]["detail"]
    assert stages["ack"]["seen"] == "unknown"


@pytest.mark.parametrize(
    ("args", "word"),
    [
        (["bad\tid", "--sink", "SINK"], "EVENT_ID"),
        (["a", "--sink", "http://sink.invalid:1"], "sink.invalid"),
        (["a", "--sink", "missing.db"], "missing.db"),
    ],
)
def test_trace_bad_input(source_db: Path, sink_db: Path, args: list[str], word: str) -> None:
    with Outbox(source_db) as ob:
        ob.accept(_ev("a"))
    Inbox(sink_db).close()
    args = [str(sink_db) if arg == "SINK" else arg for arg in args]
    assert_one_line_error(run_cli("trace", *args, "--source", str(source_db)), word)


def test_trace_without_a_sink_says_the_sink_was_not_asked(source_db: Path) -> None:
    with Outbox(source_db) as ob:
        ob.accept(_ev("a"))
    shown = run_cli("trace", "a", "--source", str(source_db), "--json")
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    sink = next(stage for stage in report["stages"] if stage["stage"] == "sink")
    assert (sink["seen"], sink["state"]) == ("unknown", "not asked")
    ack = next(stage for stage in report["stages"] if stage["stage"] == "ack")
    assert ack["seen"] == "unknown"  # never "none possible" without asking the sink
    assert report["via"] is None  # no relay ever recorded a target here
    assert report["verdict"] == "pending (the sink was not asked whether it has it)"


# --- quarantine, requeue, quarantined --------------------------------------------------------


def test_quarantine_then_requeue_records_the_reorder(
    source_db: Path, sink_service: Service, sink_db: Path
) -> None:
    url = sink_service.base_url + "/events"
    with Outbox(source_db) as ob:
        for name in ("a", "b", "c"):
            ob.accept(_ev(name))
    held = run_cli("quarantine", "a", "--source", str(source_db), "--reason", "bad sku upstream")
    assert held.returncode == 0 and "not counted as sent" in held.stdout
    listed = _cli_json("quarantined", "--source", str(source_db), "--json")
    assert [(r["id"], r["seq"], r["reason"]) for r in listed] == [("a", 1, "bad sku upstream")]
    assert "bad sku upstream" in run_cli("quarantined", "--source", str(source_db)).stdout

    assert run_cli("dispatch", "--source", str(source_db), "--to", url).returncode == 0
    assert raw_rows(sink_db, "SELECT source, id FROM ackledger_inbox ORDER BY id") == [
        (ob.source, "b"),
        (ob.source, "c"),
    ]
    status = _cli_json("status", "--source", str(source_db), "--json")
    assert (status["sent"], status["quarantined"], status["pending"]) == (2, 1, 0)

    back = run_cli("requeue", "a", "--source", str(source_db))
    assert back.returncode == 0, back.stderr
    assert back.stdout.splitlines() == [
        "requeued a at seq 1",
        "reorder: 2 later event(s) were marked sent while it was out: b, c",
    ]
    pending = _cli_json("pending", "--source", str(source_db), "--json")
    assert pending == [{"seq": 1, **of(_ev("a"), source=ob.source)}]
    [(kind_1, _), (kind_2, detail)] = raw_rows(
        source_db, "SELECT kind, detail FROM ackledger_outbox_log WHERE event_id = 'a' ORDER BY seq"
    )
    assert (kind_1, kind_2) == ("quarantined", "requeued")
    assert json.loads(str(detail))["overtaken_by"] == ["b", "c"]
    assert run_cli("dispatch", "--source", str(source_db), "--to", url).returncode == 0
    trace = _stages(_trace("a", source_db, str(sink_db)))
    assert "2 later event(s) were marked sent while it was out: b, c" in trace["outbox"]["detail"]
    assert trace["sent"]["seen"] == "yes"


@pytest.mark.parametrize(
    ("args", "word"),
    [
        (["quarantine", "nope", "--reason", "x"], "nope"),
        (["quarantine", "sent-1", "--reason", "x"], "sent"),
        (["quarantine", "held-1", "--reason", "x"], "quarantined"),
        (["quarantine", "open-1", "--reason", "  "], "reason"),
        (["quarantine", "bad\tid", "--reason", "x"], "EVENT_ID"),
        (["quarantine", "open-1"], "--reason"),
        (["requeue", "nope"], "nope"),
        (["requeue", "open-1"], "pending, not quarantined"),
        (["requeue", "sent-1"], "sent, not quarantined"),
        (["purge", "--sent-older-than", "7x"], "duration"),
        (["purge", "--sent-older-than", "0d"], "duration"),
        (["purge", "--sent-older-than=-1d"], "duration"),
        (["purge"], "--sent-older-than"),
    ],
)
def test_operations_bad_input_is_one_line_exit_2_and_writes_nothing(
    source_db: Path, args: list[str], word: str
) -> None:
    with Outbox(source_db) as ob:
        for name in ("sent-1", "held-1", "open-1"):
            ob.accept(_ev(name))
        ob.mark_sent("sent-1")
        ob.quarantine("held-1", "earlier")
    before = _dump(source_db)
    result = run_cli(*args[:1], "--source", str(source_db), *args[1:])
    assert_one_line_error(result, word)
    assert _dump(source_db) == before


def test_operations_never_create_a_missing_database(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    for args in (
        ["quarantine", "a", "--reason", "x"],
        ["requeue", "a"],
        ["quarantined"],
        ["purge", "--sent-older-than", "7d"],
        ["status"],
        ["trace", "a", "--sink", str(missing)],
    ):
        assert_one_line_error(run_cli(*args, "--source", str(missing)), "typo.db")
    assert not missing.exists()


# --- purge ---------------------------------------------------------------------------------


def test_purge_never_touches_pending_or_quarantined_rows(source_db: Path) -> None:
    with Outbox(source_db) as ob:
        for name in ("old-sent", "new-sent", "held", "waiting"):
            ob.accept(_ev(name))
        ob.mark_sent("old-sent", attempted=True)
        ob.mark_sent("new-sent", attempted=True)
        ob.quarantine("held", "poison")
    ten_days_ago = time.time() - 10 * 86400
    conn = sqlite3.connect(source_db)
    with conn:  # everything is old except new-sent's sending
        conn.execute("UPDATE ackledger_outbox SET created_at = ?", (ten_days_ago,))
        conn.execute(
            "UPDATE ackledger_outbox SET sent_at = ?, quarantined_at = ? WHERE id IN "
            "('old-sent', 'held')",
            (ten_days_ago, ten_days_ago),
        )
    conn.close()
    first = run_cli("purge", "--source", str(source_db), "--sent-older-than", "7d")
    assert first.returncode == 0 and first.stdout.startswith("purged 1 sent row(s)")
    assert ids(source_db, "SELECT id FROM ackledger_outbox ORDER BY seq") == [
        "new-sent",
        "held",
        "waiting",
    ]
    _age_sent(source_db, 2 * 3600)
    second = run_cli("purge", "--source", str(source_db), "--sent-older-than", "1h")
    assert second.stdout.startswith("purged 1 sent row(s)")
    assert ids(source_db, "SELECT id FROM ackledger_outbox ORDER BY seq") == ["held", "waiting"]
    again = run_cli("purge", "--source", str(source_db), "--sent-older-than", "1s")
    assert again.stdout.startswith("purged 0")
    status = _cli_json("status", "--source", str(source_db), "--json")
    assert (status["pending"], status["quarantined"]) == (1, 1)
    assert (status["sent"], status["attempts"], status["purged"]) == (2, 2, 2)
