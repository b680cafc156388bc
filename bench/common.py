"""What every benchmark shares: repetitions, medians with their spread, figures, scratch space."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Plan:
    """How big and how often: ``--quick`` keeps the whole run under two minutes."""

    name: str
    reps: int
    #: Seconds each floor sample runs for.
    floor_seconds: float
    accept_events: int
    relay_events: int
    batch_events: int
    load_seconds: float
    growth_rows: tuple[int, ...]
    ledger_requests: int
    ledger_http_seconds: float


QUICK = Plan(
    name="quick",
    reps=3,
    floor_seconds=0.4,
    accept_events=1_500,
    relay_events=1_200,
    batch_events=8_000,
    load_seconds=1.5,
    growth_rows=(10_000, 100_000),
    ledger_requests=4_000,
    ledger_http_seconds=1.5,
)

FULL = Plan(
    name="full",
    reps=7,
    floor_seconds=1.5,
    accept_events=6_000,
    relay_events=5_000,
    batch_events=40_000,
    load_seconds=5.0,
    growth_rows=(10_000, 100_000, 1_000_000),
    ledger_requests=20_000,
    ledger_http_seconds=5.0,
)


@dataclass
class Figure:
    """One measured quantity: every repetition's value, reported as median and spread."""

    key: str
    label: str
    unit: str
    samples: list[float] = field(default_factory=list)
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")

    @property
    def low(self) -> float:
        return min(self.samples) if self.samples else float("nan")

    @property
    def high(self) -> float:
        return max(self.samples) if self.samples else float("nan")

    def spread_pct(self) -> float:
        """(max - min) / median, in percent: how much the repetitions disagreed."""
        med = self.median
        return 100.0 * (self.high - self.low) / med if med else float("nan")

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "unit": self.unit,
            "median": self.median,
            "min": self.low,
            "max": self.high,
            "samples": self.samples,
            "note": self.note,
        }


class Results:
    """Every figure of a run, by key, in the order they were measured."""

    def __init__(self) -> None:
        self.figures: dict[str, Figure] = {}
        self.skipped: dict[str, str] = {}
        self.notes: list[str] = []

    def add(self, key: str, label: str, unit: str, value: float, note: str = "") -> Figure:
        figure = self.figures.get(key)
        if figure is None:
            figure = Figure(key, label, unit, note=note)
            self.figures[key] = figure
        figure.samples.append(value)
        return figure

    def get(self, key: str) -> float | None:
        figure = self.figures.get(key)
        return None if figure is None or not figure.samples else figure.median

    def skip(self, section: str, reason: str) -> None:
        self.skipped[section] = reason
        print(f"  skipped {section}: {reason}", flush=True)


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("nan")


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile of ``values`` (which need not be sorted)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, round(pct / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def timed_loop(step: Callable[[], object], seconds: float) -> float:
    """Run ``step`` until ``seconds`` have passed; returns calls per second."""
    count = 0
    start = time.perf_counter()
    deadline = start + seconds
    now = start
    while now < deadline:
        step()
        count += 1
        now = time.perf_counter()
    return rate(count, now - start)


@contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A temporary directory on the same file system as every benchmark database."""
    with tempfile.TemporaryDirectory(prefix=f"ackledger-bench-{prefix}-") as name:
        yield Path(name)


def drain_rate(
    sent_count: Callable[[], int], total: int, *, timeout: float, interval: float
) -> float:
    """Events/s of relays in other processes, from the first sent event seen to the last.

    ``sent_count`` reads how many are sent (from a separate connection); the clock starts at
    the first one seen, so the relays' start-up is not counted. NaN if they did not finish.
    """
    deadline = time.monotonic() + timeout
    first: tuple[float, int] | None = None
    sent = 0
    while sent < total and time.monotonic() < deadline:
        sent = sent_count()
        now = time.perf_counter()
        if first is None and sent:
            first = (now, sent)
        time.sleep(interval)
    end = time.perf_counter()
    if first is None or sent < total:
        return float("nan")
    return rate(sent - first[1], end - first[0])


def rss_kib(pid: int) -> int:
    """Resident set size of a process in KiB (Linux /proc)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_count() -> int:
    return os.cpu_count() or 1
