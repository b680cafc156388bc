"""A 429's or 503's ``Retry-After`` (seconds or an HTTP-date) is honoured, capped by
``--max-backoff``: counted as requests a real receiver sees in a window."""

from __future__ import annotations

import email.utils
import time
from pathlib import Path

import pytest

from ackledger import NotAcknowledged, Outbox, send_http
from ackledger.ops.processes import run_cli
from ackledger.wire.ack import retry_after_seconds
from tests.events import SOURCE, lab
from tests.opshelp import start_relay, wait_until
from tests.plainreceiver import PlainReceiver, always

pytestmark = pytest.mark.slow


def _publish(source: Path) -> None:
    with Outbox(source, source=SOURCE) as outbox:
        outbox.accept({"id": "r-1", "sku": "sku-1", "qty": 1})


def _requests_in(receiver: PlainReceiver, window: float) -> int:
    """How many requests arrived within ``window`` seconds of the first one."""
    wait_until(lambda: bool(receiver.arrivals), "the first request")
    first = receiver.arrivals[0]
    time.sleep(max(0.0, first + window - time.monotonic()) + 0.1)
    return sum(1 for at in receiver.arrivals if at <= first + window)


def _relay_against(tmp_path: Path, receiver: PlainReceiver, window: float, *extra: str) -> int:
    source = tmp_path / "source.db"
    _publish(source)
    log = tmp_path / "relay.log"
    relay = start_relay(source, receiver.url, log, *extra)
    try:
        seen = _requests_in(receiver, window)
    finally:
        assert relay.stop() == 0
    assert "Retry-After" in log.read_text()
    return seen


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_seconds_spaces_the_relay_s_requests(tmp_path: Path, status: int) -> None:
    with PlainReceiver(always(status, headers={"Retry-After": "2"})) as receiver:
        # Without it, backoff from 0.05 s would send about 7 requests in these 3.5 s.
        seen = _relay_against(tmp_path, receiver, 3.5, "--max-backoff", "10")
    assert 1 <= seen <= 2, receiver.arrivals


def test_retry_after_as_an_http_date_is_honoured(tmp_path: Path) -> None:
    def script(n: int, sent: bytes) -> tuple[int, dict[str, str], bytes]:
        when = email.utils.formatdate(time.time() + 3, usegmt=True)
        return 503, {"Retry-After": when}, b""

    with PlainReceiver(script) as receiver:
        seen = _relay_against(tmp_path, receiver, 1.8, "--max-backoff", "10")
    assert seen == 1, receiver.arrivals


def test_retry_after_is_capped_by_max_backoff(tmp_path: Path) -> None:
    with PlainReceiver(always(429, headers={"Retry-After": "3600"})) as receiver:
        seen = _relay_against(tmp_path, receiver, 2.0, "--max-backoff", "0.4")
    assert seen >= 3, receiver.arrivals


def test_the_sender_reports_the_wait_and_dispatch_prints_it(tmp_path: Path) -> None:
    with PlainReceiver(always(503, headers={"Retry-After": "7"})) as receiver:
        with pytest.raises(NotAcknowledged) as caught:
            send_http(lab("r-9", "sku-1", 1), receiver.url)
        assert caught.value.retry_after == 7.0 and caught.value.status == 503
        source = tmp_path / "source.db"
        _publish(source)
        done = run_cli("dispatch", "--source", str(source), "--to", receiver.url)
    assert done.returncode == 1
    assert "wait 7 s" in done.stderr, done.stderr


def test_retry_after_on_another_status_is_not_a_wait() -> None:
    with (
        PlainReceiver(always(500, headers={"Retry-After": "7"})) as receiver,
        pytest.raises(NotAcknowledged) as caught,
    ):
        send_http(lab("r-9", "sku-1", 1), receiver.url)
    assert caught.value.retry_after is None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (b"0", 0.0),
        (b" 120 ", 120.0),
        (b"Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # a date passed: try now
        (b"Thu, 01 Jan 2099 00:00:00 GMT", 4070908800.0 - 1_600_000_000.0),
        (b"soon", None),
        (b"-5", None),
        (b"1.5", None),
        (b"", None),
        (None, None),
    ],
)
def test_retry_after_values_in_seconds(value: bytes | None, seconds: float | None) -> None:
    assert retry_after_seconds(value, now=1_600_000_000.0) == seconds
