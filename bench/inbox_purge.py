"""``python -m bench.inbox_purge [--receipts N]``: purging an inbox while its sink serves.

A real ``serve sink`` on a SQLite file that holds N receipts older than the horizon, one
keep-alive client posting new events to ``/events`` back to back, and ``ackledger inbox purge``
run as another process on the same file. SQLite has one writer, so each window of the purge
that deletes is a moment the sink cannot commit: what matters is the longest ``/events``
answer while the purge runs, against the longest in a stretch of the same length without it,
and against one purge that deletes everything in one transaction (what windows avoid).
"""

from __future__ import annotations

import argparse
import http.client
import json
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ackledger import Inbox
from ackledger._dev.procs import cli_command

from .common import percentile, scratch
from .fill import lab_event
from .relay import start_sink

DAY = 86400.0
RUN = 64  # events per run, 16 runs per fill transaction (receive_runs)


def fill(db: Path, receipts: int, old_every: int = 1) -> None:
    """``receipts`` receipts through the product, then every ``old_every``-th aged 40 days
    (bench-only SQL: the clock of receipts the purge should take)."""
    with Inbox(db, synchronous="NORMAL") as inbox:
        for start in range(0, receipts, RUN * 16):
            numbers = range(start, min(start + RUN * 16, receipts))
            events = [lab_event(f"old-{n}", f"s{n % 64}", 1) for n in numbers]
            inbox.receive_runs([events[i : i + RUN] for i in range(0, len(events), RUN)])
    conn = sqlite3.connect(db, isolation_level=None, timeout=30)
    try:
        conn.execute(
            "UPDATE ackledger_inbox SET first_received_at = first_received_at - ? "
            "WHERE CAST(substr(id, 5) AS INTEGER) % ? = 0",
            (40 * DAY, old_every),
        )
    finally:
        conn.close()


@dataclass
class Posts:
    """(start, seconds) of every answered POST /events."""

    answers: list[tuple[float, float]] = field(default_factory=list)
    failures: int = 0

    def within(self, start: float, end: float) -> list[float]:
        return [took for began, took in self.answers if start <= began + took and began <= end]


def post_until(base_url: str, stop: threading.Event, posts: Posts, tag: str) -> None:
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    number = 0
    try:
        while not stop.is_set():
            body = json.dumps(lab_event(f"{tag}-{number}", "new", 1)).encode()
            number += 1
            began = time.perf_counter()
            conn.request("POST", "/events", body, {"Content-Type": "application/cloudevents+json"})
            answer = conn.getresponse()
            answer.read()
            posts.answers.append((began, time.perf_counter() - began))
            if answer.status != 200:
                posts.failures += 1
    finally:
        conn.close()


def one_transaction_purge(db: Path) -> list[str]:
    """The same purge in one window, one DELETE transaction (``chunk`` as large as the
    table)."""
    code = (
        "import sys; from ackledger import Inbox; "
        "inbox = Inbox(sys.argv[1]); print(inbox.purge(30 * 86400, chunk=100_000)); "
        "inbox.close()"
    )
    return [sys.executable, "-c", code, str(db)]


def purge_alone(db: Path) -> float:
    """Seconds of ``Inbox.purge`` with nobody else on the file."""
    with Inbox(db) as inbox:
        began = time.perf_counter()
        inbox.purge(30 * DAY)
        return time.perf_counter() - began


def window(base_url: str, command: list[str] | None, seconds: float) -> dict[str, float]:
    """Post for a while; with ``command``, run it from 0.5 s in and measure its span."""
    posts, stop = Posts(), threading.Event()
    client = threading.Thread(target=post_until, args=(base_url, stop, posts, f"w{time.time()}"))
    client.start()
    time.sleep(0.5)
    began = time.perf_counter()
    if command is None:
        time.sleep(seconds)
        out = ""
    else:
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        out = done.stdout.strip()
    ended = time.perf_counter()
    time.sleep(0.3)
    stop.set()
    client.join()
    during = posts.within(began, ended)
    return {
        "seconds": ended - began,
        "posts": len(during),
        "max_ms": 1000 * max(during),
        "p99_ms": 1000 * percentile(during, 99),
        "p50_ms": 1000 * percentile(during, 50),
        "failures": posts.failures,
        "printed": float(out.split()[1]) if out.startswith("purged") else float(out or 0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inbox_purge", description=__doc__)
    parser.add_argument("--receipts", type=int, default=100_000)
    parser.add_argument(
        "--old-every",
        type=int,
        default=1,
        help="age every N-th receipt past the horizon (1: all, the default; a purge that "
        "runs hourly with a 30-day horizon finds about 1 in 720)",
    )
    args = parser.parse_args(argv)
    results: dict[str, dict[str, float]] = {}
    with scratch("inbox-purge") as folder:
        for name, command in (
            ("windows (inbox purge, 1,000 keys a window)", "cli"),
            ("one transaction (chunk=100,000)", "one"),
        ):
            db = folder / f"{command}.db"
            fill(db, args.receipts, args.old_every)
            sink = start_sink(folder, command)  # serves folder/<command>.db, the filled one
            try:
                run = (
                    cli_command("inbox", "purge", "--db", str(db), "--older-than", "30d")
                    if command == "cli"
                    else one_transaction_purge(db)
                )
                purge = window(sink.base_url, run, 0)
                baseline = window(sink.base_url, None, purge["seconds"])
            finally:
                sink.stop()
            results[name] = purge
            results[f"{name}: baseline"] = baseline
        alone = folder / "alone.db"
        fill(alone, args.receipts, args.old_every)
        took = purge_alone(alone)
    old = len(range(0, args.receipts, args.old_every))
    print(
        f"{args.receipts:,} receipts, {old:,} of them old, purged while one client posts to "
        "/events (SQLite, FULL)"
    )
    print(f"  the purge alone: {took:.2f} s, {args.receipts / took:,.0f} receipts walked/s")
    for name, figures in results.items():
        print(
            f"  {name:<52} {figures['seconds']:6.2f} s  posts {figures['posts']:>5.0f}  "
            f"p50 {figures['p50_ms']:6.2f} ms  p99 {figures['p99_ms']:7.2f} ms  "
            f"max {figures['max_ms']:7.2f} ms  failures {figures['failures']:.0f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
