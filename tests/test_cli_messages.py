"""What the commands say of themselves (help, hints, tables) agrees with what they do: each
claim checked against the real command on real files and services."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ackledger import Inbox, Outbox, new_event
from ackledger.ops.processes import Service, run_cli
from tests.events import SOURCE, lab


def _help(*command: str) -> str:
    done = run_cli(*command, "--help")
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())  # argparse wraps lines where it likes


def test_deliver_help_gives_the_exit_status_of_a_key_in_flight() -> None:
    # The in-flight exit itself is checked in test_ledger_outcomes.py: 409 exits 1.
    text = _help("deliver")
    assert "1 if (--run) the key is in flight (409" in text
    assert "(409 -> exit 1)" in text
    assert "in flight (409). " not in text and "409 -> exit 4" not in text


def test_console_help_says_only_the_buttons_need_the_token() -> None:
    text = _help("console")
    assert "every request" not in text
    assert "quarantine and requeue buttons (POST) must carry" in text
    assert "the pages are read without it" in text


@pytest.mark.parametrize("command", ["relay", "dispatch"])
def test_help_of_the_senders_names_every_kind_of_target(command: str) -> None:
    text = _help(command)
    for scheme in ("http://HOST:PORT/events", "amqp://", "nats://HOST:PORT?subject=PREFIX"):
        assert scheme in text


def _stage(text: str, name: str) -> str:
    [line] = [line for line in text.splitlines() if line.startswith(f"{name} ")]
    return line


def test_trace_of_another_type_says_what_the_outbox_knows(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    with Outbox(source, source=SOURCE) as outbox:
        outbox.publish(new_event("com.example.order.placed", {"n": 1}, source=SOURCE, id="o-1"))
        outbox.publish(lab("w-1", "pen", 2))  # a lab event, but not accepted as an order
        outbox.accept({"id": "w-2", "sku": "pen", "qty": 3})
    other = run_cli("trace", "o-1", "--source", str(source)).stdout
    accepted = _stage(other, "accepted")
    assert "yes" in accepted and "published" in accepted and "table ackledger_outbox" in accepted
    assert "order" not in accepted
    assert "com.example.order.placed event of source urn:ackledger:test" in other
    assert "seq=1" in other
    # The lab's own events keep the orders table's evidence.
    published = _stage(run_cli("trace", "w-1", "--source", str(source)).stdout, "accepted")
    assert "no order row" in published
    accepted_lab = _stage(run_cli("trace", "w-2", "--source", str(source)).stdout, "accepted")
    assert "order row" in accepted_lab and "yes" in accepted_lab


def test_trace_of_a_broker_event_names_the_consumers_metrics(tmp_path: Path) -> None:
    source, sink = tmp_path / "source.db", tmp_path / "sink.db"
    with Outbox(source, source=SOURCE) as outbox:
        outbox.publish(lab("b-1", "pen", 1))
        outbox.record_target("amqp://guest:guest@127.0.0.1:5672/%2F?exchange=events")
    Inbox(sink).close()
    text = run_cli("trace", "b-1", "--source", str(source), "--sink", str(sink)).stdout
    assert "ackledger_consumer_* metrics" in text
    assert "ackledger_consume metrics" not in text


def test_status_keeps_the_sink_counters_in_line(
    source_db: Path, sink_service: Service, sink_db: Path
) -> None:
    with Outbox(source_db, source=SOURCE) as outbox:
        outbox.accept({"id": "a", "sku": "pen", "qty": 1})
    url = sink_service.base_url
    assert run_cli("dispatch", "--source", str(source_db), "--to", url + "/events").returncode == 0
    table = run_cli("status", "--source", str(source_db), "--sink", url).stdout
    rows = [line for line in table.splitlines() if line.startswith("  ")]
    columns = {len(line) - len(line.split()[-1]) for line in rows if not line.endswith(" s")}
    columns |= {
        len(line) - len(" ".join(line.split()[-2:])) for line in rows if line.endswith(" s")
    }
    assert len(columns) == 1, table  # every value starts in the same column
    [age] = [line for line in rows if "oldest_receipt_age_seconds" in line]
    assert re.fullmatch(r"  oldest_receipt_age_seconds +\d+\.\d s", age), age
