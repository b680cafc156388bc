"""One event at a time, step by step: each step of the per-item relay beside the
floor of what it does, measured in the same run.

- the relay's own step: ``dispatch`` over a FULL outbox with a ``send`` that returns True at
  once (the ``pending`` read, amortised over its selection, and the mark's commit), beside one
  FULL one-row commit and beside the same mark done on bare ``sqlite3`` (the mark's UPDATE
  on a real outbox file, one FULL commit each: it moves the row between two partial indexes,
  so it writes three or four pages where the one-row floor writes one);
- ``send_http`` to ``serve sink``, a new event, beside a raw round trip plus a FULL commit;
- the same event again (a duplicate), beside a raw round trip plus a read by key.

Each step is also given in CPU time per event (this process's ``time.process_time`` and the
sink's from ``/proc``): on a shared machine it swings far less than the wall clock.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ackledger import Outbox
from ackledger.source.dispatch import dispatch
from ackledger.wire.http import close_connections, send_http

from . import fill
from .common import Plan, Results, cpu_seconds, scratch, timed_loop
from .relay import start_sink


def _per_event(seconds: float, count: int) -> float:
    return 1e6 * seconds / count if count else float("nan")


def send_each(
    events: list[dict[str, Any]], url: str, pid: int, clock: Callable[[int], float] = cpu_seconds
) -> tuple[float, float, float]:
    """``send_http`` of each event in turn: (wall, this process's CPU, the sink's CPU by
    ``clock(pid)``) in seconds for all of them."""
    start, cpu, sink_cpu = time.perf_counter(), time.process_time(), clock(pid)
    for event in events:
        send_http(event, url)
    wall = time.perf_counter() - start
    return wall, time.process_time() - cpu, clock(pid) - sink_cpu


def relay_own_step(folder: Path, count: int, tag: str) -> tuple[float, float]:
    """(wall, CPU) µs per event of dispatch with an instant ``send``."""
    path = folder / f"own-{tag}.db"
    fill.pending_events(path, tag, count)
    total = 0
    with Outbox(path, synchronous="FULL") as outbox:
        start, cpu = time.perf_counter(), time.process_time()
        while marked := dispatch(outbox, lambda event: True, 16):
            total += len(marked)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return _per_event(wall, total), _per_event(cpu, total)


#: The per-item mark as the product makes it (``store/outbox.py``), written out here so that
#: the floor stays the same whichever version of the product is measured.
_BARE_MARK = (
    "UPDATE ackledger_outbox SET sent = CASE WHEN quarantined = 0 THEN 1 ELSE sent END, "
    "sent_at = CASE WHEN quarantined = 0 THEN COALESCE(sent_at, ?) ELSE sent_at END, "
    "attempts = attempts + 1, last_attempt_at = ? WHERE id = ? RETURNING id"
)


def bare_mark_step(folder: Path, count: int, tag: str) -> tuple[float, float]:
    """(wall, CPU) µs per event of the relay's step without ackledger: the pending ids read
    once, then each one's mark in a FULL transaction of its own, on bare ``sqlite3``."""
    path = folder / f"bare-{tag}.db"
    fill.pending_events(path, tag, count)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = FULL")
        ids = [
            row[0]
            for row in conn.execute("SELECT id FROM ackledger_outbox WHERE sent = 0 ORDER BY seq")
        ]
        start, cpu = time.perf_counter(), time.process_time()
        for event_id in ids:
            conn.execute("BEGIN IMMEDIATE")
            now = time.time()
            conn.execute(_BARE_MARK, (now, now, event_id)).fetchall()
            conn.execute("COMMIT")
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    finally:
        conn.close()
    return _per_event(wall, len(ids)), _per_event(cpu, len(ids))


