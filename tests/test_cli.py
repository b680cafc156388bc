from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from ackledger import Outbox
from ackledger.ops.processes import Service, run_cli
from tests.conftest import raw_rows
from tests.events import lab

pytestmark = pytest.mark.slow

SNACK = {"id": "snack-7", "sku": "snack", "qty": 7}


def assert_one_line_error(result: object, *words: str) -> None:
    stderr = result.stderr  # type: ignore[attr-defined]
    assert result.returncode == 2, stderr  # type: ignore[attr-defined]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("ackledger: error:")
    assert "Traceback" not in stderr
    for word in words:
        assert word in lines[0]


def test_accept_prints_the_seq(source_db: Path) -> None:
    first = run_cli("accept", "--source", str(source_db), stdin=json.dumps(SNACK))
    second = run_cli("accept", "--source", str(source_db), stdin=json.dumps({**SNACK, "id": "b"}))
    again = run_cli("accept", "--source", str(source_db), stdin=json.dumps(SNACK))
    assert (first.stdout.strip(), second.stdout.strip(), again.stdout.strip()) == ("1", "2", "1")


@pytest.mark.parametrize(
    ("stdin", "word"),
    [
        ("not json", "JSON"),
        ("", "JSON"),
        (json.dumps({**SNACK, "qty": 0}), "qty"),
        (json.dumps({"id": "x", "sku": "s"}), "qty"),
        (json.dumps([SNACK]), "event"),
    ],
)
def test_accept_bad_input_writes_nothing(source_db: Path, stdin: str, word: str) -> None:
    result = run_cli("accept", "--source", str(source_db), stdin=stdin)
    assert_one_line_error(result, word)
    assert not source_db.exists()


def test_accept_conflict_is_refused_and_writes_nothing(source_db: Path) -> None:
    run_cli("accept", "--source", str(source_db), stdin=json.dumps(SNACK))
    result = run_cli("accept", "--source", str(source_db), stdin=json.dumps({**SNACK, "qty": 1}))
    assert_one_line_error(result, "snack-7")
    assert raw_rows(source_db, "SELECT qty FROM orders") == [(7,)]
    assert raw_rows(source_db, "SELECT data FROM ackledger_outbox") == [
        ('{"qty":7,"sku":"snack"}',)
    ]


def test_pending_json_and_table(source_db: Path) -> None:
    for event_id in ("z", "a"):
        run_cli("accept", "--source", str(source_db), stdin=json.dumps({**SNACK, "id": event_id}))
    listed = json.loads(run_cli("pending", "--source", str(source_db), "--json").stdout)
    with Outbox(source_db) as outbox:
        source = outbox.source
    assert listed == [
        {**lab("z", "snack", 7, source=source), "seq": 1},
        {**lab("a", "snack", 7, source=source), "seq": 2},
    ]
    one = json.loads(
        run_cli("pending", "--source", str(source_db), "--json", "--limit", "1").stdout
    )
    assert [item["id"] for item in one] == ["z"]
    table = run_cli("pending", "--source", str(source_db)).stdout
    assert table.index(" z ") < table.index(" a ")


def test_publish_prints_the_seq_of_any_event(source_db: Path) -> None:
    event = {
        "id": "o-1",
        "source": "/orders-service",
        "type": "com.example.order.placed",
        "data": {"lines": [{"sku": "pen", "qty": 2}], "note": None},
    }
    first = run_cli("publish", "--source", str(source_db), stdin=json.dumps(event))
    again = run_cli("publish", "--source", str(source_db), stdin=json.dumps(event))
    assert (first.stdout.strip(), again.stdout.strip()) == ("1", "1"), first.stderr
    other = {**event, "data": {"lines": []}}
    refused = run_cli("publish", "--source", str(source_db), stdin=json.dumps(other))
    assert_one_line_error(refused, "o-1")
    listed = json.loads(run_cli("pending", "--source", str(source_db), "--json").stdout)
    assert listed == [{**event, "specversion": "1.0", "seq": 1}]


