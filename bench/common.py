"""What every benchmark shares: repetitions, medians with their spread, figures, scratch space."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
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
        #: Figures whose workload did not get the answers it expected: key -> label, unit, why.
        self.refused: dict[str, dict[str, str]] = {}
        self.skipped: dict[str, str] = {}
        self.notes: list[str] = []

    def add(self, key: str, label: str, unit: str, value: float, note: str = "") -> Figure:
        if key in self.refused:
            # One refused repetition refuses the figure: a median over the rest would hide it.
            return Figure(key, label, unit, [value], note)
        figure = self.figures.get(key)
        if figure is None:
            figure = Figure(key, label, unit, note=note)
            self.figures[key] = figure
        figure.samples.append(value)
        return figure

    def refuse(self, key: str, label: str, unit: str, why: str) -> None:
        """Drop figure ``key`` for the whole run and keep why, to be shown instead of it."""
        self.figures.pop(key, None)
        self.refused.setdefault(key, {"label": label, "unit": unit, "why": why})

    def get(self, key: str) -> float | None:
        figure = self.figures.get(key)
        return None if figure is None or not figure.samples else figure.median

    def skip(self, section: str, reason: str) -> None:
        self.skipped[section] = reason
        print(f"  skipped {section}: {reason}", flush=True)

    def as_dict(self) -> dict[str, Any]:
        return {
            "figures": [f.as_dict() for f in self.figures.values()],
            "refused": self.refused,
            "skipped": self.skipped,
            "notes": self.notes,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Results:
        results = cls()
        for item in data.get("figures", []):
            results.figures[item["key"]] = Figure(
                item["key"], item["label"], item["unit"], list(item["samples"]), item["note"]
            )
        results.refused = dict(data.get("refused", {}))
        results.skipped = dict(data.get("skipped", {}))
        results.notes = list(data.get("notes", []))
        return results


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


#: Runs one read-only query on the outbox being relayed: (sql, params) -> rows.
Query = Callable[[str, tuple[Any, ...]], Sequence[Sequence[Any]]]


def marks_rate(query: Query, total: int, timeout: float) -> float:
    """Events/s of relays in other processes, read from the marks' own ``sent_at``.

    Polling a count of sent rows every few milliseconds took a good part of one of the two
    cores (an index scan per poll; on PostgreSQL ``stats()``, a scan of the table), which the
    relays and the sink then lacked. Instead this waits, with a cheap probe of the pending
    index every 20 ms, until nothing is pending, then reads the first and the last mark's time
    once. The clock starts at the first mark, so the relays' start-up is not counted, and
    neither are the events of that first mark. NaN if they did not finish in ``timeout``.
    """
    deadline = time.monotonic() + timeout
    while query("SELECT 1 FROM ackledger_outbox WHERE sent = 0 AND quarantined = 0 LIMIT 1", ()):
        if time.monotonic() > deadline:
            return float("nan")
        time.sleep(0.02)
    rows = query(
        "SELECT count(*), min(sent_at), max(sent_at) FROM ackledger_outbox WHERE sent = 1", ()
    )
    sent, first, last = rows[0]
    if sent < total or first is None or last <= first:
        return float("nan")
    at_first = query(
        "SELECT count(*) FROM ackledger_outbox WHERE sent = 1 AND sent_at = ?", (first,)
    )
    return rate(int(sent) - int(at_first[0][0]), float(last) - float(first))


def rss_kib(pid: int) -> int:
    """Resident set size of a process in KiB (Linux /proc)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (``/proc/PID/stat``), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_count() -> int:
    return os.cpu_count() or 1
