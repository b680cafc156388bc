"""The headline table: both outboxes to HTTP, RabbitMQ and NATS, rates and per-event waits.

The page is rendered from stored figures (no broker is run here); one open-loop run goes from a
real SQLite outbox through a real ``ackledger relay`` process to a real ``serve sink`` process.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench import brokers, latency, report
from bench.common import Results

from ackledger import Outbox
from ackledger.ops.processes import start_service

#: Each headline row: its cells' keys (one at a time, its waits, batched, its waits).
ROWS = {
    "| SQLite | HTTP (`serve sink`) |": ("relay.item_daemon", "latency.sqlite.http.item",
                                         "relay.daemon", "latency.sqlite.http.batch"),
    "| SQLite | RabbitMQ |": ("broker.sqlite.rabbit.item", "latency.sqlite.rabbit.item",
                              "broker.sqlite.rabbit.default", "latency.sqlite.rabbit.batch"),
    "| SQLite | NATS JetStream |": ("broker.sqlite.nats.item", "latency.sqlite.nats.item",
                                    "broker.sqlite.nats.default", "latency.sqlite.nats.batch"),
    "| PostgreSQL | HTTP (`serve sink`) |": ("pg.relay.item.1", "latency.pg.http.item",
                                             "pg.relay.batch.1", "latency.pg.http.batch"),
    "| PostgreSQL | RabbitMQ |": ("broker.ours.item", "latency.pg.rabbit.item",
                                  "broker.ours.default", "latency.pg.rabbit.batch"),
    "| PostgreSQL | NATS JetStream |": ("broker.nats.item", "latency.pg.nats.item",
                                        "broker.nats.default", "latency.pg.nats.batch"),
}  # fmt: skip


def _page(results: Results) -> str:
    machine = {"cores": "2", "cpu": "cpu", "kernel": "Linux", "python": "CPython",
               "sqlite": "3", "postgresql": "15", "load_before": "0 0 0",
               "load_after": "0 0 0"}  # fmt: skip
    section: dict[str, Any] = {"plan": "quick", "command": "python -m bench --quick",
                               "started": "2026-01-01 00:00 UTC", "seconds": 1.0,
                               "machine": machine, **results.as_dict()}  # fmt: skip
    return report.render({"brokers": section}, ["brokers"])


def _line(page: str, row: str) -> str:
    (found,) = [line for line in page.splitlines() if line.startswith(row)]
    return found


def _waits(marked: int, published: int = 100) -> latency.Waits:
    """Waits of 1, 2, ... ``marked`` ms: p50 is ``marked / 2`` ms, p99 ``0.99 x marked``."""
    return latency.Waits(published, marked, [n / 1000 for n in range(1, marked + 1)])


def test_every_headline_row_shows_its_rates_and_waits_from_the_stored_figures() -> None:
    results = Results()
    for number, (one, one_waits, batch, batch_waits) in enumerate(ROWS.values()):
        results.add(one, "one at a time", "/s", 1000.0 + number)
        results.add(batch, "batched", "/s", 5000.0 + number)
        results.add(f"{one_waits}.p50", "p50", "ms", 1.5 + number)
        results.add(f"{one_waits}.p99", "p99", "ms", 20.0 + number)
        results.add(f"{batch_waits}.p50", "p50", "ms", 250.0 + number)
        results.add(f"{batch_waits}.p99", "p99", "ms", 490.0 + number)
    page = _page(results)
    for number, row in enumerate(ROWS):
        line = _line(page, row)
        assert "not measured" not in line
        cells = line.removeprefix(row).split(" | ")[:4]
        assert cells == [
            f" {1000 + number:,}",
            f"{1.5 + number:.2f} / {20 + number:.1f}",
            f"{5000 + number:,}",
            f"{250 + number} / {490 + number}",
        ], row
    assert f"at {latency.RATE:g}/s" in page
    assert len(page.splitlines()) < 300


def test_the_waits_are_the_events_own_in_ms() -> None:
    results = Results()
    latency.record(results, "latency.sqlite.rabbit.item", "sqlite -> RabbitMQ", _waits(100))
    assert results.get("latency.sqlite.rabbit.item.p50") == 50.0
    assert results.get("latency.sqlite.rabbit.item.p99") == 99.0
    assert "| 50.0 / 99.0 |" in _line(_page(results), "| SQLite | RabbitMQ |")


def test_a_row_with_an_event_not_marked_sent_is_refused_for_the_whole_run() -> None:
    results = Results()
    key = "latency.sqlite.nats.batch"
    latency.record(results, key, "sqlite -> NATS", _waits(99))
    # A later repetition where every event was marked does not bring the figure back.
    latency.record(results, key, "sqlite -> NATS", _waits(100))
    assert results.get(f"{key}.p50") is None and results.get(f"{key}.p99") is None
    line = _line(_page(results), "| SQLite | NATS JetStream |")
    assert "**refused** (99 of 100 events marked sent)" in line
    assert "50.0" not in line and "49.5" not in line


def test_a_rate_counts_only_when_the_broker_holds_every_event() -> None:
    results = Results()
    key = "broker.sqlite.rabbit.default"
    brokers._delivered(results, key, "to RabbitMQ", 3000.0, stored=19_999, total=20_000)
    nan = "broker.sqlite.nats.item"
    brokers._delivered(results, nan, "to NATS", math.nan, stored=4000, total=4000)
    good = "broker.sqlite.nats.default"
    brokers._delivered(results, good, "to NATS", 4321.0, stored=20_000, total=20_000)
    assert results.get(key) is None and results.get(nan) is None
    assert results.get(good) == 4321.0
    page = _page(results)
    assert "**refused** (19999 of 20000 events in the broker)" in _line(page, "| SQLite | RabbitMQ")
    assert "**refused** (not all sent)" in _line(page, "| SQLite | NATS JetStream |")
    assert "| 4,321 |" in _line(page, "| SQLite | NATS JetStream |")


def test_an_open_loop_run_counts_every_published_event_and_not_the_first(tmp_path: Path) -> None:
    sink = start_service(["serve", "sink", "--db", str(tmp_path / "sink.db"), "--port", "0"])
    source = tmp_path / "outbox.db"
    try:
        waits = latency.measure_waits(source, sink.base_url + "/events", "t", 20, rate=100.0)
    finally:
        sink.stop()
    assert (waits.published, waits.marked, len(waits.seconds)) == (20, 20, 20)
    assert all(seconds > 0 for seconds in waits.seconds)
    with Outbox(source) as outbox:
        # The one event sent before the clock started is in the outbox, not in the waits.
        assert outbox.stats()["sent"] == 21
