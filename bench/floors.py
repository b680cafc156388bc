"""The floors: what this machine physically allows, measured in the same run as the workloads.

- fdatasync: a 4 KiB overwrite made durable, as often as the disk allows;
- SQLite one-row commits in WAL, synchronous FULL and NORMAL (raw ``sqlite3``, no ackledger);
- keep-alive HTTP round trips from ``http.client`` to ``bench.rawserver`` on loopback.
"""

from __future__ import annotations

import http.client
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

from .common import Plan, Results, scratch, timed_loop
from .rawserver import one_row_committer

BODY = b'{"id":"floor","qty":1,"sku":"floor"}'


def fdatasync_rate(folder: Path, seconds: float) -> float:
    path = folder / "fdatasync.bin"
    block = os.urandom(4096)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:

        def step() -> None:
            os.pwrite(fd, block, 0)
            os.fdatasync(fd)

        return timed_loop(step, seconds)
    finally:
        os.close(fd)


def sqlite_commit_rate(folder: Path, synchronous: str, seconds: float) -> float:
    path = folder / f"commits-{synchronous}.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")

        def step() -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (v) VALUES (?)", ("x" * 40,))
            conn.execute("COMMIT")

        return timed_loop(step, seconds)
    finally:
        conn.close()


def http_round_trip_rate(
    url: str, seconds: float, after: Callable[[], None] | None = None
) -> float:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = {"Content-Type": "application/json", "Accept": "application/json"}

    def step() -> None:
        conn.request("POST", "/events", body=BODY, headers=headers)
        response = conn.getresponse()
        response.read()
        if after is not None:
            after()

    try:
        step()  # connect outside the timing
        return timed_loop(step, seconds)
    finally:
        conn.close()


def measure(plan: Plan, results: Results) -> None:
    print("floors", flush=True)
    from ackledger._dev.procs import start_listener

    rawserver = Path(__file__).with_name("rawserver.py")
    with (
        scratch("floors") as folder,
        start_listener([sys.executable, str(rawserver)]) as raw,
        start_listener(
            [sys.executable, str(rawserver), "--commit", str(folder / "raw-sink.db")]
        ) as durable,
    ):
        mark = one_row_committer(str(folder / "raw-source.db"))
        for _ in range(plan.reps):
            results.add(
                "floor.fdatasync",
                "fdatasync (4 KiB overwrite)",
                "/s",
                fdatasync_rate(folder, plan.floor_seconds),
            )
            results.add(
                "floor.commit_full",
                "SQLite one-row commit, WAL, synchronous=FULL",
                "/s",
                sqlite_commit_rate(folder, "FULL", plan.floor_seconds),
            )
            results.add(
                "floor.commit_normal",
                "SQLite one-row commit, WAL, synchronous=NORMAL",
                "/s",
                sqlite_commit_rate(folder, "NORMAL", plan.floor_seconds),
            )
            trip = results.add(
                "floor.http",
                "http.client keep-alive round trip to a raw socket server",
                "/s",
                http_round_trip_rate(raw.base_url, plan.floor_seconds),
            ).samples[-1]
            commit = results.figures["floor.commit_full"].samples[-1]
            # One event relayed one at a time costs a commit at the sink, a commit of the mark
            # at the source and one round trip between them.
            results.add(
                "floor.relay",
                "per-item relay floor 1/(2 commits + 1 round trip)",
                "/s",
                1.0 / (2.0 / commit + 1.0 / trip),
            )
            # The same three steps done for real by two processes that hand over to each other:
            # what the machine allows a relay once its fsyncs and wake-ups interleave.
            results.add(
                "floor.handover",
                "two-process hand-over: round trip + a one-row FULL commit on each side",
                "/s",
                http_round_trip_rate(durable.base_url, plan.floor_seconds, after=mark),
            )
    for key in ("floor.fdatasync", "floor.commit_full", "floor.commit_normal", "floor.http"):
        figure = results.figures[key]
        print(f"  {figure.label}: {figure.median:,.0f}/s", flush=True)
