"""The direct routes' lean steps (bench/CHANGES.md item 111) on a real ``serve sink`` over raw
sockets, without the access log (the histogram's own path): each answer counted once in the
series of its status, bucket and sum alike, and no series for a status never answered; an
HTTP/1.0 request that asks to be kept alive by ``Proxy-Connection`` (llhttp reads it as
``Connection``) still gets ``connection: close``; a kept-alive connection still idles out."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ackledger._dev.procs import Service, start_service
from tests.test_sink_direct import SLOW_HANDLERS, _connect, _event, _get, _post, _Reader, _slow

pytestmark = pytest.mark.slow

_SERIES = re.compile(
    r'ackledger_http_request_duration_seconds_(bucket|count|sum)\{(?:le="([^"]+)",)?'
    r'method="POST",route="/events",status="(\d+)"\} (\S+)'
)


@pytest.fixture
def quiet_sink(tmp_path: Path) -> Iterator[Service]:
    """A sink without the access log, with a handler that takes the time it is told."""
    (tmp_path / "slow_events.py").write_text(SLOW_HANDLERS, encoding="utf-8")
    args = ["serve", "sink", "--db", str(tmp_path / "sink.db"), "--port", "0"]
    args += ["--handlers", "slow_events:HANDLERS"]
    with start_service(args, env={"PYTHONPATH": str(tmp_path)}) as running:
        yield running


def _histogram(service: Service) -> dict[str, dict[str, float]]:
    """status -> {"count", "sum", and each bucket's bound}, for POST /events."""
    found: dict[str, dict[str, float]] = {}
    for kind, bound, status, value in _SERIES.findall(_get(service, "/metrics")[2].decode()):
        found.setdefault(status, {})[bound or kind] = float(value)
    return found


def test_each_direct_answer_is_counted_once_in_its_status_series(
    quiet_sink: Service, tmp_path: Path
) -> None:
    slow = _slow("t-2", tmp_path / "marker", 0.3)
    started = time.perf_counter()
    with _connect(quiet_sink) as sock:
        reader = _Reader(sock)
        # 200, 200 (a duplicate), 400, 200 (0.3 s), 400, 200: the series of 200 is made by
        # the first and held for the others; the 400's is another, made by its own first.
        for body in (_event("t-1"), _event("t-1"), b"{", slow, b"[", _event("t-3")):
            sock.sendall(_post("/events", body))
            reader.answer()
    elapsed = time.perf_counter() - started
    histogram = _histogram(quiet_sink)
    assert set(histogram) == {"200", "400"}  # no series of a status never answered
    for status, count in (("200", 4), ("400", 2)):
        series = histogram[status]
        assert series["count"] == count and series["+Inf"] == count
        bounds = sorted((float(bound), n) for bound, n in series.items() if bound[0].isdigit())
        assert [n for _, n in bounds] == sorted(n for _, n in bounds)  # cumulative
        # The sum is the answers' own times: less than the whole run's, and the 200s' has
        # the slow one's 0.3 s (answered after its series was made).
        assert (0.3 if status == "200" else 0) < series["sum"] < elapsed


def test_http_1_0_kept_alive_by_proxy_connection_is_still_closed(quiet_sink: Service) -> None:
    with _connect(quiet_sink) as sock:
        sock.sendall(_post("/events", _event("v-1"), "Proxy-Connection: keep-alive", version="1.0"))
        reader = _Reader(sock)
        status, headers, _ = reader.answer()
        assert status == 200 and headers[b"connection"] == b"close"
        assert reader.closed()
