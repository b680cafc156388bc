"""PostgreSQL rows: relays (1, 2 and 4, per item and batched), the sink and the ledger.

Everything is on the local PostgreSQL server: a fresh database per workload, made and dropped
here. The outbox is filled with events over 64 partitions (skus); N ``ackledger relay`` processes
(one of N each, leasing partitions) drain it into one ``ackledger serve sink`` process whose
inbox is on PostgreSQL too. The clock runs from the first event marked sent to the last, read
from a separate connection, so process start-up is not counted.

This machine has 2 cores, shared by PostgreSQL, the sink, the relays and this process: more
relays cannot mean more throughput here, and the rows show what leases cost, not how far
PostgreSQL scales.
"""

from __future__ import annotations

import secrets
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ackledger import Outbox
from ackledger.ops.processes import Service, cli_command, start_service

from . import fill, latency
from .common import Plan, Results, marks_rate, scratch
from .ledger import delivery_requests
from .load import DELIVERIES, EVENTS, record, run_load
from .machine import POSTGRES_URL

PARTITIONS = 64
RELAY_COUNTS = (1, 2, 4)
CLIENT_COUNTS = (1, 8, 32)
HTTP_CLIENTS = 16


def _admin() -> Any:
    import psycopg

    return psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5)


def available() -> str | None:
    """None if the server answers, else why not."""
    try:
        _admin().close()
    except Exception as exc:
        return f"PostgreSQL not reachable at {POSTGRES_URL}: {type(exc).__name__}"
    return None


@contextmanager
def database() -> Iterator[str]:
    """A new, empty database for one workload; dropped afterwards."""
    name = "ackledger_bench_" + secrets.token_hex(4)
    with _admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield POSTGRES_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        with _admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _event(tag: str, number: int) -> dict[str, Any]:
    return fill.lab_event(f"{tag}-{number:07d}", f"p{number % PARTITIONS}", 1)


def _serve(kind: str, url: str, folder: Path) -> Service:
    return start_service(
        ["serve", kind, "--db", url, "--port", "0"], stderr_path=folder / f"{kind}.log"
    )


def relay_rate(source: str, sink_url: str, relays: int, total: int, batch: bool) -> float:
    """Events/s of ``relays`` relay processes draining ``total`` events."""
    extra = ["--batch"] if batch else []
    processes = [
        subprocess.Popen(
            cli_command(
                "relay",
                "--source",
                source,
                "--to",
                sink_url + "/events",
                "--owner",
                f"bench-{n}",
                "--poll-interval",
                "0.05",
                *extra,
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for n in range(relays)
    ]
    try:
        with Outbox(source) as outbox:

            def query(sql: str, params: tuple[Any, ...]) -> list[Any]:
                with outbox.backend.read() as tx:
                    return tx.execute(sql, params)

            return marks_rate(query, total, timeout=600)
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(60)


def _latencies(plan: Plan, results: Results, folder: Path) -> None:
    """The headline's p50/p99 of one relay, per item and batched, into a PostgreSQL sink."""
    for mode, flags in latency.HTTP_MODES:
        with database() as source, database() as sink_db:
            sink = _serve("sink", sink_db, folder)
            try:
                label = latency.http_label("pg", flags)
                latency.run_row(results, f"latency.pg.http.{mode}", label, source,
                                sink.base_url + "/events", *flags,
                                count=latency.events_for(plan))  # fmt: skip
            finally:
                sink.stop()


def measure(plan: Plan, results: Results) -> None:
    print("PostgreSQL", flush=True)
    why = available()
    if why is not None:
        results.skip("postgres", why)
        return
    total = max(2_000, plan.relay_events)
    reps = max(1, plan.reps // 3)
    with scratch("postgres") as folder:
        for rep in range(reps):
            for batch in (False, True):
                kind = "batch" if batch else "item"
                for relays in RELAY_COUNTS:
                    events = total * 4 if batch else total
                    with database() as source, database() as sink_db:
                        fill.pending_events(source, f"r{rep}{kind}{relays}", events, _event)
                        sink = _serve("sink", sink_db, folder)
                        try:
                            value = relay_rate(source, sink.base_url, relays, events, batch)
                        finally:
                            sink.stop()
                    results.add(
                        f"pg.relay.{kind}.{relays}",
                        f"PostgreSQL relay, {kind}, {relays} relay(s), {PARTITIONS} partitions",
                        "/s",
                        value,
                    )
                    print(f"  relay {kind} x{relays}: {value:,.0f}/s", flush=True)
        _latencies(plan, results, folder)
        with database() as sink_db:
            sink = _serve("sink", sink_db, folder)
            try:
                for rep in range(reps):
                    for clients in CLIENT_COUNTS:

                        def make(client: int, number: int, tag: str = f"{rep}-{clients}") -> Any:
                            return fill.lab_event(f"{tag}-{client}-{number}", "s", 1)

                        load = run_load(sink.base_url, EVENTS, clients, plan.load_seconds, make)
                        record(results, f"pg.sink.c{clients}", f"PostgreSQL sink /events, "
                               f"{clients} client(s)", load)  # fmt: skip
            finally:
                sink.stop()
        with database() as ledger_db:
            ledger = _serve("ledger", ledger_db, folder)
            try:
                for rep in range(reps):
                    ask = delivery_requests(f"pg{rep}")
                    load = run_load(
                        ledger.base_url, DELIVERIES, HTTP_CLIENTS, plan.ledger_http_seconds, ask
                    )
                    record(results, "pg.ledger.http", "PostgreSQL ledger POST /deliveries, "
                           f"{HTTP_CLIENTS} clients", load)  # fmt: skip
            finally:
                ledger.stop()
