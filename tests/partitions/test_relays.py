"""Many relay processes on one PostgreSQL outbox, into a real sink: order per partition,
nothing lost, nothing applied twice, also under kill -9 and with a paused relay (fencing).

Sizes: ``ACKLEDGER_RELAY_EVENTS`` (default 1,200) events over 64 partitions, 4 workers: enough
for every worker to hold leases and for five kills; ``python -m bench --only drills`` runs the
same drills with 20,000.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ackledger import Outbox
from ackledger.ops.processes import Service, cli_command, start_service

from .. import pg
from ..conftest import raw_rows
from ..events import lab
from ..opshelp import process_state

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

EVENTS = int(os.environ.get("ACKLEDGER_RELAY_EVENTS", "1200"))
#: The kill drill kills a worker each time another sixth of the events has been sent.
KILL_EVERY = max(1, EVENTS // 6)
PARTITIONS = 64
WORKERS = 4
DEADLINE_S = 900


@dataclass
class Worker:
    owner: str
    process: subprocess.Popen[bytes]
    log: Path


def start_worker(
    source: str, sink: Service, owner: str, log_dir: Path, *extra: str, ttl: float = 5.0
) -> Worker:
    log = log_dir / f"{owner}.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [
                *cli_command("relay"), "--source", source,
                "--to", sink.base_url + "/events", "--owner", owner,
                "--lease-ttl", str(ttl), "--poll-interval", "0.2", "--max-backoff", "2", *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    return Worker(owner, process, log)


def stop_worker(worker: Worker) -> int:
    if worker.process.poll() is None:
        worker.process.send_signal(signal.SIGTERM)
    return worker.process.wait(timeout=60)


def fill(source: str, count: int, partitions: int) -> dict[str, tuple[int, str, int]]:
    """``count`` events spread over ``partitions`` partition keys (the sku: a lab event's
    ``partitionkey``); ids are random so
    that id order says nothing about seq order. Returns id -> (seq, partition, qty)."""
    rng = random.Random(6)
    made: dict[str, tuple[int, str, int]] = {}
    with Outbox(source) as ob:
        for start in range(0, count, 2000):
            with ob.transaction() as tx:
                for n in range(start, min(count, start + 2000)):
                    event_id = f"ev-{rng.getrandbits(48):012x}-{n}"
                    sku, qty = f"sku-{rng.randrange(partitions):02d}", 1 + n % 7
                    made[event_id] = (
                        tx.enqueue(lab(event_id, sku, qty, source=ob.source)),
                        sku,
                        qty,
                    )
    return made


def pending_count(source: str) -> int:
    return int(pg.rows(source, "SELECT COUNT(*) FROM ackledger_outbox WHERE sent = 0")[0][0])


def wait_until_drained(source: str, workers: list[Worker], chaos: object = None) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while pending_count(source) > 0:
        assert time.monotonic() < deadline, f"{pending_count(source)} events still pending"
        for worker in workers:
            assert worker.process.poll() in (None, -signal.SIGKILL), worker.log.read_text()
        if callable(chaos):
            chaos()
        time.sleep(0.2)


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[Service]:
    args = ["serve", "sink", "--db", str(tmp_path / "sink.db"), "--port", "0"]
    with start_service(args, stderr_path=tmp_path / "sink.log") as service:
        yield service


def check_sink(sink_db: Path, made: dict[str, tuple[int, str, int]]) -> dict[str, int]:
    """The invariants; returns a few counts for the report."""
    rows: list[tuple[Any, ...]] = raw_rows(
        sink_db, "SELECT id, source, type, receipts, arrival, last_arrival FROM ackledger_inbox"
    )
    assert len(rows) == len(made), "every event arrived, each recorded once"
    assert len({row[1] for row in rows}) == 1, "every receipt is of the one outbox's source"
    by_partition: dict[str, list[tuple[int, int, int, int]]] = defaultdict(list)
    for event_id, _, kind, receipts, arrival, last_arrival in rows:
        # A receipt keeps no data: the sku and qty are judged by the inventory below.
        seq, partition, _ = made[str(event_id)]
        assert kind == "warehouse.stock.added"
        by_partition[partition].append((int(arrival), seq, int(last_arrival), int(receipts)))
    for partition, items in by_partition.items():
        items.sort()
        seqs = [seq for _, seq, _, _ in items]
        assert seqs == sorted(seqs), f"partition {partition}: arrival order is not seq order"
        # A re-send is allowed only of the last event not yet acknowledged: all its copies
        # arrive before the next event of its partition does.
        for (_, seq, last, _), (next_arrival, _, _, _) in itertools.pairwise(items):
            assert last < next_arrival, f"partition {partition}: seq {seq} re-sent late"
    totals: dict[str, int] = defaultdict(int)
    for _, partition, qty in made.values():
        totals[partition] += qty
    stock = {str(sku): qty for sku, qty in raw_rows(sink_db, "SELECT sku, qty FROM inventory")}
    assert stock == totals, "each event applied exactly once"
    receipts = sum(int(row[3]) for row in rows)
    return {"events": len(rows), "resends": receipts - len(rows)}


def check_source(source: str) -> None:
    assert pg.rows(source, "SELECT COUNT(*) FROM ackledger_outbox WHERE sent = 0") == [(0,)]
    assert pg.rows(source, "SELECT COUNT(*) FROM ackledger_outbox WHERE sent_at IS NULL") == [(0,)]


def test_four_workers_keep_order_per_partition(pg_url: str, sink: Service, tmp_path: Path) -> None:
    made = fill(pg_url, EVENTS, PARTITIONS)
    started = time.monotonic()
    workers = [start_worker(pg_url, sink, f"w{n}", tmp_path) for n in range(WORKERS)]
    try:
        wait_until_drained(pg_url, workers)
    finally:
        codes = [stop_worker(worker) for worker in workers]
    elapsed = time.monotonic() - started
    assert codes == [0] * WORKERS
    reports = [json.loads(w.log.read_text().strip().splitlines()[-1]) for w in workers]
    assert sum(r["sent"] for r in reports) >= EVENTS
    assert all(r["sent"] > 0 for r in reports), "every worker took part"
    check_source(pg_url)
    counts = check_sink(tmp_path / "sink.db", made)
    print(f"\n{EVENTS} events, {WORKERS} workers: {elapsed:.1f}s, {counts}")


def test_kill_minus_nine_of_random_workers_keeps_every_invariant(
    pg_url: str, sink: Service, tmp_path: Path
) -> None:
    made = fill(pg_url, EVENTS, PARTITIONS)
    workers = [start_worker(pg_url, sink, f"w{n}", tmp_path, ttl=2.0) for n in range(WORKERS)]
    rng = random.Random(9)
    kills = 0

    def chaos() -> None:
        # By progress, not by the clock: a fast machine sees as many kills as a slow one.
        nonlocal kills
        if pending_count(pg_url) > EVENTS - KILL_EVERY * (kills + 1):
            return
        n = rng.randrange(WORKERS)
        workers[n].process.kill()  # SIGKILL: no release, no clean-up
        workers[n].process.wait(timeout=60)
        kills += 1
        # The same owner name comes back, as a restarted Pod would: it must not inherit the
        # dead process's leases (it waits for them to expire) nor its tokens.
        workers[n] = start_worker(pg_url, sink, workers[n].owner, tmp_path, ttl=2.0)

    try:
        wait_until_drained(pg_url, workers, chaos)
    finally:
        codes = [stop_worker(worker) for worker in workers]
    assert codes == [0] * WORKERS
    assert kills >= 3, "the run was too short to test anything; raise ACKLEDGER_RELAY_EVENTS"
    check_source(pg_url)
    counts = check_sink(tmp_path / "sink.db", made)
    print(f"\n{EVENTS} events with {kills} kill -9: {counts}")


def wait_for(predicate: object, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not (callable(predicate) and predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_paused_worker_cannot_mark_after_its_lease_was_taken_over(
    pg_url: str, sink: Service, tmp_path: Path
) -> None:
    count = 300
    made = fill(pg_url, count, 1)  # one partition: both workers want the same one
    by_seq = sorted(made, key=lambda event_id: made[event_id][0])
    # A: after its 5th ACK, before marking that event, it is stopped (SIGSTOP) past its lease.
    a = start_worker(pg_url, sink, "relay-a", tmp_path, "--stop-self-after-acks", "5", ttl=1.5)
    b: Worker | None = None
    try:
        wait_for(lambda: process_state(a.process.pid) == "T", "relay-a to be stopped")
        held = pg.rows(pg_url, "SELECT owner, token FROM ackledger_partition_leases")
        assert [row[0] for row in held] == ["relay-a"]
        a_token = int(held[0][1])
        # B takes the partition once A's lease has expired, re-sends A's unmarked 5th event
        # and sends everything after it.
        b = start_worker(pg_url, sink, "relay-b", tmp_path, ttl=30)
        wait_for(lambda: pending_count(pg_url) == 0, "relay-b to drain the partition")
        owner, b_token = pg.rows(pg_url, "SELECT owner, token FROM ackledger_partition_leases")[0]
        assert owner == "relay-b" and int(b_token) > a_token
        a.process.send_signal(signal.SIGCONT)
        wait_for(lambda: "lease lost" in a.log.read_text(), "relay-a to find its lease lost")
    finally:
        a.process.send_signal(signal.SIGCONT)
        codes = [stop_worker(a)] + ([stop_worker(b)] if b is not None else [])
    assert codes == [0, 0]
    report_a = json.loads(a.log.read_text().strip().splitlines()[-1])
    assert (report_a["sent"], report_a["lost"]) == (4, 1)  # its 5th mark was refused
    assert f"(token {a_token})" in a.log.read_text()
    check_source(pg_url)
    counts = check_sink(tmp_path / "sink.db", made)
    # Exactly one re-send: B's copy of the event A had delivered but could not mark. A sent
    # nothing after it resumed.
    assert counts == {"events": count, "resends": 1}
    fifth = by_seq[4]
    assert raw_rows(
        tmp_path / "sink.db", "SELECT receipts FROM ackledger_inbox WHERE id = ?", (fifth,)
    ) == [(2,)]
    assert pg.rows(pg_url, "SELECT attempts FROM ackledger_outbox WHERE id = ?", (fifth,)) == [(1,)]
