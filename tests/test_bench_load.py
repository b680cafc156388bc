"""The benchmark's load client counts a rate only when every answer is the one its route promises.

Real services on loopback (``ackledger serve ledger``, ``ackledger serve sink``, and the raw
socket server of the floors, whose fixed ACK names another event); the page rendered from a
refused workload shows the refusal and its status histogram, never the rate.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bench import report
from bench.common import Results
from bench.fill import lab_event
from bench.ledger import check_answers, delivery_requests
from bench.load import DELIVERIES, EVENTS, LoadResult, Route, delivery, record, run_load

from ackledger.ops.processes import Service, start_listener, start_service

SECONDS = 0.4


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    folder = tmp_path_factory.mktemp("ledger")
    service = start_service(["serve", "ledger", "--db", str(folder / "l.db"), "--port", "0"])
    try:
        yield service
    finally:
        service.stop()


def _events(client: int, number: int) -> dict[str, Any]:
    return lab_event(f"load-{client}-{number}", f"s{number % 4}", 1)


def _page(results: Results) -> str:
    section = {
        "plan": "quick",
        "command": "python -m bench --quick",
        "started": "2026-01-01 00:00 UTC",
        "seconds": 1.0,
        "machine": {
            "cores": "2",
            "cpu": "cpu",
            "kernel": "Linux",
            "python": "CPython",
            "sqlite": "3",
            "postgresql": "15",
            "load_before": "0 0 0",
            "load_after": "0 0 0",
        },
        **results.as_dict(),
    }
    return report.render({"ledger-http": section}, ["ledger-http"])


def test_the_ledger_answers_every_request_as_its_route_promises(ledger: Service) -> None:
    load = run_load(ledger.base_url, DELIVERIES, 4, SECONDS, delivery_requests("ok"))
    assert load.requests > 10
    assert load.all_expected, load.wrong
    # Every other request repeats the one before it: both answers occur, and both count.
    assert set(load.statuses) == {200, 201}
    results = Results()
    record(results, "ledger.http", "ledger POST /deliveries, 4 clients", load)
    assert results.get("ledger.http.rps") == pytest.approx(load.throughput)
    assert not results.refused
    assert f"| SQLite | {report._num(load.throughput)} |" in _page(results)


def test_a_workload_sent_in_the_wrong_content_type_is_refused(ledger: Service) -> None:
    wrong = Route("/deliveries", "application/cloudevents+json", delivery)
    load = run_load(ledger.base_url, wrong, 4, SECONDS, delivery_requests("bad"))
    assert load.requests > 10
    assert not load.all_expected
    assert set(load.statuses) == {400}
    results = Results()
    record(results, "ledger.http", "ledger POST /deliveries, 4 clients", load)
    assert results.get("ledger.http.rps") is None
    assert "ledger.http.rps" not in results.figures
    why = results.refused["ledger.http.rps"]["why"]
    assert f"400: {load.requests:,}" in why
    page = _page(results)
    assert f"**refused** (answers {{400: {load.requests:,}}}" in page
    assert report._num(load.throughput) not in page


def test_an_ack_of_another_event_is_refused(tmp_path: Path) -> None:
    rawserver = Path(__file__).resolve().parent.parent / "bench" / "rawserver.py"
    with start_listener([sys.executable, str(rawserver)]) as raw:
        load = run_load(raw.base_url, EVENTS, 1, SECONDS, _events)
    # Status 200, JSON, "ack": true: only the identity says it is not this event's ACK.
    assert set(load.statuses) == {200}
    assert set(load.wrong) == {"ACK of another event"}
    results = Results()
    record(results, "sink.c1", "sink /events, 1 client", load)
    assert results.figures == {}
    assert set(results.refused) == {"sink.c1.rps", "sink.c1.p50", "sink.c1.p99"}


def test_the_sink_acks_every_event_it_is_sent(tmp_path: Path) -> None:
    sink = start_service(["serve", "sink", "--db", str(tmp_path / "s.db"), "--port", "0"])
    try:
        load = run_load(sink.base_url, EVENTS, 2, SECONDS, _events)
    finally:
        sink.stop()
    assert load.requests > 10
    assert load.all_expected, load.wrong


def test_one_refused_repetition_refuses_the_figure_for_the_whole_run() -> None:
    good = LoadResult(requests=100, seconds=1.0, latencies=[0.001] * 100)
    good.statuses[201] = 100
    bad = LoadResult(requests=5, seconds=1.0, latencies=[0.001] * 5)
    bad.statuses[503] = 5
    bad.wrong["status 503"] = 5
    results = Results()
    record(results, "ledger.http", "ledger", good)
    record(results, "ledger.http", "ledger", bad)
    record(results, "ledger.http", "ledger", good)
    assert results.get("ledger.http.rps") is None
    assert "503: 5" in results.refused["ledger.http.rps"]["why"]


def test_a_ledger_run_whose_repeats_did_the_work_again_is_refused() -> None:
    check_answers([0, 1, 0], [{"delivery_no": 1}, {"delivery_no": 2}, {"delivery_no": 1}])
    with pytest.raises(ValueError, match="key 0"):  # the repeat ran the work a second time
        check_answers([0, 1, 0], [{"delivery_no": 1}, {"delivery_no": 2}, {"delivery_no": 3}])
    with pytest.raises(ValueError, match="one delivery"):  # another key's answer replayed
        check_answers([0, 1], [{"delivery_no": 1}, {"delivery_no": 1}])