def read_by_key_seconds(folder: Path, seconds: float) -> float:
    """One indexed read of a row by its key on bare ``sqlite3`` (a duplicate's least work)."""
    conn = sqlite3.connect(folder / "read-floor.db", isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS t (source TEXT, id TEXT, fp TEXT, "
            "PRIMARY KEY (id, source)) WITHOUT ROWID"
        )
        conn.execute("INSERT OR IGNORE INTO t VALUES ('/floor', 'e1', 'x')")

        def step() -> None:
            conn.execute(
                "SELECT fp FROM t WHERE source = ? AND id = ?", ("/floor", "e1")
            ).fetchall()

        return 1.0 / timed_loop(step, seconds)
    finally:
        conn.close()


def measure(plan: Plan, results: Results) -> None:
    print("steps of one event", flush=True)
    with scratch("steps") as folder:
        sink = start_sink(folder, "sink")
        url = sink.base_url + "/events"
        pid = sink.process.pid
        try:
            for rep in range(plan.reps):
                wall, cpu = relay_own_step(folder, plan.relay_events, f"o{rep}")
                results.add("step.relay_own", "relay's own step (pending + mark)", "µs", wall)
                results.add("step.relay_own_cpu", "relay's own step, CPU", "µs", cpu)
                wall, cpu = bare_mark_step(folder, plan.relay_events, f"b{rep}")
                results.add(
                    "floor.step_mark", "the same mark on bare sqlite3 (one FULL commit)", "µs", wall
                )
                results.add("floor.step_mark_cpu", "the same mark on bare sqlite3, CPU", "µs", cpu)
                events = [
                    fill.lab_event(f"st{rep}-{n}", f"s{n % 64}", 1)
                    for n in range(plan.relay_events)
                ]
                send_http(fill.lab_event(f"st{rep}-warm", "s0", 1), url)
                for kind in ("new", "dup"):
                    wall, cpu, sink_cpu = send_each(events, url, pid)
                    what = "a new event" if kind == "new" else "the same event again"
                    key = f"step.sink_{kind}"
                    count = len(events)
                    results.add(
                        key, f"send_http to serve sink, {what}", "µs", _per_event(wall, count)
                    )
                    results.add(
                        f"{key}_cpu",
                        f"send_http, {what}: sender's CPU",
                        "µs",
                        _per_event(cpu, count),
                    )
                    results.add(
                        f"{key}_sink_cpu",
                        f"send_http, {what}: the sink's CPU",
                        "µs",
                        _per_event(sink_cpu, count),
                    )
                close_connections()
                results.add(
                    "floor.read_key",
                    "SQLite read of one row by key (bare sqlite3)",
                    "µs",
                    1e6 * read_by_key_seconds(folder, plan.floor_seconds),
                )
        finally:
            sink.stop()
    _derive(results)
    _print_table(results)


#: The table: (step, its CPU keys, its floor, the floor's words).
_TABLE = (
    ("step.relay_own", ("step.relay_own_cpu",), "floor.step_commit", "one FULL commit"),
    ("step.relay_own", ("step.relay_own_cpu",), "floor.step_mark", "the mark on bare sqlite3"),
    (
        "step.sink_new",
        ("step.sink_new_cpu", "step.sink_new_sink_cpu"),
        "floor.step_new",
        "raw round trip + FULL commit",
    ),
    (
        "step.sink_dup",
        ("step.sink_dup_cpu", "step.sink_dup_sink_cpu"),
        "floor.step_dup",
        "raw round trip + read by key",
    ),
)


def _print_table(results: Results) -> None:
    """Each step per event (wall, then CPU: the sender's, and the sink's where it has one)
    beside its floor in the same run, and the ratio of the two."""
    for key, cpu_keys, floor_key, floor_words in _TABLE:
        step, floor = results.figures.get(key), results.get(floor_key)
        if step is None or floor is None:
            continue
        cpus = " + ".join(f"{results.get(cpu) or 0:,.0f}" for cpu in cpu_keys)
        print(
            f"  {step.label}: {step.median:,.0f} µs (CPU {cpus} µs); {floor_words}: "
            f"{floor:,.0f} µs; {step.median / floor:.2f}x",
            flush=True,
        )


def _derive(results: Results) -> None:
    """The floors of the steps, in µs, from the floors section's rates (same run)."""
    commit = results.get("floor.commit_full")
    trip = results.get("floor.http_raw")
    read = results.get("floor.read_key")
    if commit:
        results.add("floor.step_commit", "one FULL one-row commit", "µs", 1e6 / commit)
    if commit and trip:
        results.add(
            "floor.step_new", "raw round trip + one FULL commit", "µs", 1e6 / trip + 1e6 / commit
        )
    if trip and read is not None:
        results.add("floor.step_dup", "raw round trip + one read by key", "µs", 1e6 / trip + read)
