"""The seed's final inspection, with real processes and independent reads."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ackledger import Outbox, dispatch, send_http
from ackledger.ops.faultproxy import FaultProxy
from ackledger.ops.processes import Service, run_cli
from ackledger.wire.http import close_connections
from tests.conftest import raw_rows

pytestmark = pytest.mark.slow

SNACK = {"id": "snack-7", "sku": "snack", "qty": 7}

# A publisher that dies with os._exit(73) in after_delivery: right after the exact ACK,
# before mark_sent. No finally block, no close() runs.
DYING_PUBLISHER = textwrap.dedent(
    """
    import os, sys
    from ackledger import Outbox, dispatch, send_http
    outbox = Outbox(sys.argv[1])
    dispatch(outbox, lambda e: send_http(e, sys.argv[2]), after_delivery=lambda i: os._exit(73))
    print("unreachable")
    """
)


def source_sent(source: Path, event_id: str) -> object:
    return raw_rows(source, "SELECT sent FROM ackledger_outbox WHERE id = ?", (event_id,))[0][0]


def sink_facts(sink: Path, event_id: str, sku: str) -> tuple[object, object]:
    receipts = raw_rows(sink, "SELECT receipts FROM ackledger_inbox WHERE id = ?", (event_id,))
    stock = raw_rows(sink, "SELECT qty FROM inventory WHERE sku = ?", (sku,))
    return (receipts[0][0] if receipts else None, stock[0][0] if stock else None)


def test_publisher_dies_after_ack_then_a_new_process_resends(
    source_db: Path, sink_db: Path, sink_service: Service
) -> None:
    url = sink_service.base_url + "/events"
    with Outbox(source_db) as outbox:
        outbox.accept(SNACK)

    died = subprocess.run(
        [sys.executable, "-c", DYING_PUBLISHER, str(source_db), url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert died.returncode == 73, died.stderr
    assert "unreachable" not in died.stdout

    # Independent connections: the source still says pending, the sink already holds the stock.
    assert source_sent(source_db, "snack-7") == 0
    assert sink_facts(sink_db, "snack-7", "snack") == (1, 7)

    resend = run_cli("dispatch", "--source", str(source_db), "--to", url)
    assert resend.returncode == 0, resend.stderr
    assert "sent snack-7" in resend.stdout

    # The sink saw two requests with the same id; the effect happened once.
    assert sink_facts(sink_db, "snack-7", "snack") == (2, 7)
    assert source_sent(source_db, "snack-7") == 1


def test_cli_crash_drill_leaves_later_events_pending(
    source_db: Path, sink_db: Path, sink_service: Service
) -> None:
    url = sink_service.base_url + "/events"
    for event in (SNACK, {"id": "pen-2", "sku": "pen", "qty": 2}):
        run_cli("accept", "--source", str(source_db), stdin=json.dumps(event))
    died = run_cli("dispatch", "--source", str(source_db), "--to", url, "--exit-after-ack", "73")
    assert died.returncode == 73
    assert raw_rows(source_db, "SELECT id, sent FROM ackledger_outbox ORDER BY seq") == [
        ("snack-7", 0),
        ("pen-2", 0),
    ]
    assert raw_rows(sink_db, "SELECT id FROM ackledger_inbox") == [("snack-7",)]
    assert run_cli("dispatch", "--source", str(source_db), "--to", url).returncode == 0
    assert raw_rows(sink_db, "SELECT sku, qty FROM inventory ORDER BY sku") == [
        ("pen", 2),
        ("snack", 7),
    ]
    assert raw_rows(source_db, "SELECT sum(sent) FROM ackledger_outbox") == [(2,)]


def test_response_lost_after_the_sink_committed(
    source_db: Path, sink_db: Path, sink_service: Service
) -> None:
    close_connections()
    with Outbox(source_db) as outbox, FaultProxy(sink_service.port, drop_responses=1) as proxy:
        outbox.accept(SNACK)
        outbox.accept({"id": "later", "sku": "tea", "qty": 1})

        with pytest.raises(OSError):
            dispatch(outbox, lambda e: send_http(e, proxy.url, timeout=5))
        assert proxy.dropped == 1
        # The sink committed; the publisher could not know, so the item stays pending.
        assert sink_facts(sink_db, "snack-7", "snack") == (1, 7)
        assert source_sent(source_db, "snack-7") == 0
        assert [p["id"] for p in outbox.pending()] == ["snack-7", "later"]

        assert dispatch(outbox, lambda e: send_http(e, proxy.url)) == ["snack-7", "later"]
    assert sink_facts(sink_db, "snack-7", "snack") == (2, 7)
    assert source_sent(source_db, "snack-7") == 1
    close_connections()
