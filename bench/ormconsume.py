"""``consume --session`` with a SQLAlchemy ORM handler (``bench/usershop.py``) on PostgreSQL,
against a hand-written pika + SQLAlchemy consumer with the same guarantees
(``bench/handconsumer.py``), each in a process of its own with the same prefetch.

A fresh durable queue is filled with persistent events, the consumer is started, and the rate
is read from the effect rows' own ``done_at`` marks (first to last), so start-up is not counted;
every event must have made exactly one row. The two run back to back in each round, each
first in turn, and each round's own ratio is kept (``consume.paired``): the shared machine's
speed drifts between rounds far more than within one.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ackledger import new_event
from ackledger.envelope import canonical_json
from ackledger.ops.processes import cli_command

from .broker_routes import AMQP
from .common import Plan, Results, rate, scratch
from .handconsumer import RECEIPTS
from .postgres import available, database
from .usershop import SHIPMENTS, TYPE

PREFETCH = 16
#: At least this many rounds: the ratio is their median.
MIN_ROUNDS = 5
ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def _queue(events: int) -> Iterator[str]:
    """A new durable queue holding ``events`` persistent events; deleted afterwards."""
    import pika

    name = "bench-orm-" + secrets.token_hex(4)
    connection = pika.BlockingConnection(pika.URLParameters(AMQP))
    channel = connection.channel()
    channel.queue_declare(name, durable=True)
    properties = pika.BasicProperties(content_type="application/cloudevents+json", delivery_mode=2)
    for number in range(events):
        event = new_event(TYPE, {"sku": f"s{number % 8}"}, source="/orders", id=f"o-{number}")
        channel.basic_publish("", name, canonical_json(event).encode(), properties)
    try:
        yield name
    finally:
        channel.queue_delete(name)
        connection.close()


def _rows(url: str, sql: str) -> list[Any]:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


def _drain(command: list[str], db: str, events: int, folder: Path) -> float:
    """Events/s of the consumer ``command`` until every event has its row; NaN if not."""
    env = {**os.environ, "BENCH_SHOP_DB": db, "PYTHONPATH": str(ROOT)}
    with (folder / "consumer.log").open("ab") as log:
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 300
        while _rows(db, "SELECT count(*) FROM shipments")[0][0] < events:
            if process.poll() not in (None, 0) or time.monotonic() > deadline:
                return float("nan")
            time.sleep(0.1)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait(60)
    first, last = _rows(db, "SELECT min(done_at), max(done_at) FROM shipments")[0]
    return rate(events - 1, (last - first).total_seconds())


def measure(plan: Plan, results: Results) -> None:
    print("consume --session (SQLAlchemy ORM, PostgreSQL) against a hand-written consumer",
          flush=True)  # fmt: skip
    why = available()
    if why is not None:
        results.skip("orm-consume", why)
        return
    events = max(300, plan.relay_events // 2)
    results.notes.append(f"orm-consume: {events:,} events a run, prefetch {PREFETCH}")
    with scratch("orm-consume") as folder:
        for rep in range(max(plan.reps, MIN_ROUNDS)):
            # Each goes first in turn: the shared machine's speed drifts within a run.
            keys = ["consume.hand", "consume.session"]
            rates: dict[str, float] = {}
            for key in keys if rep % 2 == 0 else keys[::-1]:
                with database() as db, _queue(events) as queue:
                    _rows_commit(db, SHIPMENTS, RECEIPTS)
                    source = f"{AMQP}?queue={queue}&prefetch={PREFETCH}"
                    if key == "consume.hand":
                        command = [sys.executable, "-m", "bench.handconsumer", AMQP, queue,
                                   str(PREFETCH), str(events)]  # fmt: skip
                        label = f"hand-written pika + SQLAlchemy consumer, prefetch {PREFETCH}"
                    else:
                        command = cli_command("consume", "--from", source, "--db", db,
                                              "--session", "bench.usershop:Session",
                                              "--handlers", "bench.usershop:HANDLERS")  # fmt: skip
                        label = f"`consume --session`, SQLAlchemy ORM handler, prefetch {PREFETCH}"
                    value = _drain(command, db, events, folder)
                results.add(key, label, "/s", value)
                rates[key] = value
                print(f"  {label}: {value:,.0f}/s", flush=True)
            paired = rates["consume.session"] / rates["consume.hand"]
            results.add("consume.paired", "`consume --session` / hand-written, one round", "x",
                        paired)  # fmt: skip
            print(f"  this round: {paired:.2f} x", flush=True)


def _rows_commit(url: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(url) as conn:
        for statement in statements:
            conn.execute(statement)
