"""Growth: ``pending()`` latency and the relay's memory with many rows already sent.

The outbox is given 10k, 100k (and in the full run 1M) sent rows, then a few thousand pending
events; both figures must stay flat, because ``pending()`` reads a partial index of unsent rows
only and the relay holds at most one batch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ackledger import Outbox
from ackledger.ops.processes import cli_command

from . import fill
from .common import Plan, Results, scratch
from .relay import relay_daemon_has_batch, start_sink

PENDING_ON_TOP = 2_000
PENDING_CALLS = 2_000


def pending_latency_us(path: Path) -> float:
    with Outbox(path) as outbox:
        outbox.pending(16)
        start = time.perf_counter()
        for _ in range(PENDING_CALLS):
            outbox.pending(16)
        return 1e6 * (time.perf_counter() - start) / PENDING_CALLS


def _drained(path: Path) -> bool:
    with Outbox(path) as outbox:
        return not outbox.pending(1)


def relay_peak_rss_kib(path: Path, sink_url: str, daemon: bool) -> int:
    """Run a relay until the outbox is drained; returns its peak resident set in KiB."""
    if daemon:
        process = subprocess.Popen(
            cli_command("relay", "--source", str(path), "--to", sink_url + "/events", "--batch"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while not _drained(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        peak = _peak_rss(process.pid)
        process.send_signal(signal.SIGTERM)
        process.wait(30)
        return peak
    child = Path(__file__).with_name("relay_child.py")
    answer = subprocess.run(
        [sys.executable, str(child), str(path), sink_url + "/events/batch"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return int(answer.stdout.split()[-1])


def _peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def measure(plan: Plan, results: Results) -> None:
    print("growth", flush=True)
    daemon = relay_daemon_has_batch()
    relay_name = "`ackledger relay --batch`" if daemon else "a dispatch_batch loop process"
    results.notes.append(f"growth: relay RSS measured on {relay_name}")
    with scratch("growth") as folder:
        sink = start_sink(folder, "sink", "--synchronous", "NORMAL")
        try:
            for rows in plan.growth_rows:
                path = folder / f"outbox-{rows}.db"
                with Outbox(path):
                    pass  # creates the schema
                start = time.perf_counter()
                fill.sent_rows(path, f"old{rows}", rows)
                print(f"  {rows:,} sent rows written in {time.perf_counter() - start:.1f} s")
                fill.pending_events(path, f"new{rows}", PENDING_ON_TOP)
                for _ in range(plan.reps):
                    results.add(
                        f"growth.pending.{rows}",
                        f"pending(16) with {rows:,} sent rows",
                        "us",
                        pending_latency_us(path),
                    )
                for rep in range(plan.reps):
                    if rep:
                        fill.pending_events(path, f"new{rows}r{rep}", PENDING_ON_TOP)
                    results.add(
                        f"growth.rss.{rows}",
                        f"relay peak RSS with {rows:,} sent rows",
                        "MiB",
                        relay_peak_rss_kib(path, sink.base_url, daemon) / 1024,
                    )
                latency = results.get(f"growth.pending.{rows}") or 0.0
                rss = results.get(f"growth.rss.{rows}") or 0.0
                print(f"  {rows:,} rows: pending() {latency:.1f} us, relay RSS {rss:.1f} MiB")
                os.unlink(path)
        finally:
            sink.stop()