@pytest.mark.parametrize(
    ("args", "word"),
    [
        (["pending", "--limit", "0"], "limit"),
        (["pending", "--limit", "1001"], "limit"),
        (["pending", "--limit", "two"], "limit"),
        (["dispatch", "--to", "http://sink.invalid/events"], "sink.invalid"),
        (["dispatch", "--to", "https://127.0.0.1/events"], "http"),
        (["dispatch", "--to", "http://127.0.0.1:1/other?x=1"], "query"),
        (["dispatch", "--to", "http://127.0.0.1:1/events", "--timeout", "-1"], "timeout"),
        (["dispatch"], "--to"),
        (["pending", "--synchronous", "OFF"], "synchronous"),
    ],
)
def test_bad_arguments_are_one_line_exit_2(source_db: Path, args: list[str], word: str) -> None:
    run_cli("accept", "--source", str(source_db), stdin=json.dumps(SNACK))
    before = raw_rows(source_db, "SELECT seq, sent, attempts FROM ackledger_outbox")
    result = run_cli(*args[:1], "--source", str(source_db), *args[1:])
    assert_one_line_error(result, word)
    assert raw_rows(source_db, "SELECT seq, sent, attempts FROM ackledger_outbox") == before


def test_reading_commands_never_create_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    assert_one_line_error(run_cli("pending", "--source", str(missing)), "typo.db")
    result = run_cli("dispatch", "--source", str(missing), "--to", "http://127.0.0.1:9/events")
    assert_one_line_error(result, "typo.db")
    assert not missing.exists()


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    assert_one_line_error(run_cli("pending", "--source", str(junk)), "database")


def test_dispatch_sends_and_reports(source_db: Path, sink_service: Service, sink_db: Path) -> None:
    for event_id in ("a", "b"):
        run_cli("accept", "--source", str(source_db), stdin=json.dumps({**SNACK, "id": event_id}))
    result = run_cli(
        "dispatch", "--source", str(source_db), "--to", sink_service.base_url + "/events"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["sent a", "sent b", "dispatched 2 event(s)"]
    assert raw_rows(sink_db, "SELECT qty FROM inventory") == [(14,)]


def test_dispatch_batch_flag(source_db: Path, sink_service: Service, sink_db: Path) -> None:
    for event_id in ("a", "b", "c"):
        run_cli("accept", "--source", str(source_db), stdin=json.dumps({**SNACK, "id": event_id}))
    url = sink_service.base_url + "/events"
    result = run_cli("dispatch", "--source", str(source_db), "--to", url, "--batch")
    assert result.returncode == 0, result.stderr
    assert raw_rows(source_db, "SELECT sum(sent) FROM ackledger_outbox") == [(3,)]
    assert raw_rows(sink_db, "SELECT qty FROM inventory") == [(21,)]


def test_dispatch_to_a_dead_sink_exits_1_and_says_what_stays_pending(source_db: Path) -> None:
    run_cli("accept", "--source", str(source_db), stdin=json.dumps(SNACK))
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    result = run_cli(
        "dispatch", "--source", str(source_db), "--to", f"http://127.0.0.1:{port}/events"
    )
    assert result.returncode == 1
    assert "still pending: snack-7" in result.stderr
    assert "Traceback" not in result.stderr
    assert raw_rows(source_db, "SELECT sent, attempts FROM ackledger_outbox") == [(0, 1)]


def test_serve_rejects_a_bad_port(sink_db: Path) -> None:
    assert_one_line_error(run_cli("serve", "sink", "--db", str(sink_db), "--port", "70000"), "port")
    assert not sink_db.exists()


def test_help_names_every_command() -> None:
    text = run_cli("--help").stdout
    for command in ("accept", "pending", "dispatch", "serve", "demo"):
        assert command in text


def test_demo_tells_the_story_and_passes() -> None:
    result = run_cli("demo", timeout=180)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "VERDICT: PASS" in result.stdout
    assert "FAIL" not in result.stdout.replace("VERDICT: PASS", "")
