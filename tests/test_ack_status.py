"""``ack="status"``: receivers that answer 201, 202, 204 or an empty 200 and echo no identity.

Under the default exact ACK such an answer is no ACK (the event stays pending); opted in, any
2xx is, and ``trace``, ``status`` and the relay's metrics name the mark "2xx without identity".
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ackledger import NotAcknowledged, Outbox, send_http, send_http_batch
from ackledger.ops.processes import run_cli
from tests.events import SOURCE, lab
from tests.opshelp import count, metrics, one, start_relay, wait_until
from tests.plainreceiver import PlainReceiver, always

PLAIN = [(201, b""), (202, b""), (204, b""), (200, b""), (202, b'{"accepted": "yes"}')]


@pytest.mark.parametrize(("status", "body"), PLAIN)
def test_any_2xx_acknowledges_under_ack_status_and_none_under_exact(
    status: int, body: bytes
) -> None:
    with PlainReceiver(always(status, body)) as receiver:
        event = lab("plain-1", "sku-1", 1)
        with pytest.raises(NotAcknowledged):
            send_http(event, receiver.url)
        assert send_http(event, receiver.url, ack="status") is True
        events = [lab(f"plain-{i}", "sku-1", 1) for i in range(3)]
        assert send_http_batch(events, receiver.url + "/batch", ack="status") == 3
        with pytest.raises(NotAcknowledged):
            send_http_batch(events, receiver.url + "/batch")
        assert receiver.paths[-1] == "/events/batch"


@pytest.mark.parametrize("status", [301, 400, 404, 500, 503])
def test_a_status_outside_2xx_is_no_ack_under_ack_status(status: int) -> None:
    with PlainReceiver(always(status)) as receiver:
        with pytest.raises(NotAcknowledged) as caught:
            send_http(lab("plain-1", "sku-1", 1), receiver.url, ack="status")
        assert caught.value.status == status
        assert f"HTTP {status} instead of 2xx" in str(caught.value)
        with pytest.raises(NotAcknowledged):
            send_http_batch([lab("plain-2", "sku-1", 1)], receiver.url + "/batch", ack="status")


def test_an_unknown_ack_mode_is_refused_before_any_request() -> None:
    with PlainReceiver(always(204)) as receiver:
        with pytest.raises(ValueError, match="ack"):
            send_http(lab("plain-1", "sku-1", 1), receiver.url, ack="loose")
        assert receiver.arrivals == []


def _publish(source: Path, n: int) -> None:
    with Outbox(source, source=SOURCE) as outbox:
        for i in range(n):
            outbox.accept({"id": f"k-{i}", "sku": "sku-1", "qty": i + 1})


@pytest.mark.slow
@pytest.mark.parametrize("batch", [False, True])
def test_a_relay_with_ack_status_marks_a_knative_style_receiver_s_202s(
    tmp_path: Path, batch: bool
) -> None:
    source = tmp_path / "source.db"
    _publish(source, 5)
    with PlainReceiver(always(202)) as receiver:
        relay = start_relay(
            source, receiver.url, tmp_path / "relay.log", "--ack", "status",
            *(["--batch"] if batch else []),
        )  # fmt: skip
        try:
            wait_until(lambda: count(source, "sent = 1") == 5, "every event marked sent")
            samples = metrics(relay.base_url + "/metrics")
        finally:
            assert relay.stop() == 0
        # Each event once: no re-sends of events already answered 202.
        assert len(receiver.arrivals) == (1 if batch else 5)
    assert one(samples, "ackledger_relay_sends_succeeded_without_identity_total") == 5
    traced = run_cli("trace", "k-0", "--source", str(source), "--json")
    report = json.loads(traced.stdout)
    assert "2xx without identity" in report["via"]["ack"], report["via"]
    assert "2xx without identity" in run_cli("trace", "k-0", "--source", str(source)).stdout
    status = json.loads(run_cli("status", "--source", str(source), "--json").stdout)
    assert "2xx without identity" in status["ack"]


@pytest.mark.slow
def test_without_ack_status_a_204_receiver_leaves_the_events_pending(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    _publish(source, 2)
    with PlainReceiver(always(204)) as receiver:
        relay = start_relay(source, receiver.url, tmp_path / "relay.log")
        try:
            wait_until(lambda: len(receiver.arrivals) >= 3, "re-sends of the unacknowledged one")
            time.sleep(0.2)
        finally:
            assert relay.stop() == 0
    assert count(source, "sent = 1") == 0
    status = json.loads(run_cli("status", "--source", str(source), "--json").stdout)
    assert status["ack"] is None


def test_ack_status_on_a_broker_target_is_bad_input(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    _publish(source, 1)
    done = run_cli(
        "relay", "--source", str(source), "--to", "nats://127.0.0.1:4222?subject=x",
        "--ack", "status",
    )  # fmt: skip
    assert done.returncode == 2 and "ack" in done.stderr, done.stderr
    assert count(source, "sent = 1") == 0
